"""torch._utils' helpers that training code imports (guided-diffusion's fp16_util, Apex-style
mixed-precision and bucketing code): flatten / unflatten dense tensors into one buffer, group
tensors into size-limited chunks, reorder them back, and is_compiling (False: no compiler)."""
from collections import defaultdict

from . import _C

__all__ = ["_flatten_dense_tensors", "_unflatten_dense_tensors", "_take_tensors",
           "_reorder_tensors_as", "is_compiling"]


def _flatten_dense_tensors(tensors):
    """One contiguous 1-D buffer holding the tensors one after another (a copy; gradients
    flow back to each)."""
    tensors = list(tensors)
    if len(tensors) == 1:
        return tensors[0].contiguous().view(-1)
    return _C.cat([t.contiguous().view(-1) for t in tensors])


def _unflatten_dense_tensors(flat, tensors):
    """Views of flat shaped like each of tensors, in order (flat from _flatten_dense_tensors)."""
    out, offset = [], 0
    for t in tensors:
        k = t.numel()
        out.append(flat.narrow(0, offset, k).view_as(t))
        offset += k
    return tuple(out)


def _take_tensors(tensors, size_limit):
    """Chunks of tensors of one type each, up to size_limit bytes (a tensor larger than the
    limit is a chunk of its own), in the sequence's order within each type."""
    buf = defaultdict(lambda: [[], 0])
    for t in tensors:
        key = t.type()
        size = t.numel() * t.element_size()
        entry = buf[key]
        if entry[1] + size > size_limit and entry[1] > 0:
            yield entry[0]
            entry = buf[key] = [[], 0]
        entry[0].append(t)
        entry[1] += size
    for chunk, _ in buf.values():
        if chunk:
            yield chunk


def _reorder_tensors_as(tensors, ordered_tensors):
    """tensors (ordered as ordered_tensors within each type, as _take_tensors yields them)
    back in ordered_tensors' order."""
    by_type = defaultdict(list)
    for t in tensors:
        by_type[t.type()].append(t)
    iters = {k: iter(v) for k, v in by_type.items()}
    return tuple(next(iters[t.type()]) for t in ordered_tensors)


def is_compiling():
    return False
