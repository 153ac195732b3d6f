"""cddp.nn — torch.nn: Module, Parameter, layers, losses, init, functional, utils, parallel."""
from .parameter import Parameter, Buffer
from .modules import (Module, Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict,
                      Linear, Identity, ReLU, Tanh, Sigmoid, Softmax, LogSoftmax, Dropout,
                      Flatten, CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, BCELoss,
                      BCEWithLogitsLoss)
from .modules import (Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, MaxPool1d, MaxPool2d,
                      AvgPool1d, AvgPool2d, AdaptiveAvgPool1d, AdaptiveAvgPool2d,
                      AdaptiveMaxPool1d, AdaptiveMaxPool2d, ZeroPad1d, ZeroPad2d, ZeroPad3d,
                      ConstantPad1d, ConstantPad2d, ConstantPad3d, ReflectionPad1d,
                      ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d,
                      ReplicationPad3d, CircularPad1d, CircularPad2d, CircularPad3d, Upsample,
                      UpsamplingNearest2d, UpsamplingBilinear2d, PixelShuffle, PixelUnshuffle,
                      Fold, Unfold)
from .modules import RNNBase, RNN, LSTM, GRU, RNNCellBase, RNNCell, LSTMCell, GRUCell
from .modules import (SmoothL1Loss, HuberLoss, KLDivLoss, PoissonNLLLoss,  # noqa: F401
                      GaussianNLLLoss, HingeEmbeddingLoss, SoftMarginLoss,
                      MultiLabelSoftMarginLoss, MarginRankingLoss, CosineEmbeddingLoss,
                      TripletMarginLoss)
from .modules import (LayerNorm, Embedding, MultiheadAttention, Transformer,  # noqa: F401
                      TransformerEncoder, TransformerDecoder, TransformerEncoderLayer,
                      TransformerDecoderLayer)
from .modules import (Softmax2d, LeakyReLU, PReLU, GELU, SiLU, ELU, SELU, CELU, Softplus,  # noqa: F401
                      Hardtanh, ReLU6, Mish, Hardswish, Hardsigmoid, Softsign, Tanhshrink,
                      Dropout1d, Dropout2d, Dropout3d, AlphaDropout, FeatureAlphaDropout,
                      BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm, InstanceNorm1d,
                      InstanceNorm2d, InstanceNorm3d, GroupNorm, LocalResponseNorm)
from .modules import (GLU, LogSigmoid, Softmin, Softshrink, Hardshrink, Threshold,  # noqa: F401
                      RReLU, RMSNorm, Unflatten, PairwiseDistance, CosineSimilarity, Bilinear,
                      LazyLinear, ChannelShuffle, MultiMarginLoss, MultiLabelMarginLoss,
                      TripletMarginWithDistanceLoss, MaxUnpool1d, MaxUnpool2d, EmbeddingBag)
from .modules import CTCLoss  # noqa: F401
from .modules import (Conv3d, ConvTranspose3d, MaxPool3d, AvgPool3d,  # noqa: F401
                      AdaptiveAvgPool3d, AdaptiveMaxPool3d)
from .parameter import UninitializedParameter  # noqa: F401
from .modules import (AdaptiveLogSoftmaxWithLoss, FractionalMaxPool2d,  # noqa: F401
                      FractionalMaxPool3d, NLLLoss2d, Container)
from . import grad  # noqa: F401,E402  (torch.nn.grad: conv input/weight gradients)
from .modules import (MaxUnpool3d, LPPool1d, LPPool2d, LPPool3d,  # noqa: F401
                      UninitializedBuffer, LazyConv1d, LazyConv2d, LazyConv3d,
                      LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d,
                      LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyInstanceNorm1d,
                      LazyInstanceNorm2d, LazyInstanceNorm3d)
from . import functional, init, utils, parallel  # noqa: F401
from . import attention, common_types  # noqa: F401,E402  (torch.nn.attention without an import)
from .parallel import DataParallel
