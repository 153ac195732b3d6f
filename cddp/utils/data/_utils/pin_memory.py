"""torch.utils.data._utils.pin_memory.pin_memory: Tensor.pin_memory() over a batch's nested
containers (dicts, sequences, namedtuples; other leaves as they are)."""
import collections.abc

from .... import _C

__all__ = ["pin_memory"]


def pin_memory(data, device=None):
    if isinstance(data, _C.Tensor):
        return data.pin_memory()
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        return type(data)({k: pin_memory(v, device) for k, v in data.items()}) \
            if not hasattr(data, "default_factory") else \
            {k: pin_memory(v, device) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(pin_memory(v, device) for v in data))
    if isinstance(data, tuple):
        return tuple(pin_memory(v, device) for v in data)
    if isinstance(data, collections.abc.Sequence):
        try:
            return type(data)([pin_memory(v, device) for v in data])
        except TypeError:
            return [pin_memory(v, device) for v in data]
    if hasattr(data, "pin_memory"):
        return data.pin_memory()
    return data
