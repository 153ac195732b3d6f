"""torch.autograd.variable: where old scripts import Variable from."""
from . import Variable  # noqa: F401

__all__ = ["Variable"]
