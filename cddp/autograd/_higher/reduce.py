"""Double-backward formulas: reduce ops (see formula.py)."""
from ... import _C
from .formula import formula
from .nn import _input


@formula("SumBackward0")
def _sum(ctx, g):
    # ops/reduce: sum() of every element; the gradient spreads g over the input's shape
    return (g[0].expand(ctx.meta(0)[0]),)


# ---- helpers ---------------------------------------------------------------------------
#
# Every reduction node here runs on the reduction plan (ops/reduce/plan.c cddp_rplan_to_node):
# i[0] = mask of the reduced dims (bit d: dim d), i[1] = keepdim; meta(0) = the input.

def _plan(ctx):
    """(input shape, reduced dims, keepdim-shape of the output) of a reduction node."""
    shape = ctx.meta(0)[0]
    mask = ctx.i[0]
    dims = tuple(d for d in range(len(shape)) if mask >> d & 1)
    kshape = tuple(1 if mask >> d & 1 else n for d, n in enumerate(shape))
    return shape, dims, kshape


def _kept(t, kshape):
    """An output-shaped tensor with the reduced dims restored as size 1 (keepdim's shape)."""
    return t.reshape(kshape)


def _count(mask, dims):
    """A 0/1 float mask summed over dims, keepdim (a 0-dim input: the mask itself)."""
    return mask.sum(dim=dims, keepdim=True) if dims else mask


def _where0(cond, t):
    """0 where cond, else t; t must be finite where cond (no NaN leaks into the backward)."""
    return _C.where(cond, _C.zeros_like(t), t)


def _safe(t):
    """t with its zeros replaced by ones: a denominator whose quotient is masked where t == 0
    (a plain where over t / 0 would send 0 * inf = NaN into the next backward)."""
    return _C.where(t == 0, _C.ones_like(t), t)


@formula("SumBackward1", "MeanBackward0", "MeanBackward1")
def _sum_mean(ctx, g):
    # ops/reduce/sum.c sum_backward: g spread over the reduced dims, times d[0] (1, or 1/R
    # for mean)
    shape, _, kshape = _plan(ctx)
    gin = _kept(g[0], kshape).expand(shape)
    return (gin * ctx.d[0] if ctx.d[0] != 1.0 else gin,)


@formula("ProdBackward0", "ProdBackward1")
def _prod(ctx, g):
    # ops/reduce/sum.c prod_backward: slot 0 = the input; at most one reduced dim for
    # ProdBackward1, every dim for ProdBackward0. Gradient: the product of the other elements
    # of each reduced row (torch's prod_backward: result / x without zeros, else the
    # exclusive cumulative products from both sides).
    shape, dims, kshape = _plan(ctx)
    x = ctx.input(0, 0)
    if not dims:
        return (g[0].reshape(shape),)
    if len(dims) > 1:                     # prod(): one row of every element
        return (_prod_rows(x.reshape(-1), g[0].reshape(1), 0).reshape(shape),)
    return (_prod_rows(x, _kept(g[0], kshape), dims[0]),)


def _prod_rows(x, g, d):
    """g (size 1 on dim d) times the product of the other elements along d of x."""
    if not bool((x == 0).any()):
        return g * (x.prod(dim=d, keepdim=True) / x)
    n = x.shape[d]
    head, last = x.split([n - 1, 1], d)
    tail = x.split([1, n - 1], d)[1]
    ones = _C.ones_like(last)
    left = _C.cat([ones, head], d).cumprod(d)
    right = _C.cat([ones, tail.flip(d)], d).cumprod(d).flip(d)
    return g * (left * right)


@formula("LinalgVectorNormBackward0")
def _vector_norm(ctx, g):
    # ops/reduce/norm.c norm_backward: slot 0 = the input (cast to the dtype= argument: a
    # copy then, refused by ctx.input), slot 1 = the norm (output); d[0] = ord. torch's
    # norm_backward case by case; where the norm (or, for ord < 1, an element) is 0 the
    # first-order gradient is 0 and so is its derivative here (quotients masked with a safe
    # denominator: no NaN).
    shape, dims, kshape = _plan(ctx)
    p = ctx.d[0]
    x = ctx.input(0, 0)
    gk = _kept(g[0], kshape)
    if p == 0.0:
        return (_C.zeros_like(x),)
    if p == 1.0:
        return (x.sgn() * gk,)
    n = _kept(ctx.output(1, 0), kshape)
    if p == 2.0:
        return (x * _where0(n == 0, gk / _safe(n)),)
    if p == float("inf") or p == float("-inf"):
        ax = x.detach().abs()
        hit = ((ax == n.detach()) | ax.isnan()).to(x.dtype)
        return (x.sgn() * (gk / _count(hit, dims)) * hit,)
    if p < 1.0:
        ax = _safe(x.abs())
        scaled = _where0(x == 0, x.sgn() * ax.pow(p - 1))
        return (scaled * gk * n.pow(1 - p),)
    scaled = x.sgn() * x.abs().pow(p - 1) if p < 2.0 else x * x.abs().pow(p - 2)
    return (scaled * _where0(n == 0, gk / _safe(n).pow(p - 1)),)


@formula("LogsumexpBackward0")
def _logsumexp(ctx, g):
    # ops/reduce/softmax.c logsumexp_backward: slot 0 = input, slot 1 = output;
    # gin = g * exp(x - lse)
    _, _, kshape = _plan(ctx)
    x = ctx.input(0, 0)
    out = _kept(ctx.output(1, 0), kshape)
    return (_kept(g[0], kshape) * (x - out).exp(),)


@formula("VarBackward0", "StdBackward0")
def _var_std(ctx, g):
    # ops/reduce/var.c var_backward: slot 0 = input, slot 1 = std (output; std only);
    # i[2] = 1 for std; d[0] = dof (0 when the correction leaves none).
    # var: g * 2 (x - mean) / dof; std: g (x - mean) / (dof * std), 0 where std == 0.
    _, dims, kshape = _plan(ctx)
    x = ctx.input(0, 0)
    dof = ctx.d[0]
    gk = _kept(g[0], kshape)
    centered = x - (x.mean(dim=dims, keepdim=True) if dims else x)
    if ctx.i[2]:
        sd = _kept(ctx.output(1, 0), kshape)
        return (_where0(sd == 0, gk / _safe(sd)) / dof * centered,)
    return (gk * (2.0 / dof if dof else float("inf")) * centered,)


@formula("AmaxBackward0", "AminBackward0", "MaxBackward1", "MinBackward1")
def _even(ctx, g):
    # ops/reduce/minmax.c even_backward: slot 0 = input, slot 1 = the selected values;
    # g shared evenly among the elements equal to the selection (NaN matches NaN). The
    # selection mask is piecewise constant in x: the result is linear in g only.
    shape, dims, kshape = _plan(ctx)
    x = ctx.saved(0)
    m = _kept(ctx.saved(1), kshape)
    hit = ((x == m) | (x.isnan() & m.isnan())).to(g[0].dtype)
    return (_kept(g[0], kshape) / _count(hit, dims) * hit,)


@formula("MaxBackward0", "MinBackward0")
def _select_dim(ctx, g):
    # ops/reduce/minmax.c scatter_backward: slot 0 = the indices (output-shaped, int64);
    # one reduced dim. g lands at the selected index of each row.
    shape, dims, kshape = _plan(ctx)
    if not dims:
        return (g[0].reshape(shape),)
    d = dims[0]
    idx = _kept(ctx.saved(0), kshape)
    pos = _C.arange(shape[d]).reshape(tuple(-1 if k == d else 1 for k in range(len(shape))))
    hit = (pos == idx).to(g[0].dtype)
    return (_kept(g[0], kshape) * hit,)


@formula("CumsumBackward0")
def _cumsum(ctx, g):
    # ops/reduce/scan.c cumsum_backward: one scanned dim (i[0] mask); the gradient is g's
    # reversed cumulative sum along it
    shape, dims, _ = _plan(ctx)
    if not dims:
        return (g[0].reshape(shape),)
    d = dims[0]
    return (g[0].flip(d).cumsum(d).flip(d),)


@formula("TraceBackward0")
def _trace(ctx, g):
    # ops/shape/tri.c trace_backward: g (0-dim) on the diagonal of the (M, N) input
    (m, n), dt = ctx.meta(0)
    return (g[0] * _C.eye(m, n, dtype=g[0].dtype),)


@formula("CumprodBackward0")
def _cumprod(ctx, g):
    # ops/reduce/cumprod.c cumprod_backward: slot 0 = the input (a copy of the old values for
    # cumprod_: nn.py's _input rebuilds it on the input's history), one scanned dim (i[0]
    # mask). dx[k] = sum_{j >= k} g[j] prod_{i <= j, i != k}
    # x[i]: without zeros (sum_{j >= k} g[j] y[j]) / x[k]; with zeros the products themselves,
    # O(R^2) per lane (exact, as torch's cumprod_backward is).
    shape, dims, _ = _plan(ctx)
    x = _input(ctx, 0, 0)
    if not dims:
        return (g[0].reshape(shape),)
    d = dims[0]
    if not bool((x == 0).any()):
        return ((g[0] * x.cumprod(d)).flip(d).cumsum(d).flip(d) / x,)
    xm, gm = x.movedim(d, -1), g[0].movedim(d, -1)
    R = xm.shape[-1]
    pos = _C.arange(R)
    later = pos.reshape(1, R) > pos.reshape(R, 1)        # [k, j]: j > k
    upper = (pos.reshape(1, R) >= pos.reshape(R, 1)).to(xm.dtype)
    # P[.., k, j] = prod_{k < i <= j} x[i] (1 for j <= k), masked to j >= k
    P = _C.where(later, xm.unsqueeze(-2), 1.0).cumprod(-1) * upper
    ones = _C.ones_like(xm.narrow(-1, 0, 1))
    before = _C.cat([ones, xm.narrow(-1, 0, R - 1)], -1).cumprod(-1)    # prod_{i < k} x[i]
    return ((before * (P * gm.unsqueeze(-2)).sum(-1)).movedim(-1, d),)


@formula("CummaxBackward0", "CumminBackward0")
def _cumbest(ctx, g):
    # ops/reduce/cumprod.c cumbest_backward: slot 0 = the int64 indices (the input's shape),
    # one scanned dim (i[0] mask). g scatter-added at the indices: linear in g, and the
    # indices are piecewise constant in x.
    shape, dims, _ = _plan(ctx)
    if not dims:
        return (g[0].reshape(shape),)
    return (_C.zeros(shape, dtype=g[0].dtype).scatter_add(dims[0], ctx.saved(0), g[0]),)
