"""Double backward (create_graph=True) through reduction, shape and indexing nodes: the
formulas of cddp/autograd/_higher/reduce.py and shape.py.

For each case y = f(x1, x2, ...) (float64; one or several outputs), squared so that the
gradient reaching the node depends on the inputs, with random seeds v_k (themselves requiring
grad) and random weights w_i:

    g_i = autograd.grad([y_k * y_k], x_i, [v_k], create_graph=True)     the formulas
    s   = sum_i (g_i * w_i).sum()
    d   = autograd.grad(s, (x_1, ..., v_1, ...))                          their derivatives

Oracles: g_i equals the C engine's first-order gradient; d equals central finite differences
of s (s computed with the C engine alone); and, when torch is installed, g_i and d equal
torch's (rtol 1e-10). Each case also checks that the node it means to test is in y's graph.
Inputs stay away from kinks and ties (max, norms, prod at 0) so that finite differences are
meaningful; zeros and ties have tests of their own.
"""
import numpy as np
import pytest

import cddp
from conftest import graph_names

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")

RNG_SEED = 4321
INF = float("inf")


def _gen(kind, shape, rng):
    if kind == "any":
        return rng.standard_normal(shape)
    if kind == "nz":                       # away from 0: |x| >= 0.3 (norm ord < 2, prod)
        a = rng.uniform(0.3, 1.5, shape)
        return a * np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    if kind == "perm":                     # distinct values, spread out (max / min / amax)
        n = int(np.prod(shape))
        return (rng.permutation(n) * 0.5 - n / 4 + rng.uniform(-0.1, 0.1, n)).reshape(shape)
    raise ValueError(kind)


def _mask(lib, shape, seed=7):
    return lib.tensor(np.random.default_rng(seed).random(shape) > 0.4)


def _index(lib, values):
    return lib.tensor(np.array(values, dtype=np.int64))


def _pad(lib, x, p, mode="constant"):
    return lib.nn.functional.pad(x, p, mode=mode)


def _write_through_view(lib, x, w):
    y = x * 1
    y[:, 1:3].mul_(w)                     # CopySlices on y
    return y


def _write_through_transposed_view(lib, x, w):
    y = (x * 1).t()
    y[1].mul_(w)                          # a non-contiguous base
    return y * 1


def _stale_view(lib, x, w):
    y = x * 1
    v = y[1:3]
    y.mul_(w)                             # v is stale: AsStridedBackward0 over y
    return v


def _fills(lib, x, w):
    y = x * 2
    z = x * 3
    y.zero_()
    z[0].fill_(w.sum())                   # fill_ with a 0-d tensor that has a history
    return y + z * x


# ---- cases: (id, node name, f(lib, *xs), input kinds and shapes) ------------------------------

A23, A34, A234 = ("any", (2, 3)), ("any", (3, 4)), ("any", (2, 3, 4))

CASES = [
    # reductions
    ("sum_dim", "SumBackward1", lambda L, x: x.sum(dim=1), [A34]),
    ("sum_dims_keepdim", "SumBackward1", lambda L, x: x.sum(dim=(0, 2), keepdim=True), [A234]),
    ("sum_negdim", "SumBackward1", lambda L, x: x.sum(-1), [A234]),
    ("sum_all", "SumBackward0", lambda L, x: x.sum(), [A34]),
    ("mean_all", "MeanBackward0", lambda L, x: x.mean(), [A34]),
    ("mean_dim", "MeanBackward1", lambda L, x: x.mean(dim=(0, 2)), [A234]),
    ("mean_keepdim", "MeanBackward1", lambda L, x: x.mean(1, keepdim=True), [A234]),
    ("norm2_all", "LinalgVectorNormBackward0", lambda L, x: L.linalg.vector_norm(x), [A34]),
    ("norm2_dim", "LinalgVectorNormBackward0", lambda L, x: L.linalg.vector_norm(x, dim=1),
     [A234]),
    ("norm2_keepdim", "LinalgVectorNormBackward0",
     lambda L, x: L.linalg.vector_norm(x, 2, (0, 2), True), [A234]),
    ("norm_method", "LinalgVectorNormBackward0", lambda L, x: x.norm(dim=0), [A34]),
    ("norm1", "LinalgVectorNormBackward0", lambda L, x: L.linalg.vector_norm(x, 1, dim=1),
     [("nz", (3, 4))]),
    ("norm3", "LinalgVectorNormBackward0", lambda L, x: L.linalg.vector_norm(x, 3, dim=1),
     [("nz", (3, 4))]),
    ("norm1_5", "LinalgVectorNormBackward0", lambda L, x: L.linalg.vector_norm(x, 1.5),
     [("nz", (3, 4))]),
    ("norm0_5", "LinalgVectorNormBackward0", lambda L, x: L.linalg.vector_norm(x, 0.5, dim=0),
     [("nz", (3, 4))]),
    ("norm_neg1", "LinalgVectorNormBackward0", lambda L, x: L.linalg.vector_norm(x, -1, dim=1),
     [("nz", (3, 4))]),
    ("norm_inf", "LinalgVectorNormBackward0", lambda L, x: L.linalg.vector_norm(x, INF, dim=1),
     [("perm", (3, 4))]),
    ("norm_neginf", "LinalgVectorNormBackward0", lambda L, x: L.linalg.vector_norm(x, -INF),
     [("perm", (3, 4))]),
    ("norm0", "LinalgVectorNormBackward0",
     lambda L, x: L.linalg.vector_norm(x, 0, dim=1) + x.sum(1), [A34]),
    ("logsumexp", "LogsumexpBackward0", lambda L, x: x.logsumexp(1), [A34]),
    ("logsumexp_keepdim", "LogsumexpBackward0", lambda L, x: x.logsumexp((0, 2), True), [A234]),
    ("var_dim", "VarBackward0", lambda L, x: x.var(dim=1), [A34]),
    ("var_all", "VarBackward0", lambda L, x: x.var(), [A34]),
    ("var_correction0", "VarBackward0", lambda L, x: x.var((0, 2), correction=0, keepdim=True),
     [A234]),
    ("std_dim", "StdBackward0", lambda L, x: x.std(dim=0), [A34]),
    ("std_all", "StdBackward0", lambda L, x: x.std(), [A234]),
    ("std_keepdim", "StdBackward0", lambda L, x: x.std(2, keepdim=True, unbiased=False), [A234]),
    ("amax", "AmaxBackward0", lambda L, x: x.amax(1), [("perm", (3, 4))]),
    ("amin_dims", "AminBackward0", lambda L, x: x.amin((0, 2), keepdim=True),
     [("perm", (2, 3, 4))]),
    ("max_all", "MaxBackward1", lambda L, x: x.max(), [("perm", (3, 4))]),
    ("min_all", "MinBackward1", lambda L, x: x.min(), [("perm", (3, 4))]),
    ("max_dim", "MaxBackward0", lambda L, x: x.max(dim=1).values, [("perm", (3, 4))]),
    ("min_dim_keepdim", "MinBackward0", lambda L, x: x.min(0, keepdim=True)[0],
     [("perm", (2, 3, 4))]),
    ("prod_dim", "ProdBackward1", lambda L, x: x.prod(1), [("nz", (3, 4))]),
    ("prod_keepdim", "ProdBackward1", lambda L, x: x.prod(0, keepdim=True), [("nz", (3, 4))]),
    ("prod_all", "ProdBackward0", lambda L, x: x.prod(), [("nz", (2, 3))]),
    ("cumsum", "CumsumBackward0", lambda L, x: x.cumsum(1), [A34]),
    ("cumsum_dim0", "CumsumBackward0", lambda L, x: L.cumsum(x, dim=0), [A234]),
    ("trace_wide", "TraceBackward0", lambda L, x: x.trace(), [A34]),
    ("trace_tall", "TraceBackward0", lambda L, x: L.trace(x), [("any", (4, 3))]),
    # views and reshapes
    ("view", "ViewBackward0", lambda L, x: x.view(4, 3), [A34]),
    ("flatten", "ViewBackward0", lambda L, x: x.flatten(1), [A234]),
    ("reshape_copy", "UnsafeViewBackward0", lambda L, x: x.transpose(0, 1).reshape(-1), [A34]),
    ("squeeze_all", "SqueezeBackward0", lambda L, x: x.squeeze(), [("any", (3, 1, 4, 1))]),
    ("squeeze_dim", "SqueezeBackward1", lambda L, x: x.squeeze(1), [("any", (3, 1, 4))]),
    ("squeeze_dims", "SqueezeBackward2", lambda L, x: x.squeeze((1, 3)), [("any", (3, 1, 4, 1))]),
    ("unsqueeze", "UnsqueezeBackward0", lambda L, x: x.unsqueeze(1), [A34]),
    ("getitem_none", "UnsqueezeBackward0", lambda L, x: x[None], [A34]),
    ("getitem_alias", "AliasBackward0", lambda L, x: x[...] * x[:, :], [A34]),
    ("getitem_none_slice_full", "UnsqueezeBackward0", lambda L, x: x[0:1, None], [("any", (1, 4))]),
    ("getitem_select_keeps_all", "SelectBackward0", lambda L, x: x[0], [("any", (1, 4))]),
    ("expand", "ExpandBackward0", lambda L, x: x.expand(3, 4), [("any", (3, 1))]),
    ("expand_new_dims", "ExpandBackward0", lambda L, x: x.expand(2, 3, 4), [("any", (1, 4))]),
    ("transpose", "TransposeBackward0", lambda L, x: x.transpose(0, 2), [A234]),
    ("t", "TBackward0", lambda L, x: x.t(), [A34]),
    ("t_1d", "TBackward0", lambda L, x: x.t(), [("any", (4,))]),
    ("permute", "PermuteBackward0", lambda L, x: x.permute(2, 0, 1), [A234]),
    ("movedim", "PermuteBackward0", lambda L, x: L.movedim(x, 0, 2), [A234]),
    ("unsqueeze_neg", "UnsqueezeBackward0", lambda L, x: x.unsqueeze(-1), [A34]),
    ("squeeze_neg", "SqueezeBackward1", lambda L, x: x.squeeze(-2), [("any", (3, 1, 4))]),
    ("transpose_neg", "TransposeBackward0", lambda L, x: x.transpose(-1, 0), [A234]),
    ("permute_neg", "PermuteBackward0", lambda L, x: x.permute(-1, 0, 1), [A234]),
    ("expand_as", "ExpandBackward0", lambda L, x, y: x.expand_as(y) * y, [("any", (4,)), A34]),
    # slices and pieces
    ("narrow_neg", "SliceBackward0", lambda L, x: x.narrow(-1, -3, 2), [A234]),
    ("select_neg", "SelectBackward0", lambda L, x: x.select(-1, -1), [A234]),
    ("unbind_neg", "UnbindBackward0", lambda L, x: x.unbind(-1), [A23]),
    ("chunk_uneven", "SplitBackward0", lambda L, x: x.chunk(3, -1), [("any", (2, 5))]),
    ("narrow", "SliceBackward0", lambda L, x: x.narrow(1, 1, 2), [A34]),
    ("narrow_dim0", "SliceBackward0", lambda L, x: x.narrow(0, 1, 2), [A34]),
    ("narrow_full", "SliceBackward0", lambda L, x: x.narrow(0, 0, 3), [A34]),
    ("select", "SelectBackward0", lambda L, x: x.select(1, 2), [A34]),
    ("select_dim0", "SelectBackward0", lambda L, x: x.select(0, 1), [A34]),
    ("split", "SplitBackward0", lambda L, x: x.split(3, dim=1), [("any", (2, 5))]),
    ("split_sizes", "SplitWithSizesBackward0", lambda L, x: x.split([1, 3], dim=1), [A34]),
    ("chunk", "SplitBackward0", lambda L, x: x.chunk(2, 0), [A34]),
    ("unbind", "UnbindBackward0", lambda L, x: x.unbind(1), [A34]),
    ("cat", "CatBackward0", lambda L, x, y: L.cat([x, y * y, x], 1), [A23, ("any", (2, 4))]),
    ("cat_dim0", "CatBackward0", lambda L, x, y: L.cat([x, y]), [A23, ("any", (1, 3))]),
    ("stack", "StackBackward0", lambda L, x, y: L.stack([x, y], 0), [A23, A23]),
    ("stack_last", "StackBackward0", lambda L, x, y: L.stack([x, y * x], -1), [A23, A23]),
    # copies that rearrange
    ("repeat", "RepeatBackward0", lambda L, x: x.repeat(2, 1, 3), [A23]),
    ("tile", "RepeatBackward0", lambda L, x: L.tile(x, (2,)), [A23]),
    ("repeat_interleave", "RepeatBackward0", lambda L, x: x.repeat_interleave(2, dim=1), [A23]),
    ("repeat_interleave_flat", "RepeatBackward0", lambda L, x: x.repeat_interleave(3), [A23]),
    ("diagonal_neg_dims", "DiagonalBackward0", lambda L, x: x.diagonal(1, -1, -2), [A234]),
    ("diagonal_empty", "DiagonalBackward0", lambda L, x: x.diagonal(5) + x.sum(), [A34]),
    ("flip", "FlipBackward0", lambda L, x: x.flip((0, 2)), [A234]),
    ("roll", "RollBackward0", lambda L, x: x.roll(1, 0), [A34]),
    ("roll_dims", "RollBackward0", lambda L, x: x.roll((1, -3), (0, 1)), [A34]),
    ("roll_flat", "RollBackward0", lambda L, x: x.roll(5), [A34]),
    ("pad", "ConstantPadNdBackward0", lambda L, x: _pad(L, x, [1, 2, 0, 1]), [A34]),
    ("pad_negative", "ConstantPadNdBackward0", lambda L, x: _pad(L, x, [-1, 2, 1, -1]), [A34]),
    ("pad_3d", "ConstantPadNdBackward0", lambda L, x: _pad(L, x, [1, 0, 0, 0, 2, 1]), [A234]),
    ("diagonal", "DiagonalBackward0", lambda L, x: x.diagonal(), [A34]),
    ("diagonal_offset", "DiagonalBackward0", lambda L, x: x.diagonal(1), [("any", (4, 3))]),
    ("diagonal_wide_offset", "DiagonalBackward0", lambda L, x: x.diagonal(2), [A34]),
    ("diagonal_negoffset", "DiagonalBackward0", lambda L, x: x.diagonal(-1, 1, 2), [A234]),
    ("diagonal_swapped", "DiagonalBackward0", lambda L, x: L.diagonal(x, 1, 2, 0), [A234]),
    ("diag", "DiagonalBackward0", lambda L, x: L.diag(x, -2), [("any", (5, 3))]),
    ("diag_embed", "DiagEmbedBackward0", lambda L, x: L.diag_embed(x, 1), [A23]),
    ("tril", "TrilBackward0", lambda L, x: x.tril(), [A34]),
    ("triu", "TriuBackward0", lambda L, x: x.triu(1), [A234]),
    ("tril_neg", "TrilBackward0", lambda L, x: L.tril(x, -1), [("any", (4, 3))]),
    # indexing that keeps its indices
    ("masked_select", "MaskedSelectBackward0", lambda L, x: L.masked_select(x, _mask(L, (3, 4))),
     [A34]),
    ("masked_select_broadcast", "MaskedSelectBackward0",
     lambda L, x: x.masked_select(_mask(L, (2, 3, 4))), [("any", (3, 1))]),
    ("masked_select_nothing", "MaskedSelectBackward0",
     lambda L, x: L.masked_select(x, L.tensor(np.zeros((3, 4), bool))) + x.sum(), [A34]),
    ("take", "TakeBackward0", lambda L, x: L.take(x, _index(L, [[0, 5], [5, -1], [3, 3]])),
     [A34]),
    # linear ops through formula.adjoint, writes through views, in-place fills
    ("pad_reflect", "ReflectionPad2DBackward0", lambda L, x: _pad(L, x, [1, 2, 2, 1], "reflect"),
     [("any", (1, 3, 4))]),
    ("pad_replicate", "ReplicationPad2DBackward0",
     lambda L, x: _pad(L, x, [2, 1], "replicate"), [A234]),
    ("pad_circular", "CircularPad2DBackward0", lambda L, x: _pad(L, x, [1, 1, 0, 2], "circular"),
     [A234]),
    ("copy_slices", "CopySlices", _write_through_view, [A34, ("any", (3, 2))]),
    ("copy_slices_transposed", "CopySlices", _write_through_transposed_view,
     [A34, ("any", (3,))]),
    ("as_strided", "AsStridedBackward0", _stale_view, [A34, A34]),
    ("fills", "FillBackward3", _fills, [A34, ("any", (2,))]),
    # indexing nodes (ops/index: told apart by their backward, read through _C._index_plan)
    ("getitem_slice", "SliceBackward0", lambda L, x: x[1:3], [A34]),
    ("getitem_column", "SelectBackward0", lambda L, x: x[:, 0], [("any", (4, 4))]),
    ("getitem_int", "SelectBackward0", lambda L, x: x[2], [A34]),
    ("getitem_step", "SliceBackward0", lambda L, x: x[::2, 1:], [A34]),
    ("getitem_slice_none", "UnsqueezeBackward0", lambda L, x: x[1:3, None], [A34]),
    ("narrow00", "SliceBackward0", lambda L, x: x.narrow(0, 0, 2), [A34]),
    ("select00", "SelectBackward0", lambda L, x: x.select(0, 0), [A34]),
    ("index_select", "IndexSelectBackward0", lambda L, x: x.index_select(0, _index(L, [2, 0, 2])),
     [A34]),
    ("gather", "GatherBackward0", lambda L, x: x.gather(1, _index(L, [[0, 0], [1, 2], [3, 1]])),
     [A34]),
    ("advanced_index", "IndexBackward0", lambda L, x: x[_index(L, [0, 2, 0])], [A34]),
    ("advanced_index_2d", "IndexBackward0",
     lambda L, x: x[_index(L, [0, 2]), _index(L, [3, 1])], [A34]),
    ("boolean_mask", "IndexBackward0", lambda L, x: x[_mask(L, (3, 4))], [A34]),
    ("scatter", "ScatterBackward0",
     lambda L, x, s: x.scatter(1, _index(L, [[0, 1], [2, 0], [3, 1]]), s), [A34, ("any", (3, 2))]),
    ("scatter_add", "ScatterAddBackward0",
     lambda L, x, s: x.scatter_add(1, _index(L, [[0, 0], [2, 1], [3, 3]]), s),
     [A34, ("any", (3, 2))]),
    ("index_put", "IndexPutBackward0",
     lambda L, x, s: x.index_put((_index(L, [0, 2]),), s), [A34, ("any", (4,))]),
    ("index_put_acc", "IndexPutBackward0",
     lambda L, x, s: x.index_put((_index(L, [0, 0]),), s, accumulate=True), [A34, ("any", (4,))]),
    ("index_add", "IndexAddBackward0",
     lambda L, x, s: x.index_add(0, _index(L, [2, 0, 2]), s), [A34, ("any", (3, 4))]),
]


# ---- the machinery ---------------------------------------------------------------------------

def _outs(y):
    return list(y) if isinstance(y, (tuple, list)) else [y]


def _inputs(specs, seed):
    rng = np.random.default_rng(seed)
    return [_gen(kind, shape, rng) for kind, shape in specs]


def _run(lib, fn, arrays, v_arrs, ws, dtype=np.float64):
    """(first-order gradients, second-order gradients w.r.t. inputs and seeds) with lib."""
    xs = [lib.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    vs = [lib.tensor(v.astype(dtype), requires_grad=True) for v in v_arrs]
    ys = [y * y for y in _outs(fn(lib, *xs))]
    gs = lib.autograd.grad(ys, xs, vs, create_graph=True)
    if lib is cddp:
        assert all(g.grad_fn is not None for g in gs)
    s = sum((g * lib.tensor(w.astype(dtype))).sum() for g, w in zip(gs, ws))
    d = lib.autograd.grad(s, xs + vs, allow_unused=True)
    d = [np.zeros(t.shape) if r is None else r.detach().numpy() for r, t in zip(d, xs + vs)]
    return [g.detach().numpy() for g in gs], d


def _first_order(fn, arrays, v_arrs):
    """The C engine's gradients (no create_graph), as numpy."""
    xs = [cddp.tensor(a, requires_grad=True) for a in arrays]
    ys = [y * y for y in _outs(fn(cddp, *xs))]
    gs = cddp.autograd.grad(ys, xs, [cddp.tensor(v) for v in v_arrs])
    return [g.numpy() for g in gs]


def _s(fn, arrays, v_arrs, ws):
    return sum(float((g * w).sum()) for g, w in zip(_first_order(fn, arrays, v_arrs), ws))


def _numerical(fn, arrays, v_arrs, ws, eps=1e-6):
    """Central differences of s = sum_i <grad_i(x, v), w_i> in each input and each seed."""
    out, all_arrays = [], arrays + v_arrs
    na = len(arrays)
    for k, base in enumerate(all_arrays):
        num = np.zeros(np.shape(base))
        flat = num.reshape(-1)
        for j in range(flat.size):
            def at(delta):
                a = np.array(base, dtype=np.float64)
                a.reshape(-1)[j] += delta
                moved = all_arrays[:k] + [a] + all_arrays[k + 1:]
                return _s(fn, moved[:na], moved[na:], ws)
            flat[j] = (at(eps) - at(-eps)) / (2 * eps)
        out.append(num)
    return out


def _setup(case, seed=RNG_SEED):
    name, node, fn, specs = case
    arrays = _inputs(specs, seed)
    ys = _outs(fn(cddp, *[cddp.tensor(a, requires_grad=True) for a in arrays]))
    rng = np.random.default_rng(seed + 1)
    v_arrs = [rng.standard_normal(tuple(y.shape)) for y in ys]
    ws = [rng.standard_normal(np.shape(a)) for a in arrays]
    return arrays, v_arrs, ws, ys


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_first_order_and_finite_differences(case):
    name, node, fn, specs = case
    arrays, v_arrs, ws, ys = _setup(case)
    assert node in graph_names(ys)
    gs, d = _run(cddp, fn, arrays, v_arrs, ws)
    for got, want in zip(gs, _first_order(fn, arrays, v_arrs)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    num = _numerical(fn, arrays, v_arrs, ws)
    for got, want in zip(d, num):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@needs_torch
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_torch(case):
    name, node, fn, specs = case
    arrays, v_arrs, ws, _ = _setup(case)
    gs, d = _run(cddp, fn, arrays, v_arrs, ws)
    tgs, td = _run(torch, fn, arrays, v_arrs, ws)
    for got, want in zip(gs + d, tgs + td):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# ---- zeros, ties, third order, float32, and what has no formula ------------------------------

def _check(fn, arrays, fd=True, with_torch=True, seed=RNG_SEED):
    """The checks above on explicit inputs (fd: finite differences too; off across ties)."""
    ys = _outs(fn(cddp, *[cddp.tensor(a, requires_grad=True) for a in arrays]))
    rng = np.random.default_rng(seed + 1)
    v_arrs = [rng.standard_normal(tuple(y.shape)) for y in ys]
    ws = [rng.standard_normal(np.shape(a)) for a in arrays]
    gs, d = _run(cddp, fn, arrays, v_arrs, ws)
    for got, want in zip(gs, _first_order(fn, arrays, v_arrs)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if fd:
        for got, want in zip(d, _numerical(fn, arrays, v_arrs, ws)):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if with_torch and torch is not None:
        tgs, td = _run(torch, fn, arrays, v_arrs, ws)
        for got, want in zip(gs + d, tgs + td):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    return gs, d


def test_prod_with_zeros():
    # one zero in a row (its gradient is the product of the others), two zeros, none
    a = np.array([[0.0, 2.0, 3.0, -0.5], [0.0, 1.5, 0.0, 2.0], [1.0, 2.0, -2.0, 0.7]])
    _check(lambda L, x: x.prod(1), [a])
    _check(lambda L, x: x.prod(0, keepdim=True), [a.T.copy()])
    _check(lambda L, x: x.prod(), [np.array([[0.0, 2.0], [3.0, -0.5]])])


@needs_torch
def test_prod_with_zeros_third_order():
    from cddp.autograd._higher import FORMULAS
    if "CumprodBackward0" not in FORMULAS:      # the zero-safe formula runs cumprod
        pytest.skip("no double-backward formula for CumprodBackward0 yet")
    a = np.array([[0.0, 2.0, 0.4], [1.5, 0.0, 0.0], [1.0, 2.0, -2.0], [0.3, -0.6, 0.0]])
    for fn in (lambda L, x: x.prod(0), lambda L, x: x.prod(1, keepdim=True)):
        for got, want in zip(_third(cddp, fn, [a]), _third(torch, fn, [a])):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)


def test_norm_at_zero_is_zero_not_nan():
    # the gradient of ||x|| is 0 where ||x|| == 0 (torch's convention); its derivative is 0
    # there too (torch's formula gives NaN for ord 2 and ord < 1: x / 0 masked after the fact;
    # for 1 < ord < 2 the second derivative at a zero element is infinite, as in torch).
    # The other row checks against torch.
    a = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, -2.0]])
    for p in (2, 3, 0.5):
        gs, d = _check(lambda L, x: L.linalg.vector_norm(x, p, dim=1), [a], fd=False,
                       with_torch=False)
        assert all(np.isfinite(t).all() for t in gs + d)
        np.testing.assert_array_equal(gs[0][0], 0.0)
        np.testing.assert_array_equal(d[0][0], 0.0)
        _check(lambda L, x: L.linalg.vector_norm(x, p, dim=1), [a[1:]])


def test_norm_ord_below_one_with_a_zero_element():
    a = np.array([[0.0, 0.8, -1.2], [1.0, 2.0, -2.0]])
    gs, d = _check(lambda L, x: L.linalg.vector_norm(x, 0.5, dim=1), [a], fd=False,
                   with_torch=False)
    assert gs[0][0, 0] == 0 and d[0][0, 0] == 0 and np.isfinite(d[1]).all()
    # away from the zero element: finite differences in the nonzero ones agree
    b = a[1:]
    _check(lambda L, x: L.linalg.vector_norm(x, 0.5, dim=1), [b])


def test_std_of_a_constant_row():
    # std == 0: the first-order gradient is 0 (torch's masked_fill), so is its derivative
    a = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]])
    gs, d = _check(lambda L, x: x.std(1), [a], fd=False, with_torch=False)
    np.testing.assert_array_equal(gs[0][0], 0.0)
    np.testing.assert_array_equal(d[0][0], 0.0)
    _check(lambda L, x: x.std(1), [a[1:]])


@pytest.mark.parametrize("fn", [
    lambda L, x: x.amax(1), lambda L, x: x.amin(0), lambda L, x: x.max(),
    lambda L, x: x.min(), lambda L, x: x.max(1).values, lambda L, x: x.min(dim=0)[0],
    lambda L, x: L.linalg.vector_norm(x, INF, dim=1)],
    ids=["amax", "amin", "max", "min", "max_dim", "min_dim", "norm_inf"])
def test_ties_share_or_pick_first(fn):
    # amax / max() / the inf norm share g among ties; max(dim) gives it to the first index
    a = np.array([[1.0, 3.0, 3.0, -3.0], [-1.0, 2.0, 4.0, 0.5], [1.0, 3.0, 3.0, -3.0]])
    _check(fn, [a], fd=False)


def test_cat_skips_inputs_without_grad_and_legacy_empty():
    c = cddp.tensor(np.ones((2, 2)))
    e = cddp.tensor(np.zeros(0))
    x = cddp.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = cddp.cat([c, x, e, x * 2], 1)
    v = cddp.tensor(np.arange(16.0).reshape(2, 8), requires_grad=True)
    g, = cddp.autograd.grad(y * y, x, v, create_graph=True)
    xa, va = np.arange(6.0).reshape(2, 3), np.arange(16.0).reshape(2, 8)
    want = 2 * xa * va[:, 2:5] + 2 * (2 * 2 * xa) * va[:, 5:8]
    np.testing.assert_allclose(g.detach().numpy(), want)
    h, = cddp.autograd.grad(g.sum(), v)
    np.testing.assert_allclose(h.numpy()[:, 2:5], 2 * xa)
    np.testing.assert_allclose(h.numpy()[:, 5:8], 8 * xa)
    np.testing.assert_array_equal(h.numpy()[:, :2], 0.0)


def test_norm_of_a_cast_input_is_refused():
    # Tensor.norm(dtype=...) saves the cast copy: differentiating it would be wrong
    # (linalg.vector_norm(dtype=...) casts first, with a node of its own: that one works)
    x = cddp.tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32), requires_grad=True)
    y = x.norm(dtype=cddp.float64)
    with pytest.raises(NotImplementedError, match="copy"):
        cddp.autograd.grad(y * y, x, create_graph=True)


FLOAT32 = ["sum_dims_keepdim", "mean_dim", "norm2_dim", "norm3", "logsumexp", "var_dim",
           "std_all", "amax", "max_dim", "prod_dim", "cumsum", "trace_wide", "reshape_copy",
           "permute", "narrow", "split_sizes", "cat", "stack", "repeat", "roll_dims", "pad",
           "diagonal_offset", "triu", "masked_select", "take"]


@pytest.mark.parametrize("name", FLOAT32)
def test_float32(name):
    case = next(c for c in CASES if c[0] == name)
    arrays, v_arrs, ws, _ = _setup(case)
    gs, d = _run(cddp, case[2], arrays, v_arrs, ws, dtype=np.float32)
    assert all(t.dtype == np.float32 for t in gs + d)
    gs64, d64 = _run(cddp, case[2], arrays, v_arrs, ws)
    for got, want in zip(gs + d, gs64 + d64):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


THIRD = ["norm2_dim", "norm3", "logsumexp", "var_dim", "std_dim", "prod_dim", "mean_dim",
         "sum_dims_keepdim", "cumsum", "narrow", "select", "cat", "stack", "permute",
         "transpose", "expand", "repeat", "flip", "roll", "pad", "diagonal", "tril",
         "split_sizes", "unbind", "trace_wide", "cat_dim0", "diagonal_wide_offset",
         "diagonal_offset", "diag", "masked_select", "max_dim", "amin_dims", "norm_inf",
         "squeeze_dims", "view", "reshape_copy", "chunk"]


def _third(lib, fn, arrays):
    xs = [lib.tensor(a, requires_grad=True) for a in arrays]
    y = sum(((t * t * t).sum() for t in _outs(fn(lib, *xs))))
    g1 = lib.autograd.grad(y, xs, create_graph=True)
    g2 = lib.autograd.grad(sum((g * g).sum() for g in g1), xs, create_graph=True)
    g3 = lib.autograd.grad(sum((g * g).sum() for g in g2), xs, allow_unused=True)
    return [np.zeros(np.shape(a)) if g is None else g.detach().numpy()
            for g, a in zip(g3, arrays)]


@needs_torch
@pytest.mark.parametrize("name", THIRD)
def test_third_order_against_torch(name):
    case = next(c for c in CASES if c[0] == name)
    arrays, _, _, _ = _setup(case)
    for got, want in zip(_third(cddp, case[2], arrays), _third(torch, case[2], arrays)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)
