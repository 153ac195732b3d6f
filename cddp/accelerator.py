"""cddp.accelerator — torch.accelerator: the device-neutral API recent torch scripts check
before anything else (`torch.accelerator.current_accelerator()` to pick a device, the
device_count / set_device_index / synchronize calls).

It answers from cddp.cuda, so the two always agree: with no usable GPU there is no
accelerator (current_accelerator() is None, is_available() False, device_count() 0) and the
calls that need one raise torch's RuntimeError; scripts then take their CPU path. That is
independent of the CUDA-to-CPU fallback, which serves scripts that ask for CUDA by name.
"""
from . import cuda as _cuda
from ._device import device as _device

_NONE = "Cannot access accelerator device when none is available."


def _need():
    if not _cuda.is_available():
        raise RuntimeError(_NONE)


def current_accelerator(check_available=False):
    """The accelerator device type (device('cuda')), or None when there is none."""
    return _device("cuda") if _cuda.is_available() else None


def is_available():
    return _cuda.is_available()


def device_count():
    return _cuda.device_count() if _cuda.is_available() else 0


def current_device_index():
    _need()
    return _cuda.current_device()


def set_device_index(device):
    _need()
    _cuda.set_device(device)


def synchronize(device=None):
    _need()
    _cuda.synchronize(device)


def empty_cache():
    _need()
    _cuda.empty_cache()


current_device_idx = current_device_index       # torch's older names, kept as aliases
set_device_idx = set_device_index


class device_index:
    """Context manager: run the block with `device` as the current accelerator index
    (None: a no-op, allowed without an accelerator, as torch)."""

    def __init__(self, device):
        self.idx = device
        self.prev = None

    def __enter__(self):
        if self.idx is not None:
            self.prev = current_device_index()
            set_device_index(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx is not None:
            set_device_index(self.prev)
        return False
