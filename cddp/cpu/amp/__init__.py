"""cddp.cpu.amp — torch.cpu.amp (deprecated aliases of cddp.amp with device_type "cpu")."""
from .autocast_mode import autocast  # noqa: F401
from .grad_scaler import GradScaler  # noqa: F401
