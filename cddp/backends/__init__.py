"""cddp.backends — torch.backends flags that scripts set (cudnn.benchmark, ...)."""
from . import cudnn  # noqa: F401
