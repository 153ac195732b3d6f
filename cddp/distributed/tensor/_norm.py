"""cddp.distributed.tensor._norm — the total norm of gradients some of which are DTensors
(FSDP2's sharded gradients), for cddp.nn.utils.get_total_norm / clip_grad_norm_.

Contract: total_norm(tensors, p) = the p-norm of all the tensors' GLOBAL values taken
together, as a 0-dim plain tensor equal on every rank (collective over the meshes of the
DTensors: every rank must pass the same DTensors in the same order). Each local part's
norm is taken in its dtype, the results promoted as torch's stack does; finite p: the sums
of |x|^p of sharded parts are all-reduced (SUM) over the mesh dimensions they are sharded
on, p = inf: their maxima (MAX), p = 0: counts (SUM); replicated parts and plain tensors
count once. Partial DTensors are reduced to Replicate first.

Differences from torch: torch returns a DTensor (Replicate) for DTensor inputs; this is a
plain tensor holding the same value. The sum of |x|^p is combined across ranks in the
promoted dtype, so the last bits may differ from torch's reduction order.
"""
import math

from ... import _C
from .. import distributed_c10d as _c10d
from .placement_types import Partial, Replicate, Shard


def total_norm(tensors, p):
    p = float(p)
    dtype = None
    groups = {}          # (mesh, sharded mesh dims) -> [local parts], in first-seen order
    plain = []
    for t in tensors:
        dtype = t.dtype if dtype is None else _C.promote_types(dtype, t.dtype)
        if not getattr(type(t), "_is_dtensor", False):
            plain.append(t)
            continue
        spec = t._spec
        if any(isinstance(pl, Partial) for pl in spec.placements):
            t = t.redistribute(spec.mesh, [Replicate() if isinstance(pl, Partial) else pl
                                           for pl in spec.placements])
            spec = t._spec
        dims = tuple(i for i, pl in enumerate(spec.placements) if isinstance(pl, Shard)
                     and spec.mesh.size(i) > 1)
        if dims:
            groups.setdefault((spec.mesh, dims), []).append(t.detach())
        else:
            plain.append(t.detach())

    def local(parts):
        """max |x| (p = inf), count (p = 0) or sum |x|^p of the parts, shape (1,)."""
        parts = [q for q in parts if q.numel() > 0]   # a rank may hold no rows: identity 0
        if not parts:
            return _C.zeros(1, dtype=dtype)
        norms = _C.stack([q.norm(p).to(dtype) for q in parts])
        if math.isinf(p):
            return norms.max().reshape(1)
        if p == 0:
            return norms.sum().reshape(1)
        return norms.pow(p).sum().reshape(1)

    op = _c10d.ReduceOp.MAX if math.isinf(p) else _c10d.ReduceOp.SUM
    acc = local(plain)
    for (mesh, dims), parts in groups.items():
        part = local(parts)
        for i in dims:
            _c10d.all_reduce(part, op=op, group=mesh.get_group(i))
        acc = _C.maximum(acc, part) if math.isinf(p) else acc + part
    if math.isinf(p) or p == 0:
        return acc.reshape(())
    return acc.pow(1.0 / p).reshape(())
