"""Double backward (create_graph=True) through the linalg and nn nodes
(cddp/autograd/_higher/linalg.py, nn.py).

Each program f(T, *inputs) runs with T = cddp (and T = torch as the oracle when installed):
L = sum(f * v); g = grad(L, inputs, create_graph=True); S = sum_i <g_i, u_i>;
h = grad(S, inputs). h is checked against central finite differences of S computed from
first-order gradients (a Hessian-vector product check, torch-free), and g, h against torch.
"""
import numpy as np
import pytest

import cddp

F = cddp.nn.functional
RNG = np.random.default_rng(0)


def _t(T, a, grad=True):
    if T is cddp:
        t = cddp.from_numpy(np.array(a))
    else:
        t = T.from_numpy(np.array(a))
    return t.requires_grad_(grad) if grad else t


def _vjp(T, f, xs, v, create_graph):
    out = f(T, *xs)
    L = (out * _t(T, v, False)).sum()
    return T.autograd.grad(L, xs, create_graph=create_graph, allow_unused=True)


def _second(T, f, arrays, v, us):
    xs = [_t(T, a) for a in arrays]
    g = _vjp(T, f, xs, v, True)
    S = None
    for gi, u in zip(g, us):
        if gi is None:
            continue
        s = (gi * _t(T, u, False)).sum()
        S = s if S is None else S + s
    h = T.autograd.grad(S, xs, allow_unused=True)
    return g, h


def _S(f, arrays, v, us):
    """<first-order gradients, us> at arrays, without create_graph."""
    xs = [_t(cddp, a) for a in arrays]
    g = _vjp(cddp, f, xs, v, False)
    return sum(float((gi.numpy() * u).sum()) for gi, u in zip(g, us) if gi is not None)


def check(f, *arrays, eps=1e-6, tol=1e-6, fd_max=60, torch_f=None):
    """Double backward of f at arrays (float64): graph, finite differences and torch."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    out = f(cddp, *[_t(cddp, a, False) for a in arrays])
    v = RNG.standard_normal(tuple(out.shape))
    us = [RNG.standard_normal(a.shape) for a in arrays]
    g, h = _second(cddp, f, arrays, v, us)
    assert any(gi is not None and gi.grad_fn is not None for gi in g), "no history"
    # finite differences of S along each coordinate (a random sample of fd_max of them)
    for j, a in enumerate(arrays):
        hj = np.zeros(a.shape) if h[j] is None else h[j].numpy()
        idx = list(np.ndindex(a.shape))
        if len(idx) > fd_max:
            idx = [idx[k] for k in RNG.choice(len(idx), fd_max, replace=False)]
        for k in idx:
            ap, am = a.copy(), a.copy()
            ap[k] += eps
            am[k] -= eps
            pa, ma = list(arrays), list(arrays)
            pa[j], ma[j] = ap, am
            fd = (_S(f, pa, v, us) - _S(f, ma, v, us)) / (2 * eps)
            assert abs(fd - hj[k]) <= tol * max(1.0, abs(fd)), (j, k, fd, hj[k])
    try:
        import torch
    except ImportError:
        return g, h
    if torch_f is False:                  # a program torch cannot reproduce (random draws)
        return g, h
    tg, th = _second(torch, torch_f or f, arrays, v, us)
    for a, b in zip(g, tg):       # a history only where torch's gradient has one
        assert a is None or a.grad_fn is None or (b is not None and b.requires_grad)
    for a, b in list(zip(g, tg)) + list(zip(h, th)):
        if b is None:
            assert a is None or np.abs(a.detach().numpy()).max() == 0
            continue
        assert a is not None
        b = b.detach().numpy()
        np.testing.assert_allclose(a.detach().numpy(), b, rtol=1e-10,
                                   atol=1e-11 * max(1.0, float(np.abs(b).max(initial=0))))
    return g, h


def rn(*shape):
    return RNG.standard_normal(shape)


# ---- linalg -------------------------------------------------------------------------------

def test_mm_node():
    a = _t(cddp, rn(2, 3))
    assert cddp.mm(a, a.t()).grad_fn.name() == "MmBackward0"
    check(lambda T, a, b: T.mm(a, b), rn(3, 4), rn(4, 2))
    check(lambda T, a, b: T.mm(a, b) * T.mm(a, b), rn(3, 4), rn(4, 2))


@pytest.mark.parametrize("sa,sb", [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)),
                                   ((3, 4), (4, 2)), ((2, 3, 4), (4, 2)), ((2, 3, 4), (4,)),
                                   ((4,), (2, 4, 3)), ((2, 3, 4), (2, 4, 2)),
                                   ((2, 1, 3, 4), (3, 4, 2)), ((3, 4), (2, 4, 2))])
def test_matmul_shapes(sa, sb):
    check(lambda T, a, b: T.matmul(a, b) * T.matmul(a, b), rn(*sa), rn(*sb))


def test_bmm_mv_dot_outer():
    a = _t(cddp, rn(2, 3, 4))
    assert cddp.bmm(a, a.transpose(1, 2)).grad_fn.name() == "BmmBackward0"
    check(lambda T, a, b: T.bmm(a, b) * T.bmm(a, b),
          rn(2, 3, 4), rn(2, 4, 2))
    check(lambda T, a, b: T.mv(a, b) * T.mv(a, b), rn(3, 4), rn(4))
    check(lambda T, a, b: T.dot(a, b) * T.dot(a, b), rn(4), rn(4))
    check(lambda T, a, b: T.outer(a, b) * T.outer(a, b), rn(3), rn(4))


def test_addmm_and_linear():
    check(lambda T, i, a, b: T.addmm(i, a, b, beta=0.5, alpha=-2.0) * T.mm(a, b),
          rn(2), rn(3, 4), rn(4, 2))
    check(lambda T, i, a, b: T.addmm(i, a, b) * i, rn(3, 2), rn(3, 4), rn(4, 2))
    for sx in [(3, 4), (2, 3, 4), (4,)]:
        x = _t(cddp, rn(*sx))
        w, b = _t(cddp, rn(5, 4)), _t(cddp, rn(5))
        assert F.linear(x, w, b).grad_fn.name() == "AddmmBackward0"
        assert F.linear(x, w).grad_fn.name() == "MmBackward0"
        check(lambda T, x, w, b: F_(T).linear(x, w, b) * F_(T).linear(x, w, b),
              rn(*sx), rn(5, 4), rn(5))
        check(lambda T, x, w: F_(T).linear(x, w) * F_(T).linear(x, w), rn(*sx), rn(5, 4))


def F_(T):
    return T.nn.functional


def test_strided_and_nonleaf_inputs():
    """Nodes that keep a contiguous copy of a strided input (F.linear, conv) or of a non-leaf
    one: the input is rebuilt on its own history."""
    check(lambda T, x, w: F_(T).linear(x.t(), w) * F_(T).linear(x.t(), w), rn(4, 3), rn(5, 4))
    check(lambda T, x, w: F_(T).linear(x * x, w) * F_(T).linear(x * x, w), rn(3, 4), rn(5, 4))
    check(lambda T, x, w: F_(T).conv2d(x.transpose(2, 3) * x.transpose(2, 3), w * w),
          rn(1, 2, 4, 5), rn(3, 2, 2, 2), fd_max=20)
    check(lambda T, x, y: F_(T).mse_loss(x * y, y * y, reduction="none"), rn(3, 4), rn(3, 4))


def test_addx_family():
    check(lambda T, i, a, b: T.baddbmm(i, a, b, beta=0.5, alpha=1.5) * T.bmm(a, b),
          rn(3, 2), rn(2, 3, 4), rn(2, 4, 2))
    check(lambda T, i, a, b: T.addbmm(i, a, b, beta=0.5, alpha=1.5) * i,
          rn(3, 2), rn(2, 3, 4), rn(2, 4, 2))
    # addmv / addr keep their vectors as views: the matrix-and-vector cross term is only
    # available where one of them is a constant
    m = rn(3, 4)
    check(lambda T, i, v: T.addmv(i, _t(T, m, False), v, alpha=2.0) * T.addmv(
        i, _t(T, m, False), v, alpha=2.0), rn(3), rn(4))
    vec = rn(4)
    check(lambda T, i, a: T.addmv(i, a, _t(T, vec, False), beta=0.3) * T.mv(
        a, _t(T, vec, False)), rn(3), rn(3, 4))
    v2 = rn(2)
    check(lambda T, i, a: T.addr(i, a, _t(T, v2, False), alpha=2.0) * T.addr(
        i, a, _t(T, v2, False)), rn(3, 2), rn(3))


def test_addmv_addr_all_inputs():
    check(lambda T, i, a, v: T.addmv(i, a, v, beta=0.5, alpha=2.0) * T.addmv(i, a, v),
          rn(3), rn(3, 4), rn(4))
    check(lambda T, i, a, b: T.addr(i, a, b, beta=0.5, alpha=2.0) * T.addr(i, a, b),
          rn(3, 2), rn(3), rn(2))
    check(lambda T, i, a, b: T.addr(i, a * a, b * b) * i, rn(3, 2), rn(3), rn(2))


def test_linalg_float32():
    a = cddp.randn(3, 4, requires_grad=True)
    b = cddp.randn(4, 2, requires_grad=True)
    y = a @ b
    ga, gb = cddp.autograd.grad((y * y).sum(), (a, b), create_graph=True)
    assert ga.dtype == cddp.float32 and ga.grad_fn is not None
    ha, hb = cddp.autograd.grad((ga * ga).sum() + gb.sum(), (a, b))
    a64 = a.detach().to(cddp.float64).requires_grad_()
    b64 = b.detach().to(cddp.float64).requires_grad_()
    y = a64 @ b64
    ga, gb = cddp.autograd.grad((y * y).sum(), (a64, b64), create_graph=True)
    ha64, hb64 = cddp.autograd.grad((ga * ga).sum() + gb.sum(), (a64, b64))
    np.testing.assert_allclose(ha.numpy(), ha64.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(hb.numpy(), hb64.numpy(), rtol=1e-4, atol=1e-4)


# ---- nn: softmax and losses -------------------------------------------------------------

def test_softmax_log_softmax():
    for dim in (0, 1, -1):
        check(lambda T, x: F_(T).softmax(x, dim), rn(3, 4))
        check(lambda T, x: F_(T).log_softmax(x, dim), rn(3, 4))
    check(lambda T, x: F_(T).softmax(x, 1) * F_(T).log_softmax(x, 1), rn(2, 3, 2))
    check(lambda T, x: F_(T).softmax(x, 0), rn(4))
    x = _t(cddp, rn(3))
    assert F.softmax(x, 0).grad_fn.name() == "SoftmaxBackward0"
    assert F.log_softmax(x, 0).grad_fn.name() == "LogSoftmaxBackward0"


def test_cross_entropy_and_nll():
    y = np.array([0, 2, 1, 2])
    w = np.array([0.5, 2.0, 1.5])
    x = _t(cddp, rn(4, 3))
    assert F.cross_entropy(x, cddp.from_numpy(y)).grad_fn.name() == "NllLossBackward0"
    assert F.cross_entropy(x, cddp.from_numpy(y), label_smoothing=0.1).grad_fn.name() == \
        "AddBackward0"
    for kw in [{}, {"reduction": "sum"}, {"reduction": "none"}, {"weight": w},
               {"weight": w, "reduction": "none"}, {"ignore_index": 2},
               {"ignore_index": 2, "weight": w, "reduction": "mean"},
               {"label_smoothing": 0.2}, {"label_smoothing": 0.2, "weight": w}]:
        def f(T, x, kw=kw):
            k = {a: (_t(T, b, False) if a == "weight" else b) for a, b in kw.items()}
            return F_(T).cross_entropy(x, _t(T, y, False), **k)
        check(f, rn(4, 3))

        def g(T, x, kw=kw):
            k = {a: (_t(T, b, False) if a == "weight" else b) for a, b in kw.items()
                 if a != "label_smoothing"}
            lp = F_(T).log_softmax(x, 1)
            return F_(T).nll_loss(lp, _t(T, y, False), **k) * F_(T).nll_loss(
                lp, _t(T, y, False), **k)
        check(g, rn(4, 3))
    # K-dimensional inputs, probabilities as target, one sample
    yk = np.array([[0, 2], [1, 1]])
    check(lambda T, x: F_(T).cross_entropy(x, _t(T, yk, False), reduction="none"),
          rn(2, 3, 2))
    check(lambda T, x: F_(T).cross_entropy(x, _t(T, yk, False)), rn(2, 3, 2))
    p = np.abs(rn(4, 3))
    p /= p.sum(1, keepdims=True)
    check(lambda T, x: F_(T).cross_entropy(x, _t(T, p, False), label_smoothing=0.1), rn(4, 3))
    check(lambda T, x: F_(T).cross_entropy(x, _t(T, np.array(1), False)), rn(3))
    # probability targets that require grad (a target with a history, e.g. a teacher's
    # softmax): the node has a target edge; both gradients and their derivatives
    for kw in [{}, {"weight": w}, {"label_smoothing": 0.1, "reduction": "sum"}]:
        def fp(T, x, t, kw=kw):
            k = {a: (_t(T, b, False) if a == "weight" else b) for a, b in kw.items()}
            return F_(T).cross_entropy(x, t, **k)
        check(fp, rn(4, 3), p)
    pk = np.abs(rn(2, 3, 2))
    pk /= pk.sum(1, keepdims=True)
    check(lambda T, x, t: F_(T).cross_entropy(x, t, reduction="none"), rn(2, 3, 2), pk)


def test_cross_entropy_all_ignored():
    x = cddp.randn(2, 3, dtype=cddp.float64, requires_grad=True)
    y = cddp.tensor([1, 1])
    (g,) = cddp.autograd.grad(F.cross_entropy(x, y, ignore_index=1), (x,), create_graph=True)
    assert np.all(g.detach().numpy() == 0)


@pytest.mark.filterwarnings("ignore:Using a target size")
@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_pointwise_losses(red):
    names = {"mse_loss": "MseLossBackward0", "l1_loss": "L1LossBackward0",
             "binary_cross_entropy": "BinaryCrossEntropyBackward0",
             "binary_cross_entropy_with_logits": "BinaryCrossEntropyWithLogitsBackward0"}
    for fn, node in names.items():
        a = _t(cddp, np.full((2, 3), 0.5))
        assert getattr(F, fn)(a, a.detach()).grad_fn.name() == node
    check(lambda T, x, y: F_(T).mse_loss(x, y, reduction=red), rn(3, 4), rn(3, 4))
    check(lambda T, x, y: F_(T).mse_loss(x, y, reduction=red) * F_(T).mse_loss(
        x, y, reduction=red), rn(3, 4), rn(4))
    check(lambda T, x, y: F_(T).l1_loss(x, y, reduction=red) * F_(T).l1_loss(
        x, y, reduction=red), rn(3, 4), rn(3, 4))
    p = RNG.uniform(0.1, 0.9, (3, 4))
    t = RNG.uniform(0, 1, (3, 4))
    wt = RNG.uniform(0.5, 2, (4,))
    check(lambda T, x, y: F_(T).binary_cross_entropy(x, y, reduction=red), p, t)
    check(lambda T, x, y: F_(T).binary_cross_entropy(x, y, _t(T, wt, False), reduction=red),
          p, t)
    pw = RNG.uniform(0.5, 2, (4,))
    check(lambda T, x, y: F_(T).binary_cross_entropy_with_logits(x, y, reduction=red),
          rn(3, 4), t)
    check(lambda T, x, y: F_(T).binary_cross_entropy_with_logits(
        x, y, _t(T, wt, False), pos_weight=_t(T, pw, False), reduction=red), rn(3, 4), t)


# ---- nn: convolution ----------------------------------------------------------------------

CONV2D = [dict(), dict(stride=2), dict(padding=1), dict(dilation=2, padding=1),
          dict(stride=2, padding=1, dilation=2), dict(padding="same"), dict(groups=2),
          dict(stride=(2, 1), padding=(0, 1), groups=2)]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("kw", CONV2D)
def test_conv2d(kw):
    ks = (2, 2) if kw.get("padding") == "same" else (3, 2)
    cg = 2 // kw.get("groups", 1)
    x = _t(cddp, rn(1, 2, 5, 6))
    assert F.conv2d(x, _t(cddp, rn(4, cg, *ks)), **kw).grad_fn.name() == "ConvolutionBackward0"
    check(lambda T, x, w, b: F_(T).conv2d(x, w, b, **kw) * F_(T).conv2d(x, w, b, **kw),
          rn(2, 2, 5, 6), rn(4, cg, *ks), rn(4), fd_max=25)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2, groups=2),
                                dict(padding="same")])
def test_conv1d(kw):
    cg = 2 // kw.get("groups", 1)
    check(lambda T, x, w: F_(T).conv1d(x, w, **kw) * F_(T).conv1d(x, w, **kw),
          rn(2, 2, 7), rn(4, cg, 2), fd_max=25)


def test_unfold_fold_and_conv3d():
    # unfold / fold: linear, differentiated through formula.adjoint; conv3d composes slices
    # (indexing nodes) with conv2d
    kw = dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    x = _t(cddp, rn(1, 2, 5, 6))
    assert F.unfold(x, **kw).grad_fn.name() == "Im2ColBackward0"
    check(lambda T, x: F_(T).unfold(x, **kw) * F_(T).unfold(x, **kw), rn(2, 2, 5, 6), fd_max=25)
    L = F.unfold(x, **kw).shape[-1]
    check(lambda T, c: F_(T).fold(c, (5, 6), **kw) ** 2, rn(2, 12, L), fd_max=25)
    check(lambda T, x, w: F_(T).conv3d(x, w, padding=1) ** 2, rn(1, 2, 3, 4, 4),
          rn(2, 2, 2, 2, 2), fd_max=20)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(dilation=2, groups=2)])
def test_conv_transpose(kw):
    x = _t(cddp, rn(1, 2, 4, 4))
    assert F.conv_transpose2d(x, _t(cddp, rn(2, 2, 2, 2))).grad_fn.name() == \
        "ConvolutionBackward0"
    cg = 4 // kw.get("groups", 1)
    check(lambda T, x, w, b: F_(T).conv_transpose2d(x, w, b, **kw) * F_(T).conv_transpose2d(
        x, w, b, **kw), rn(2, 2, 4, 4), rn(2, cg, 3, 2), rn(4), fd_max=25)
    check(lambda T, x, w: F_(T).conv_transpose1d(x, w) * F_(T).conv_transpose1d(x, w),
          rn(2, 2, 4), rn(2, 3, 2), fd_max=25)


# ---- nn: normalization --------------------------------------------------------------------

def test_layer_norm():
    x = _t(cddp, rn(2, 3))
    assert F.layer_norm(x, (3,)).grad_fn.name() == "NativeLayerNormBackward0"
    check(lambda T, x, w, b: F_(T).layer_norm(x, (4,), w, b, eps=1e-3), rn(3, 4), rn(4), rn(4))
    check(lambda T, x, w, b: F_(T).layer_norm(x, (2, 3), w, b) * x, rn(2, 2, 3), rn(2, 3),
          rn(2, 3))
    check(lambda T, x: F_(T).layer_norm(x, (4,)) * x, rn(3, 4))
    check(lambda T, x, w: F_(T).layer_norm(x * x, (4,), w * w), rn(3, 4), rn(4))


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(training):
    rm, rv = rn(3), np.abs(rn(3)) + 0.5
    x = _t(cddp, rn(4, 3))
    assert F.batch_norm(x, _t(cddp, rm, False), _t(cddp, rv, False),
                        training=True).grad_fn.name() == "NativeBatchNormBackward0"

    def f(T, x, w, b):
        return F_(T).batch_norm(x, _t(T, rm, False), _t(T, rv, False), w, b,
                                training=training, eps=1e-3) * x
    check(f, rn(4, 3), rn(3), rn(3))
    check(f, rn(2, 3, 2, 2), rn(3), rn(3), fd_max=30)
    check(lambda T, x: F_(T).batch_norm(x, None if training else _t(T, rm, False),
                                        None if training else _t(T, rv, False),
                                        training=training) * x, rn(3, 3, 2))


# ---- nn: pooling, embedding ---------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                     count_include_pad=False),
                                dict(kernel_size=(2, 3), stride=(1, 2), divisor_override=4),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)])
def test_avg_pool(kw):
    x = _t(cddp, rn(1, 2, 5, 6))
    assert F.avg_pool2d(x, **kw).grad_fn.name() == "AvgPool2DBackward0"
    check(lambda T, x: F_(T).avg_pool2d(x * x, **kw), rn(2, 2, 5, 6), fd_max=30)
    check(lambda T, x, y: F_(T).avg_pool2d(x, **kw) * F_(T).avg_pool2d(y, **kw),
          rn(2, 5, 6), rn(2, 5, 6), fd_max=20)


def test_avg_pool1d():
    check(lambda T, x: F_(T).avg_pool1d(x * x, 3, 2, 1), rn(2, 2, 7))


@pytest.mark.parametrize("osize", [(2, 3), (3, 4), (1, 1), (5, 6)])
def test_adaptive_avg_pool(osize):
    x = _t(cddp, rn(1, 2, 5, 6))
    assert F.adaptive_avg_pool2d(x, osize).grad_fn.name() == "AdaptiveAvgPool2DBackward0"
    check(lambda T, x: F_(T).adaptive_avg_pool2d(x * x, osize), rn(2, 2, 5, 6), fd_max=30)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=2, dilation=2, ceil_mode=True)])
def test_max_pool(kw):
    x = _t(cddp, rn(1, 2, 5, 6))
    assert F.max_pool2d(x, **kw).grad_fn.name() == "MaxPool2DWithIndicesBackward0"
    check(lambda T, x: F_(T).max_pool2d(x * x, **kw) * F_(T).max_pool2d(x, **kw),
          rn(2, 2, 5, 6), fd_max=30)
    check(lambda T, x: F_(T).max_pool1d(x * x, 2), rn(2, 2, 6))


def test_adaptive_max_pool():
    x = _t(cddp, rn(1, 2, 5, 6))
    assert F.adaptive_max_pool2d(x, 2).grad_fn.name() == "AdaptiveMaxPool2DBackward0"
    check(lambda T, x: F_(T).adaptive_max_pool2d(x * x, (2, 4)) * F_(T).adaptive_max_pool2d(
        x, (2, 4)), rn(2, 5, 6), fd_max=30)


@pytest.mark.parametrize("kw", [dict(), dict(padding_idx=1), dict(scale_grad_by_freq=True),
                                dict(padding_idx=0, scale_grad_by_freq=True)])
def test_embedding(kw):
    idx = np.array([[1, 3, 1], [0, 1, 4]])
    w = _t(cddp, rn(5, 3))
    assert F.embedding(_t(cddp, idx, False), w).grad_fn.name() == "EmbeddingBackward0"
    check(lambda T, w: F_(T).embedding(_t(T, idx, False), w * w, **kw) * F_(T).embedding(
        _t(T, idx, False), w, **kw), rn(5, 3))


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
def test_extra_losses(red):
    x = _t(cddp, rn(3))
    assert F.smooth_l1_loss(x, x.detach()).grad_fn.name() == "SmoothL1LossBackward0"
    assert F.huber_loss(x, x.detach()).grad_fn.name() == "HuberLossBackward0"
    assert F.kl_div(x, x.detach(), reduction="sum").grad_fn.name() == "KlDivBackward0"
    a, b = rn(3, 4), rn(3, 4)
    for beta in (1.0, 0.5, 0.0):
        check(lambda T, x, y: F_(T).smooth_l1_loss(x, y, reduction=red, beta=beta) *
              F_(T).smooth_l1_loss(x, y, reduction=red, beta=beta), a, b)
        if beta:
            check(lambda T, x, y: F_(T).huber_loss(x, y, reduction=red, delta=beta) *
                  F_(T).huber_loss(x, y, reduction=red, delta=beta), a, b)
    r = "batchmean" if red == "mean" else red
    t = RNG.uniform(0.1, 1, (3, 4))
    check(lambda T, x, y: F_(T).kl_div(x, y, reduction=r) * F_(T).kl_div(x, y, reduction=r),
          rn(3, 4), t)
    check(lambda T, x, y: F_(T).kl_div(x, y, reduction=r, log_target=True) * x, rn(3, 4),
          rn(3, 4))


def test_group_norm():
    x = _t(cddp, rn(2, 4, 3))
    assert F.group_norm(x, 2).grad_fn.name() == "NativeGroupNormBackward0"
    check(lambda T, x, w, b: F_(T).group_norm(x, 2, w, b, eps=1e-3) * x, rn(2, 4, 3), rn(4),
          rn(4))
    check(lambda T, x: F_(T).group_norm(x, 4) * x, rn(2, 4, 2, 2), fd_max=30)
    check(lambda T, x, w: F_(T).group_norm(x * x, 1, w * w) * x, rn(2, 4), rn(4))


@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(3, 7)),
                                dict(scale_factor=1.7, mode="nearest-exact"),
                                dict(scale_factor=2, mode="bilinear"),
                                dict(size=(7, 4), mode="bilinear", align_corners=True),
                                dict(scale_factor=0.6, mode="bilinear")])
def test_interpolate(kw):
    x = _t(cddp, rn(1, 2, 4, 5))
    name = "UpsampleBilinear2DBackward0" if kw.get("mode") == "bilinear" else \
        "UpsampleNearest2DBackward0"
    assert F.interpolate(x, **kw).grad_fn.name() == name
    check(lambda T, x: F_(T).interpolate(x * x, **kw), rn(1, 2, 4, 5), fd_max=30)


# ---- end to end ---------------------------------------------------------------------------

def _critic(T):
    nn = T.nn
    return nn.Sequential(nn.Conv2d(2, 4, 3, stride=2, padding=1), nn.LeakyReLU(0.2),
                         nn.Conv2d(4, 3, 2, groups=1), nn.LeakyReLU(0.2), nn.Flatten(),
                         nn.Linear(3 * 2 * 2, 1))


def _wgan_gp(T, critic, real, fake, alpha):
    x = (alpha * real + (1 - alpha) * fake).detach().requires_grad_(True)
    out = critic(x)
    (g,) = T.autograd.grad(out.sum(), (x,), create_graph=True)
    gp = ((g.reshape(g.shape[0], -1).norm(2, dim=1) - 1) ** 2).mean()
    loss = out.mean() + 10 * gp
    loss.backward()
    return loss, g


def test_wgan_gp_conv_critic():
    torch = pytest.importorskip("torch")
    critic = _critic(cddp).double()
    tcritic = _critic(torch).double()
    with torch.no_grad():
        for p, tp in zip(critic.parameters(), tcritic.parameters()):
            tp.copy_(torch.from_numpy(p.detach().numpy().copy()))
    real, fake, alpha = rn(3, 2, 6, 6), rn(3, 2, 6, 6), RNG.uniform(0, 1, (3, 1, 1, 1))
    loss, g = _wgan_gp(cddp, critic, *[_t(cddp, a, False) for a in (real, fake, alpha)])
    tloss, tg = _wgan_gp(torch, tcritic, *[_t(torch, a, False) for a in (real, fake, alpha)])
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-10)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-10, atol=1e-12)
    for p, tp in zip(critic.parameters(), tcritic.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_wgan_gp_float32_step():
    """One float32 critic step with the penalty: runs, and every parameter gets a gradient."""
    critic = _critic(cddp)
    opt = cddp.optim.Adam(critic.parameters(), lr=1e-3)
    real, fake = cddp.randn(4, 2, 6, 6), cddp.randn(4, 2, 6, 6)
    loss, g = _wgan_gp(cddp, critic, real, fake, cddp.rand(4, 1, 1, 1))
    assert g.dtype == cddp.float32 and g.grad_fn is not None
    assert all(p.grad is not None and np.isfinite(p.grad.numpy()).all()
               for p in critic.parameters())
    opt.step()


def test_mlp_hessian_vector_product():
    """Linear -> tanh-free MLP (Linear, softmax, cross entropy): HVP against torch."""
    def f(T, x, w1, b1, w2):
        h = F_(T).linear(x, w1, b1)
        h = h * h
        return F_(T).cross_entropy(F_(T).linear(h, w2), _t(T, np.array([0, 2, 1]), False))
    check(f, rn(3, 4), rn(5, 4), rn(5), rn(3, 5), fd_max=20)


# ---- nn: attention ------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(), dict(is_causal=True), dict(scale=0.3), "bool", "float"])
def test_sdpa(kw):
    q = _t(cddp, rn(2, 3, 4))
    assert F.scaled_dot_product_attention(q, q, q).grad_fn.name() == \
        "ScaledDotProductAttentionBackward0"
    bm = np.array([[1, 0, 1, 1], [1, 1, 0, 0], [0, 1, 1, 1]], dtype=bool)

    def f(T, q, k, v):
        if kw == "bool":
            a = dict(attn_mask=_t(T, bm, False))
        elif kw == "float":
            a = dict(attn_mask=_t(T, np.where(bm, 0.5, -np.inf), False))
        else:
            a = kw
        return F_(T).scaled_dot_product_attention(q, k, v, **a)
    check(f, rn(2, 3, 2), rn(2, 4, 2), rn(2, 4, 3), fd_max=20)
    # broadcast batch dims, and a product that reaches q, k, v twice
    check(lambda T, q, k, v: f(T, q, k, v) * f(T, q, k, v), rn(2, 1, 3, 2), rn(3, 4, 2),
          rn(1, 4, 3), fd_max=15)


def test_sdpa_float_mask_gradient():
    m = rn(3, 4)
    check(lambda T, q, k, v, m: F_(T).scaled_dot_product_attention(q, k, v, attn_mask=m * m) *
          F_(T).scaled_dot_product_attention(q, k, v, attn_mask=m),
          rn(2, 3, 2), rn(2, 4, 2), rn(2, 4, 3), m, fd_max=12)


def test_sdpa_dropout_seeded():
    """Dropout noise is the node's: seeded forwards draw the same, so finite differences
    apply (torch draws another noise, so no torch comparison)."""
    def f(T, q, k, v):
        T.manual_seed(0)
        return F_(T).scaled_dot_product_attention(q, k, v, dropout_p=0.3) * q.sum()
    check(f, rn(2, 3, 2), rn(2, 4, 2), rn(2, 4, 3), fd_max=12, torch_f=False)


def test_sdpa_with_weights():
    """The need_weights path (multi-head attention's): both outputs carry gradient; P is then
    the node's own output 1. Finite differences only (torch has no such public op)."""
    from cddp import _C

    def f(T, q, k, v):
        out, attn = _C._sdpa(q, k, v, None, 0.0, False, None, False, True)
        return out.sum(-1, keepdim=True) * attn
    check(f, rn(2, 3, 2), rn(2, 4, 2), rn(2, 4, 3), fd_max=12, torch_f=False)


def test_nn_float32():
    """float32 programs: the create_graph gradients keep float32 and second derivatives agree
    with the float64 run to float32 accuracy."""
    def prog(dt):
        gen = np.random.default_rng(5)
        x = cddp.from_numpy(gen.standard_normal((2, 2, 5, 5))).to(dt).requires_grad_()
        w = cddp.from_numpy(gen.standard_normal((3, 2, 3, 3))).to(dt).requires_grad_()
        lw = cddp.from_numpy(gen.standard_normal((4, 27))).to(dt).requires_grad_()
        h = F.conv2d(x, w, padding=1, stride=2)
        h = F.layer_norm(h, (3, 3, 3))
        h = F.batch_norm(h, None, None, training=True)
        h = F.avg_pool2d(h, 1) * h
        out = F.cross_entropy(F.linear(h.reshape(2, 27), lw), cddp.tensor([1, 3]))
        gs = cddp.autograd.grad(out, (x, w, lw), create_graph=True)
        assert all(gi.dtype == dt and gi.grad_fn is not None for gi in gs)
        hs = cddp.autograd.grad(sum((gi * gi).sum() for gi in gs), (x, w, lw))
        return [gi.detach().to(cddp.float64).numpy() for gi in gs + hs]
    for a, b in zip(prog(cddp.float32), prog(cddp.float64)):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3 * np.abs(b).max())


def test_leaf_changed_after_forward_raises():
    """A node that kept a copy of a leaf cannot tell the leaf's new value from the copy's:
    differentiating through it after an in-place change raises instead of using the new
    value."""
    x = cddp.randn(3, 4, dtype=cddp.float64, requires_grad=True)
    y = cddp.randn(3, 4, dtype=cddp.float64)
    loss = F.mse_loss(x, y)
    with cddp.no_grad():
        x.add_(1.0)
    with pytest.raises(NotImplementedError, match="modified after the forward"):
        cddp.autograd.grad(loss, (x,), create_graph=True)


def test_multihead_attention_with_weights():
    """nn.MultiheadAttention returning its weights (the attention node's second output):
    second derivatives in the input against torch."""
    torch = pytest.importorskip("torch")
    cddp.manual_seed(0)
    m = cddp.nn.MultiheadAttention(4, 2, batch_first=True).double()
    tm = torch.nn.MultiheadAttention(4, 2, batch_first=True).double()
    with torch.no_grad():
        for (n, p), (tn, tp) in zip(m.named_parameters(), tm.named_parameters()):
            assert n == tn
            tp.copy_(torch.from_numpy(p.detach().numpy().copy()))
    xa = rn(2, 3, 4)
    res = []
    for T, mod in ((cddp, m), (torch, tm)):
        x = _t(T, xa)
        out, w = mod(x, x, x, need_weights=True)
        (g,) = T.autograd.grad((out * out).sum() + (w * w).sum(), (x,), create_graph=True)
        (h,) = T.autograd.grad((g * g).sum(), (x,))
        res.append((g.detach().numpy(), h.numpy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
