"""cddp.cuda.amp.grad_scaler — torch.cuda.amp.GradScaler, the deprecated alias of
cddp.amp.GradScaler("cuda", ...). No GPU: it works on the CPU after the one CUDA-to-CPU warning
(CDDP_STRICT_DEVICE=1: error)."""
import warnings

from ...amp.grad_scaler import GradScaler as _GradScaler, OptState  # noqa: F401

__all__ = ["GradScaler"]


class GradScaler(_GradScaler):
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
