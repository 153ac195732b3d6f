"""cddp.backends.cuda — torch.backends.cuda's settable flags (TF32 matmul, the scaled
dot-product attention kernels). cddp computes float32 products in float32 and attention by
its one kernel whatever they say; they are kept so scripts that set and read them run."""
import contextlib


class _Matmul:
    """torch.backends.cuda.matmul: allow_tf32 and the reduced-precision reduction flags."""

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _Matmul()
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built():
    """Whether this cddp was built with its CUDA path (cddp._cuda)."""
    try:
        from .. import _cuda  # noqa: F401
    except ImportError:
        return False
    return True


def flash_sdp_enabled():
    return _sdp["flash"]


def mem_efficient_sdp_enabled():
    return _sdp["mem_efficient"]


def math_sdp_enabled():
    return _sdp["math"]


def cudnn_sdp_enabled():
    return _sdp["cudnn"]


def enable_flash_sdp(enabled):
    _sdp["flash"] = bool(enabled)


def enable_mem_efficient_sdp(enabled):
    _sdp["mem_efficient"] = bool(enabled)


def enable_math_sdp(enabled):
    _sdp["math"] = bool(enabled)


def enable_cudnn_sdp(enabled):
    _sdp["cudnn"] = bool(enabled)


@contextlib.contextmanager
def sdp_kernel(enable_flash=True, enable_math=True, enable_mem_efficient=True,
               enable_cudnn=True):
    """The deprecated context manager: sets the four flags, restores them on exit."""
    saved = dict(_sdp)
    _sdp.update(flash=bool(enable_flash), math=bool(enable_math),
                mem_efficient=bool(enable_mem_efficient), cudnn=bool(enable_cudnn))
    try:
        yield
    finally:
        _sdp.update(saved)
