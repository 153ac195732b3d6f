"""cddp.optim — torch.optim: Optimizer, SGD, Adam, AdamW, Adadelta, Adagrad, RMSprop,
Adamax, NAdam, RAdam, ASGD, Rprop, LBFGS, Adafactor, Muon, SparseAdam, lr_scheduler,
swa_utils."""
from .optimizer import Optimizer
from .sgd import SGD
from .adam import Adam, AdamW
from .adadelta import Adadelta
from .adagrad import Adagrad
from .rmsprop import RMSprop
from .adamax import Adamax
from .nadam import NAdam
from .radam import RAdam
from .asgd import ASGD
from .rprop import Rprop
from .lbfgs import LBFGS
from .adafactor import Adafactor
from .muon import Muon
from .sparse_adam import SparseAdam
from . import lr_scheduler, swa_utils

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adadelta", "Adagrad", "RMSprop", "Adamax",
           "NAdam", "RAdam", "ASGD", "Rprop", "LBFGS", "Adafactor", "Muon", "SparseAdam",
           "lr_scheduler",
           "swa_utils"]
