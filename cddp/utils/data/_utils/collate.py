"""torch.utils.data._utils.collate: default_collate / default_convert, and the type-dispatched
collate(batch, *, collate_fn_map) that default_collate is an instance of (torch's extension
point: a map from an element type to the function that collates a batch of it).

    collate(batch, collate_fn_map=m)   batch[0]'s exact type in m, else the first isinstance
                                       match in m's order, else containers field by field
                                       (Mapping, namedtuple, Sequence) with the same map
    default_collate_fn_map             Tensor: stack on a new dim 0; NumPy arrays: stacked as
                                       tensors; NumPy scalars, float (float64), int (tensor
                                       inference: [True, 2] is int64): 1-D tensors; str /
                                       bytes: the list itself
    default_convert(data)              batch_size=None's collate_fn: NumPy to tensors inside
                                       containers; a plain tuple becomes a list (torch's)

Collating N tensors is one C stack (one copy into one buffer)."""
import collections.abc
import copy

import numpy as np

from .... import _C

Tensor = _C.Tensor
_NUMPY_KINDS = {"f", "i", "u", "b"}
_ERR = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
        "found {}")

__all__ = ["collate", "default_collate", "default_convert", "default_collate_fn_map",
           "collate_tensor_fn", "collate_numpy_array_fn", "collate_numpy_scalar_fn",
           "collate_float_fn", "collate_int_fn", "collate_str_fn"]


def collate(batch, *, collate_fn_map=None):
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type, fn in collate_fn_map.items():
            if isinstance(elem, collate_type):
                return fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        collated = {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map)
                    for key in elem}
        try:
            return collated if elem_type is dict else elem_type(collated)
        except TypeError:
            return collated
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(*(collate(samples, collate_fn_map=collate_fn_map)
                           for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch)]
    raise TypeError(_ERR.format(elem_type))


def collate_tensor_fn(batch, *, collate_fn_map=None):
    return _C.stack(list(batch), 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    elem = batch[0]
    if elem.dtype.kind not in _NUMPY_KINDS:          # strings, objects: torch's message
        raise TypeError(_ERR.format(elem.dtype))
    return _C.stack([_C.as_tensor(b) for b in batch], 0)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    return _C.as_tensor(list(batch))     # as torch: [np.int64(1), 2.5] is float32


def collate_float_fn(batch, *, collate_fn_map=None):
    return _C.tensor(batch, dtype=_C.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    return _C.tensor(batch)    # bool included: [1, 2.5] is float32, [True, 2] int64, [True] bool


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


default_collate_fn_map = {Tensor: collate_tensor_fn, np.ndarray: collate_numpy_array_fn,
                          (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
                          float: collate_float_fn, int: collate_int_fn, str: collate_str_fn,
                          bytes: collate_str_fn}


def default_collate(batch):
    """torch's rules (default_collate_fn_map above), containers collated field by field."""
    return collate(batch, collate_fn_map=default_collate_fn_map)


def default_convert(data):
    """torch's default_convert (the collate_fn of batch_size=None): NumPy arrays and scalars
    become tensors, containers are converted element by element, and a plain tuple becomes a
    list (torch keeps that for backwards compatibility)."""
    if isinstance(data, Tensor):
        return data
    elem_type = type(data)
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in ("str_", "string_"):
        if isinstance(data, np.ndarray) and data.dtype.kind in "SaUO":
            return data
        return _C.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data
