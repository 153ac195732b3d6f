"""torch.utils.dlpack: zero-copy exchange with other array libraries through DLPack. cddp's
CPU memory is NumPy-compatible, so both directions go through NumPy's DLPack support: export is
the capsule of the ndarray that views the tensor (it keeps the tensor's storage alive), import
is NumPy's from_dlpack viewed as a cddp tensor (it keeps the producer's buffer alive). Only
CPU data (DLPack device type kDLCPU) crosses; bfloat16 has no NumPy dtype and is refused."""
import numpy as np

from .. import _C

__all__ = ["from_dlpack", "to_dlpack"]

_KDLCPU = 1


class _Capsule:
    """A bare DLPack capsule as NumPy's from_dlpack wants it: an object with __dlpack__."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return (_KDLCPU, 0)


def from_dlpack(ext_tensor):
    """A tensor sharing memory with ext_tensor (an object with __dlpack__, or a capsule from a
    legacy to_dlpack)."""
    if isinstance(ext_tensor, _C.Tensor):
        return ext_tensor
    if hasattr(ext_tensor, "__dlpack_device__"):
        dev = tuple(ext_tensor.__dlpack_device__())
        if dev[0] != _KDLCPU:
            raise RuntimeError(f"from_dlpack: cddp takes CPU data only (DLPack device type "
                               f"{_KDLCPU}); the producer is on device type {dev[0]}, index "
                               f"{dev[1]}")
    elif not hasattr(ext_tensor, "__dlpack__"):
        if type(ext_tensor).__name__ != "PyCapsule":
            raise TypeError(f"from_dlpack: expected an object with __dlpack__ or a DLPack "
                            f"capsule, got {type(ext_tensor).__name__}")
        ext_tensor = _Capsule(ext_tensor)
    return _C.from_numpy(np.from_dlpack(ext_tensor))


def _exportable(t):
    if t.requires_grad:
        raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
    if t.dtype == _C.bfloat16:
        raise BufferError("cddp cannot export bfloat16 through DLPack (no NumPy dtype for it); "
                          "convert with .float() first")
    return t.numpy()


def to_dlpack(tensor):
    """A DLPack capsule viewing tensor's memory (torch's legacy export)."""
    return _exportable(tensor).__dlpack__()


def _tensor_dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    kwargs = {k: v for k, v in (("stream", stream), ("max_version", max_version),
                                ("dl_device", dl_device), ("copy", copy)) if v is not None}
    return _exportable(self).__dlpack__(**kwargs)


def _tensor_dlpack_device(self):
    return (_KDLCPU, 0)
