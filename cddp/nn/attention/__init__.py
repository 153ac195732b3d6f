"""torch.nn.attention: SDPBackend and sdpa_kernel, the context manager scripts use to pick
scaled_dot_product_attention's kernel. cddp has one kernel (the math one, fused in C), so the
choice only sets the flags torch.backends.cuda reports (flash_sdp_enabled() ...) for the
block and restores them after; the attention computed is the same whichever is chosen."""
import contextlib
import enum

from ...backends import cuda as _cuda_backend

__all__ = ["SDPBackend", "sdpa_kernel", "WARN_FOR_UNFUSED_KERNELS"]

WARN_FOR_UNFUSED_KERNELS = False


class SDPBackend(enum.IntEnum):
    """torch's backend numbering; prints as SDPBackend.MATH (torch's enum), not as the int."""
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4

    __str__ = enum.Enum.__str__


_FLAG = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash",
         SDPBackend.EFFICIENT_ATTENTION: "mem_efficient", SDPBackend.CUDNN_ATTENTION: "cudnn"}


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority=False):
    """Enable exactly `backends` (one SDPBackend or a list) inside the block."""
    if isinstance(backends, SDPBackend):
        backends = [backends]
    if not isinstance(backends, (list, tuple)) or \
            not all(isinstance(b, SDPBackend) for b in backends):
        raise AssertionError("Backend must be an instance of SDPBackend or a list of "
                             "SDPBackend instances")
    saved = dict(_cuda_backend._sdp)
    _cuda_backend._sdp.update({flag: b in backends for b, flag in _FLAG.items()})
    try:
        yield
    finally:
        _cuda_backend._sdp.update(saved)
