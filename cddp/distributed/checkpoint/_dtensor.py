"""cddp.distributed.checkpoint._dtensor — DTensor leaves (FSDP2's sharded state dicts) in
save and load.

Contract:
- full_for_save(state_dict): a copy of the containers with every DTensor leaf replaced by
  its full value (collective over its mesh, in the state dict's order, which every rank
  shares); the existing whole-tensor format then writes each tensor once.
- full_targets(target) / scatter_loaded(swaps): before loading, every DTensor leaf of the
  target is swapped for an empty full-shaped tensor that the loader fills; after, each
  DTensor receives its part of the loaded value (its own storage, in place) and stands in
  the target again.

Differences from torch: torch's DCP writes each rank's shards with their offsets (no
gather); cddp gathers the full tensor, so saving holds one full tensor at a time per rank,
and the checkpoint has torch's logical content (one whole tensor per key), loadable at any
world size.
"""
from ... import _C
from ...autograd.grad_mode import no_grad
from . import _layout


def _is_dtensor(v):
    return getattr(type(v), "_is_dtensor", False)


def _any(obj):
    found = []
    _layout.walk(_layout.copy_containers(obj),
                 lambda path, v: found.append(1) if _is_dtensor(v) else None)
    return bool(found)


def full_for_save(state_dict):
    if not _any(state_dict):
        return state_dict
    return _layout.walk(_layout.copy_containers(state_dict),
                        lambda path, v: v.full_tensor() if _is_dtensor(v) else v)


def full_targets(target):
    """target with DTensor leaves swapped (in place) for full-shaped buffers; the swaps."""
    swaps = []

    def leaf(path, v):
        if not _is_dtensor(v):
            return v
        buf = _C.empty(v._spec.shape, dtype=v.dtype)
        swaps.append((path, v, buf))
        return buf
    return _layout.walk(target, leaf), swaps


def scatter_loaded(target, swaps):
    """Copy each filled buffer's part into its DTensor and put the DTensor back."""
    from ..tensor._api import _local_part
    back = {}
    with no_grad():
        for path, dt, buf in swaps:
            dt.detach().copy_(_local_part(buf, dt._spec.mesh, dt._spec.placements))
            back[id(buf)] = dt
    if back:
        _layout.walk(target, lambda path, v: back.get(id(v), v))
    return target
