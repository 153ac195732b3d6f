"""cddp.cpu.amp.autocast_mode — torch.cpu.amp.autocast, the deprecated alias of
cddp.amp.autocast("cpu", ...) (bfloat16 by default)."""
import warnings

from ... import _C
from ...amp import autocast_mode as _amp

__all__ = ["autocast"]


class autocast(_amp.autocast):
    def __init__(self, enabled=True, dtype=_C.bfloat16, cache_enabled=True):
        warnings.warn("`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cpu', args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cpu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)
