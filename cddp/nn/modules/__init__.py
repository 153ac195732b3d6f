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
from .rnn import RNNBase, RNN, LSTM, GRU, RNNCellBase, RNNCell, LSTMCell, GRUCell
from .loss import (SmoothL1Loss, HuberLoss, KLDivLoss, PoissonNLLLoss, GaussianNLLLoss,
                   HingeEmbeddingLoss, SoftMarginLoss, MultiLabelSoftMarginLoss,
                   MarginRankingLoss, CosineEmbeddingLoss, TripletMarginLoss)
from .activation import MultiheadAttention
from .normalization import LayerNorm
from .sparse import Embedding
from .transformer import (Transformer, TransformerEncoder, TransformerDecoder,
                          TransformerEncoderLayer, TransformerDecoderLayer)
