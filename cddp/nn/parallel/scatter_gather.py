"""torch.nn.parallel.scatter_gather: scatter / scatter_kwargs / gather over nested tuples, lists
and dicts of tensors. Every "device" is this process's CPU (cddp has no device tensors yet), so
scatter splits each tensor into len(target_gpus) chunks along dim (torch's comm.scatter sizes)
and gather concatenates along dim; everything else is repeated per chunk, as torch's."""
from ... import _C

__all__ = ["scatter", "scatter_kwargs", "gather"]

Tensor = _C.Tensor


def scatter(inputs, target_gpus, dim=0):
    n = max(len(target_gpus), 1)

    def split(obj):
        if isinstance(obj, Tensor):
            return list(obj.chunk(n, dim))
        if isinstance(obj, tuple) and hasattr(obj, "_fields") and obj:
            return [type(obj)(*parts) for parts in zip(*map(split, obj))]
        if isinstance(obj, tuple) and obj:
            return list(zip(*map(split, obj)))
        if isinstance(obj, list) and obj:
            return [list(parts) for parts in zip(*map(split, obj))]
        if isinstance(obj, dict) and obj:
            return [type(obj)(zip(obj.keys(), parts)) for parts in zip(*map(split, obj.values()))]
        return [obj for _ in range(n)]
    return split(inputs)


def scatter_kwargs(inputs, kwargs, target_gpus, dim=0):
    scattered_inputs = scatter(inputs, target_gpus, dim) if inputs else []
    scattered_kwargs = scatter(kwargs, target_gpus, dim) if kwargs else []
    if len(scattered_inputs) < len(scattered_kwargs):
        scattered_inputs += [() for _ in range(len(scattered_kwargs) - len(scattered_inputs))]
    elif len(scattered_kwargs) < len(scattered_inputs):
        scattered_kwargs += [{} for _ in range(len(scattered_inputs) - len(scattered_kwargs))]
    return tuple(scattered_inputs), tuple(scattered_kwargs)


def gather(outputs, target_device, dim=0):
    first = outputs[0]
    if isinstance(first, Tensor):
        return _C.cat(list(outputs), dim) if len(outputs) > 1 else first
    if first is None:
        return None
    if isinstance(first, dict):
        if not all(len(first) == len(d) for d in outputs):
            raise ValueError("All dicts must have the same number of keys")
        return type(first)((k, gather([d[k] for d in outputs], target_device, dim)) for k in first)
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(gather(p, target_device, dim) for p in zip(*outputs)))
    return type(first)(gather(p, target_device, dim) for p in zip(*outputs))
