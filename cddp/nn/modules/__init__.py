from .module import Module
from .container import Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict
from .linear import Linear, Identity
from .activation import ReLU, Tanh, Sigmoid, Softmax, LogSoftmax
from .dropout import Dropout, Flatten
from .activation import (Softmax2d, LeakyReLU, PReLU, GELU, SiLU, ELU, SELU, CELU, Softplus,
                         Hardtanh, ReLU6, Mish, Hardswish, Hardsigmoid, Softsign, Tanhshrink)
from .dropout import Dropout1d, Dropout2d, Dropout3d, AlphaDropout, FeatureAlphaDropout
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .groupnorm import GroupNorm, LocalResponseNorm
from .loss import CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, BCELoss, BCEWithLogitsLoss
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .pooling import (MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d, AdaptiveAvgPool1d,
                      AdaptiveAvgPool2d, AdaptiveMaxPool1d, AdaptiveMaxPool2d)
from .padding import (ZeroPad1d, ZeroPad2d, ZeroPad3d, ConstantPad1d, ConstantPad2d,
                      ConstantPad3d, ReflectionPad1d, ReflectionPad2d, ReflectionPad3d,
                      ReplicationPad1d, ReplicationPad2d, ReplicationPad3d, CircularPad1d,
                      CircularPad2d, CircularPad3d)
from .upsampling import (Upsample, UpsamplingNearest2d, UpsamplingBilinear2d, PixelShuffle,
                         PixelUnshuffle)
from .fold import Fold, Unfold
from .rnn import RNNBase, RNN, LSTM, GRU, RNNCellBase, RNNCell, LSTMCell, GRUCell
from .loss import (SmoothL1Loss, HuberLoss, KLDivLoss, PoissonNLLLoss, GaussianNLLLoss,
                   HingeEmbeddingLoss, SoftMarginLoss, MultiLabelSoftMarginLoss,
                   MarginRankingLoss, CosineEmbeddingLoss, TripletMarginLoss)
from .activation import MultiheadAttention
from .normalization import LayerNorm
from .sparse import Embedding
from .transformer import (Transformer, TransformerEncoder, TransformerDecoder,
                          TransformerEncoderLayer, TransformerDecoderLayer)
from .activation import GLU, LogSigmoid, Softmin, Softshrink, Hardshrink, Threshold, RReLU
from .normalization import RMSNorm
from .dropout import Unflatten
from .distance import PairwiseDistance, CosineSimilarity
from .linear import Bilinear, LazyLinear
from .lazy import LazyModuleMixin
from .channelshuffle import ChannelShuffle
from .loss import MultiMarginLoss, MultiLabelMarginLoss, TripletMarginWithDistanceLoss
from .loss import CTCLoss
from .pooling import MaxUnpool1d, MaxUnpool2d
from .conv import Conv3d, ConvTranspose3d
from .pooling import MaxPool3d, AvgPool3d, AdaptiveAvgPool3d, AdaptiveMaxPool3d
from .sparse import EmbeddingBag
from .pooling import MaxUnpool3d, LPPool1d, LPPool2d, LPPool3d
from .lazy import (UninitializedBuffer, LazyConv1d, LazyConv2d, LazyConv3d,
                   LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d,
                   LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyInstanceNorm1d,
                   LazyInstanceNorm2d, LazyInstanceNorm3d)

from .adaptive import AdaptiveLogSoftmaxWithLoss
from .loss import NLLLoss2d
from .container import Container
from .fractional import FractionalMaxPool2d, FractionalMaxPool3d

from . import flatten, pixelshuffle, utils  # noqa: E402,F401  (torch.nn.modules.<name> paths)
