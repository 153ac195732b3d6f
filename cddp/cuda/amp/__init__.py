"""cddp.cuda.amp — torch.cuda.amp (deprecated aliases; CPU fallback without a GPU)."""
from .autocast_mode import autocast, custom_bwd, custom_fwd  # noqa: F401
from .common import amp_definitely_not_available  # noqa: F401
from .grad_scaler import GradScaler  # noqa: F401
