"""Double-backward formulas: shape and indexing ops (see formula.py).

Each of these ops is linear, so its input's gradient is the op's own backward applied to g,
written with differentiable cddp ops (the second backward then runs through them).

Indexing nodes (ops/index/index_adv.c: Tensor.__getitem__ / __setitem__, gather,
index_select, scatter, index_put ...) are told apart by their backward function, not their
name (a basic indexing view is named after its last view op: SelectBackward0,
SliceBackward0, UnsqueezeBackward0, AliasBackward0): the engine asks _C._index_plan(node)
for the flat positions the op read or wrote and runs index_plan() below. So the Slice/Select
formulas here see only narrow / select nodes (ops/shape/slice.c). AsStridedBackward0 and
CopySlices (autograd/view.c: writes through views) read their region the same way, through
_C._view_positions. Linear ops with no simple differentiable transpose (reflection /
replication / circular pads) use formula.adjoint.
"""
import math

from ... import _C
from .formula import Unsupported, adjoint, formula, sum_to

def _numel(shape):
    return math.prod(shape)


def index_plan(ctx, plan, g):
    """An indexing node (ops/index/index_adv.c ix_backward), from plan = (kind, acc, embed,
    positions): positions[r] is the flat offset (in input 0's contiguous layout) of the
    element the op read (gather: out[r] = x[pos[r]]) or wrote (put: x[pos[r]] = src[r], or
    += when acc; embed: src's gradient is the leading region of src's shape, else it is summed
    back over the broadcast). Every gradient is linear in g: index_add / index_select."""
    kind, acc, embed, pos = plan
    shape, dt = ctx.meta(0)
    flat = pos.reshape(-1)
    g = g[0]
    if kind == 0:
        z = _C.zeros(_numel(shape), dtype=dt)
        return (z.index_add(0, flat, g.reshape(-1).to(dt)).reshape(shape),)
    gx = gs = None
    if ctx.needs(0):
        if acc:
            gx = g
        else:
            keep = _C.ones(_numel(shape), dtype=dt).index_fill(0, flat, 0)
            gx = g * keep.reshape(shape)
    if len(ctx.next) > 1 and ctx.needs(1):
        src_shape, sdt = ctx.meta(1)
        r = g.reshape(-1).index_select(0, flat).reshape(tuple(pos.shape)).to(sdt)
        if embed:
            region = _C.arange(_numel(src_shape)).reshape(src_shape)[
                tuple(slice(0, n) for n in pos.shape)].reshape(-1)
            gs = _C.zeros(_numel(src_shape), dtype=sdt).index_add(0, region, r.reshape(-1))
            gs = gs.reshape(src_shape)
        else:
            lead = 0
            while lead < len(src_shape) and src_shape[lead] == 1:
                lead += 1
            gs = sum_to(r, src_shape[lead:]).reshape(src_shape)
    return (gx, gs) if len(ctx.next) > 1 else (gx,)


def _place(g, shape, dim, start):
    """Zeros of `shape` with g (shape but g.shape[dim] along dim) at [start, start + len)
    along dim: a concatenation, differentiable in g."""
    before, after = start, shape[dim] - start - g.shape[dim]
    parts = []
    if before:
        parts.append(g.new_zeros(tuple(before if k == dim else n for k, n in enumerate(shape))))
    parts.append(g)
    if after:
        parts.append(g.new_zeros(tuple(after if k == dim else n for k, n in enumerate(shape))))
    return _C.cat(parts, dim) if len(parts) > 1 else g


@formula("ViewBackward0", "UnsafeViewBackward0", "SqueezeBackward0", "SqueezeBackward1",
         "SqueezeBackward2")
def _reshape(ctx, g):
    # ops/shape/shape.c reshape_backward: g's elements in C order, in the input's shape.
    # (UnsafeViewBackward0 of an N-D matmul has 2 edges: linalg.py takes those first.)
    if len(ctx.next) != 1:
        raise Unsupported(f"cddp: double backward through {ctx.name} with {len(ctx.next)} "
                          "inputs is not supported")
    return (g[0].reshape(ctx.meta(0)[0]),)


@formula("UnsqueezeBackward0")
def _unsqueeze(ctx, g):
    # ops/shape/shape.c reshape_backward (unsqueeze); indexing views of this name take
    # index_plan
    return (g[0].reshape(ctx.meta(0)[0]),)


@formula("ExpandBackward0")
def _expand(ctx, g):
    # ops/shape/shape.c expand_backward: g summed back to the input's shape
    return (sum_to(g[0], ctx.meta(0)[0]),)


@formula("TransposeBackward0", "TBackward0")
def _transpose(ctx, g):
    # ops/shape/shape.c transpose_backward: i[0], i[1] the swapped dims (equal for t() of a
    # 0-d / 1-d tensor)
    a, b = ctx.i[0], ctx.i[1]
    if a == b or g[0].dim() < 2:
        return (g[0],)
    return (g[0].transpose(a, b),)


@formula("PermuteBackward0")
def _permute(ctx, g):
    # ops/shape/shape.c permute_backward: i[0..ndim) the forward permutation (output dim k
    # is input dim perm[k]); also movedim / moveaxis
    nd = len(ctx.meta(0)[0])
    inv = [0] * nd
    for k in range(nd):
        inv[ctx.i[k]] = k
    return (g[0].permute(*inv) if nd else g[0],)


@formula("SliceBackward0", "SplitBackward0", "SplitWithSizesBackward0")
def _narrow(ctx, g):
    # ops/shape/slice.c narrow_backward: i[0] = dim, i[1] = start; g at [start, start + len)
    # of zeros (split / chunk pieces are narrows too)
    dim, start = ctx.i[0], ctx.i[1]
    return (_place(g[0], ctx.meta(0)[0], dim, start),)


@formula("SelectBackward0", "UnbindBackward0")
def _select(ctx, g):
    # ops/shape/slice.c select_backward: i[0] = dim, i[1] = index; g at that index of zeros
    dim, index = ctx.i[0], ctx.i[1]
    return (_place(g[0].unsqueeze(dim), ctx.meta(0)[0], dim, index),)


@formula("CatBackward0", "StackBackward0")
def _cat(ctx, g):
    # ops/shape/join.c join_backward: i[0] = dim (wrapped), i[1] = 1 for stack; input k's
    # gradient is its slice of g (a legacy empty 1-D input of cat gets zeros)
    g = g[0]
    dim, stack = ctx.i[0], ctx.i[1]
    n = len(ctx.next)
    if stack:
        pieces = g.unbind(dim)
        return tuple(pieces[k] if ctx.needs(k) else None for k in range(n))
    shapes = [ctx.meta(k)[0] for k in range(n)]
    skipped = [len(s) != g.dim() for s in shapes]
    pieces = g.split([0 if skip else s[dim] for s, skip in zip(shapes, skipped)], dim)
    return tuple(None if not ctx.needs(k) else
                 g.new_zeros(shapes[k]) if skipped[k] else pieces[k] for k in range(n))


@formula("RepeatBackward0")
def _repeat(ctx, g):
    # ops/shape/repeat.c repeat_backward: i[0] = m, i[1..m] = xs (the input's sizes padded to
    # m dims), i[1+m..2m] = r; the output in C order is (r_0, xs_0, ..., r_m-1, xs_m-1), so
    # the gradient sums the r dims (repeat, tile, repeat_interleave with an int)
    shape = ctx.meta(0)[0]
    m = ctx.i[0]
    xs, r = ctx.i[1:1 + m], ctx.i[1 + m:1 + 2 * m]
    if m == 0:
        return (g[0].reshape(shape),)
    laid = tuple(v for pair in zip(r, xs) for v in pair)
    return (g[0].reshape(laid).sum(dim=tuple(range(0, 2 * m, 2))).reshape(shape),)


@formula("FlipBackward0")
def _flip(ctx, g):
    # ops/shape/repeat.c flip_backward: i[0] = mask of the flipped dims
    dims = tuple(d for d in range(g[0].dim()) if ctx.i[0] >> d & 1)
    return (g[0].flip(dims) if dims else g[0],)


@formula("RollBackward0")
def _roll(ctx, g):
    # ops/shape/repeat.c roll_backward: i[0..ndim) the forward shifts (0 <= shift < size);
    # the gradient rolls back
    g = g[0]
    dims = [d for d in range(g.dim()) if ctx.i[d]]
    if not dims:
        return (g,)
    return (g.roll([g.shape[d] - ctx.i[d] for d in dims], dims),)


@formula("ConstantPadNdBackward0")
def _constant_pad(ctx, g):
    # nn/pad.c constant_backward: i[0] = npad, i[1..] = the pads (last dim first); the
    # gradient is g's box in the input's frame: the pads negated (a pad is a crop back)
    from ...nn import functional as F
    pad = [-p for p in ctx.i[1:1 + ctx.i[0]]]
    return (F.pad(g[0], pad),)


@formula("DiagonalBackward0")
def _diagonal(ctx, g):
    # ops/shape/tri.c diagonal_backward: i[0] = offset, i[1] = dim1, i[2] = dim2; g on that
    # diagonal of zeros of the input's shape: diag_embed's square (n = len + |offset|) cut or
    # zero-padded to the input's sizes on dim1 and dim2 (nothing but zeros lies outside them)
    shape = ctx.meta(0)[0]
    k, d1, d2 = ctx.i[0], ctx.i[1], ctx.i[2]
    out = _C.diag_embed(g[0], k, d1, d2)
    for d in (d1, d2):
        n = out.shape[d]
        if n > shape[d]:
            out = out.split([shape[d], n - shape[d]], d)[0]
        elif n < shape[d]:
            out = _place(out, tuple(shape[d] if j == d else s for j, s in enumerate(out.shape)),
                         d, 0)
    return (out,)


@formula("DiagEmbedBackward0")
def _diag_embed(ctx, g):
    # ops/shape/tri.c diag_embed_backward: i[0..2] as DiagonalBackward0; g's diagonal
    return (g[0].diagonal(ctx.i[0], ctx.i[1], ctx.i[2]),)


@formula("TrilBackward0", "TriuBackward0")
def _tri(ctx, g):
    # ops/shape/tri.c tri_backward: i[0] = diagonal, i[1] = upper; the same triangle of g
    return (g[0].triu(ctx.i[0]) if ctx.i[1] else g[0].tril(ctx.i[0]),)


@formula("MaskedSelectBackward0")
def _masked_select(ctx, g):
    # ops/index/nonzero.c masked_select_backward: slot 0 = the mask as given, i[0] = ndim and
    # i[1..] = the broadcast shape; g (nnz,) on the mask's true positions (C order) of zeros
    # of that shape, summed to the input's shape. Position j takes g[rank of j among the true
    # positions], masked.
    shape = ctx.meta(0)[0]
    bshape = tuple(ctx.i[1:1 + ctx.i[0]])
    g = g[0]
    mask = ctx.saved(0).expand(bshape).reshape(-1)
    if g.numel() == 0:                    # nothing selected: zeros, still connected to g
        return (g.sum().expand(shape),)
    rank = (mask.to(_C.int64).cumsum(0) - 1).clamp(min=0)
    full = g.take(rank) * mask.to(g.dtype)         # take: a node with a formula (below)
    return (sum_to(full.reshape(bshape), shape),)


@formula("TakeBackward0")
def _take(ctx, g):
    # ops/index/nonzero.c take_backward: slot 0 = the indices (int64, wrapped into range);
    # g added at those positions of the flattened input (duplicates accumulate)
    shape = ctx.meta(0)[0]
    g = g[0]
    ix = ctx.saved(0).reshape(-1)
    flat = g.new_zeros((_numel(shape),)).index_add(0, ix, g.reshape(-1))
    return (flat.reshape(shape),)


@formula("ReflectionPad2DBackward0", "ReplicationPad2DBackward0", "CircularPad2DBackward0")
def _pad_map(ctx, g):
    # nn/pad.c map_backward (any rank, whatever the name's 2D): i[0] = len(pad), i[1..] = pad,
    # i[7] = mode (1 reflect, 2 replicate, 3 circular); linear in x, so its adjoint
    from ...nn import functional as F
    pad = [int(v) for v in ctx.i[1:1 + ctx.i[0]]]
    mode = {1: "reflect", 2: "replicate", 3: "circular"}[ctx.i[7]]
    shape, dt = ctx.meta(0)
    return (adjoint(lambda x: F.pad(x, pad, mode=mode), g[0], shape, dt),)


@formula("AsStridedBackward0")
def _as_strided(ctx, g):
    # autograd/view.c as_strided_backward: a view (of a base written in place since) reads
    # the base's elements at _view_positions (flat, C order of the base's shape)
    pos = _C._view_positions(ctx.node)
    shape, dt = ctx.meta(0)
    if pos is None:
        # the as_strided op (ops/shape/strided.c): the output's gradient summed per storage
        # position, read back at the input's positions, shared evenly where the input
        # overlaps itself
        ypos, xpos, n = _C._as_strided_positions(ctx.node)
        xpos = xpos.reshape(-1)
        buf = _C.zeros(n, dtype=dt).index_add(0, ypos.reshape(-1), g[0].reshape(-1).to(dt))
        cnt = _C.zeros(n, dtype=dt).index_add(0, xpos, _C.ones(xpos.shape[0], dtype=dt))
        return ((buf.index_select(0, xpos) / cnt.index_select(0, xpos)).reshape(shape),)
    z = _C.zeros(_numel(shape), dtype=dt)
    return (z.index_add(0, pos.reshape(-1), g[0].reshape(-1).to(dt)).reshape(shape),)


@formula("CopySlices")
def _copy_slices(ctx, g):
    # autograd/view.c copy_slices_backward: an in-place op on a view; edges (the base before,
    # the view after). The base's gradient outside the view's region, the region to the view.
    pos = _C._view_positions(ctx.node).reshape(-1)
    shape, dt = ctx.meta(0)
    g = g[0]
    gb = gx = None
    if ctx.needs(0):
        gb = g * _C.ones(_numel(shape), dtype=dt).index_fill(0, pos, 0).reshape(shape)
    if ctx.needs(1):
        vshape, vdt = ctx.meta(1)
        gx = g.reshape(-1).index_select(0, pos).reshape(vshape).to(vdt)
    return gb, gx
