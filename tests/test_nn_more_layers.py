"""torch.nn layers and functionals composed from cddp ops: RMSNorm, Unflatten, GLU,
LogSigmoid, Softmin, Softshrink, Hardshrink, Threshold, RReLU, CosineSimilarity,
PairwiseDistance, pdist, Bilinear, ChannelShuffle, TripletMarginWithDistanceLoss,
MultiMarginLoss, MultiLabelMarginLoss, gumbel_softmax, LazyLinear, MaxUnpool1d/2d, EmbeddingBag.

Oracles: NumPy formulas and central finite differences in float64 (gradcheck) without torch;
torch, when importable, for values and input gradients in float32 and float64, seeded draws
(rrelu, gumbel_softmax, module inits), state_dict keys and error messages.
"""
import re

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t

RNG = np.random.default_rng(7)


def R(*shape):
    return RNG.standard_normal(shape)


def both(torch, fc, ft, arrays, dtypes=("float32", "float64"), ints=(), consts=(), rtol=None):
    """fc(cddp tensors) vs ft(torch tensors) on the same arrays: values and the gradient of
    sum(out * w) for each float input. ints: positions of integer arrays; consts: float
    inputs that take no gradient."""
    for dt in dtypes:
        tol = rtol or (2e-5 if dt == "float32" else 1e-10)
        cx, tx = [], []
        for i, a in enumerate(arrays):
            if i in ints:
                cx.append(cddp.from_numpy(np.array(a, dtype=np.int64)))
                tx.append(torch.from_numpy(np.array(a, dtype=np.int64)))
            else:
                a = np.array(a, dtype=dt)
                cx.append(cddp.from_numpy(a.copy()).requires_grad_(i not in consts))
                tx.append(torch.from_numpy(a.copy()).requires_grad_(i not in consts))
        co, to = fc(*cx), ft(*tx)
        np.testing.assert_allclose(n(co), to.detach().numpy(), rtol=tol, atol=tol,
                                   err_msg=f"values ({dt})")
        assert str(co.dtype).split(".")[-1] == str(to.dtype).split(".")[-1]
        if not to.requires_grad:
            continue
        w = RNG.standard_normal(tuple(to.shape)).astype(dt)
        (co * cddp.from_numpy(w.copy())).sum().backward()
        (to * torch.from_numpy(w.copy())).sum().backward()
        for i, (c, tt) in enumerate(zip(cx, tx)):
            if i in ints:
                continue
            g = np.zeros(tt.shape, dtype=dt) if tt.grad is None else tt.grad.numpy()
            got = np.zeros(g.shape, dtype=dt) if c.grad is None else n(c.grad)
            np.testing.assert_allclose(got, g, rtol=tol, atol=tol,
                                       err_msg=f"gradient of input {i} ({dt})")


# ---- activations ---------------------------------------------------------------------------

def test_activations_match_numpy_and_finite_differences():
    x = R(3, 4)
    x[0, :3] = [0.5, -0.5, 0.25]                     # the shrink bands' edges and inside
    np.testing.assert_allclose(n(F.logsigmoid(t(x))), -np.logaddexp(0, -x), rtol=1e-12)
    np.testing.assert_allclose(n(F.softshrink(t(x), 0.5)),
                               np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0)))
    np.testing.assert_allclose(n(F.hardshrink(t(x), 0.5)), np.where(np.abs(x) > 0.5, x, 0))
    np.testing.assert_allclose(n(F.threshold(t(x), 0.1, -3.0)), np.where(x > 0.1, x, -3.0))
    e = np.exp(-x - (-x).max(1, keepdims=True))
    np.testing.assert_allclose(n(F.softmin(t(x), 1)), e / e.sum(1, keepdims=True), rtol=1e-12)
    a, b = x[:, :2], x[:, 2:]
    np.testing.assert_allclose(n(F.glu(t(x))), a / (1 + np.exp(-b)), rtol=1e-12)
    np.testing.assert_allclose(n(F.rrelu(t(x), 0.1, 0.3)), np.where(x >= 0, x, 0.2 * x))
    y = R(3, 6)                                      # away from the kinks for differences
    y = np.where(np.abs(np.abs(y) - 0.5) < 0.05, 0.8, y)
    for op in (F.logsigmoid, lambda z: F.softshrink(z, 0.5), lambda z: F.hardshrink(z, 0.5),
               lambda z: F.threshold(z, 0.1, 2.0), lambda z: F.softmin(z, 0),
               lambda z: F.glu(z, 1), lambda z: F.rrelu(z)):
        gradcheck(op, y)


def test_activation_modules_and_errors():
    x = t(R(2, 4))
    for m, f in ((nn.GLU(0), F.glu(x, 0)), (nn.LogSigmoid(), F.logsigmoid(x)),
                 (nn.Softmin(1), F.softmin(x, 1)), (nn.Softshrink(0.3), F.softshrink(x, 0.3)),
                 (nn.Hardshrink(0.3), F.hardshrink(x, 0.3)),
                 (nn.Threshold(0.2, 5.0), F.threshold(x, 0.2, 5.0))):
        np.testing.assert_array_equal(n(m(x)), n(f))
        assert len(m.state_dict()) == 0
    assert repr(nn.Threshold(0.1, 20, True)) == "Threshold(threshold=0.1, value=20, inplace=True)"
    assert repr(nn.Softshrink()) == "Softshrink(0.5)"
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        F.glu(t(R(2, 3)))
    with pytest.raises(RuntimeError, match="lambda must be greater or equal to 0"):
        F.softshrink(x, -1.0)
    with pytest.raises(RuntimeError, match="Lower bound should be less than or equal"):
        F.rrelu(x, 0.5, 0.1, training=True)
    y = t(R(3))
    F.threshold(y, 0.0, 7.0, inplace=True)
    assert np.all((n(y) > 0) | (n(y) == 7.0))


def test_rrelu_training_draws_uniform_per_negative_element():
    x = t(np.array([[-1.0, 2.0, -3.0], [0.0, -0.5, 4.0]]), requires_grad=True)
    cddp.manual_seed(11)
    out = F.rrelu(x, 0.1, 0.3, training=True)
    ratio = n(out)[n(x) < 0] / n(x)[n(x) < 0]
    assert np.all((ratio >= 0.1) & (ratio < 0.3)) and len(set(ratio.round(12))) == 3
    np.testing.assert_array_equal(n(out)[n(x) > 0], n(x)[n(x) > 0])
    out.sum().backward()
    slopes = n(x.grad)
    np.testing.assert_allclose(slopes[n(x) < 0], ratio)       # gradient uses the same noise
    # the draws: one float64 uniform_ over the elements <= 0, in row-major order
    cddp.manual_seed(11)
    draws = n(cddp.empty(4, dtype=cddp.float64).uniform_(0.1, 0.3))
    np.testing.assert_array_equal(slopes[n(x) <= 0], draws.astype(np.float32)
                                  if slopes.dtype == np.float32 else draws)


def test_activations_vs_torch(torch):
    TF = torch.nn.functional
    x = R(4, 6)
    x[0, :3] = [0.5, -0.5, 0.0]
    for fc, ft in ((F.logsigmoid, TF.logsigmoid),
                   (lambda z: F.softmin(z, 1), lambda z: TF.softmin(z, 1)),
                   (lambda z: F.softmin(z, 0, dtype=cddp.float64),
                    lambda z: TF.softmin(z, 0, dtype=torch.float64)),
                   (lambda z: F.softshrink(z, 0.5), lambda z: TF.softshrink(z, 0.5)),
                   (lambda z: F.hardshrink(z, 0.5), lambda z: TF.hardshrink(z, 0.5)),
                   (lambda z: F.threshold(z, 0.0, -2.0), lambda z: TF.threshold(z, 0.0, -2.0)),
                   (lambda z: F.glu(z, -1), lambda z: TF.glu(z, -1)),
                   (lambda z: F.rrelu(z), lambda z: TF.rrelu(z))):
        both(torch, fc, ft, [x])
    # seeded training draws: torch's values and noise-scaled gradients, float32 and float64
    for dt in ("float32", "float64"):
        cddp.manual_seed(5)
        torch.manual_seed(5)
        both(torch, lambda z: F.rrelu(z, 0.05, 0.4, True), lambda z: TF.rrelu(z, 0.05, 0.4, True),
             [x.T], dtypes=(dt,))
        assert float(cddp.rand(())) == float(torch.rand(()))    # the same stream consumed
    m, tm = nn.RReLU(0.1, 0.2, inplace=False), torch.nn.RReLU(0.1, 0.2)
    assert repr(m) == repr(tm)
    m.eval()
    tm.eval()
    np.testing.assert_allclose(n(m(t(x))), tm(torch.from_numpy(x)).numpy(), rtol=1e-12)
    for name in ("GLU", "LogSigmoid", "Softmin", "Softshrink", "Hardshrink"):
        assert repr(getattr(nn, name)()) == repr(getattr(torch.nn, name)())


def test_gumbel_softmax_vs_torch(torch):
    x = R(5, 7)
    for hard in (False, True):
        for dt in ("float32", "float64"):
            cddp.manual_seed(3)
            torch.manual_seed(3)
            both(torch, lambda z: F.gumbel_softmax(z, tau=0.7, hard=hard, dim=1),
                 lambda z: torch.nn.functional.gumbel_softmax(z, tau=0.7, hard=hard, dim=1),
                 [x], dtypes=(dt,), rtol=1e-5 if dt == "float32" else 1e-10)


def test_gumbel_softmax_torch_free():
    x = t(R(4, 6), requires_grad=True)
    cddp.manual_seed(0)
    y = F.gumbel_softmax(x, tau=0.5)
    np.testing.assert_allclose(n(y).sum(1), 1.0, rtol=1e-12)
    cddp.manual_seed(0)
    g = -n(cddp.empty(4, 6, dtype=cddp.float64).exponential_().log())
    z = (n(x) + g) / 0.5
    e = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(n(y), e / e.sum(1, keepdims=True), rtol=1e-12)
    cddp.manual_seed(0)
    h = F.gumbel_softmax(x, tau=0.5, hard=True)
    np.testing.assert_array_equal(n(h), np.eye(6)[n(y).argmax(1)])
    (h * t(R(4, 6))).sum().backward()                # straight-through: the soft gradient
    assert np.abs(n(x.grad)).sum() > 0


# ---- norms, distances, products ------------------------------------------------------------

def test_rms_norm_numpy_and_gradcheck():
    x = R(3, 2, 4)
    w = R(2, 4)
    ref = x / np.sqrt((x * x).mean((-1, -2), keepdims=True) + 1e-3) * w
    np.testing.assert_allclose(n(F.rms_norm(t(x), (2, 4), t(w), 1e-3)), ref, rtol=1e-12)
    eps = np.finfo(np.float64).eps                   # eps=None: finfo(dtype).eps
    np.testing.assert_allclose(n(F.rms_norm(t(x), 4)),
                               x / np.sqrt((x * x).mean(-1, keepdims=True) + eps), rtol=1e-12)
    gradcheck(lambda a, b: F.rms_norm(a, [4], b, 1e-5), x, R(4))
    m = nn.RMSNorm([2, 4])
    assert list(m.state_dict()) == ["weight"] and np.all(n(m.weight) == 1)
    assert list(nn.RMSNorm(4, elementwise_affine=False).state_dict()) == []
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[5\], expected input "
                                           r"with shape \[\*5\], but got input of size"):
        F.rms_norm(t(x), [5])


def test_rms_norm_vs_torch(torch):
    x, w = R(3, 5, 6), R(6)
    both(torch, lambda a, b: F.rms_norm(a, (6,), b), lambda a, b:
         torch.nn.functional.rms_norm(a, (6,), b), [x, w])
    both(torch, lambda a: F.rms_norm(a, (5, 6), eps=0.1), lambda a:
         torch.nn.functional.rms_norm(a, (5, 6), eps=0.1), [x])
    m, tm = nn.RMSNorm((5, 6), eps=1e-4), torch.nn.RMSNorm((5, 6), eps=1e-4)
    assert repr(m) == repr(tm) and list(m.state_dict()) == list(tm.state_dict())
    with pytest.raises(RuntimeError) as e:
        torch.nn.functional.rms_norm(torch.zeros(2, 3), [4])
    with pytest.raises(RuntimeError, match=re.escape(str(e.value))):
        F.rms_norm(t(np.zeros((2, 3))), [4])


def test_distances_numpy_and_gradcheck():
    a, b = R(4, 5), R(4, 5)
    np.testing.assert_allclose(n(F.pairwise_distance(t(a), t(b))),
                               np.linalg.norm(a - b + 1e-6, axis=-1), rtol=1e-12)
    np.testing.assert_allclose(n(nn.PairwiseDistance(1.0, 0.0, True)(t(a), t(b))),
                               np.abs(a - b).sum(-1, keepdims=True), rtol=1e-12)
    i, j = np.triu_indices(4, 1)
    np.testing.assert_allclose(n(F.pdist(t(a))), np.linalg.norm(a[i] - a[j], axis=1),
                               rtol=1e-12)
    np.testing.assert_allclose(n(F.pdist(t(a), 3)),
                               (np.abs(a[i] - a[j]) ** 3).sum(1) ** (1 / 3), rtol=1e-12)
    cs = (a * b).sum(0) / np.linalg.norm(a, axis=0) / np.linalg.norm(b, axis=0)
    np.testing.assert_allclose(n(nn.CosineSimilarity(0)(t(a), t(b))), cs, rtol=1e-12)
    gradcheck(lambda x, y: F.pairwise_distance(x, y, 3.0), a, b)
    gradcheck(F.pdist, a)
    with pytest.raises(RuntimeError, match="pdist only supports 2D tensors, got: 3D"):
        F.pdist(t(R(2, 2, 2)))


def test_distances_vs_torch(torch):
    TF = torch.nn.functional
    a, b = R(6, 5), R(6, 5)
    for p in (1.0, 2.0, 3.0):
        both(torch, lambda x, y: F.pairwise_distance(x, y, p, 1e-6, True),
             lambda x, y: TF.pairwise_distance(x, y, p, 1e-6, True), [a, b])
        both(torch, lambda x: F.pdist(x, p), lambda x: TF.pdist(x, p), [a])
    both(torch, lambda x, y: nn.CosineSimilarity(1)(x, y),
         lambda x, y: torch.nn.CosineSimilarity(1)(x, y), [a, b])
    both(torch, lambda x, y: nn.PairwiseDistance()(x, y),
         lambda x, y: torch.nn.PairwiseDistance()(x, y), [a[0], b[0]])


def test_bilinear_numpy_gradcheck_and_init():
    x1, x2, w, bias = R(2, 3, 4), R(2, 3, 5), R(6, 4, 5), R(6)
    ref = np.einsum("...i,oij,...j->...o", x1, w, x2) + bias
    np.testing.assert_allclose(n(F.bilinear(t(x1), t(x2), t(w), t(bias))), ref, rtol=1e-12)
    gradcheck(lambda a, b, c, d: F.bilinear(a, b, c, d), x1, x2, w, bias)
    cddp.manual_seed(1)
    m = nn.Bilinear(4, 5, 6)
    cddp.manual_seed(1)
    draws = n(cddp.empty(6 * 4 * 5 + 6).uniform_(-0.5, 0.5))   # bound 1 / sqrt(in1) = 0.5
    np.testing.assert_array_equal(n(m.weight).ravel(), draws[:120])
    np.testing.assert_array_equal(n(m.bias), draws[120:])
    assert list(m.state_dict()) == ["weight", "bias"]
    assert list(nn.Bilinear(4, 5, 6, bias=False).state_dict()) == ["weight"]
    with pytest.raises(RuntimeError, match="input1 size does not match weight size"):
        F.bilinear(t(R(2, 3)), t(R(2, 5)), t(w))


def test_bilinear_vs_torch(torch):
    both(torch, F.bilinear, torch.nn.functional.bilinear, [R(3, 4), R(3, 5), R(2, 4, 5), R(2)])
    both(torch, F.bilinear, torch.nn.functional.bilinear, [R(2, 3, 4), R(2, 3, 5), R(2, 4, 5)])
    cddp.manual_seed(9)
    torch.manual_seed(9)
    m, tm = nn.Bilinear(3, 4, 5), torch.nn.Bilinear(3, 4, 5)
    assert repr(m) == repr(tm) and list(m.state_dict()) == list(tm.state_dict())
    for k in ("weight", "bias"):
        np.testing.assert_array_equal(n(m.state_dict()[k]), tm.state_dict()[k].numpy())


def test_channel_shuffle_and_unflatten():
    x = np.arange(2 * 6 * 2, dtype=np.float64).reshape(2, 6, 2)
    ref = x.reshape(2, 3, 2, 2).transpose(0, 2, 1, 3).reshape(2, 6, 2)
    np.testing.assert_array_equal(n(nn.ChannelShuffle(3)(t(x))), ref)
    gradcheck(lambda z: F.channel_shuffle(z, 2), R(1, 4, 3))
    with pytest.raises(RuntimeError, match="Number of channels must be divisible by groups. "
                                           "Got 6 channels and 4 groups."):
        F.channel_shuffle(t(x), 4)
    u = nn.Unflatten(1, (2, 3))
    assert tuple(u(t(x)).shape) == (2, 2, 3, 2) and repr(u) == \
        "Unflatten(dim=1, unflattened_size=(2, 3))"
    with pytest.raises(TypeError, match="unflattened_size must be tuple of ints, but found "
                                        "element of type float at pos 1"):
        nn.Unflatten(1, (2, 3.0))


def test_channel_shuffle_unflatten_vs_torch(torch):
    both(torch, lambda z: F.channel_shuffle(z, 2), lambda z:
         torch.nn.functional.channel_shuffle(z, 2), [R(2, 4, 3, 2)])
    assert repr(nn.ChannelShuffle(2)) == repr(torch.nn.ChannelShuffle(2))
    for shape, g in (((2, 6), 2), ((2, 6, 2), 0), ((2, 6, 2), 4)):
        with pytest.raises(RuntimeError) as e:
            torch.nn.functional.channel_shuffle(torch.zeros(shape), g)
        with pytest.raises(RuntimeError, match=re.escape(str(e.value))):
            F.channel_shuffle(t(np.zeros(shape)), g)
    both(torch, nn.Unflatten(-1, [2, 2]), torch.nn.Unflatten(-1, [2, 2]), [R(3, 4)])
    assert repr(nn.Unflatten(-1, [2, 2])) == repr(torch.nn.Unflatten(-1, [2, 2]))


# ---- losses --------------------------------------------------------------------------------

def ref_multi_margin(x, y, p, margin, w):
    nb, c = x.shape
    out = np.zeros(nb)
    for i in range(nb):
        z = np.maximum(0, margin - x[i, y[i]] + x[i]) ** p
        z[y[i]] = 0
        out[i] = z.sum() * (1 if w is None else w[y[i]]) / c
    return out


def ref_multilabel_margin(x, y):
    nb, c = x.shape
    out = np.zeros(nb)
    for i in range(nb):
        js = []
        for v in y[i]:
            if v < 0:
                break
            js.append(v)
        others = [k for k in range(c) if k not in js]
        out[i] = sum(max(0, 1 - (x[i, j] - x[i, k])) for j in js for k in others) / c
    return out


def test_margin_losses_numpy_and_gradcheck():
    x, y = R(5, 4), np.array([0, 3, 1, 1, 2])
    w = np.abs(R(4))
    for p in (1, 2):
        for red in ("none", "sum", "mean"):
            got = n(F.multi_margin_loss(t(x), t(y), p, 0.7, t(w), reduction=red))
            ref = ref_multi_margin(x, y, p, 0.7, w)
            np.testing.assert_allclose(got, {"none": ref, "sum": ref.sum(),
                                             "mean": ref.mean()}[red], rtol=1e-12)
        gradcheck(lambda a: F.multi_margin_loss(a, t(y), p, 0.7, t(w), reduction="none"), x)
    yl = np.array([[3, 0, -1, 1], [1, 2, 3, 0], [-1, 0, 0, 0], [2, 2, -1, 0], [0, -1, 3, 3]])
    np.testing.assert_allclose(n(F.multilabel_margin_loss(t(x), t(yl), reduction="none")),
                               ref_multilabel_margin(x, yl), rtol=1e-12)
    gradcheck(lambda a: F.multilabel_margin_loss(a, t(yl)), x)
    with pytest.raises(ValueError, match="only p == 1 and p == 2 supported"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(RuntimeError, match="target out of range"):
        F.multi_margin_loss(t(x), t(np.array([0, 4, 1, 1, 2])))
    m = nn.MultiMarginLoss(weight=t(w))
    assert list(m.state_dict()) == ["weight"]


def test_triplet_with_distance_numpy_and_gradcheck():
    a, p, ng = R(4, 3), R(4, 3), R(4, 3)

    def d(u, v):
        return np.linalg.norm(u - v + 1e-6, axis=-1)

    ref = np.maximum(0, 1.5 + d(a, p) - np.minimum(d(a, ng), d(p, ng)))
    m = nn.TripletMarginWithDistanceLoss(margin=1.5, swap=True, reduction="none")
    np.testing.assert_allclose(n(m(t(a), t(p), t(ng))), ref, rtol=1e-12)

    def cos(u, v):
        return 1 - F.cosine_similarity(u, v)

    gradcheck(lambda x, y, z: F.triplet_margin_with_distance_loss(
        x, y, z, distance_function=cos, margin=3.0), a, p, ng)
    with pytest.raises(ValueError, match="expected margin to be greater than 0, got -1"):
        nn.TripletMarginWithDistanceLoss(margin=-1)
    assert list(m.state_dict()) == []


def test_losses_vs_torch(torch):
    TF = torch.nn.functional
    x, y = R(6, 5), np.array([0, 4, 1, 1, 2, 3])
    w = np.abs(R(5))
    for p in (1, 2):
        for red in ("none", "mean", "sum"):
            both(torch, lambda a, b, c: F.multi_margin_loss(a, b, p, 0.5, c, reduction=red),
                 lambda a, b, c: TF.multi_margin_loss(a, b, p, 0.5, c, reduction=red),
                 [x, y, w], ints=(1,), consts=(2,))
    both(torch, lambda a, b: F.multi_margin_loss(a, b, reduction="none"),
         lambda a, b: TF.multi_margin_loss(a, b, reduction="none"), [x[0], y[:1]], ints=(1,))
    yl = np.array([[3, 0, -1, 1, 1], [1, 2, 3, 0, 4], [-1, 0, 0, 0, 0], [2, 2, -1, 0, 0],
                   [0, -1, 3, 3, 3], [4, 3, 2, 1, 0]])
    for red in ("none", "mean", "sum"):
        both(torch, lambda a, b: F.multilabel_margin_loss(a, b, reduction=red),
             lambda a, b: TF.multilabel_margin_loss(a, b, reduction=red), [x, yl], ints=(1,))
        both(torch, lambda a, b: F.multilabel_margin_loss(a, b, reduction=red),
             lambda a, b: TF.multilabel_margin_loss(a, b, reduction=red), [x[1], yl[1]],
             ints=(1,))
    a, p, ng = R(4, 3), R(4, 3), R(4, 3)
    for swap in (False, True):
        both(torch, nn.TripletMarginWithDistanceLoss(margin=2.0, swap=swap),
             torch.nn.TripletMarginWithDistanceLoss(margin=2.0, swap=swap), [a, p, ng])
    both(torch, lambda *z: F.triplet_margin_with_distance_loss(
        *z, distance_function=lambda u, v: (u - v).abs().sum(-1), reduction="sum"),
        lambda *z: TF.triplet_margin_with_distance_loss(
            *z, distance_function=lambda u, v: (u - v).abs().sum(-1), reduction="sum"),
        [a, p, ng])
    for name in ("MultiMarginLoss", "MultiLabelMarginLoss"):
        assert list(getattr(nn, name)().state_dict()) == list(
            getattr(torch.nn, name)().state_dict())


# ---- LazyLinear ----------------------------------------------------------------------------

def test_lazy_linear_torch_free():
    m = nn.LazyLinear(3)
    assert repr(m) == "LazyLinear(in_features=0, out_features=3, bias=True)"
    assert isinstance(m.weight, nn.UninitializedParameter)
    assert list(m.state_dict()) == ["weight", "bias"]
    cddp.manual_seed(4)
    y = m(t(R(2, 5).astype(np.float32)))
    assert type(m) is nn.Linear and m.in_features == 5 and tuple(y.shape) == (2, 3)
    assert type(m.weight) is nn.Parameter and tuple(m.weight.shape) == (3, 5)
    cddp.manual_seed(4)
    ref = nn.Linear(5, 3)                              # the same draws as Linear's init
    np.testing.assert_array_equal(n(m.weight), n(ref.weight))
    np.testing.assert_array_equal(n(m.bias), n(ref.bias))
    lazy = nn.LazyLinear(3)
    lazy.load_state_dict(ref.state_dict())             # materialized to the saved shapes
    np.testing.assert_array_equal(n(lazy.weight), n(ref.weight))
    one = t(np.ones((1, 5), dtype=np.float32))
    np.testing.assert_array_equal(n(lazy(one)), n(ref(one)))
    assert type(lazy) is nn.Linear and lazy.in_features == 5
    nb = nn.LazyLinear(2, bias=False)
    nb(t(R(1, 4).astype(np.float32)))
    assert nb.bias is None and list(nb.state_dict()) == ["weight"]


def test_lazy_linear_vs_torch(torch):
    cddp.manual_seed(8)
    torch.manual_seed(8)
    m, tm = nn.LazyLinear(4), torch.nn.LazyLinear(4)
    assert repr(m) == repr(tm) and list(m.state_dict()) == list(tm.state_dict())
    both(torch, m, tm, [R(3, 6)], dtypes=("float32",))
    assert repr(m) == repr(tm)
    np.testing.assert_array_equal(n(m.weight), tm.weight.detach().float().numpy())


# ---- MaxUnpool -----------------------------------------------------------------------------

def test_max_unpool_torch_free():
    x = R(2, 3, 4, 6)
    out, idx = F.max_pool2d(t(x), 2, return_indices=True)
    up = nn.MaxUnpool2d(2)(out, idx)
    assert tuple(up.shape) == (2, 3, 4, 6)
    # every pooled maximum goes back where it came from, everything else is zero
    blocks = x.reshape(2, 3, 2, 2, 3, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 2, 3, 4)
    keep = blocks == blocks.max(-1, keepdims=True)
    ref = np.where(keep, blocks, 0).reshape(2, 3, 2, 3, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    np.testing.assert_array_equal(n(up), ref.reshape(2, 3, 4, 6))
    gradcheck(lambda z: F.max_unpool2d(z, idx, 2), n(out))
    o1, i1 = F.max_pool1d(t(R(2, 3, 7)), 3, 2, return_indices=True)
    u1 = nn.MaxUnpool1d(3, 2)(o1, i1, output_size=[2, 3, 8])
    assert tuple(u1.shape) == (2, 3, 8)
    assert np.count_nonzero(n(u1)) <= o1.numel()
    o1, i1 = F.max_pool1d(t(R(2, 3, 9)), 3, return_indices=True)   # no shared maxima
    gradcheck(lambda z: F.max_unpool1d(z, i1, 3), n(o1))
    with pytest.raises(ValueError, match="invalid output_size"):
        F.max_unpool1d(o1, i1, 3, 2, output_size=[12])
    with pytest.raises(RuntimeError, match="Found an invalid max index"):
        F.max_unpool2d(out, idx + 100, 2)


def test_max_unpool_vs_torch(torch):
    x = R(2, 3, 5, 6)
    tx = torch.from_numpy(x)
    # overlapping windows share maxima: the duplicates of an index carry the same value, as
    # they do in use (which duplicate's write lands is unspecified)
    tout, tidx = torch.nn.functional.max_pool2d(tx, 2, 1, return_indices=True)
    _, cidx = F.max_pool2d(t(x), 2, 1, return_indices=True)
    np.testing.assert_array_equal(n(cidx), tidx.numpy())
    p = tout.numpy()
    both(torch, lambda z: F.max_unpool2d(z, cidx, 2, 1), lambda z:
         torch.nn.functional.max_unpool2d(z, tidx, 2, 1), [p])
    ti = tidx[0][:, :2, :3].contiguous()
    both(torch, lambda z: nn.MaxUnpool2d((2, 3), 2)(z, cddp.from_numpy(ti.numpy()), (5, 7)),
         lambda z: torch.nn.MaxUnpool2d((2, 3), 2)(z, ti, (5, 7)), [p[0][:, :2, :3]])
    x1 = R(2, 3, 9)
    _, ti1 = torch.nn.functional.max_pool1d(torch.from_numpy(x1), 3, 2, return_indices=True)
    both(torch, lambda z: F.max_unpool1d(z, cddp.from_numpy(ti1.numpy()), 3, 2),
         lambda z: torch.nn.functional.max_unpool1d(z, ti1, 3, 2), [R(*ti1.shape)])
    assert repr(nn.MaxUnpool2d(2)) == repr(torch.nn.MaxUnpool2d(2))
    assert repr(nn.MaxUnpool1d(3, 2)) == repr(torch.nn.MaxUnpool1d(3, 2))


# ---- EmbeddingBag --------------------------------------------------------------------------

def ref_bag(w, idx, offsets, mode, psw=None, pad=None):
    ends = list(offsets[1:]) + [len(idx)]
    out = []
    for s, e in zip(offsets, ends):
        rows = [w[i] * (1 if psw is None else psw[k]) for k, i in enumerate(idx[s:e], s)
                if i != pad]
        if not rows:
            out.append(np.zeros(w.shape[1]))
        else:
            out.append({"sum": np.sum, "mean": np.mean, "max": np.max}[mode](rows, 0))
    return np.array(out)


def test_embedding_bag_torch_free():
    w = R(10, 3)
    idx = np.array([1, 2, 4, 5, 4, 3, 2, 9, 2])
    off = np.array([0, 3, 3, 7])                       # bag 1 is empty
    for mode in ("sum", "mean", "max"):
        for pad in (None, 2):
            got = F.embedding_bag(t(idx), t(w), t(off), mode=mode, padding_idx=pad)
            np.testing.assert_allclose(n(got), ref_bag(w, idx, off, mode, pad=pad),
                                       rtol=1e-12)
        gradcheck(lambda ww: F.embedding_bag(t(idx), ww, t(off), mode=mode), w)
    psw = R(9)
    np.testing.assert_allclose(
        n(F.embedding_bag(t(idx), t(w), t(off), mode="sum", per_sample_weights=t(psw))),
        ref_bag(w, idx, off, "sum", psw), rtol=1e-12)
    gradcheck(lambda ww, p: F.embedding_bag(t(idx), ww, t(off), mode="sum",
                                            per_sample_weights=p), w, psw)
    two = idx.reshape(3, 3)
    np.testing.assert_allclose(n(F.embedding_bag(t(two), t(w))),
                               ref_bag(w, idx, np.array([0, 3, 6]), "mean"), rtol=1e-12)
    np.testing.assert_allclose(
        n(F.embedding_bag(t(idx), t(w), t(np.array([0, 3, 3, 7, 9])), mode="sum",
                          include_last_offset=True)), ref_bag(w, idx, off, "sum"), rtol=1e-12)
    bag = nn.EmbeddingBag(10, 3, mode="max", padding_idx=-1)
    assert list(bag.state_dict()) == ["weight"] and np.all(n(bag.weight)[9] == 0)
    assert repr(bag) == "EmbeddingBag(10, 3, mode='max', padding_idx=9)"
    with pytest.raises(NotImplementedError, match="per_sample_weights is only supported for "
                                                  "mode='sum'"):
        F.embedding_bag(t(idx), t(w), t(off), mode="mean", per_sample_weights=t(psw))
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor but got None"):
        F.embedding_bag(t(idx), t(w))


def test_embedding_bag_vs_torch(torch):
    w = R(10, 4)
    idx = np.array([1, 2, 4, 5, 4, 3, 2, 9, 2, 0])
    off = np.array([0, 3, 3, 7])
    for mode in ("sum", "mean", "max"):
        for pad in (None, 2):
            both(torch, lambda a, b, c: F.embedding_bag(b, a, c, mode=mode, padding_idx=pad),
                 lambda a, b, c: torch.nn.functional.embedding_bag(b, a, c, mode=mode,
                                                                   padding_idx=pad),
                 [w, idx, off], ints=(1, 2))
    both(torch, lambda a, b, c, p: F.embedding_bag(b, a, c, mode="sum", per_sample_weights=p),
         lambda a, b, c, p: torch.nn.functional.embedding_bag(b, a, c, mode="sum",
                                                              per_sample_weights=p),
         [w, idx, off, R(10)], ints=(1, 2))
    both(torch, lambda a, b: F.embedding_bag(b, a, mode="max"),
         lambda a, b: torch.nn.functional.embedding_bag(b, a, mode="max"),
         [w, idx.reshape(2, 5)], ints=(1,))
    cddp.manual_seed(2)
    torch.manual_seed(2)
    m, tm = nn.EmbeddingBag(7, 3, mode="sum", padding_idx=1), \
        torch.nn.EmbeddingBag(7, 3, mode="sum", padding_idx=1)
    assert repr(m) == repr(tm) and list(m.state_dict()) == list(tm.state_dict())
    np.testing.assert_array_equal(n(m.weight), tm.weight.detach().numpy())
