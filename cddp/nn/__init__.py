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
from . import functional, init, utils, parallel  # noqa: F401
from .parallel import DataParallel
