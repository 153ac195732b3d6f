"""AdaptiveLogSoftmaxWithLoss (nn/modules/adaptive.py) and fractional max pooling
(nn/_functional_fractional.py, nn/modules/fractional.py).

Oracles: NumPy references written from torch's definitions — the full adaptive softmax built
from the head and tail weights, and torch's generate_intervals (arithmetic in the sample's
dtype, truncation toward zero) with a `val > max || isnan(val)` window scan; finite differences
for gradients; and torch (when importable) for values, indices, losses, gradients with respect to
inputs and parameters, and error types and messages.
"""
import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(2024)


# ---- NumPy references ------------------------------------------------------------------------

def np_intervals(u, in_size, out_size, pool):
    """torch's generate_intervals, computed in u's NumPy dtype."""
    dt = type(u)
    seq = np.zeros(out_size, np.int64)
    if out_size > 1:
        alpha = dt(in_size - pool) / dt(out_size - 1)
        for i in range(out_size - 1):
            seq[i] = int((dt(i) + u) * alpha) - int(u * alpha)
    if out_size > 0:
        seq[out_size - 1] = in_size - pool
    return seq


def np_fmp(x, k, o, samples):
    """Fractional max pooling of x (N, C, *S) with samples (N, C, nd): (values, indices).
    2-D: sample 0 drives W and 1 drives H; 3-D: 0 T, 1 H, 2 W (torch's)."""
    nd = len(k)
    N, C, *S = x.shape
    col = (1, 0) if nd == 2 else (0, 1, 2)
    vals = np.zeros((N, C) + tuple(o), x.dtype)
    idxs = np.zeros((N, C) + tuple(o), np.int64)
    for b in range(N):
        for c in range(C):
            seqs = [np_intervals(samples[b, c, col[d]], S[d], o[d], k[d]) for d in range(nd)]
            plane = x[b, c].reshape(-1)
            for oi in np.ndindex(*o):
                best, best_i = -np.inf, None
                for ki in np.ndindex(*k):         # (t, h, w) scan order
                    pos = [seqs[d][oi[d]] + ki[d] for d in range(nd)]
                    flat = int(np.ravel_multi_index(pos, S))
                    if best_i is None:
                        best_i = flat
                    v = plane[flat]
                    if v > best or np.isnan(v):
                        best, best_i = v, flat
                vals[(b, c) + oi] = best
                idxs[(b, c) + oi] = best_i
    return vals, idxs


def np_asm_log_prob(x, head_w, head_b, tails, cutoffs):
    """Full adaptive-softmax log-distribution (N, n_classes) straight from the weights."""
    def log_softmax(z):
        z = z - z.max(1, keepdims=True)
        return z - np.log(np.exp(z).sum(1, keepdims=True))
    head = x @ head_w.T + (0 if head_b is None else head_b)
    hl = log_softmax(head)
    short = cutoffs[0]
    parts = [hl[:, :short]]
    for i, (w1, w2) in enumerate(tails):
        parts.append(log_softmax((x @ w1.T) @ w2.T) + hl[:, short + i:short + i + 1])
    return np.concatenate(parts, 1)


def asm_weights(m):
    hb = None if m.head.bias is None else n(m.head.bias).astype(np.float64)
    tails = [(n(seq[0].weight).astype(np.float64), n(seq[1].weight).astype(np.float64))
             for seq in m.tail]
    return n(m.head.weight).astype(np.float64), hb, tails


def sample_case(nd, float_dt):
    """Random shapes with room for the pool, plus samples (with one extra batch row)."""
    S = [int(RNG.integers(3, 9)) for _ in range(nd)]
    K = [int(RNG.integers(1, s - 1)) for s in S]
    # 2-D allows output + kernel - 1 == input; torch's 3-D check is strict
    O = [int(RNG.integers(1, s - kk + (2 if nd == 2 else 1))) for s, kk in zip(S, K)]
    N, C = int(RNG.integers(1, 3)), int(RNG.integers(1, 3))
    x = RNG.integers(-2, 3, (N, C, *S)).astype(float_dt)      # small ints: many ties
    x += RNG.standard_normal(x.shape).astype(float_dt) * (RNG.random() < 0.5)
    samples = RNG.random((N + 1, C, nd)).astype(float_dt)
    return x, K, O, samples


# ---- fractional max pooling without torch ----------------------------------------------------

@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_fmp_matches_numpy_reference(nd, dt):
    f = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d
    for trial in range(6):
        x, K, O, s = sample_case(nd, dt)
        if trial == 0:
            x.reshape(-1)[::5] = np.nan                      # the last NaN in a window wins
        if trial == 1:
            s[..., 0] = dt(0.9999999)                        # samples near 1
        out, idx = f(t(x), K, O, return_indices=True, _random_samples=t(s))
        ref_v, ref_i = np_fmp(x, K, O, s)
        assert out.dtype == (cddp.float32 if dt == np.float32 else cddp.float64)
        assert idx.dtype == cddp.int64
        np.testing.assert_array_equal(n(idx), ref_i)
        np.testing.assert_array_equal(n(out), ref_v)


def test_fmp_intervals_use_the_input_dtype():
    """H 19, kernel 3, output 4, sample 0.87499994: float32 arithmetic starts the second window
    at 6, float64 at 5 (torch computes in the input's dtype; H holds 0..18, so the max of the
    window starting at s is s + 2)."""
    u = np.float32(0.8749999403953552)
    assert list(np_intervals(u, 19, 4, 3)) == [0, 6, 11, 16]
    assert list(np_intervals(np.float64(u), 19, 4, 3)) == [0, 5, 11, 16]
    x = np.arange(19, dtype=np.float32).reshape(1, 1, 19, 1).repeat(3, 3)
    s = np.array([[[0.5, u]]], np.float32)
    out = F.fractional_max_pool2d(t(x), (3, 1), (4, 3), _random_samples=t(s))
    np.testing.assert_array_equal(n(out)[0, 0, :, 0], [2, 8, 13, 18])
    out64 = F.fractional_max_pool2d(t(x.astype(np.float64)), (3, 1), (4, 3),
                                    _random_samples=t(s.astype(np.float64)))
    np.testing.assert_array_equal(n(out64)[0, 0, :, 0], [2, 7, 13, 18])
    # samples outside [0, 1) are taken as torch takes them (int() truncates toward zero)
    for v in (-2.7, 1.0, 3.3):
        sv = np.full((1, 1, 2), v, np.float32)
        got = F.fractional_max_pool2d(t(x), (3, 1), (4, 3), return_indices=True,
                                    _random_samples=t(sv))
        ref = np_fmp(x, (3, 1), (4, 3), sv)
        np.testing.assert_array_equal(n(got[1]), ref[1])


def test_fmp_gradient_routes_to_argmax_and_finite_differences():
    x = RNG.standard_normal((2, 3, 7, 6))
    x[0, 0, :3, :3] = 5.0                       # a tie shared by overlapping windows
    s = RNG.random((2, 3, 2))
    xc = t(x, requires_grad=True)
    out, idx = F.fractional_max_pool2d(xc, (3, 2), (4, 4), return_indices=True,
                                       _random_samples=t(s))
    w = RNG.standard_normal(tuple(out.shape))
    out.backward(t(w))
    ref = np.zeros((2, 3, 42))
    i = n(idx).reshape(2, 3, -1)
    for b in range(2):
        for c in range(3):
            np.add.at(ref[b, c], i[b, c], w[b, c].reshape(-1))   # duplicates accumulate
    np.testing.assert_array_equal(n(xc.grad), ref.reshape(x.shape))
    # distinct values: piecewise linear, so central differences are exact away from ties
    x3 = RNG.permutation(90).reshape(1, 2, 3, 3, 5).astype(np.float64)
    s3 = t(RNG.random((1, 2, 3)))
    gradcheck(lambda a: F.fractional_max_pool3d(a, (2, 1, 2), (1, 2, 3), _random_samples=s3),
              x3, eps=1e-3)


def test_fmp_unbatched_module_and_random_path():
    x = RNG.standard_normal((3, 9, 8)).astype(np.float32)
    s = RNG.random((1, 3, 2)).astype(np.float32)
    a, ia = F.fractional_max_pool2d(t(x), 2, output_ratio=(0.5, 0.5), return_indices=True,
                                    _random_samples=t(s))
    b, ib = F.fractional_max_pool2d_with_indices(t(x[None]), 2, (4, 4), _random_samples=t(s))
    assert tuple(a.shape) == (3, 4, 4)
    np.testing.assert_array_equal(n(a), n(b)[0])
    np.testing.assert_array_equal(n(ia), n(ib)[0])
    m = nn.FractionalMaxPool2d(2, output_size=4, return_indices=True, _random_samples=t(s))
    assert list(m.state_dict().keys()) == ["_random_samples"]
    assert list(nn.FractionalMaxPool2d(2, output_ratio=0.5).state_dict().keys()) == []
    mo, mi = m(t(x))
    np.testing.assert_array_equal(n(mo), n(a))
    np.testing.assert_array_equal(n(mi), n(ia))
    # without samples: drawn from cddp's generator, so a seed repeats them
    x5 = t(RNG.standard_normal((2, 2, 6, 7, 8)))
    cddp.manual_seed(3)
    r1, i1 = F.fractional_max_pool3d(x5, 2, output_ratio=0.5, return_indices=True)
    cddp.manual_seed(3)
    r2 = nn.FractionalMaxPool3d(2, output_ratio=(0.5, 0.5, 0.5))(x5)
    assert tuple(r1.shape) == (2, 2, 3, 3, 4)
    np.testing.assert_array_equal(n(r1), n(r2))
    flat = n(x5).reshape(2, 2, -1)
    np.testing.assert_array_equal(n(r1).reshape(2, 2, -1),
                                  np.take_along_axis(flat, n(i1).reshape(2, 2, -1), 2))


@pytest.mark.parametrize("call, exc, msg", [
    (lambda x: F.fractional_max_pool2d(x, 2), ValueError, "requires specifying either"),
    (lambda x: F.fractional_max_pool2d(x, 5, 5), RuntimeError,
     "fractional_max_pool2d(): pool height 5 too large relative to input height 8"),
    (lambda x: F.fractional_max_pool2d(x, (2, 2, 2), 3), RuntimeError,
     "kernel_size must either be a single Int or tuple of Ints"),
    (lambda x: F.fractional_max_pool2d(x, 2, 3, _random_samples=cddp.rand(2, 3, 2,
                                                                           dtype=cddp.float64)),
     RuntimeError, "Expect _random_samples to have the same dtype as input"),
    (lambda x: F.fractional_max_pool2d(x, 2, 3, _random_samples=cddp.rand(1, 3, 2)),
     RuntimeError, "Expect _random_samples.size(0) no less then input batch size."),
    (lambda x: F.fractional_max_pool2d(x[0, 0], 2, 3, _random_samples=cddp.rand(1, 3, 2)),
     RuntimeError, "Expected 3D or 4D tensor, but got: [8, 9]"),
    (lambda x: F.fractional_max_pool3d(x[None], 2, 3, _random_samples=cddp.rand(1, 2, 3)),
     RuntimeError, "pool time 2 too large relative to input time 3"),
    (lambda x: nn.FractionalMaxPool2d(2, 3, 0.5), ValueError, "only one of output_size"),
    (lambda x: nn.FractionalMaxPool2d(2, output_ratio=1.0), ValueError,
     "output_ratio must be between 0 and 1 (got 1.0)"),
    (lambda x: nn.FractionalMaxPool3d(0, output_size=2), ValueError,
     "kernel_size must be greater than 0, but got 0"),
])
def test_fmp_errors(call, exc, msg):
    x = t(RNG.standard_normal((2, 3, 8, 9)).astype(np.float32))
    with pytest.raises(exc) as e:
        call(x)
    assert msg in str(e.value)


# ---- AdaptiveLogSoftmaxWithLoss without torch ------------------------------------------------

def test_asm_matches_numpy_full_softmax():
    m = nn.AdaptiveLogSoftmaxWithLoss(12, 20, [4, 9, 15], div_value=2.0, head_bias=True,
                                      dtype=cddp.float64)
    assert [(k, tuple(v.shape)) for k, v in m.state_dict().items()] == [
        ("head.weight", (7, 12)), ("head.bias", (7,)), ("tail.0.0.weight", (6, 12)),
        ("tail.0.1.weight", (5, 6)), ("tail.1.0.weight", (3, 12)), ("tail.1.1.weight", (6, 3)),
        ("tail.2.0.weight", (1, 12)), ("tail.2.1.weight", (5, 1))]
    x = RNG.standard_normal((7, 12))
    target = np.array([0, 3, 4, 8, 9, 14, 19])             # every bucket and both its ends
    ref = np_asm_log_prob(x, *asm_weights(m), m.cutoffs)
    np.testing.assert_allclose(np.exp(ref).sum(1), 1.0, rtol=1e-12)
    lp = m.log_prob(t(x))
    np.testing.assert_allclose(n(lp), ref, rtol=1e-12, atol=1e-12)
    out = m(t(x), t(target))
    np.testing.assert_allclose(n(out.output), ref[np.arange(7), target], rtol=1e-12)
    np.testing.assert_allclose(out.loss.item(), -ref[np.arange(7), target].mean(), rtol=1e-12)
    np.testing.assert_array_equal(n(m.predict(t(x))), ref.argmax(1))
    one = m(t(x[2]), t(np.array(target[2])))               # unbatched: 0-d output
    assert tuple(one.output.shape) == ()
    np.testing.assert_allclose(one.output.item(), ref[2, target[2]], rtol=1e-12)
    # gradient of the per-example outputs wrt the input, by finite differences
    gradcheck(lambda a: m(a, t(target)).output, x)


def test_asm_errors():
    with pytest.raises(ValueError, match="unique, positive integers sorted"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [5, 3])
    with pytest.raises(ValueError, match="unique, positive integers sorted"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 10])
    with pytest.raises(ValueError, match="length larger than 0"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [])
    m = nn.AdaptiveLogSoftmaxWithLoss(16, 10, [3, 6])
    x = t(RNG.standard_normal((3, 16)).astype(np.float32))
    with pytest.raises(RuntimeError, match=r"Target values should be in \[0, 9\], but values "
                                           r"in range \[-1, 10\] were found"):
        m(x, t(np.array([-1, 2, 10])))
    with pytest.raises(RuntimeError, match="same size in the batch dimension"):
        m(x, t(np.array([1, 2])))
    with pytest.raises(RuntimeError, match="multi-target not supported"):
        m(x, t(np.array([[1], [2], [3]])))


# ---- against torch ---------------------------------------------------------------------------

def _to_torch(torch, a):
    return torch.from_numpy(np.array(a))


@pytest.mark.parametrize("nd", [2, 3])
def test_fmp_matches_torch(torch, nd):
    tf = torch.nn.functional
    f = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d
    g = tf.fractional_max_pool2d if nd == 2 else tf.fractional_max_pool3d
    for trial in range(8):
        dt = (np.float32, np.float64)[trial % 2]
        x, K, O, s = sample_case(nd, dt)
        if trial == 2:
            x.reshape(-1)[::4] = np.nan
        unbatched = trial == 3
        if unbatched:
            x, s = x[0], s[:1]
        xc, xt = t(x, requires_grad=True), _to_torch(torch, x).requires_grad_()
        oc, ic = f(xc, K, O, return_indices=True, _random_samples=t(s))
        ot, it = g(xt, K, O, return_indices=True, _random_samples=_to_torch(torch, s))
        np.testing.assert_array_equal(n(ic), it.numpy())
        np.testing.assert_array_equal(n(oc), ot.detach().numpy())
        w = RNG.standard_normal(tuple(ot.shape)).astype(dt)
        oc.backward(t(w))
        ot.backward(_to_torch(torch, w))
        np.testing.assert_allclose(n(xc.grad), xt.grad.numpy(), rtol=0, atol=1e-6)
    # half precision: the intervals are computed in the dtype, as torch's
    for cd, td in ((cddp.float16, torch.float16), (cddp.bfloat16, torch.bfloat16)):
        x, K, O, s = sample_case(nd, np.float32)
        oc, ic = f(t(x).to(cd), K, O, return_indices=True, _random_samples=t(s).to(cd))
        ot, it = g(_to_torch(torch, x).to(td), K, O, return_indices=True,
                   _random_samples=_to_torch(torch, s).to(td))
        np.testing.assert_array_equal(n(ic), it.numpy())
        np.testing.assert_array_equal(n(oc.float()), ot.float().numpy())


def _outcome(fn):
    try:
        r = fn()
    except Exception as e:        # noqa: BLE001  (the error itself is what is compared)
        return type(e).__name__, str(e).replace("cddp.Size", "torch.Size")
    return "ok", [tuple(getattr(v, "shape", ())) for v in (r if isinstance(r, tuple) else (r,))]


def test_fmp_errors_match_torch(torch):
    x = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)
    x3 = RNG.standard_normal((2, 3, 6, 7, 8)).astype(np.float32)
    s, s3 = RNG.random((2, 3, 2)).astype(np.float32), RNG.random((2, 3, 3)).astype(np.float32)
    cases = [
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X, 3, output_size=(5, 7),
                                                              _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X, 3, output_size=(5, 6, 1),
                                                              _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X, 3, output_ratio=0.5,
                                                              _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X, 3, output_ratio=(.5, .5, .5)),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X, 3, 4, _random_samples=S[:, :2]),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X, 3, 4, _random_samples=S[0]),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X[:, :, :0], 2, 2,
                                                              _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X, 2.0, 2, _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X, 2, -1, _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X.long(), 2, 2,
                                                              _random_samples=S.long()),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X, 2, (0, 2), True,
                                                              _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool2d(X[:0], 2, 2, return_indices=True),
        lambda L, X, S: L.nn.FractionalMaxPool2d(2, output_ratio=(0.5, 0.5, 0.5)),
    ]
    cases3 = [
        lambda L, X, S: L.nn.functional.fractional_max_pool3d(X, 3, (3, 5, 6), _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool3d(X, 3, (3, 5, 5), _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool3d(X, (3, 3), 2, _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool3d(X, 2, 2, _random_samples=S[:1]),
        lambda L, X, S: L.nn.functional.fractional_max_pool3d(X[0, 0], 2, 2, _random_samples=S),
        lambda L, X, S: L.nn.functional.fractional_max_pool3d(X, 3, output_ratio=(0.5, 0.5)),
        lambda L, X, S: L.nn.FractionalMaxPool3d((2, 0, 1), output_size=2),
        lambda L, X, S: L.nn.FractionalMaxPool3d(2, output_ratio=(0.5, 1, 0.5)),
    ]
    for cs, xa, sa in ((cases, x, s), (cases3, x3, s3)):
        for case in cs:
            got = _outcome(lambda: case(cddp, t(xa), t(sa)))
            want = _outcome(lambda: case(torch, _to_torch(torch, xa), _to_torch(torch, sa)))
            assert got == want


@pytest.mark.parametrize("head_bias, dt", [(False, np.float32), (True, np.float64)])
def test_asm_matches_torch(torch, head_bias, dt):
    tdt = torch.float32 if dt == np.float32 else torch.float64
    tm = torch.nn.AdaptiveLogSoftmaxWithLoss(10, 25, [3, 8, 17], div_value=2.0,
                                             head_bias=head_bias, dtype=tdt)
    cm = nn.AdaptiveLogSoftmaxWithLoss(10, 25, [3, 8, 17], div_value=2.0, head_bias=head_bias,
                                       dtype=cddp.float32 if dt == np.float32 else cddp.float64)
    assert list(cm.state_dict().keys()) == list(tm.state_dict().keys())
    cm.load_state_dict({k: t(v.numpy()) for k, v in tm.state_dict().items()})
    tol = dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-12)
    x = RNG.standard_normal((9, 10)).astype(dt)
    target = np.array([0, 2, 3, 7, 8, 16, 17, 24, 5])
    xc, xt = t(x, requires_grad=True), _to_torch(torch, x).requires_grad_()
    oc, ot = cm(xc, t(target)), tm(xt, _to_torch(torch, target))
    np.testing.assert_allclose(n(oc.output), ot.output.detach().numpy(), **tol)
    np.testing.assert_allclose(oc.loss.item(), ot.loss.item(), **tol)
    oc.loss.backward()
    ot.loss.backward()
    np.testing.assert_allclose(n(xc.grad), xt.grad.numpy(), **tol)
    for (kc, pc), (kt, pt) in zip(cm.named_parameters(), tm.named_parameters()):
        assert kc == kt
        np.testing.assert_allclose(n(pc.grad), pt.grad.numpy(), **tol, err_msg=kc)
    np.testing.assert_allclose(n(cm.log_prob(xc)), tm.log_prob(xt).detach().numpy(), **tol)
    np.testing.assert_array_equal(n(cm.predict(xc)), tm.predict(xt).numpy())
    uc, ut = cm(xc[4], t(np.array(8))), tm(xt[4], _to_torch(torch, np.array(8)))
    assert tuple(uc.output.shape) == tuple(ut.output.shape) == ()
    np.testing.assert_allclose(uc.output.item(), ut.output.item(), **tol)
    # argument errors: same type and message
    for args in ([], [3, 3], [0, 5], [4, 25], [2.5]):
        assert _outcome(lambda: nn.AdaptiveLogSoftmaxWithLoss(10, 25, args)) == \
            _outcome(lambda: torch.nn.AdaptiveLogSoftmaxWithLoss(10, 25, args))
    for tg in (np.array([0, 25]), np.array([-3, 1])):
        assert _outcome(lambda: cm(xc[:2], t(tg))) == \
            _outcome(lambda: tm(xt[:2], _to_torch(torch, tg)))
    assert _outcome(lambda: cm(xc, t(np.array(3)))) == \
        _outcome(lambda: tm(xt, _to_torch(torch, np.array(3))))
