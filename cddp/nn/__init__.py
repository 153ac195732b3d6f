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
from . import functional, init, utils, parallel  # noqa: F401
from .parallel import DataParallel
