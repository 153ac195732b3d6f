"""cddp.cuda — torch.cuda's module-level API. This build has no GPU path yet, so
is_available() is False and device_count() 0; the calls scripts make unconditionally
(set_device, manual_seed, manual_seed_all, synchronize, empty_cache) are accepted.
Tensors and modules asked onto CUDA run on the CPU after one warning per process
(CDDP_STRICT_DEVICE=1 makes that an error) — see Tensor.to / Module.to.
"""
from .. import _C


def is_available():
    return False


def device_count():
    return 0


def current_device():
    return 0


def set_device(device):
    """Accepted (no GPU: nothing to select). Validates the argument like torch."""
    if not isinstance(device, (int, str)) and not hasattr(device, "type"):
        raise TypeError(f"set_device: expected an int, str or cddp.device, got {type(device).__name__}")


def manual_seed(seed):
    """Seeds the CPU generator too: with no GPU, that is where "CUDA" work runs."""
    _C.manual_seed(int(seed))


def manual_seed_all(seed):
    _C.manual_seed(int(seed))


def synchronize(device=None):
    return None


def empty_cache():
    return None


def is_initialized():
    return False


def get_device_name(device=None):
    raise RuntimeError("cddp.cuda: no CUDA device is available")


class device:
    """Context manager torch.cuda.device(i): a no-op without a GPU."""

    def __init__(self, device):
        self.idx = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


from . import amp  # noqa: E402,F401  (torch.cuda.amp: CPU fallback, see cddp/amp)
