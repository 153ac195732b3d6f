"""torch's top-level aten forms (cddp/_variable_functions.py): the argument orders that differ
from torch.nn.functional, aten's integer reductions, RNN cells on explicit weights, signal
windows, cumulative_trapezoid, set_flush_denormal, set_default_tensor_type, and the
constants. Against NumPy formulas and functional calls with the arguments reordered by hand
(no torch needed), and value for value against torch where it is installed."""
import math
import os

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F

rng = np.random.default_rng(0)


def _t(a, lib=cddp, grad=False):
    t = lib.tensor(np.asarray(a))
    return t.requires_grad_() if grad else t


def _np(t):
    return t.detach().numpy()


# ---- without torch: the reorderings and the formulas ----------------------------------------

def test_batch_and_instance_norm_take_weight_before_running_stats():
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    w, b = rng.random(3).astype(np.float32) + 0.5, rng.standard_normal(3).astype(np.float32)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    got = cddp.batch_norm(_t(x), _t(w), _t(b), _t(rm), _t(rv), True, 0.1, 1e-5, True)
    mean, var = x.mean((0, 2)), x.var((0, 2))
    want = (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) * w[:, None] + b[:, None]
    np.testing.assert_allclose(_np(got), want, rtol=1e-4, atol=1e-5)
    got = cddp.instance_norm(_t(x), _t(w), _t(b), None, None, True, 0.1, 1e-5, True)
    m, v = x.mean(2, keepdims=True), x.var(2, keepdims=True)
    want = (x - m) / np.sqrt(v + 1e-5) * w[:, None] + b[:, None]
    np.testing.assert_allclose(_np(got), want, rtol=1e-4, atol=1e-5)


def test_embedding_takes_the_weight_first():
    w = rng.standard_normal((6, 3)).astype(np.float32)
    idx = np.array([[0, 5], [2, 2]])
    np.testing.assert_array_equal(_np(cddp.embedding(_t(w), _t(idx))), w[idx])


def test_integer_reductions():
    a, b = rng.standard_normal(7).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    y = np.sign(rng.standard_normal(7)).astype(np.float32)
    per = np.maximum(0, -y * (a - b) + 0.3)
    for r, want in ((0, per), (1, per.mean()), (2, per.sum())):
        got = cddp.margin_ranking_loss(_t(a), _t(b), _t(y), 0.3, r)
        np.testing.assert_allclose(_np(got), want, rtol=1e-6, atol=1e-6)
    logp = np.log(rng.dirichlet(np.ones(4), 3)).astype(np.float32)
    q = rng.dirichlet(np.ones(4), 3).astype(np.float32)
    # aten's mean reduction is the mean over elements (not batchmean), and does not warn
    got = cddp.kl_div(_t(logp), _t(q))
    np.testing.assert_allclose(float(got), (q * (np.log(q) - logp)).mean(), rtol=1e-5)
    with pytest.raises(ValueError, match="reduction"):
        cddp.kl_div(_t(logp), _t(q), 3)


def test_rnn_cells_match_the_modules():
    cddp.manual_seed(0)
    x, h, c = cddp.randn(2, 3), cddp.randn(2, 4), cddp.randn(2, 4)
    lstm = cddp.nn.LSTMCell(3, 4)
    h1, c1 = cddp.lstm_cell(x, (h, c), lstm.weight_ih, lstm.weight_hh, lstm.bias_ih,
                            lstm.bias_hh)
    h2, c2 = lstm(x, (h, c))
    np.testing.assert_array_equal(_np(h1), _np(h2))
    np.testing.assert_array_equal(_np(c1), _np(c2))
    gru = cddp.nn.GRUCell(3, 4)
    np.testing.assert_array_equal(
        _np(cddp.gru_cell(x, h, gru.weight_ih, gru.weight_hh, gru.bias_ih, gru.bias_hh)),
        _np(gru(x, h)))
    rnn = cddp.nn.RNNCell(3, 4)
    want = np.tanh(_np(x) @ _np(rnn.weight_ih).T + _np(rnn.bias_ih) + _np(h) @ _np(rnn.weight_hh).T
                   + _np(rnn.bias_hh))
    np.testing.assert_allclose(
        _np(cddp.rnn_tanh_cell(x, h, rnn.weight_ih, rnn.weight_hh, rnn.bias_ih, rnn.bias_hh)),
        want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        _np(cddp.rnn_relu_cell(x, h, rnn.weight_ih, rnn.weight_hh)),
        np.maximum(0, _np(x) @ _np(rnn.weight_ih).T + _np(h) @ _np(rnn.weight_hh).T),
        rtol=1e-5, atol=1e-6)


def test_convolution_dispatches_on_the_weight_rank():
    cddp.manual_seed(1)
    x, w, b = cddp.randn(1, 2, 6, 6), cddp.randn(3, 2, 3, 3), cddp.randn(3)
    np.testing.assert_array_equal(
        _np(cddp.convolution(x, w, b, [2, 1], [1, 0], [1, 1], False, [0, 0], 1)),
        _np(F.conv2d(x, w, b, (2, 1), (1, 0))))
    wt = cddp.randn(2, 3, 3, 3)
    np.testing.assert_array_equal(
        _np(cddp.convolution(x, wt, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1)),
        _np(F.conv_transpose2d(x, wt, None, 2, 1, 1)))


@pytest.mark.parametrize("periodic", [True, False])
def test_windows_against_numpy(periodic):
    n = 9
    m = n + 1 if periodic else n          # periodic: the first n points of an n + 1 window
    np.testing.assert_allclose(_np(cddp.hann_window(n, periodic, dtype=cddp.float64)),
                               np.hanning(m)[:n], atol=1e-12)
    np.testing.assert_allclose(_np(cddp.hamming_window(n, periodic, dtype=cddp.float64)),
                               np.hamming(m)[:n], atol=1e-12)
    np.testing.assert_allclose(_np(cddp.blackman_window(n, periodic, dtype=cddp.float64)),
                               np.blackman(m)[:n], atol=1e-12)
    np.testing.assert_allclose(_np(cddp.bartlett_window(n, periodic, dtype=cddp.float64)),
                               np.bartlett(m)[:n], atol=1e-12)
    np.testing.assert_allclose(_np(cddp.kaiser_window(n, periodic, 5.0, dtype=cddp.float64)),
                               np.kaiser(m, 5.0)[:n], rtol=1e-10)
    assert cddp.hann_window(1).tolist() == [1.0] and cddp.hann_window(0).numel() == 0
    with pytest.raises(RuntimeError, match="floating point"):
        cddp.hann_window(4, dtype=cddp.int64)


def test_cumulative_trapezoid_against_numpy():
    y = rng.random((3, 6))
    x = np.sort(rng.random(6))
    steps = (y[:, 1:] + y[:, :-1]) / 2 * np.diff(x)
    np.testing.assert_allclose(_np(cddp.cumulative_trapezoid(_t(y), _t(x))),
                               np.cumsum(steps, 1), rtol=1e-12)
    np.testing.assert_allclose(_np(cddp.cumulative_trapezoid(_t(y), dx=0.5, dim=0)),
                               np.cumsum((y[1:] + y[:-1]) / 2 * 0.5, 0), rtol=1e-12)


@pytest.mark.skipif("vgpreload" in os.environ.get("LD_PRELOAD", ""),
                    reason="valgrind's CPU ignores MXCSR's flush-to-zero and denormals-are-zero")
def test_set_flush_denormal():
    tiny = 1e-39                                     # a float32 denormal
    try:
        if not cddp.set_flush_denormal(True):
            pytest.skip("no flush-denormal mode on this CPU")
        assert (cddp.tensor([tiny]) * 1).item() == 0.0
    finally:
        cddp.set_flush_denormal(False)
    assert (cddp.tensor([tiny]) * 1).item() == pytest.approx(tiny, rel=1e-3)


def test_set_default_tensor_type_and_constants():
    try:
        with pytest.warns(UserWarning, match="deprecated"):
            cddp.set_default_tensor_type("torch.DoubleTensor")
        assert cddp.zeros(1).dtype == cddp.float64
        with pytest.warns(UserWarning):
            cddp.set_default_tensor_type(cddp.FloatTensor)
        assert cddp.zeros(1).dtype == cddp.float32
        with pytest.raises(TypeError, match="floating-point"), pytest.warns(UserWarning):
            cddp.set_default_tensor_type("torch.LongTensor")
    finally:
        cddp.set_default_dtype(cddp.float32)
    assert (cddp.pi, cddp.e, cddp.inf, cddp.newaxis) == (math.pi, math.e, math.inf, None)
    assert math.isnan(cddp.nan)
    assert cddp.OutOfMemoryError is cddp.cuda.OutOfMemoryError
    assert issubclass(cddp.AcceleratorError, RuntimeError)
    assert cddp.GradScaler is cddp.amp.GradScaler


def test_feature_dropout_zeroes_whole_channels():
    cddp.manual_seed(3)
    x = cddp.ones(8, 16, 5)
    y = _np(cddp.feature_dropout(x, 0.5, True))
    per_channel = y.reshape(8, 16, 5)
    assert set(np.unique(per_channel)) <= {0.0, 2.0}
    assert (per_channel.min(2) == per_channel.max(2)).all()        # a channel is all or none
    assert 0 < (per_channel[:, :, 0] == 0).mean() < 1
    assert cddp.feature_dropout(x, 0.5, False) is x


def test_predicates_and_inplace_forms():
    a = cddp.tensor([1.5, -2.0])
    assert cddp.is_same_size(a, cddp.zeros(2)) and not cddp.is_same_size(a, cddp.zeros(3))
    assert cddp.is_signed(a) and not cddp.is_signed(cddp.tensor([True]))
    assert cddp.get_device(a) == -1 and not cddp.is_conj(a) and not cddp.is_neg(a)
    assert cddp.fill(a, 7).tolist() == [7.0, 7.0] and a.tolist() == [1.5, -2.0]
    g = cddp.tensor([12, 18])
    assert cddp.gcd_(g, cddp.tensor([8, 27])) is g and g.tolist() == [4, 9]
    z = cddp.zeros(2, 3)
    cddp.index_put_(z, (cddp.tensor([0, 1]), cddp.tensor([2, 0])), cddp.tensor([5.0, 6.0]))
    assert z.tolist() == [[0, 0, 5], [6, 0, 0]]
    assert [p.tolist() for p in cddp.split_with_sizes(cddp.arange(5), [2, 3])] == \
        [[0, 1], [2, 3, 4]]


# ---- against torch ----------------------------------------------------------------------------

def _pair(shape, lo=None):
    a = rng.standard_normal(shape).astype(np.float32)
    if lo is not None:
        a = np.abs(a) + lo
    return a


CASES = {
    "cosine_similarity": lambda L: (L(_pair((4, 5))), L(_pair((4, 5)))),
    "pairwise_distance": lambda L: (L(_pair((4, 5))), L(_pair((4, 5))), 3.0),
    "pdist": lambda L: (L(_pair((5, 3))),),
    "layer_norm": lambda L: (L(_pair((2, 3, 4))), [4], L(_pair(4)), L(_pair(4))),
    "group_norm": lambda L: (L(_pair((2, 4, 3))), 2, L(_pair(4)), L(_pair(4))),
    "rms_norm": lambda L: (L(_pair((2, 6))), [6], L(_pair(6))),
    "prelu": lambda L: (L(_pair((2, 3, 4))), L(_pair(3, 0.1))),
    "celu": lambda L: (L(_pair((3, 4))), 0.7),
    "selu": lambda L: (L(_pair((3, 4))),),
    "threshold": lambda L: (L(_pair((3, 4))), 0.1, -2.0),
    "hardshrink": lambda L: (L(_pair((3, 4))), 0.4),
    "rrelu": lambda L: (L(_pair((3, 4))),),
    "binary_cross_entropy_with_logits": lambda L: (L(_pair((3, 4))),
                                                   L(_pair((3, 4), 0.0).clip(0, 1)), None,
                                                   L(_pair(4, 0.5)).detach(), 2),
    "hinge_embedding_loss": lambda L: (L(_pair((6,))), L(np.sign(_pair((6,)))), 0.5, 0),
    "cosine_embedding_loss": lambda L: (L(_pair((4, 5))), L(_pair((4, 5))),
                                        L(np.sign(_pair((4,)))), 0.1, 1),
    "triplet_margin_loss": lambda L: (L(_pair((4, 5))), L(_pair((4, 5))), L(_pair((4, 5))),
                                      1.0, 2.0, 1e-6, True, 1),
    "poisson_nll_loss": lambda L: (L(_pair((3, 4))), L(_pair((3, 4), 0.0)), True, True,
                                   1e-8, 1),
    "bilinear": lambda L: (L(_pair((3, 4))), L(_pair((3, 5))), L(_pair((2, 4, 5))),
                           L(_pair(2))),
    "channel_shuffle": lambda L: (L(_pair((1, 6, 2, 2))), 3),
    "kl_div": lambda L: (L(np.log(rng.dirichlet(np.ones(4), 3)).astype(np.float32)),
                         L(rng.dirichlet(np.ones(4), 3).astype(np.float32)), 2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    torch = pytest.importorskip("torch")
    state = rng.bit_generator.state
    ours_in = CASES[name](lambda a: cddp.tensor(a).requires_grad_())
    rng.bit_generator.state = state
    theirs_in = CASES[name](lambda a: torch.tensor(a).requires_grad_())
    ours, theirs = getattr(cddp, name)(*ours_in), getattr(torch, name)(*theirs_in)
    np.testing.assert_allclose(_np(ours), theirs.detach().numpy(), rtol=2e-5, atol=1e-6)
    ours.sum().backward()
    theirs.sum().backward()
    for a, b in zip(ours_in, theirs_in):
        if isinstance(b, torch.Tensor) and b.grad is not None:
            np.testing.assert_allclose(_np(a.grad), b.grad.numpy(), rtol=2e-5, atol=1e-5)


def test_norms_embedding_ctc_and_cells_match_torch():
    torch = pytest.importorskip("torch")
    x = _pair((4, 3, 5))
    w, b = _pair(3, 0.5), _pair(3)
    rm, rv = _pair(3), _pair(3, 0.5)
    ours_rm, theirs_rm = cddp.tensor(rm), torch.tensor(rm)
    ours_rv, theirs_rv = cddp.tensor(rv), torch.tensor(rv)
    o = cddp.batch_norm(_t(x), _t(w), _t(b), ours_rm, ours_rv, True, 0.3, 1e-5, False)
    t = torch.batch_norm(_t(x, torch), _t(w, torch), _t(b, torch), theirs_rm, theirs_rv, True,
                         0.3, 1e-5, False)
    np.testing.assert_allclose(_np(o), t.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(ours_rv), theirs_rv.numpy(), rtol=1e-6)
    o = cddp.instance_norm(_t(x), _t(w), _t(b), None, None, True, 0.1, 1e-5, False)
    t = torch.instance_norm(_t(x, torch), _t(w, torch), _t(b, torch), None, None, True, 0.1,
                            1e-5, False)
    np.testing.assert_allclose(_np(o), t.numpy(), rtol=1e-5, atol=1e-6)
    wt, idx = _pair((6, 3)), np.array([1, 0, 5, 1])
    np.testing.assert_array_equal(_np(cddp.embedding(_t(wt), _t(idx), 1)),
                                  torch.embedding(_t(wt, torch), _t(idx, torch), 1).numpy())
    logp = np.log(rng.dirichlet(np.ones(5), (6, 2))).astype(np.float32)       # (T, N, C)
    tgt = np.array([[1, 2], [3, 3]])
    args = ([6, 5], [2, 2], 0, 0, False)
    np.testing.assert_allclose(_np(cddp.ctc_loss(_t(logp), _t(tgt), *args)),
                               torch.ctc_loss(_t(logp, torch), _t(tgt, torch), *args).numpy(),
                               rtol=1e-5)
    xs, hs, cs = _pair((2, 3)), _pair((2, 4)), _pair((2, 4))
    wi, wh, bi, bh = _pair((16, 3)), _pair((16, 4)), _pair(16), _pair(16)
    oh, oc = cddp.lstm_cell(_t(xs), (_t(hs), _t(cs)), _t(wi), _t(wh), _t(bi), _t(bh))
    th, tc = torch.lstm_cell(_t(xs, torch), (_t(hs, torch), _t(cs, torch)), _t(wi, torch),
                             _t(wh, torch), _t(bi, torch), _t(bh, torch))
    np.testing.assert_allclose(_np(oh), th.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(oc), tc.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window",
                                  "bartlett_window", "kaiser_window"])
def test_windows_match_torch(name):
    torch = pytest.importorskip("torch")
    for n in (0, 1, 2, 7, 64):
        for periodic in (True, False):
            # cddp computes in float64 and rounds once; torch's kaiser is float32 throughout
            np.testing.assert_allclose(_np(getattr(cddp, name)(n, periodic)),
                                       getattr(torch, name)(n, periodic).numpy(),
                                       rtol=2e-6 if name == "kaiser_window" else 0, atol=2e-7)


# ---- Tensor.put / index_reduce / apply_ / map_ / map2_ ---------------------------------------

def test_put_against_numpy_and_its_gradient():
    a = rng.standard_normal((3, 4))
    idx, src = np.array([[-1, 0], [5, 7]]), rng.standard_normal((2, 2))
    want = a.copy()
    np.put(want, np.where(idx < 0, idx + a.size, idx), src)
    np.testing.assert_array_equal(_np(_t(a).put(_t(idx), _t(src))), want)
    acc = a.copy().reshape(-1)
    np.add.at(acc, [3, 3, 0], [1.0, 2.0, 4.0])
    got = _t(a).put(_t(np.array([3, 3, 0])), _t(np.array([1.0, 2.0, 4.0])), accumulate=True)
    np.testing.assert_array_equal(_np(got), acc.reshape(3, 4))
    x, s = _t(a, grad=True), _t(src, grad=True)
    x.put(_t(idx), s * 3).sum().backward()
    g = np.ones(12)
    g[[11, 0, 5, 7]] = 0                                  # overwritten positions get nothing
    np.testing.assert_array_equal(_np(x.grad), g.reshape(3, 4))
    np.testing.assert_array_equal(_np(s.grad), np.full((2, 2), 3.0))
    t = _t(a.copy())
    assert t.put_(_t(np.array([1])), _t(np.array([9.0]))) is t and t.reshape(-1)[1].item() == 9
    with pytest.raises(IndexError, match="out of range"):
        _t(a).put(_t(np.array([12])), _t(np.array([1.0])))
    with pytest.raises(IndexError, match="same number of elements"):
        _t(a).put(_t(np.array([1, 2])), _t(np.array([1.0])))


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_against_a_loop(reduce, include_self):
    base = rng.standard_normal((4, 3))
    src = rng.standard_normal((5, 3))
    index = np.array([0, 2, 0, 3, 0])
    want = base.copy()
    for row in range(4):
        picked = [src[i] for i in range(5) if index[i] == row]
        if not picked:
            continue
        vals = ([base[row]] if include_self else []) + picked
        op = {"prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}[reduce]
        want[row] = op(np.stack(vals), 0)
    got = _t(base).index_reduce(0, _t(index), _t(src), reduce, include_self=include_self)
    np.testing.assert_allclose(_np(got), want, rtol=1e-12)
    with pytest.raises(RuntimeError, match="prod, mean, amax or amin"):
        _t(base).index_reduce(0, _t(index), _t(src), "sum")


def test_index_reduce_matches_torch_along_dim_1():
    torch = pytest.importorskip("torch")
    base, src = rng.standard_normal((2, 4)), rng.standard_normal((2, 3))
    index = np.array([3, 0, 3])
    for reduce in ("prod", "mean", "amax", "amin"):
        np.testing.assert_allclose(
            _np(_t(base).index_reduce(1, _t(index), _t(src), reduce)),
            _t(base, torch).index_reduce(1, _t(index, torch), _t(src, torch), reduce).numpy(),
            rtol=1e-12)


def test_apply_map_map2_against_python():
    vals = [0.5, -1.0, 2.0, 3.5]
    t = cddp.tensor(vals)
    assert t.apply_(lambda v: v * v + 1) is t
    assert t.tolist() == [v * v + 1 for v in vals]
    t.map_(cddp.tensor([1.0]), lambda a, b: a - b)           # broadcast other
    assert t.tolist() == [v * v for v in vals]
    t.map2_(cddp.tensor(vals), cddp.full((4,), 2.0), lambda a, b, c: a + b * c)
    assert t.tolist() == [v * v + 2 * v for v in vals]
    ints = cddp.tensor([1, 2, 3])
    assert ints.apply_(lambda v: v * 10).tolist() == [10, 20, 30] and ints.dtype == cddp.int64
    with pytest.raises(RuntimeError, match="requires grad"):
        cddp.ones(2, requires_grad=True).apply_(lambda v: v)


# ---- empty_strided / dim_order -----------------------------------------------------------------

@pytest.mark.parametrize("size,stride", [((2, 3), (3, 1)), ((2, 3), (1, 2)),
                                         ((2, 3, 4, 5), (60, 1, 15, 3)),
                                         ((4, 2, 3), (1, 12, 4))])
def test_empty_strided_dense_layouts(size, stride):
    t = cddp.empty_strided(size, stride)
    assert tuple(t.shape) == size and t.stride() == stride
    # dense: every element has its own slot and the slots fill the allocation exactly
    offsets = {sum(i * s for i, s in zip(idx, stride)) for idx in np.ndindex(*size)}
    assert offsets == set(range(int(np.prod(size))))
    assert t.dim_order() == tuple(sorted(range(len(size)), key=lambda d: (-stride[d], -d)))
    assert cddp.zeros(1).new_empty_strided(size, stride).stride() == stride



@pytest.mark.parametrize("size,stride", [((2, 3), (0, 1)), ((2, 3), (4, 1)), ((3, 3), (1, 1))])
def test_empty_strided_overlapping_and_gapped_layouts(size, stride):
    """Strides that overlap or leave gaps view a storage spanning them, as torch's."""
    t = cddp.empty_strided(size, stride, requires_grad=True)
    assert tuple(t.shape) == size and t.stride() == stride and t.is_leaf
    span = 1 + sum((a - 1) * b for a, b in zip(size, stride))
    assert t.untyped_storage().nbytes() == 4 * span


def test_dim_order_matches_torch():
    torch = pytest.importorskip("torch")
    for perm in [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0)]:
        ours = cddp.empty(2, 3, 4).permute(*perm)
        theirs = torch.empty(2, 3, 4).permute(*perm)
        assert ours.dim_order() == theirs.dim_order()
        assert ours.stride() == theirs.stride()
