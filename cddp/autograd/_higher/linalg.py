"""Double-backward formulas: linalg ops (see formula.py).

Each formula recomputes the first-order gradients of a product with differentiable cddp ops
(matmul, transpose, sums to the broadcast shape), so their history reaches g and both
operands. Names shared with other ops are told apart by the node's layout:

    MmBackward0 / AddmmBackward0   matmul/mm/addmm (ops/linalg) or F.linear (nn/linear.c:
                                   i[1] = K, i[2] = N set; y = x @ w^T (+ b))
    UnsafeViewBackward0, SqueezeBackward4   N-D matmul (2 edges) or a reshape/squeeze (1 edge)
    MulBackward0                   torch.outer (i[0] = CDDP_VIEW_OUTER) or an elementwise mul
"""
from ... import _C
from .formula import formula, shared, sum_to

_OUTER = 1          # ops/linalg/blas.h CDDP_VIEW_OUTER


def _mT(t):
    return t.transpose(-1, -2)


def _matmul_grads(ctx, a, b, g, how, alpha=1.0, ea=0, eb=1):
    """Gradients of alpha * (a @ b) (torch.matmul's rules: 1-D operands gain a dim, batch
    dims broadcast) or of alpha * outer(a, b), for the edges ea, eb of the node."""
    if how == _OUTER:
        a2, b2, g2 = a.unsqueeze(1), b.unsqueeze(0), g
    else:
        a2 = a.unsqueeze(0) if a.dim() == 1 else a
        b2 = b.unsqueeze(1) if b.dim() == 1 else b
        if a.dim() == 1 and b.dim() == 1:
            g2 = g.reshape(1, 1)
        elif b.dim() == 1:
            g2 = g.unsqueeze(-1)
        elif a.dim() == 1:
            g2 = g.unsqueeze(-2)
        else:
            g2 = g
    if alpha != 1:
        g2 = g2 * alpha
    ga = gb = None
    if ctx.needs(ea):
        ga = sum_to(_C.matmul(g2, _mT(b2)), tuple(a2.shape)).reshape(ctx.meta(ea)[0])
    if ctx.needs(eb):
        gb = sum_to(_C.matmul(_mT(a2), g2), tuple(b2.shape)).reshape(ctx.meta(eb)[0])
    return ga, gb


def _operands(ctx, ea=0, eb=1, sa=0, sb=1, va=None, vb=None):
    """The saved operands, each with its history where the other's gradient (which reads it)
    is wanted (nn._both: a saved copy or view is attached to the input's history)."""
    from .nn import _both
    return _both(ctx, ea, eb, sa, sb, va, vb)


def _is_linear(ctx):
    # nn/linear.c sets i = (M, K, N); the matmul family and addmm leave i[1], i[2] at 0.
    # (K = N = 0 reads as matmul: every tensor involved is empty then, so both agree.)
    return ctx.i[1] != 0 or ctx.i[2] != 0


def _linear(ctx, g):
    # nn/linear.c linear_backward: y (*, N) = x (*, K) @ w (N, K)^T (+ b); slot 0 = x made
    # contiguous (x itself unless it was strided), slot 1 = w; edges x, w (, b).
    x, w = _operands(ctx)
    K, N = ctx.i[1], ctx.i[2]
    g2 = g.reshape(-1, N)
    gx = _C.matmul(g, w) if ctx.needs(0) else None
    gw = _C.matmul(_mT(g2), x.reshape(-1, K)) if ctx.needs(1) else None
    if len(ctx.next) == 2:
        return gx, gw
    gb = g2.sum(0) if ctx.needs(2) else None
    return gx, gw, gb


@formula("MmBackward0", "BmmBackward0", "MvBackward0", "DotBackward0")
def _mm(ctx, g):
    # ops/linalg/linalg_engine.c matmul_backward (cddp_product_with_grad): slots 0, 1 = a, b
    # as given; i[0] = how. nn/linear.c records MmBackward0 too (no bias).
    if g[0] is None:
        return None, None
    if _is_linear(ctx):
        return _linear(ctx, g[0])
    a, b = _operands(ctx)
    return _matmul_grads(ctx, a, b, g[0], ctx.i[0])


shared("UnsafeViewBackward0", lambda ctx: len(ctx.next) == 2, _mm)
shared("SqueezeBackward4", lambda ctx: len(ctx.next) == 2, _mm)
# ops/linalg/linalg.c outer: MulBackward0 over matmul_backward with i[0] = CDDP_VIEW_OUTER
shared("MulBackward0", lambda ctx: len(ctx.next) == 2 and ctx.i[0] == _OUTER and
       len(ctx.meta(0)[0]) == 1 and len(ctx.meta(1)[0]) == 1, _mm)


@formula("AddmmBackward0")
def _addmm(ctx, g):
    # ops/linalg/linalg.c addmm_common: d[0] = alpha, d[1] = beta; slots 0, 1 = mat1, mat2;
    # edges input, mat1, mat2. nn/linear.c records AddmmBackward0 too (with a bias).
    if g[0] is None:
        return None, None, None
    if _is_linear(ctx):
        return _linear(ctx, g[0])
    return _addx(ctx, g[0], _C.matmul)


def _flat(t):
    return t.reshape(-1)


def _addx(ctx, g, how, va=None, vb=None):
    """beta * input + alpha * (a (.., n, k) @ b (.., k, p)) over the saved matrices; how
    the gradient is laid over them is the caller's (how: matmul, or a (g2, a, b) -> tuple);
    va, vb: the inputs' values from the saved views (nn._input)."""
    alpha, beta = ctx.d[0], ctx.d[1]
    gi = sum_to(g * beta, ctx.meta(0)[0]) if ctx.needs(0) else None
    a, b = _operands(ctx, 1, 2, 0, 1, va, vb)
    if how is _C.matmul:
        ga, gb = _matmul_grads(ctx, a, b, g, 0, alpha, 1, 2)
    else:
        ga, gb = how(g * alpha if alpha != 1 else g, a, b)
    return gi, ga, gb


@formula("BaddbmmBackward0", "AddbmmBackward0", "AddmvBackward0", "AddrBackward0")
def _addx_family(ctx, g):
    # ops/linalg/addmm_family.c addx_backward: i[0] = kind (baddbmm, addbmm, addmv, addr),
    # d[0] = alpha, d[1] = beta; slots 0, 1 = the operands as matrices: as given for baddbmm
    # and addbmm, the vectors of addmv / addr as (n, 1) / (1, m) views.
    if g[0] is None:
        return None, None, None
    kind = ctx.i[0]
    if kind == 0:                                   # baddbmm: (B, n, p)
        return _addx(ctx, g[0], _C.matmul)
    if kind == 1:                                   # addbmm: (n, p) = sum_b a[b] @ b[b]
        def how(g2, a, b):
            return (_C.matmul(g2, _mT(b)) if ctx.needs(1) else None,
                    _C.matmul(_mT(a), g2) if ctx.needs(2) else None)
        return _addx(ctx, g[0], how)
    if kind == 2:                                   # addmv: mat (n, m) @ vec (m,)
        def how(g2, a, b):
            return (_C.outer(g2, b.reshape(-1)) if ctx.needs(1) else None,
                    _C.mv(_mT(a), g2) if ctx.needs(2) else None)
        return _addx(ctx, g[0], how, vb=_flat)

    def how(g2, a, b):                              # addr: outer(vec1 (n,), vec2 (m,))
        return (_C.mv(g2, b.reshape(-1)) if ctx.needs(1) else None,
                _C.mv(_mT(g2), a.reshape(-1)) if ctx.needs(2) else None)
    return _addx(ctx, g[0], how, _flat, _flat)
