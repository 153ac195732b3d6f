"""Double-backward formulas: nn ops (see formula.py).

Most nn nodes keep contiguous or float64 copies of their inputs (the C kernels read those), so
ctx.input cannot hand back the input itself. _input rebuilds it instead: the copy's value at
the input's shape and dtype, attached to the input's own history (its grad_fn's output, via
node._as_output, or the leaf itself once its value is checked), which is all a formula needs
for its result to be differentiable in that input.
"""
import numpy as np

from ... import _C
from .formula import Unsupported, _sink, adjoint, formula, shared, sum_to


def _F():
    from ...nn import functional
    return functional


# ---- reading a node's inputs -------------------------------------------------------------

def _promote(a, b):
    from ... import promote_types
    return promote_types(a, b)


def _has_slot(ctx, k):
    try:
        return ctx.saved(k) is not None
    except (IndexError, ValueError, RuntimeError):
        return False


def _unbroadcast(t, shape):
    """t's part that an input of `shape` broadcast to t's shape came from."""
    shape = tuple(shape)
    lead = t.dim() - len(shape)
    if lead:
        t = t[(0,) * lead]
    for d, n in enumerate(shape):
        if n == 1 and t.shape[d] != 1:
            t = t.narrow(d, 0, 1)
    return t


def _input(ctx, slot, edge, value=None):
    """Forward input `edge` with its history, from saved slot `slot` (the input itself, or a
    copy of its value: contiguous, cast, broadcast or reshaped to `value`'s layout when given
    as value(t) -> tensor of the input's shape). A constant when the input wants no gradient."""
    t = ctx.saved(slot)
    if t is None:
        raise Unsupported(f"cddp: double backward through {ctx.name}: its saved input {slot} "
                          "was not kept")
    node, nr = ctx.next[edge]
    shape, dt = ctx.meta(edge)
    if node is None:
        return t
    got = _sink(t)
    if got[0] is node and got[1] == nr and value is None and tuple(t.shape) == shape:
        return t
    t = t.detach()
    v = value(t) if value is not None else _unbroadcast(t, shape)
    v = v.reshape(shape).to(dt)
    if node.name() == "AccumulateGrad":
        leaf = node.variable
        a = leaf.detach().to(_C.float64).numpy()
        b = v.detach().to(_C.float64).numpy()
        if tuple(leaf.shape) != shape or not np.array_equal(a, b, equal_nan=True):
            raise Unsupported(f"cddp: double backward through {ctx.name}: input {edge} (a "
                              "leaf) was modified after the forward")
        return leaf
    return node._as_output(v.contiguous(), nr)


def _both(ctx, ea, eb, sa, sb, va=None, vb=None):
    """Inputs ea, eb (saved in sa, sb), each with its history only where the other's
    gradient (which reads it) is wanted."""
    a = _input(ctx, sa, ea, va) if ctx.needs(eb) else ctx.saved(sa)
    b = _input(ctx, sb, eb, vb) if ctx.needs(ea) else ctx.saved(sb)
    return a, b


# ---- softmax ------------------------------------------------------------------------------

@formula("SoftmaxBackward0", "LogSoftmaxBackward0")
def _softmax(ctx, g):
    # ops/reduce/softmax.c softmax_backward: slot 0 = the output y; i[0] = mask of the dim
    # (0 for a 0-d input), i[2] = log flag. softmax: y * (g - sum(g * y)); log_softmax:
    # g - exp(y) * sum(g).
    g = g[0]
    if g is None or not ctx.needs(0):
        return (None,)
    y = ctx.output(0)
    mask = ctx.i[0]
    dim = mask.bit_length() - 1 if mask else None

    def total(t):
        return t.sum() if dim is None else t.sum(dim, keepdim=True)
    if ctx.i[2]:
        return (g - y.exp() * total(g),)
    return (y * (g - total(g * y)),)


# ---- losses -------------------------------------------------------------------------------

def _kernel_node(ctx):
    """The float32 class-index node of nn/loss.c (nn/ce_rows.c): i[6] = 1; slots 0 = targets,
    1 = log-softmax in the input's layout, 2 = weight. Otherwise the float64 node: slots 0 =
    x rows, 1 = target, 2 = row lse, 3 = weight."""
    return ctx.i[6] == 1


def _ce_rows(ctx):
    """nn/loss.c row_coeffs for every row: the (R, C) weights a (NumPy) and which rows count
    (not ignore_index)."""
    if _kernel_node(ctx):                     # class indices only; rows = positions (n, d..)
        R, C, probs, ignore, eps = ctx.i[0] * ctx.i[2], ctx.i[1], 0, ctx.i[4], ctx.d[0]
        tslot, wslot = 0, 2
    else:
        R, C, probs, ignore, eps = ctx.i[0], ctx.i[1], ctx.i[2], ctx.i[4], ctx.d[0]
        tslot, wslot = 1, 3
    tgt = ctx.saved(tslot).detach()
    w = ctx.saved(wslot) if _has_slot(ctx, wslot) else None
    wv = None if w is None else w.detach().numpy()
    t = tgt.numpy()
    if probs:
        a = t.reshape(R, C) * (1 - eps) + eps / C
        if wv is not None:
            a = a * wv
        keep = np.ones(R, dtype=bool)
    else:
        y = t.reshape(R)
        keep = y != ignore
        a = np.zeros((R, C))
        if eps > 0:
            a[:] = eps / C * (wv if wv is not None else 1.0)
        rows = np.nonzero(keep)[0]
        a[rows, y[rows]] += (wv[y[rows]] if wv is not None else 1.0) * (1 - eps)
        a[~keep] = 0
    return a, keep


def _is_ce(ctx):
    # nn/loss.c's cross entropy with label smoothing (class indices: the only AddBackward0
    # case): 1 edge; slots x, target, lse (+ weight), or targets, log-softmax (+ weight) for
    # the float32 kernels' node. A real add saves nothing.
    return len(ctx.next) == 1 and _has_slot(ctx, 1) and (_kernel_node(ctx) or
                                                         _has_slot(ctx, 2))


@formula("NllLossBackward0")
def _ce(ctx, g):
    # nn/loss.c ce_backward (cross_entropy with logits = i[3], nll_loss without): slot 0 = x
    # as float64 rows (R, C) (classes last for (N, C, d1, ..)), 1 = target (int64 (R,) or
    # float64 (R, C) probabilities when i[2]), 2 = row lse, 3 = float64 weight or None;
    # i = (R, C, probs, logits, ignore_index, reduction), d = (label smoothing, mean divisor).
    # gx[r, c] = s_r * (A_r * softmax(x)[r, c] - a[r, c]) (without the softmax term for nll).
    # With probability targets that need grad the node has edge 1 (the target): then a is
    # built from the target with its history, and gt = -s (1 - eps) w log_softmax(x).
    g = g[0]
    want_t = len(ctx.next) > 1 and ctx.needs(1)
    if g is None or not (ctx.needs(0) or want_t):
        return (None,) * len(ctx.next)
    shape, dt = ctx.meta(0)
    C, logits, red, denom = ctx.i[1], ctx.i[3], ctx.i[5], ctx.d[1]
    a, keep = _ce_rows(ctx)
    nd = len(shape)
    cdim = 1 if nd >= 2 else 0

    def natural(rows):                       # (R, C) rows -> x's layout
        if nd <= 2:
            return rows.reshape(shape)
        lead = (shape[0],) + tuple(shape[2:])
        return rows.reshape(lead + (C,)).movedim(-1, 1)

    an = natural(_C.from_numpy(a).to(dt))
    if want_t:
        w = ctx.saved(3) if _has_slot(ctx, 3) else None
        wb = None if w is None else w.detach().to(dt).reshape((C,) + (1,) * (nd - 2))
        t = _input(ctx, 1, 1, natural)
        eps = ctx.d[0]
        an = t * (1 - eps) + eps / C
        if wb is not None:
            an = an * wb
    gx = _ce_x(ctx, g, an, keep, shape, dt, natural, nd, cdim, C, logits, red, denom)
    if len(ctx.next) == 1:
        return (gx if ctx.needs(0) else None,)
    gt = None
    if want_t:
        s = _ce_scale(g, keep, shape, dt, nd, cdim, red, denom)
        lsm = _input(ctx, 0, 0, natural).log_softmax(cdim)
        gt = -(s * (1 - ctx.d[0])) * lsm
        if wb is not None:
            gt = gt * wb
    return (gx if ctx.needs(0) else None, gt)


def _ce_scale(g, keep, shape, dt, nd, cdim, red, denom):
    """The per-row factor of the gradient: g spread over the rows (none), g / divisor (mean)."""
    if red == 0:
        return g.unsqueeze(cdim) if nd >= 1 and g.dim() < nd else g
    if red == 1:
        return g / denom
    return g


def _ce_x(ctx, g, an, keep, shape, dt, natural, nd, cdim, C, logits, red, denom):
    """The input's gradient of the fused cross entropy / nll node (an: the weights a[r, c])."""
    if red == 0:                             # none: g has x's shape less the classes
        s = g.unsqueeze(cdim) if nd >= 1 and g.dim() < nd else g
    elif red == 1:
        if denom == 0:
            if keep.any():
                raise Unsupported("cddp: double backward through NllLossBackward0: mean "
                                  "over a zero total weight")
            return g * _C.zeros(shape, dtype=dt)
        s = g / denom
    else:
        s = g
    if not logits:
        return -(s * an)
    x = _kernel_input(ctx, cdim) if _kernel_node(ctx) else _input(ctx, 0, 0, natural)
    A = an.sum(cdim, keepdim=True)
    sm = x.softmax(cdim)
    if red == 0 or not keep.all():           # ignored rows: no gradient (also under a NaN s)
        mask = natural(_C.from_numpy(np.repeat(keep[:, None], C, 1)).to(dt))
        return s * (A * sm - an) * mask
    return s * (A * sm - an)


def _kernel_input(ctx, cdim):
    """The input x with its history for the float32 kernels' node, which saved log_softmax(x)
    rather than x: lp stands for x (softmax, all the gradient reads, is the same for x and
    x - lse). A leaf input is used itself, checked against lp (modified after the forward
    otherwise)."""
    lp = ctx.saved(1)
    node, nr = ctx.next[0]
    if node is None:
        return lp
    if node.name() == "AccumulateGrad":
        leaf = node.variable
        ok = tuple(leaf.shape) == tuple(lp.shape) and np.allclose(
            leaf.detach().log_softmax(cdim).numpy(), lp.detach().numpy(), rtol=1e-4,
            atol=1e-5, equal_nan=True)
        if not ok:
            raise Unsupported(f"cddp: double backward through {ctx.name}: input 0 (a leaf) "
                              "was modified after the forward")
        return leaf
    return node._as_output(lp.detach().contiguous(), nr)


# nn/loss.c ce_record: cross_entropy with label smoothing names its node AddBackward0
shared("AddBackward0", _is_ce, _ce)


@formula("MseLossBackward0", "L1LossBackward0", "BinaryCrossEntropyBackward0",
         "BinaryCrossEntropyWithLogitsBackward0")
def _pointwise_loss(ctx, g):
    # nn/loss.c pw_backward: edges input, target; slots 0..3 = float64 copies of input,
    # target, weight, pos_weight broadcast to one shape (2, 3 None when absent);
    # i[0] = kind (mse, l1, bce, bce with logits), i[1] = reduction (none, mean, sum).
    g = g[0]
    if g is None:
        return None, None
    kind, red = ctx.i[0], ctx.i[1]
    (sx, dx), (sy, dy) = ctx.meta(0), ctx.meta(1)
    full = tuple(ctx.saved(0).shape)
    dt = _promote(dx, dy)
    n = int(np.prod(full)) if full else 1
    s = g / n if red == 1 else g
    w = ctx.saved(2).to(dt) if _has_slot(ctx, 2) else None
    pw = ctx.saved(3).to(dt) if _has_slot(ctx, 3) else None
    need_x = kind != 1 and (ctx.needs(0) or ctx.needs(1))
    x = _input(ctx, 0, 0) if need_x else ctx.saved(0)
    y = _input(ctx, 1, 1) if need_x else ctx.saved(1)
    if kind == 0:                                           # mse: 2 (x - y)
        d_x = 2 * (x - y)
        d_y = -d_x
    elif kind == 1:                                         # l1: sign(x - y), a constant
        sg = (ctx.saved(0) - ctx.saved(1)).sign().to(dt)
        d_x, d_y = sg, -sg
    elif kind == 2:                                         # bce
        d_x = (x - y) / ((1 - x) * x).clamp_min(1e-12)
        d_y = -(x.log() - (-x).log1p())
        if w is not None:
            d_x, d_y = w * d_x, w * d_y
    else:                                                   # bce with logits
        F = _F()
        sp = F.softplus(-x)
        L = 1 if pw is None else 1 + (pw - 1) * y
        d_x = (1 - y) - L * (1 - x.sigmoid())
        d_y = -x if pw is None else (pw - 1) * sp - x
        if w is not None:
            d_x, d_y = w * d_x, w * d_y
    gx = sum_to(_full(s * d_x, full), sx) if ctx.needs(0) else None
    gy = sum_to(_full(s * d_y, full), sy) if ctx.needs(1) else None
    return gx, gy


def _full(t, shape):
    return t if tuple(t.shape) == tuple(shape) else t.expand(shape)


# ---- convolution ----------------------------------------------------------------------------

class _Geom:
    """nn/conv.c geom_store: the conv that the node runs (for a transposed conv its adjoint,
    input = the transposed conv's output): stride s, left padding p, dilation d, kernel k,
    input size H, output size O, per spatial dim (h, w), and the groups G."""

    def __init__(self, i):
        self.G = i[3]
        self.H, self.O, self.k = (i[5], i[6]), (i[7], i[8]), (i[9], i[10])
        self.s, self.p, self.d = (i[11], i[12]), (i[13], i[14]), (i[15], i[16])
        self.transposed = bool(i[17])
        # right padding the output size implies (negative: input rows the conv never reads)
        self.r = tuple((o - 1) * s + d * (k - 1) + 1 - h - p
                       for o, s, d, k, h, p in zip(self.O, self.s, self.d, self.k, self.H,
                                                   self.p))

    def padded(self, t):
        """t (N, C, H, W) and the symmetric padding for a conv over it that reads every
        position the node's conv read (explicit zeros where the right padding exceeds the
        left)."""
        if all(r <= p for r, p in zip(self.r, self.p)):
            return t, self.p
        F = _F()
        return F.pad(t, (self.p[1], max(self.r[1], 0), self.p[0], max(self.r[0], 0))), (0, 0)


def _crop(t, size, start=(0, 0)):
    for d in range(2):
        if t.shape[2 + d] != size[d] or start[d]:
            t = t.narrow(2 + d, start[d], size[d])
    return t


def _conv_fwd(geo, x, w):
    """The node's conv of x (N, C, H, W) with w (OC, C/G, kh, kw): (N, OC, O)."""
    x, pad = geo.padded(x)
    return _crop(_F().conv2d(x, w, None, geo.s, pad, geo.d, geo.G), geo.O)


def _conv_in_grad(geo, gy, w):
    """The adjoint of _conv_fwd in x: (N, C, H, W) from gy (N, OC, O)."""
    F = _F()
    full = tuple((o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(geo.O, geo.s, geo.d, geo.k))
    op = tuple(h - f + 2 * p for h, f, p in zip(geo.H, full, geo.p))
    if all(0 <= o < s for o, s in zip(op, geo.s)):
        return F.conv_transpose2d(gy, w, None, geo.s, geo.p, op, geo.G, geo.d)
    t = F.conv_transpose2d(gy, w, None, geo.s, 0, 0, geo.G, geo.d)
    ext = tuple(max(p + h - f, 0) for p, h, f in zip(geo.p, geo.H, full))
    if any(ext):
        t = F.pad(t, (0, ext[1], 0, ext[0]))
    return _crop(t, geo.H, geo.p)


def _conv_w_grad(geo, x, gy):
    """The gradient of _conv_fwd in w: (OC, C/G, kh, kw) from x (N, C, H, W), gy (N, OC, O):
    a conv of x's channels (as the batch) with gy's (as the kernels), stride and dilation
    exchanged, one group per group."""
    F = _F()
    G = geo.G
    N, C = x.shape[0], x.shape[1]
    OC = gy.shape[1]
    x, pad = geo.padded(x)
    xs = x.reshape(N, G, C // G, x.shape[2], x.shape[3]).permute(2, 1, 0, 3, 4)
    xs = xs.reshape(C // G, G * N, x.shape[2], x.shape[3])
    gs = gy.reshape(N, G, OC // G, geo.O[0], geo.O[1]).permute(1, 2, 0, 3, 4)
    gs = gs.reshape(OC, N, geo.O[0], geo.O[1])
    r = F.conv2d(xs, gs, None, geo.d, pad, geo.s, G)        # (C/G, OC, kh', kw')
    return _crop(r.transpose(0, 1), geo.k)


@formula("ConvolutionBackward0")
def _conv(ctx, g):
    # nn/conv.c conv_backward: edges x, w (, b); slots 0, 1 = x, w as given; i[0..17]
    # the geometry (_Geom). 1-D convs run as 2-D with H = 1. Plain: dx = conv_transpose(g, w),
    # dw = corr(x, g); transposed (its adjoint conv is the one stored): dx = conv(g, w),
    # dw = corr(g, x).
    g = g[0]
    if g is None:
        return (None,) * len(ctx.next)
    geo = _Geom(ctx.i)
    one_d = len(ctx.meta(0)[0]) == 3
    x, w = _both(ctx, 0, 1, 0, 1)
    if one_d:
        x, w, g = x.unsqueeze(2), w.unsqueeze(2), g.unsqueeze(2)
    gx = gw = gb = None
    if geo.transposed:
        if ctx.needs(0):
            gx = _conv_fwd(geo, g, w)
        if ctx.needs(1):
            gw = _conv_w_grad(geo, g, x)
    else:
        if ctx.needs(0):
            gx = _conv_in_grad(geo, g, w)
        if ctx.needs(1):
            gw = _conv_w_grad(geo, x, g)
    if one_d:
        gx = None if gx is None else gx.squeeze(2)
        gw = None if gw is None else gw.squeeze(2)
    if len(ctx.next) == 3 and ctx.needs(2):
        gb = g.sum((0, 2, 3))
    return (gx, gw) if len(ctx.next) == 2 else (gx, gw, gb)


# ---- normalization --------------------------------------------------------------------------

def _through_norm(gy, xhat, rstd, dims):
    """The gradient reaching x through xhat = (x - mean) * rstd with x's own statistics over
    dims, gy the gradient of xhat."""
    return rstd * (gy - gy.mean(dims, keepdim=True) - xhat * (gy * xhat).mean(dims, keepdim=True))


def _normalized(x, mean_c, rstd_c, dims, batch_stats):
    """xhat = (x - mean) * rstd and rstd as differentiable functions of x. With batch
    statistics mean and var are x's over dims and rstd = 1/sqrt(var + eps), where eps (not
    kept by the nodes) is read back from the saved rstd: eps = 1/rstd^2 - var at the saved
    point, a constant. Otherwise the saved (running) statistics are constants."""
    if not batch_stats:
        return (x - mean_c) * rstd_c, rstd_c
    mean = x.mean(dims, keepdim=True)
    d = x - mean
    var = (d * d).mean(dims, keepdim=True)
    xd = x.detach().to(_C.float64)
    dd = xd - xd.mean(dims, keepdim=True)
    eps = (1 / (rstd_c.to(_C.float64) ** 2) - (dd * dd).mean(dims, keepdim=True)).to(x.dtype)
    rstd = (var + eps).rsqrt()
    return d * rstd, rstd


def _norm_grads(ctx, g, x, w, mean_c, rstd_c, dims, batch_stats, wshape):
    """Gradients of y = xhat * w + b (w, b broadcast as wshape over x) in x, w, b."""
    xhat, rstd = _normalized(x, mean_c, rstd_c, dims, batch_stats)
    gw_ = g if w is None else g * w.reshape(wshape)
    gx = None
    if ctx.needs(0):
        if batch_stats:
            gx = _through_norm(gw_, xhat, rstd, dims)
        else:
            gx = gw_ * rstd
    rest = tuple(d for d in range(x.dim()) if wshape[d] == 1)
    gw = (g * xhat).sum(rest) if ctx.needs(1) else None
    gb = g.sum(rest) if len(ctx.next) > 2 and ctx.needs(2) else None
    return gx, gw, gb


@formula("NativeLayerNormBackward0")
def _layer_norm(ctx, g):
    # nn/layer_norm.c layer_norm_backward: edges x, w, b (None when absent); slot 0 = x made
    # contiguous, 1 = w (or None), 2 = (M, 2) float64 row mean and rstd; i = (M, N).
    g = g[0]
    if g is None:
        return None, None, None
    M, N = ctx.i[0], ctx.i[1]
    shape, dt = ctx.meta(0)
    w = None
    if _has_slot(ctx, 1):
        w = _input(ctx, 1, 1) if ctx.needs(0) else ctx.saved(1)
    want_x = ctx.needs(0) or ctx.needs(1)
    x = _input(ctx, 0, 0) if want_x else ctx.saved(0)
    st = ctx.saved(2).to(dt)
    x2, g2 = x.reshape(M, N), g.reshape(M, N)
    gx, gw, gb = _norm_grads(ctx, g2, x2, w, st[:, 0:1], st[:, 1:2], (1,), True, (1, N))
    return (None if gx is None else gx.reshape(shape),
            None if gw is None else gw.reshape(ctx.meta(1)[0]),
            None if gb is None else gb.reshape(ctx.meta(2)[0]))


@formula("NativeBatchNormBackward0")
def _batch_norm(ctx, g):
    # nn/norm/batch_norm.c batch_norm_backward: edges x, w, b; slot 0 = x made contiguous,
    # 1 = (2, C) float64 mean and invstd, 2 = w when i[1]; i[0] = training (batch
    # statistics; eval reads the running ones, constants here).
    g = g[0]
    if g is None:
        return None, None, None
    shape, dt = ctx.meta(0)
    C = shape[1]
    wshape = (1, C) + (1,) * (len(shape) - 2)
    w = None
    if ctx.i[1]:
        w = _input(ctx, 2, 1) if ctx.needs(0) else ctx.saved(2)
    x = _input(ctx, 0, 0) if ctx.needs(0) or ctx.needs(1) else ctx.saved(0)
    st = ctx.saved(1).to(dt)
    dims = (0,) + tuple(range(2, len(shape)))
    return _norm_grads(ctx, g, x, w, st[0].reshape(wshape), st[1].reshape(wshape), dims,
                       bool(ctx.i[0]), wshape)


# ---- pooling and embedding (linear in x: the gradient is a constant map of g) ---------------

def _avg_rows(O, H, k, s, p, include_pad, override):
    """(O, H) matrix of one spatial dim of nn/pool.c avg_*: window [o*s - p, +k) cut at the
    right padding, then at the input; 1/extent per row (the divisor is the product of the
    two dims' extents, or divisor_override)."""
    A = np.zeros((O, H))
    for o in range(O):
        h0 = o * s - p
        h1 = min(h0 + k, H + p)
        size = h1 - h0
        h0, h1 = max(h0, 0), min(h1, H)
        if h0 >= h1:
            continue
        A[o, h0:h1] = 1.0 if override else 1.0 / (size if include_pad else h1 - h0)
    return A


def _adaptive_rows(O, H):
    A = np.zeros((O, H))
    for o in range(O):
        h0, h1 = (o * H) // O, -((-(o + 1) * H) // O)
        A[o, h0:h1] = 1.0 / (h1 - h0)
    return A


def _separable(ctx, g, Ah, Aw, scale=1.0):
    """x's gradient of y = Ah @ x @ Aw^T (per plane) for the pooling's row matrices."""
    shape, dt = ctx.meta(0)
    ah = _C.from_numpy(Ah * scale).to(dt)
    aw = _C.from_numpy(Aw).to(dt)
    return (_C.matmul(_C.matmul(ah.t(), g), aw).reshape(shape),)


@formula("AvgPool2DBackward0")
def _avg_pool(ctx, g):
    # nn/pool.c avg_pool_backward: geometry in i = (planes, H, W, OH, OW, kh, kw, sh, sw, ph,
    # pw, dh, dw, count_include_pad, divisor_override)
    if g[0] is None or not ctx.needs(0):
        return (None,)
    _, H, W, OH, OW, kh, kw, sh, sw, ph, pw, _, _, inc, div = ctx.i[:15]
    Ah = _avg_rows(OH, H, kh, sh, ph, inc, div)
    Aw = _avg_rows(OW, W, kw, sw, pw, inc, div)
    return _separable(ctx, g[0], Ah, Aw, 1.0 / div if div else 1.0)


@formula("AdaptiveAvgPool2DBackward0")
def _adaptive_avg_pool(ctx, g):
    # nn/pool.c adaptive_avg_backward: i = (planes, H, W, OH, OW, ...)
    if g[0] is None or not ctx.needs(0):
        return (None,)
    _, H, W, OH, OW = ctx.i[:5]
    return _separable(ctx, g[0], _adaptive_rows(OH, H), _adaptive_rows(OW, W))


@formula("MaxPool2DWithIndicesBackward0", "AdaptiveMaxPool2DBackward0")
def _max_pool(ctx, g):
    # nn/pool.c max_pool_backward: slot 0 = int64 indices (*, OH, OW), flat h * W + w in each
    # plane; i = (planes, H, W, OH, OW, ...). dx = g added at the indices.
    if g[0] is None or not ctx.needs(0):
        return (None,)
    shape, dt = ctx.meta(0)
    planes, H, W = ctx.i[:3]
    idx = ctx.saved(0).reshape(planes, -1)
    idx = (idx + _C.arange(planes).reshape(planes, 1) * (H * W)).reshape(-1)
    base = _C.zeros((planes * H * W,), dtype=g[0].dtype)
    return (base.index_add(0, idx, g[0].reshape(-1)).reshape(shape),)


@formula("EmbeddingBackward0")
def _embedding(ctx, g):
    # nn/embedding.c embedding_backward: slot 0 = int64 indices; i = (V, D, padding_idx (-1:
    # none), scale_grad_by_freq). dw = rows of g added at the indices (none for padding_idx,
    # each divided by its index's count when scaling). The count scaling enters the value
    # only, as in torch's embedding_dense_double_backward: the forward node's own backward
    # scales again, so a differentiable scale would count it twice (finite differences agree).
    if g[0] is None or not ctx.needs(0):
        return (None,)
    V, D, pad, scale = ctx.i[:4]
    ix = ctx.saved(0).reshape(-1)
    iv = ix.numpy()
    rows = g[0].reshape(-1, D)
    keep = iv != pad
    if not keep.all():
        rows = rows * _C.from_numpy(keep.astype(np.float64)).to(rows.dtype).reshape(-1, 1)
    out = _C.zeros((V, D), dtype=rows.dtype).index_add(0, ix, rows)
    if scale:
        f = 1.0 / np.bincount(iv, minlength=V)[iv] - 1.0
        extra = rows.detach() * _C.from_numpy(f).to(rows.dtype).reshape(-1, 1)
        out = out + _C.zeros((V, D), dtype=rows.dtype).index_add(0, ix, extra)
    return (out,)


def _upsample_rows(dt, mode, align, n_in, n_out, scale, axis):
    """(n_out, n_in) matrix of one axis of nn/interpolate.c's resampling, read off the kernel
    itself (its index and weight tables, in its arithmetic type) by resampling the identity
    along that axis while the other axis stays 1 -> 1 (a copy)."""
    from ..grad_mode import no_grad
    eye = _C.eye(n_in, dtype=dt)
    with no_grad():
        if axis == 0:                # (1, n_in, n_in, 1): channel k holds e_k down H
            y = _C._upsample(eye.reshape(1, n_in, n_in, 1), n_out, 1, scale, 0.0, mode, align)
            return y.reshape(n_in, n_out).t().contiguous()
        y = _C._upsample(eye.reshape(1, n_in, 1, n_in), 1, n_out, 0.0, scale, mode, align)
        return y.reshape(n_in, n_out).t().contiguous()


@formula("UpsampleNearest2DBackward0", "UpsampleBilinear2DBackward0")
def _upsample(ctx, g):
    # nn/interpolate.c upsample_backward: i = (planes, H, W, OH, OW, mode, align_corners),
    # d = (scale_h, scale_w); y = Ah @ x @ Aw^T per plane (each axis resampled on its own).
    if g[0] is None or not ctx.needs(0):
        return (None,)
    shape, dt = ctx.meta(0)
    _, H, W, OH, OW, mode, align = ctx.i[:7]
    Ah = _upsample_rows(dt, mode, align, H, OH, ctx.d[0], 0)
    Aw = _upsample_rows(dt, mode, align, W, OW, ctx.d[1], 1)
    return (_C.matmul(_C.matmul(Ah.t(), g[0]), Aw).reshape(shape),)


# ---- more losses and group norm -------------------------------------------------------------

@formula("SmoothL1LossBackward0", "HuberLossBackward0", "KlDivBackward0")
def _extra_loss(ctx, g):
    # nn/loss_extra.c pw_backward (pw_eval): edges input, target, third; slots 0..2 = their
    # float64 copies broadcast to one shape; i = (kind, reduction, flags, R), d = (p0, p1,
    # mean divisor). smooth_l1 (beta = p0), huber (delta = p0), kl_div (flags: log_target).
    g = g[0]
    if g is None:
        return None, None, None
    kind, red, fl = ctx.i[0], ctx.i[1], ctx.i[2]
    (sx, dx), (sy, dy) = ctx.meta(0), ctx.meta(1)
    dt = _promote(dx, dy)
    xc, yc = ctx.saved(0), ctx.saved(1)
    full = tuple(xc.shape)
    s = g if red in (0, 2) else g / ctx.d[2]
    x = _input(ctx, 0, 0) if ctx.needs(0) or ctx.needs(1) else xc
    y = _input(ctx, 1, 1) if ctx.needs(0) or ctx.needs(1) else yc
    if kind in (0, 1):                                   # smooth_l1 / huber
        p = ctx.d[0]
        tc = xc - yc
        m = ((tc.abs() < p) if kind == 0 else (tc.abs() <= p)).to(dt)
        out = (1 - m) * tc.sign().to(dt) * (1.0 if kind == 0 else p)
        if p != 0:                                       # the quadratic part, where inside
            out = out + m * (x - y) * (1.0 / p if kind == 0 else 1.0)
        d_x, d_y = out, -out
    elif kind == 2:                                      # kl_div
        if fl & 1:
            e = y.exp()
            d_x, d_y = -e, e * (y - x + 1)
        else:                                            # NaN where the target is 0, as C's
            z = (yc == 0).numpy()
            zero = _C.from_numpy(z.astype(np.float64)).to(dt)
            nan = _C.from_numpy(np.where(z, np.nan, 0.0)).to(dt)
            d_x = -y
            d_y = (y + zero).log() + 1 - x + nan
    else:
        raise Unsupported(f"cddp: double backward through {ctx.name} is not supported yet")
    gx = sum_to(_full(s * d_x, full), sx) if ctx.needs(0) else None
    gy = sum_to(_full(s * d_y, full), sy) if ctx.needs(1) else None
    return gx, gy, None


@formula("NativeGroupNormBackward0")
def _group_norm(ctx, g):
    # nn/norm/group_norm.c group_norm_backward: edges x, w, b; slot 0 = x made contiguous,
    # 1 = (2, N*G) float64 mean and rstd per (n, group), 2 = w when i[1]; i[0] = G. The
    # statistics run over x viewed as (N, G, C/G * S), the affine per channel.
    g = g[0]
    if g is None:
        return None, None, None
    shape, dt = ctx.meta(0)
    N, C, G = shape[0], shape[1], ctx.i[0]
    wshape = (1, C) + (1,) * (len(shape) - 2)
    w = None
    if ctx.i[1]:
        w = _input(ctx, 2, 1) if ctx.needs(0) else ctx.saved(2)
    x = _input(ctx, 0, 0) if ctx.needs(0) or ctx.needs(1) else ctx.saved(0)
    st = ctx.saved(1).to(dt)
    x3 = x.reshape(N, G, -1)
    xhat, rstd = _normalized(x3, st[0].reshape(N, G, 1), st[1].reshape(N, G, 1), (2,), True)
    gx = gw = gb = None
    if ctx.needs(0):
        gw_ = (g if w is None else g * w.reshape(wshape)).reshape(N, G, -1)
        gx = _through_norm(gw_, xhat, rstd, 2)
        gx = gx.reshape(shape)
    rest = (0,) + tuple(range(2, len(shape)))
    if ctx.needs(1):
        gw = (g * xhat.reshape(shape)).sum(rest)
    if ctx.needs(2):
        gb = g.sum(rest)
    return gx, gw, gb


# ---- attention ------------------------------------------------------------------------------

def _zero_on(ctx, edge):
    """A zero tensor of input `edge`'s shape whose derivative is the identity on that input
    (its history is the input's), for an input the node does not keep."""
    node, nr = ctx.next[edge]
    shape, dt = ctx.meta(edge)
    if node.name() == "AccumulateGrad":
        leaf = node.variable
        return leaf - leaf.detach()
    return node._as_output(_C.zeros(shape, dtype=dt), nr)


@formula("ScaledDotProductAttentionBackward0")
def _sdpa(ctx, g):
    # nn/sdpa.c sdpa_backward: edges q, k, v, float mask (None otherwise); slots 0..2 = q, k,
    # v (as given, or copies), 3 = P = softmax(scale q k^T + mask) (output 1 when it is the
    # returned weights); extra = the dropout noise (or None); d[0] = scale, i[0] = enable_gqa.
    # P is rebuilt differentiably as softmax(S - S_saved + log P_saved (+ mask - mask)), equal
    # to P with softmax's derivatives in S (and in the mask, whose value is not kept).
    go, ga = g[0], g[1] if 1 in g else None
    if go is None and ga is None:
        return None, None, None, None
    (sq, _), (sk, _), (sv, _) = ctx.meta(0), ctx.meta(1), ctx.meta(2)
    if ctx.i[0] and (sq[-3:-2] != sk[-3:-2] or sq[-3:-2] != sv[-3:-2]):
        raise Unsupported("cddp: double backward through ScaledDotProductAttentionBackward0 "
                          "with grouped-query heads is not supported yet")
    scale = ctx.d[0]
    q, k, v = (_input(ctx, s, s) for s in range(3))
    Pc = ctx.saved(3).detach()
    dt = Pc.dtype
    S = _C.matmul(q, k.transpose(-1, -2)) * scale
    live = (Pc != 0).any(-1, keepdim=True)            # rows not entirely masked
    logp = (Pc + (~live).to(dt)).log()
    z = S - S.detach() + logp
    if len(ctx.next) > 3 and ctx.needs(3):
        z = z + _zero_on(ctx, 3)
    P = z.softmax(-1)
    if not bool(live.all()):
        P = P * live.to(dt)
    noise = ctx.node._scalars()[2]
    Pd = P if noise is None else P * noise
    dPd = None
    dv = None
    if go is not None:
        dv = _C.matmul(Pd.transpose(-1, -2), go)
        dPd = _C.matmul(go, v.transpose(-1, -2))
    if ga is not None:
        dPd = ga if dPd is None else dPd + ga
    dP = dPd if noise is None else dPd * noise
    dS = P * (dP - (dP * P).sum(-1, keepdim=True))
    gq = sum_to(_C.matmul(dS, k) * scale, sq) if ctx.needs(0) else None
    gk = sum_to(_C.matmul(dS.transpose(-1, -2), q) * scale, sk) if ctx.needs(1) else None
    gv = sum_to(dv, sv) if ctx.needs(2) and dv is not None else None
    gm = sum_to(dS, ctx.meta(3)[0]) if len(ctx.next) > 3 and ctx.needs(3) else None
    return gq, gk, gv, gm


@formula("Im2ColBackward0", "Col2ImBackward0")
def _fold(ctx, g):
    # nn/fold.c fold_backward: i[0..14) = N, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw,
    # i[14] = 1 for unfold (Im2Col); both are linear in their input, so the adjoint
    N, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw = (int(v) for v in ctx.i[:14])
    F = _F()
    if ctx.i[14]:
        def fn(x):
            return F.unfold(x, (kh, kw), (dh, dw), (ph, pw), (sh, sw))
    else:
        def fn(x):
            return F.fold(x, (H, W), (kh, kw), (dh, dw), (ph, pw), (sh, sw))
    shape, dt = ctx.meta(0)
    return (adjoint(fn, g[0], shape, dt),)


# ---- the fused pointwise and row losses of nn/loss_extra.c ----------------------------------

def _pw_derivs(ctx, kind, x, y, z, xc, yc, zc):
    """d loss / d (x, y, z) of nn/loss_extra.c pw_eval for kinds 3..8, as differentiable
    functions of x, y, z (None: no gradient). The branch each element takes is read off the
    saved float64 copies xc, yc, zc (constants): derivatives there follow C's >= rule."""
    p0, fl = ctx.d[0], ctx.i[2]
    if kind == 3:                                        # poisson_nll (eps = p0)
        if fl & 1:                                       # log_input
            d_x, d_y = x.exp() - y, -x
        else:
            d_x, d_y = 1 - y / (x + p0), -(x + p0).log()
        if fl & 2:                                       # full: Stirling's term where y > 1
            big = yc > 1
            ys = _C.where(big, y, 1.0)                   # finite off the mask (no NaN leaks)
            d_y = d_y + big.to(ys.dtype) * (ys.log() + 0.5 / ys)
        return d_x, d_y, None
    if kind == 4:                                        # gaussian_nll: var clamped at p0
        # torch clamps a copy of var under no_grad: slope 1 in var, value max(var, eps)
        a = z + (zc.clamp_min(p0) - zc)
        t = x - y
        return t / a, -t / a, 0.5 * (1 / a - t * t / (a * a))
    if kind == 5:                                        # hinge_embedding (margin = p0)
        d_x = ((yc != 1) & (p0 - xc >= 0)).to(xc.dtype) * -1 + (yc != -1).to(xc.dtype)
        return d_x, None, None
    if kind == 6:                                        # soft_margin
        s = (-(y * x)).sigmoid()
        return -y * s, -x * s, None
    if kind == 7:                                        # margin_ranking (x1, x2, target)
        on = (-zc * (xc - yc) + p0 >= 0).to(xc.dtype)
        return -z * on, z * on, -(x - y) * on
    F = _F()                                             # multilabel_soft_margin, z = weight
    t = y * F.softplus(-x) + (1 - y) * F.softplus(x)
    return z * (x.sigmoid() - y), -z * x, t


@formula("PoissonNllLossBackward0", "GaussianNllLossBackward0", "HingeEmbeddingLossBackward0",
         "SoftMarginLossBackward0", "MarginRankingLossBackward0",
         "MultilabelSoftMarginLossBackward0")
def _pointwise_loss_extra(ctx, g):
    # nn/loss_extra.c pw_backward (pw_eval): edges input, target, third (var, margin_ranking's
    # target, multilabel's weight; None when absent); slots 0..2 = their float64 copies
    # broadcast to one shape (2 None when absent); i = (kind, reduction, flags, R), d = (p0,
    # p1, mean divisor). Element i gets s[i / R] / R times its derivatives, R the classes of
    # multilabel_soft_margin (its output drops the last dim), else 1.
    g = g[0]
    if g is None:
        return None, None, None
    kind, red, R = ctx.i[0], ctx.i[1], ctx.i[3]
    xc, yc = ctx.saved(0), ctx.saved(1)
    zc = ctx.saved(2) if _has_slot(ctx, 2) else None
    full = tuple(xc.shape)
    want = [k < len(ctx.next) and ctx.needs(k) for k in range(3)]
    if not any(want):
        return None, None, None
    x, y = _input(ctx, 0, 0), _input(ctx, 1, 1)
    z = _input(ctx, 2, 2) if zc is not None else 1.0
    zc_ = zc if zc is not None else 1.0
    dx, dy, dz = _pw_derivs(ctx, kind, x, y, z, xc, yc, zc_)
    s = g if red in (0, 2) else g / ctx.d[2]
    if kind == 8:                                        # each row of R classes averaged
        if red == 0 and len(full):
            s = s.unsqueeze(-1)
        s = s / R
    out = []
    for k, d in enumerate((dx, dy, dz)):
        if not want[k] or d is None:
            out.append(None)
            continue
        out.append(sum_to(_full(s * d, full), ctx.meta(k)[0]))
    return tuple(out)


def _pdist_grad(v, p):
    """The gradient in v of ||v||_p over the last dim (nn/loss_extra.c pdist: 0 where the
    norm is 0), differentiable in v, and the norm."""
    if p == 2:
        nrm = (v * v).sum(-1, keepdim=True).sqrt()
    elif p == 1:
        nrm = v.abs().sum(-1, keepdim=True)
    else:
        nrm = v.abs().pow(p).sum(-1, keepdim=True).pow(1 / p)
    zero = (nrm == 0).detach()
    safe = _C.where(zero, 1.0, nrm)
    if p == 2:
        gr = v / safe
    elif p == 1:
        gr = v.detach().sign()
    else:
        gr = v.sign() * v.abs().pow(p - 1) / safe.pow(p - 1)
    return _C.where(zero, 0.0, gr), nrm


@formula("CosineEmbeddingLossBackward0", "TripletMarginLossBackward0")
def _row_loss(ctx, g):
    # nn/loss_extra.c row_backward (row_eval): edges a, b, c (cosine: c = target, no
    # gradient); slots 0..2 = float64 copies of the three; i = (kind, reduction, N, D, swap),
    # d = (margin, p, eps). Row r gets w_r = g_r (none), g / N (mean) or g (sum).
    g = g[0]
    if g is None:
        return None, None, None
    kind, red, N, D, swap = ctx.i[:5]
    margin, p, eps = ctx.d[0], ctx.d[1], ctx.d[2]
    want = [ctx.needs(k) for k in range(3)]
    if kind == 0:
        want[2] = False
    if not any(want):
        return None, None, None
    w = (g / N if red == 1 else g).reshape(-1, 1) if red else g.reshape(N, 1)
    sa, sb = (ctx.saved(k).detach().reshape(N, D) for k in range(2))
    a, b = _input(ctx, 0, 0).reshape(N, D), _input(ctx, 1, 1).reshape(N, D)
    if kind == 0:                                        # cosine_embedding
        one = _C.ones((N, 1), dtype=sa.dtype)

        def cos(a, b):
            m1 = (a * a).sum(-1, keepdim=True) + 1e-12   # torch's EPSILON
            m2 = (b * b).sum(-1, keepdim=True) + 1e-12
            s = (m1 * m2).sqrt()
            return (a * b).sum(-1, keepdim=True) / s, m1, m2, s
        y = ctx.saved(2).detach().reshape(N, 1)
        csc = cos(sa, sb)[0]
        neg = ((y == -1) & (csc - margin >= 0)).to(sa.dtype)
        dl = _C.where(y == 1, -one, neg)
        cs, m1, m2, s = cos(a, b)
        k = w * dl
        ga = k * (b / s - cs * a / m1) if want[0] else None
        gb = k * (a / s - cs * b / m2) if want[1] else None
        return (None if ga is None else ga.reshape(ctx.meta(0)[0]),
                None if gb is None else gb.reshape(ctx.meta(1)[0]), None)
    c = _input(ctx, 2, 2).reshape(N, D)                  # triplet_margin

    def dist(u, v):
        return _pdist_grad(u - v + eps, p)
    gp, dp = dist(a, b)
    gn, dn = dist(a, c)
    gs = None
    use = _C.zeros((N, 1), dtype=sa.dtype) != 0
    if swap:
        gs, ds = dist(b, c)
        use = ds.detach() < dn.detach()
        dn = _C.where(use, ds, dn)
    on = (margin + dp.detach() - dn.detach() >= 0).to(sa.dtype) * w
    gn_a = _C.where(use, 0.0, gn)
    ga = on * (gp - gn_a)
    gb = -on * gp
    gc = on * gn_a
    if swap:
        gs_b = _C.where(use, gs, 0.0)
        gb = gb - on * gs_b
        gc = gc + on * gs_b
    return tuple(t.reshape(ctx.meta(k)[0]) if want[k] else None
                 for k, t in enumerate((ga, gb, gc)))


# ---- grid_sample ----------------------------------------------------------------------------

def _gs_coord(g, size, align, padding):
    """nn/grid_sample.c gs_coord on a NumPy array of grid values: the pixel coordinates and
    d coord / d g (the slope; its sign flips with each reflection, 0 where clipped)."""
    if align:
        s, c = (size - 1) / 2, (g + 1) * ((size - 1) / 2)
    else:
        s, c = size / 2, ((g + 1) * size - 1) / 2
    s = np.full(g.shape, float(s))
    if padding == 2:                                     # reflection about the edges
        lo, span = (0.0, size - 1) if align else (-0.5, size)
        if span <= 0:
            c, s = np.zeros(g.shape), np.zeros(g.shape)
        else:
            d = c - lo
            dr = np.where(d < 0, -1.0, 1.0)
            d = np.abs(d)
            even = np.fmod(np.floor(d / span), 2) == 0
            rest = np.fmod(d, span)
            c = np.where(even, lo + rest, lo + span - rest)
            s = s * np.where(even, dr, -dr)
    if padding != 0:                                     # border (and reflection): clip
        out = (c <= 0) | (c >= size - 1)
        c = np.where(c <= 0, 0.0, np.where(c >= size - 1, size - 1.0, c))
        s = np.where(out, 0.0, s)
    return c, s


def _gs_index(v, size):
    """gs_index: whole-pixel coordinates as int64 indices, outside values pinned to -2 and
    size + 1 (NaN to -2)."""
    v = np.where(v > -2, v, -2.0)
    return np.where(v > size + 1, size + 1, v).astype(np.int64)


@formula("GridSampler2DBackward0")
def _grid_sample(ctx, g):
    # nn/grid_sample.c grid_sample_backward: edges input (N, C, H, W), grid (N, Ho, Wo, 2);
    # slots 0, 1 = contiguous copies of both; i = (N, C, H, W, Ho, Wo, mode, padding,
    # align_corners). Each output point reads (at most) four pixels with bilinear weights
    # affine in the point's coordinate; the coordinate is affine in the grid (its slope, the
    # branch of each reflection or clip, and the pixels read are read off the saved grid:
    # constants), so gx = g scattered with the weights, ggrid = g . d weights / d grid.
    g = g[0]
    if g is None or not (ctx.needs(0) or ctx.needs(1)):
        return None, None
    N, C, H, W, Ho, Wo, mode, padding, align = ctx.i[:9]
    P = Ho * Wo
    gc = ctx.saved(1).detach().to(_C.float64).numpy().reshape(N, P, 2)
    cx, sx = _gs_coord(gc[..., 0], W, align, padding)
    cy, sy = _gs_coord(gc[..., 1], H, align, padding)
    dt = ctx.meta(0)[1]
    gy = g.reshape(N, C, P)

    def const(a):
        return _C.from_numpy(np.asarray(a, order="C")).to(dt)

    def at(jy, jx):                 # (flat index (N, C, P), in-image mask (N, 1, P))
        ok = (jx >= 0) & (jx < W) & (jy >= 0) & (jy < H)
        flat = np.where(ok, jy * W + jx, 0).reshape(N, 1, P)
        return _C.from_numpy(np.broadcast_to(flat, (N, C, P)).copy()), const(ok.reshape(N, 1, P))

    def scatter(idx, vals):
        return _C.zeros((N, C, H * W), dtype=vals.dtype).scatter_add(2, idx, vals)

    if mode == 1:                                        # nearest: a fixed pixel per point
        idx, ok = at(_gs_index(np.rint(cy), H), _gs_index(np.rint(cx), W))
        gx = scatter(idx, gy * ok).reshape(N, C, H, W) if ctx.needs(0) else None
        gg = _C.zeros((N, Ho, Wo, 2), dtype=dt) if ctx.needs(1) else None
        return gx, gg
    x = _input(ctx, 0, 0) if ctx.needs(1) else ctx.saved(0)
    grid = (_input(ctx, 1, 1) if ctx.needs(0) or ctx.needs(1) else ctx.saved(1)).reshape(N, P, 2)
    fx, fy = np.floor(cx), np.floor(cy)
    x0, y0 = _gs_index(fx, W), _gs_index(fy, H)
    # the coordinates, differentiable in the grid: c + slope * (grid - grid's value)
    ix = const(cx - fx) + const(sx) * (grid[..., 0] - const(gc[..., 0]))
    iy = const(cy - fy) + const(sy) * (grid[..., 1] - const(gc[..., 1]))
    wx1, wy1 = ix.unsqueeze(1), iy.unsqueeze(1)          # (N, 1, P)
    wx0, wy0 = 1 - wx1, 1 - wy1
    corners = [(at(y0, x0), wx0, wy0), (at(y0, x0 + 1), wx1, wy0),
               (at(y0 + 1, x0), wx0, wy1), (at(y0 + 1, x0 + 1), wx1, wy1)]
    gx = gg = None
    if ctx.needs(0):
        for (idx, ok), wx, wy in corners:
            t = scatter(idx, gy * (wx * wy * ok))
            gx = t if gx is None else gx + t
        gx = gx.reshape(N, C, H, W)
    if ctx.needs(1):
        xf = x.reshape(N, C, H * W)
        v00, v01, v10, v11 = (xf.gather(2, idx) * ok for (idx, ok), _, _ in corners)
        gix = (gy * ((v01 - v00) * wy0 + (v11 - v10) * wy1)).sum(1) * const(sx)
        giy = (gy * ((v10 - v00) * wx0 + (v11 - v01) * wx1)).sum(1) * const(sy)
        gg = _C.stack([gix, giy], -1).reshape(N, Ho, Wo, 2)
    return gx, gg
