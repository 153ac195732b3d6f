"""cddp.nn — torch.nn: Module, Parameter, layers, losses, init, functional, utils, parallel."""
from .parameter import Parameter, Buffer
from .modules import (Module, Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict,
                      Linear, Identity, ReLU, Tanh, Sigmoid, Softmax, LogSoftmax, Dropout,
                      Flatten, CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, BCELoss,
                      BCEWithLogitsLoss)
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
from . import functional, init, utils, parallel  # noqa: F401
from .parallel import DataParallel
