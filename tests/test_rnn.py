"""Recurrent layers (nn.RNN / LSTM / GRU, the cells, PackedSequence and padding helpers).

Oracles: torch (values, final states and every gradient: input, h0, c0, each weight and bias)
over layers x directions x batch_first x bias x initial state x dtype, unbatched and
non-contiguous inputs, packed sequences, proj_size; central finite differences in float64 on
the C op itself (no torch); NumPy for pad_sequence; an LSTM language model trained 10 SGD
steps against torch, and the same model under 2-rank DDP against a 1-process run.

Tolerances: float64 agrees with torch to ~1e-15 (same operand order in the gate math, GEMMs
that differ only in summation order), asserted at 1e-10. float32 at rtol/atol 1e-5: the
GEMMs' summation orders differ (OpenBLAS vs torch's kernels) by a few ulps (1.2e-7 each) per
product, summed over steps and the batch in the weight gradients.
"""
import itertools
import os

import numpy as np
import pytest

import cddp
import cddp.nn as nn
from cddp.nn.utils import rnn as crnn
from conftest import gradcheck, n, t
from ddp_util import run_ranks

MODES = ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"]


@pytest.fixture
def torch(torch):
    """conftest's oracle on one thread: with its pool contending for a loaded machine's cores
    torch's tiny recurrent ops run ~20x slower."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(old)


def _cls(lib, mode):
    if mode.startswith("RNN_"):
        return lib.nn.RNN, {"nonlinearity": mode[4:].lower()}
    return getattr(lib.nn, mode), {}


def _pair(torch, mode, *args, dtype="float64", **kw):
    """A torch module and a cddp module holding the same weights (loaded from torch's
    state dict, so the keys must match)."""
    tcls, extra = _cls(torch, mode)
    ccls, _ = _cls(cddp, mode)
    tm = tcls(*args, **extra, **kw, dtype=getattr(torch, dtype))
    cm = ccls(*args, **extra, **kw, dtype=getattr(cddp, dtype))
    res = cm.load_state_dict({k: t(v.detach().numpy()) for k, v in tm.state_dict().items()})
    assert not res.missing_keys and not res.unexpected_keys
    return tm, cm


def _tol(dtype):
    return dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-5, atol=1e-5)


def _close(got, want, dtype, what):
    np.testing.assert_allclose(n(got), want.detach().numpy(), err_msg=what, **_tol(dtype))


def _both(torch, a, requires_grad=True):
    """The same NumPy array as a torch leaf and a cddp leaf."""
    return (torch.tensor(a, requires_grad=requires_grad), t(a, requires_grad=requires_grad))


def _check_run(torch, tm, cm, x, state, dtype, lstm):
    """Forward both with x (NumPy) and optional state (NumPy h0 or (h0, c0)), backward a random
    weighting of output, h_n (and c_n), compare everything."""
    rng = np.random.default_rng(7)
    xt, xc = _both(torch, x)
    args_t, args_c, leaves = [xt], [xc], [("input", xt, xc)]
    if state is not None:
        pairs = [_both(torch, s) for s in (state if lstm else (state,))]
        args_t.append(tuple(p[0] for p in pairs) if lstm else pairs[0][0])
        args_c.append(tuple(p[1] for p in pairs) if lstm else pairs[0][1])
        leaves += [(f"state{i}", p[0], p[1]) for i, p in enumerate(pairs)]
    out_t, st_t = tm(*args_t)
    out_c, st_c = cm(*args_c)
    st_t, st_c = (list(st_t), list(st_c)) if lstm else ([st_t], [st_c])
    assert tuple(out_c.shape) == tuple(out_t.shape)
    _close(out_c, out_t, dtype, "output")
    loss_t = loss_c = 0
    for i, (a, b) in enumerate(zip([out_t] + st_t, [out_c] + st_c)):
        assert tuple(b.shape) == tuple(a.shape)
        _close(b, a, dtype, f"final state {i - 1}" if i else "output")
        w = rng.standard_normal(tuple(a.shape)).astype(x.dtype)
        loss_t = loss_t + (a * torch.tensor(w)).sum()
        loss_c = loss_c + (b * t(w)).sum()
    loss_t.backward()
    loss_c.backward()
    for name, a, b in leaves:
        _close(b.grad, a.grad, dtype, f"grad of {name}")
    for (name, p), q in zip(tm.named_parameters(), cm.parameters()):
        _close(q.grad, p.grad, dtype, f"grad of {name}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_layers_match_torch(torch, mode, num_layers, bidirectional, dtype):
    T, N, I, H = 4, 3, 5, 6
    D = 2 if bidirectional else 1
    rng = np.random.default_rng(0)
    for batch_first, bias, with_state in itertools.product([False, True], repeat=3):
        torch.manual_seed(1)
        tm, cm = _pair(torch, mode, I, H, num_layers, bias=bias, batch_first=batch_first,
                       bidirectional=bidirectional, dtype=dtype)
        x = rng.standard_normal((N, T, I) if batch_first else (T, N, I)).astype(dtype)
        state = None
        if with_state:
            h0 = rng.standard_normal((num_layers * D, N, H)).astype(dtype)
            state = (h0, rng.standard_normal(h0.shape).astype(dtype)) if mode == "LSTM" else h0
        _check_run(torch, tm, cm, x, state, dtype, mode == "LSTM")


@pytest.mark.parametrize("mode", MODES)
def test_unbatched_and_non_contiguous_inputs(torch, mode):
    rng = np.random.default_rng(1)
    lstm = mode == "LSTM"
    for batch_first in (False, True):
        torch.manual_seed(2)
        tm, cm = _pair(torch, mode, 3, 4, 2, batch_first=batch_first, bidirectional=True)
        x = rng.standard_normal((5, 3))                         # unbatched (T, I)
        h0 = rng.standard_normal((4, 4))
        _check_run(torch, tm, cm, x, None, "float64", lstm)
        _check_run(torch, tm, cm, x, (h0, h0 + 1) if lstm else h0, "float64", lstm)
    # strided input (every other feature) and a transposed initial state
    torch.manual_seed(3)
    tm, cm = _pair(torch, mode, 3, 4, 2)
    big = rng.standard_normal((5, 2, 6))
    h_nt = rng.standard_normal((2, 2, 4))                       # (N, L, H) -> (L, N, H) view
    xt, xc = torch.tensor(big, requires_grad=True), t(big, requires_grad=True)
    ht, hc = torch.tensor(h_nt, requires_grad=True), t(h_nt, requires_grad=True)
    st_t = (ht.transpose(0, 1), ht.transpose(0, 1) * 2) if lstm else ht.transpose(0, 1)
    st_c = (hc.transpose(0, 1), hc.transpose(0, 1) * 2) if lstm else hc.transpose(0, 1)
    assert not xc[:, :, ::2].is_contiguous() and not hc.transpose(0, 1).is_contiguous()
    out_t, s_t = tm(xt[:, :, ::2], st_t)
    out_c, s_c = cm(xc[:, :, ::2], st_c)
    _close(out_c, out_t, "float64", "output")
    (out_t.sum() + (s_t[1] if lstm else s_t).pow(2).sum()).backward()
    (out_c.sum() + (s_c[1] if lstm else s_c).pow(2).sum()).backward()
    _close(xc.grad, xt.grad, "float64", "grad of strided input")
    _close(hc.grad, ht.grad, "float64", "grad of transposed h0")


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_proj_size_matches_torch(torch, bidirectional):
    rng = np.random.default_rng(2)
    D = 2 if bidirectional else 1
    for dtype in ("float32", "float64"):
        torch.manual_seed(4)
        tm, cm = _pair(torch, "LSTM", 5, 6, 2, proj_size=3, bidirectional=bidirectional,
                       dtype=dtype)
        assert [k for k in cm.state_dict()] == [k for k in tm.state_dict()]
        x = rng.standard_normal((4, 3, 5)).astype(dtype)
        state = (rng.standard_normal((2 * D, 3, 3)).astype(dtype),
                 rng.standard_normal((2 * D, 3, 6)).astype(dtype))
        _check_run(torch, tm, cm, x, state, dtype, True)
        _check_run(torch, tm, cm, x, None, dtype, True)


@pytest.mark.parametrize("mode", MODES)
def test_packed_sequences_match_torch(torch, mode):
    from torch.nn.utils import rnn as trnn
    rng = np.random.default_rng(3)
    lstm = mode == "LSTM"
    lengths = [3, 5, 1, 5, 2]
    for bidirectional, batch_first in itertools.product([False, True], repeat=2):
        torch.manual_seed(5)
        tm, cm = _pair(torch, mode, 3, 4, 2, bidirectional=bidirectional, batch_first=batch_first)
        D = 2 if bidirectional else 1
        x = rng.standard_normal((5, 5, 3))
        h0 = rng.standard_normal((2 * D, 5, 4))
        xt, xc = _both(torch, x)
        st = [_both(torch, h0), _both(torch, h0 * 0.5)] if lstm else [_both(torch, h0)]
        pt = trnn.pack_padded_sequence(xt, lengths, batch_first=batch_first, enforce_sorted=False)
        pc = crnn.pack_padded_sequence(xc, lengths, batch_first=batch_first, enforce_sorted=False)
        for a, b in zip(pt[1:], pc[1:]):
            assert np.array_equal(a.numpy(), b.numpy())       # batch sizes and permutations
        _close(pc.data, pt.data, "float64", "packed data")
        hx_t = tuple(s[0] for s in st) if lstm else st[0][0]
        hx_c = tuple(s[1] for s in st) if lstm else st[0][1]
        out_t, fin_t = tm(pt, hx_t)
        out_c, fin_c = cm(pc, hx_c)
        assert isinstance(out_c, crnn.PackedSequence)
        fin_t, fin_c = (list(fin_t), list(fin_c)) if lstm else ([fin_t], [fin_c])
        yt, lt = trnn.pad_packed_sequence(out_t, batch_first=batch_first, padding_value=-2.0,
                                          total_length=6)
        yc, lc = crnn.pad_packed_sequence(out_c, batch_first=batch_first, padding_value=-2.0,
                                          total_length=6)
        assert np.array_equal(n(lc), lt.numpy())
        _close(yc, yt, "float64", "padded output")
        loss_t = (yt ** 2).sum() + sum((f * (i + 2)).sum() for i, f in enumerate(fin_t))
        loss_c = (yc ** 2).sum() + sum((f * (i + 2)).sum() for i, f in enumerate(fin_c))
        for a, b in zip(fin_t, fin_c):
            _close(b, a, "float64", "final state")
        loss_t.backward()
        loss_c.backward()
        _close(xc.grad, xt.grad, "float64", "grad of input")
        for i, (a, b) in enumerate(st):
            _close(b.grad, a.grad, "float64", f"grad of state {i}")
        for (name, p), q in zip(tm.named_parameters(), cm.parameters()):
            _close(q.grad, p.grad, "float64", f"grad of {name}")


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_torch(torch, name):
    rng = np.random.default_rng(4)
    lstm = name == "LSTMCell"
    for bias, batched, with_state, nl in itertools.product([True, False], [True, False],
                                                           [True, False], ["tanh", "relu"]):
        if nl == "relu" and name != "RNNCell":
            continue
        kw = {"nonlinearity": nl} if name == "RNNCell" else {}
        torch.manual_seed(6)
        tc = getattr(torch.nn, name)(4, 5, bias=bias, dtype=torch.float64, **kw)
        cc = getattr(nn, name)(4, 5, bias=bias, dtype=cddp.float64, **kw)
        cc.load_state_dict({k: t(v.detach().numpy()) for k, v in tc.state_dict().items()})
        x = rng.standard_normal((3, 4) if batched else (4,))
        hshape = (3, 5) if batched else (5,)
        xt, xc = _both(torch, x)
        leaves = [(xt, xc)]
        args_t, args_c = [xt], [xc]
        if with_state:
            st = [_both(torch, rng.standard_normal(hshape)) for _ in range(2 if lstm else 1)]
            leaves += st
            args_t.append(tuple(s[0] for s in st) if lstm else st[0][0])
            args_c.append(tuple(s[1] for s in st) if lstm else st[0][1])
        # two steps, the second fed the first's state: gradients cross the step boundary
        a1, b1 = tc(*args_t), cc(*args_c)
        a2, b2 = tc(xt * 2, a1), cc(xc * 2, b1)
        outs_t = list(a1) + list(a2) if lstm else [a1, a2]
        outs_c = list(b1) + list(b2) if lstm else [b1, b2]
        for i, (a, b) in enumerate(zip(outs_t, outs_c)):
            assert tuple(b.shape) == tuple(a.shape) and b.is_contiguous()
            _close(b, a, "float64", f"cell output {i}")
        sum(((i + 1) * o ** 2).sum() for i, o in enumerate(outs_t)).backward()
        sum(((i + 1) * o ** 2).sum() for i, o in enumerate(outs_c)).backward()
        for i, (a, b) in enumerate(leaves):
            _close(b.grad, a.grad, "float64", f"grad of leaf {i}")
        for (pname, p), q in zip(tc.named_parameters(), cc.parameters()):
            _close(q.grad, p.grad, "float64", f"grad of {pname}")


# ---- no-torch oracles ---------------------------------------------------------------------


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_layer_op_gradcheck(mode, reverse):
    """Central differences through _C._rnn_layer (float64, tiny sizes): every input's
    gradient, output and final states weighted at random."""
    T, N, I, H = 3, 2, 3, 2
    k = {0: 4, 1: 3}.get(mode, 1)
    rng = np.random.default_rng(10 + mode)
    arrays = [rng.standard_normal((T, N, I)), rng.standard_normal((N, H)),
              rng.standard_normal((N, H)), rng.standard_normal((k * H, I)) * 0.6,
              rng.standard_normal((k * H, H)) * 0.6, rng.standard_normal(k * H) * 0.3,
              rng.standard_normal(k * H) * 0.3]
    if mode == 3:
        arrays[0] = np.abs(arrays[0]) + 0.1    # keep relu away from its kink
        arrays[3] = np.abs(arrays[3])
        arrays[5] = np.abs(arrays[5])
    if mode != 0:
        del arrays[2]                           # no c0

    def op(x, h0, *rest):
        c0, (w_ih, w_hh, b_ih, b_hh) = (rest[0], rest[1:]) if mode == 0 else (None, rest)
        y, fin = cddp._C._rnn_layer(mode, x, h0, c0, w_ih, w_hh, b_ih, b_hh, None, reverse, None)
        return cddp.cat([y.reshape(-1), fin.reshape(-1)])

    gradcheck(op, *arrays, atol=1e-7, rtol=1e-6)


def test_layer_op_gradcheck_projection_and_packed():
    """LSTM with W_hr over a packed batch (sizes 3, 2, 1), both directions, by differences."""
    rng = np.random.default_rng(20)
    bs = t(np.array([3, 2, 1]))
    H, P, I = 3, 2, 2
    arrays = [rng.standard_normal((6, I)), rng.standard_normal((3, P)),
              rng.standard_normal((3, H)), rng.standard_normal((4 * H, I)) * 0.6,
              rng.standard_normal((4 * H, P)) * 0.6, rng.standard_normal(4 * H) * 0.3,
              rng.standard_normal(4 * H) * 0.3, rng.standard_normal((P, H))]
    for reverse in (False, True):
        def op(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr):
            y, fin = cddp._C._rnn_layer(0, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, reverse, bs)
            return cddp.cat([y.reshape(-1), fin])
        gradcheck(op, *arrays, atol=1e-7, rtol=1e-6)


def _np_step(mode, m, x, h, c):
    """One step of torch's documented equations in NumPy (layer 0 of module m)."""
    W_ih, W_hh = n(m.weight_ih_l0), n(m.weight_hh_l0)
    b_ih, b_hh = n(m.bias_ih_l0), n(m.bias_hh_l0)
    gi, gh = x @ W_ih.T + b_ih, h @ W_hh.T + b_hh
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    if mode == "LSTM":
        i, f, g, o = np.split(gi + gh, 4)
        c = sig(f) * c + sig(i) * np.tanh(g)
        return sig(o) * np.tanh(c), c
    if mode == "GRU":
        (ir, iz, in_), (hr, hz, hn) = np.split(gi, 3), np.split(gh, 3)
        r, z = sig(ir + hr), sig(iz + hz)
        nn_ = np.tanh(in_ + r * hn)
        return (1 - z) * nn_ + z * h, c
    return np.tanh(gi + gh), c


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH"])
def test_packed_run_is_each_sequence_alone_numpy(mode):
    """NumPy reference of torch's equations over sequences of different lengths: the packed
    run's outputs and final states are each sequence's own run, alone."""
    rng = np.random.default_rng(21)
    cddp.manual_seed(0)
    m = _cls(cddp, mode)[0](3, 4, dtype=cddp.float64, **_cls(cddp, mode)[1])
    seqs = [rng.standard_normal((L, 3)) for L in (4, 2, 3)]
    packed = crnn.pack_sequence([t(s) for s in seqs], enforce_sorted=False)
    out, fin = m(packed)
    h_n, c_n = fin if mode == "LSTM" else (fin, None)
    outs = crnn.unpack_sequence(out)
    for i, s in enumerate(seqs):
        h, c, ys = np.zeros(4), np.zeros(4), []
        for x in s:
            h, c = _np_step(mode, m, x, h, c)
            ys.append(h)
        np.testing.assert_allclose(n(outs[i]), np.array(ys), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(n(h_n[0, i]), h, rtol=1e-12, atol=1e-12)
        if c_n is not None:
            np.testing.assert_allclose(n(c_n[0, i]), c, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_numpy(name):
    """A cell is one step of torch's equations (NumPy), batched rows each on their own."""
    from types import SimpleNamespace
    mode = {"RNNCell": "RNN_TANH", "LSTMCell": "LSTM", "GRUCell": "GRU"}[name]
    cddp.manual_seed(1)
    cell = getattr(nn, name)(3, 4, dtype=cddp.float64)
    as_layer = SimpleNamespace(weight_ih_l0=cell.weight_ih, weight_hh_l0=cell.weight_hh,
                               bias_ih_l0=cell.bias_ih, bias_hh_l0=cell.bias_hh)
    rng = np.random.default_rng(24)
    x, h, c = (rng.standard_normal((2, k)) for k in (3, 4, 4))
    got = cell(t(x), (t(h), t(c)) if mode == "LSTM" else t(h))
    got = got if mode == "LSTM" else (got,)
    for b in range(2):
        want = _np_step(mode, as_layer, x[b], h[b], c[b])
        for g, w in zip(got, want):
            np.testing.assert_allclose(n(g[b]), w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence_numpy_reference(batch_first, side):
    rng = np.random.default_rng(22)
    seqs = [rng.standard_normal((L, 2, 3)) for L in (3, 0, 5, 1)]
    xs = [t(s, requires_grad=True) for s in seqs]
    out = crnn.pad_sequence(xs, batch_first=batch_first, padding_value=9.0, padding_side=side)
    want = np.full((4, 5, 2, 3), 9.0)
    for i, s in enumerate(seqs):
        if len(s):
            want[i, :len(s)] = s if side == "right" else want[i, :len(s)]
            if side == "left":
                want[i, 5 - len(s):] = s
    if not batch_first:
        want = want.transpose(1, 0, 2, 3)
    np.testing.assert_array_equal(n(out), want)
    w = np.random.default_rng(1).standard_normal(want.shape)
    (out * t(w)).sum().backward()
    for i, s in enumerate(seqs):                  # each element's gradient is its weight
        wb = w if batch_first else w.transpose(1, 0, 2, 3)
        rows = wb[i, :len(s)] if side == "right" else wb[i, 5 - len(s):]
        np.testing.assert_array_equal(n(xs[i].grad), rows)
    # and back: unpad (of right padding), pack/unpack round trips
    if side == "right":
        got = crnn.unpad_sequence(out, t(np.array([3, 0, 5, 1])), batch_first=batch_first)
        for a, s in zip(got, seqs):
            np.testing.assert_array_equal(n(a), s)
    ps = crnn.pack_sequence([t(s) for s in seqs if len(s)], enforce_sorted=False)
    for a, s in zip(crnn.unpack_sequence(ps), [s for s in seqs if len(s)]):
        np.testing.assert_array_equal(n(a), s)


def test_pack_utils_match_torch(torch):
    from torch.nn.utils import rnn as trnn
    rng = np.random.default_rng(23)
    seqs = [rng.standard_normal((L, 3)).astype(np.float32) for L in (2, 4, 4, 1)]
    for bf, side in itertools.product([False, True], ["right", "left"]):
        a = trnn.pad_sequence([torch.tensor(s) for s in seqs], batch_first=bf, padding_side=side)
        b = crnn.pad_sequence([t(s) for s in seqs], batch_first=bf, padding_side=side)
        np.testing.assert_array_equal(n(b), a.numpy())
    pt = trnn.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    pc = crnn.pack_sequence([t(s) for s in seqs], enforce_sorted=False)
    for a, b in zip(pt, pc):
        np.testing.assert_array_equal(n(b), a.numpy())
    assert np.array_equal(n(crnn.invert_permutation(pc.sorted_indices)),
                          trnn.invert_permutation(pt.sorted_indices).numpy())
    padded = np.zeros((4, 4, 3), np.float32)
    cases = [lambda m, x: m.pack_padded_sequence(x, [2, 4, 4, 1]),            # unsorted
             lambda m, x: m.pack_padded_sequence(x, [4, 4, 0, 1], enforce_sorted=False),
             lambda m, x: m.pack_padded_sequence(x, [4, 4]),                  # count
             lambda m, x: m.pad_sequence([]),
             lambda m, x: m.pad_sequence([x], padding_side="x"),
             lambda m, x: m.pad_packed_sequence(m.pack_sequence([x[:, 0]]), total_length=2)]
    for case in cases:
        _err(torch, lambda: case(trnn, torch.tensor(padded)), lambda: case(crnn, t(padded)))


# ---- modules: parameters, state dicts, modes, errors ---------------------------------------


def test_parameters_init_and_state_dict_interchange(torch):
    for mode, kw in [("LSTM", {"proj_size": 3}), ("LSTM", {}), ("GRU", {"bias": False}),
                     ("RNN_RELU", {})]:
        tcls, extra = _cls(torch, mode)
        ccls, _ = _cls(cddp, mode)
        torch.manual_seed(11)
        cddp.manual_seed(11)
        tm = tcls(5, 7, 2, bidirectional=True, **extra, **kw)
        cm = ccls(5, 7, 2, bidirectional=True, **extra, **kw)
        # torch's names, shapes, order and init (cddp's generator is torch's mt19937)
        ts, cs = tm.state_dict(), cm.state_dict()
        assert list(cs) == list(ts) == tm._flat_weights_names == cm._flat_weights_names
        for k in ts:
            assert np.array_equal(n(cs[k]), ts[k].numpy()), k
        assert [[tuple(p.shape) for p in g] for g in cm.all_weights] == \
               [[tuple(p.shape) for p in g] for g in tm.all_weights]
        assert repr(cm) == repr(tm)
        assert cm.flatten_parameters() is None
    for name in ("RNNCell", "LSTMCell", "GRUCell"):
        torch.manual_seed(12)
        cddp.manual_seed(12)
        a, b = getattr(torch.nn, name)(3, 4, bias=False), getattr(nn, name)(3, 4, bias=False)
        assert repr(a) == repr(b) and list(a.state_dict()) == list(b.state_dict())
        for k, v in a.state_dict().items():
            assert np.array_equal(n(b.state_dict()[k]), v.numpy())
    assert repr(nn.RNNCell(3, 4, nonlinearity="relu")) == "RNNCell(3, 4, nonlinearity=relu)"


def test_save_load_round_trip(tmp_path):
    m = nn.LSTM(3, 4, 2, bidirectional=True)
    path = str(tmp_path / "lstm.pt")
    cddp.save(m.state_dict(), path)
    m2 = nn.LSTM(3, 4, 2, bidirectional=True)
    m2.load_state_dict(cddp.load(path))
    x = cddp.randn(5, 2, 3)
    np.testing.assert_array_equal(n(m(x)[0]), n(m2(x)[0]))


@pytest.mark.parametrize("mode", MODES)
def test_dropout_only_in_training(mode):
    tcls, extra = _cls(cddp, mode)
    x = cddp.randn(6, 3, 4)
    with pytest.warns(UserWarning, match="dropout option adds dropout"):
        tcls(4, 5, 1, dropout=0.3, **extra)
    cddp.manual_seed(0)
    m = tcls(4, 5, 3, dropout=0.5, **extra)
    cddp.manual_seed(0)
    m0 = tcls(4, 5, 3, dropout=0.0, **extra)
    m.eval()
    np.testing.assert_array_equal(n(m(x)[0]), n(m0(x)[0]))     # eval: dropout is off
    m.train()
    assert not np.allclose(n(m(x)[0]), n(m0(x)[0]))


@pytest.mark.parametrize("mode", MODES)
def test_dropout_masks_match_torch(torch, mode):
    """Training: the same masks as torch's from the same seed (torch's CPU dropout recipe,
    drawn per layer output in the same order)."""
    torch.manual_seed(13)
    tm, cm = _pair(torch, mode, 4, 5, 3, dropout=0.5, dtype="float32")
    xn = np.random.default_rng(5).standard_normal((6, 3, 4)).astype(np.float32)
    torch.manual_seed(14)
    cddp.manual_seed(14)
    np.testing.assert_allclose(n(cm(t(xn))[0]), tm(torch.tensor(xn))[0].detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def _err(torch, fn_t, fn_c):
    """Both calls raise; same exception type and (torch -> cddp spelled) message."""
    with pytest.raises(Exception) as et:
        fn_t()
    with pytest.raises(type(et.value)) as ec:
        fn_c()
    assert str(ec.value) == str(et.value).replace("torch.", "cddp."), (str(ec.value), str(et.value))


def test_errors_match_torch(torch):
    for mode in MODES:
        tm, cm = _pair(torch, mode, 10, 20, dtype="float32")
        tcls, extra = _cls(torch, mode)
        ccls, _ = _cls(cddp, mode)
        lstm = mode == "LSTM"
        cases = [
            lambda m, L: m(L.zeros(5, 3, 7)),                           # input size
            lambda m, L: m(L.zeros(5, 3, 10),                           # hidden shape
                           (L.zeros(1, 2, 20), L.zeros(1, 3, 20)) if lstm else L.zeros(1, 2, 20)),
            lambda m, L: m(L.zeros(5, 3, 10),
                           (L.zeros(1, 3, 20), L.zeros(1, 3, 19)) if lstm else L.zeros(1, 3, 19)),
            lambda m, L: m(L.zeros(5, 3, 10),                           # hidden dims
                           (L.zeros(3, 20), L.zeros(3, 20)) if lstm else L.zeros(3, 20)),
            lambda m, L: m(L.zeros(5, 10),
                           (L.zeros(1, 1, 20), L.zeros(1, 1, 20)) if lstm else L.zeros(1, 1, 20)),
            lambda m, L: m(L.zeros(5, 3, 2, 10)),                       # input dims
            lambda m, L: m(L.zeros(5, 3, 10, dtype=L.float64)),         # dtype
            lambda m, L: m(L.zeros(0, 3, 10)),                          # empty sequence
        ]
        for case in cases:
            _err(torch, lambda: case(tm, torch), lambda: case(cm, cddp))
        ctor = [dict(dropout=1.5), dict(dropout=True), dict(bias=1), dict(batch_first=None),
                dict(num_layers=0)]
        if lstm:
            ctor += [dict(proj_size=20), dict(proj_size=-1)]
        else:
            ctor += [dict(proj_size=2)]
        for kw in ctor:
            _err(torch, lambda: tcls(10, 20, **extra, **kw), lambda: ccls(10, 20, **extra, **kw))
        _err(torch, lambda: tcls(0, 20, **extra), lambda: ccls(0, 20, **extra))
        _err(torch, lambda: tcls(10, 2.5, **extra), lambda: ccls(10, 2.5, **extra))
    _err(torch, lambda: torch.nn.RNN(3, 4, nonlinearity="gelu"),
         lambda: nn.RNN(3, 4, nonlinearity="gelu"))
    for name in ("RNNCell", "LSTMCell", "GRUCell"):
        tc, cc = getattr(torch.nn, name)(10, 20), getattr(nn, name)(10, 20)
        lstm = name == "LSTMCell"

        def st(L, *shape):
            return (L.zeros(*shape), L.zeros(*shape)) if lstm else L.zeros(*shape)
        cases = [lambda c, L: c(L.zeros(3, 7)), lambda c, L: c(L.zeros(3, 10), st(L, 2, 20)),
                 lambda c, L: c(L.zeros(3, 10), st(L, 3, 19)),
                 lambda c, L: c(L.zeros(10), st(L, 3, 20)),
                 lambda c, L: c(L.zeros(2, 3, 10)),
                 lambda c, L: c(L.zeros(3, 10), st(L, 1, 3, 20))]
        for case in cases:
            _err(torch, lambda: case(tc, torch), lambda: case(cc, cddp))


def test_autograd_behaviour():
    m = nn.LSTM(3, 4, proj_size=2)
    x = cddp.randn(5, 2, 3, requires_grad=True)
    out, (h, c) = m(x)
    assert type(out.grad_fn).__name__ != "NoneType" and h.is_contiguous() and c.is_contiguous()
    (out.sum() + h.sum() + c.sum()).backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()
    for w in ("weight_hh_l0", "weight_hr_l0"):       # w_hr rides outside the saved slots
        out, _ = m(x)
        with cddp.no_grad():
            getattr(m, w).mul_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
    with cddp.no_grad():
        out, (h, c) = m(x)
    assert out.grad_fn is None and h.grad_fn is None and not out.requires_grad
    # only h_n used: the output's gradient is absent, h0's still flows
    g = nn.GRU(3, 4)
    h0 = cddp.zeros(1, 2, 4, requires_grad=True)
    g(x, h0)[1].sum().backward()
    assert h0.grad is not None and float(h0.grad.abs().sum()) > 0
    # an empty batch runs (torch returns empty outputs too)
    out, h = nn.RNN(3, 4)(cddp.zeros(5, 0, 3))
    assert tuple(out.shape) == (5, 0, 4) and tuple(h.shape) == (1, 0, 4)


def test_layer_op_rejects_bad_arguments():
    """The C op validates on its own (it is reachable as cddp._C._rnn_layer)."""
    op = cddp._C._rnn_layer
    x, w, u = cddp.zeros(2, 1, 3), cddp.zeros(8, 3), cddp.zeros(8, 2)
    ok = [0, x, None, None, w, u, None, None, None, False, None]
    op(*ok)
    bad = [(1, cddp.zeros(2, 1, 3, dtype=cddp.float64)), (4, cddp.zeros(7, 3)),
           (5, cddp.zeros(8, 3)), (2, cddp.zeros(2, 2)), (3, cddp.zeros(1, 3)),
           (6, cddp.zeros(7)), (8, cddp.zeros(3, 2)), (1, cddp.zeros(2, 3)),
           (10, cddp.tensor([1, 2])), (1, cddp.zeros(2, 1, 3, dtype=cddp.int64))]
    for i, v in bad:
        args = list(ok)
        args[i] = v
        with pytest.raises(RuntimeError):
            op(*args)
    packed = [0, cddp.zeros(3, 3), None, None, w, u, None, None, None, False]
    op(*packed, cddp.tensor([2, 1]))
    for bs in ([1, 2], [2, 2], [3, 1], [2, 0, 1], [], [2.0, 1.0]):
        with pytest.raises(RuntimeError):
            op(*packed, cddp.tensor(bs, dtype=cddp.float32 if bs and isinstance(bs[0], float)
                                    else cddp.int64))
    with pytest.raises(TypeError):
        op(0, x)
    with pytest.raises(TypeError):
        op(0, "x", *ok[2:])
    with pytest.raises(ValueError):
        op(7, *ok[1:])
    with pytest.raises(RuntimeError):   # c0 / w_hr are LSTM-only
        op(1, x, None, cddp.zeros(1, 2), cddp.zeros(6, 3), cddp.zeros(6, 2), None, None, None,
           False, None)


# ---- an LSTM language model: 10 SGD steps vs torch, and under 2-rank DDP ------------------


# The model as source text: this module and the DDP job's script (another process) build it
# from the same lines. Embedding is a weight matrix indexed by token ids (gradient through the
# indexing), then a 2-layer LSTM and a Linear decoder.
LM = """
def build(lib, dtype):
    class LM(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = lib.nn.Parameter(lib.randn(V, E, dtype=dtype))
            self.rnn = lib.nn.LSTM(E, Hd, 2, dtype=dtype)
            self.dec = lib.nn.Linear(Hd, V, dtype=dtype)

        def forward(self, tokens):            # (T, N) -> logits (T*N, V)
            out, _ = self.rnn(self.emb[tokens])
            return self.dec(out.reshape(-1, Hd))
    return LM()

V, E, Hd, T = 23, 8, 12, 7
"""
exec(LM)  # defines build, V, E, Hd, T here


def _lm_data(batch, steps=10):
    """(steps, T+1, batch) token ids of a learnable language: next = 3 * token + 1 mod V."""
    rng = np.random.default_rng(42)
    seq = np.empty((steps, T + 1, batch), np.int64)
    seq[:, 0] = rng.integers(0, V, (steps, batch))
    for i in range(T):
        seq[:, i + 1] = (3 * seq[:, i] + 1) % V
    return seq


def _train_lm(lib, dtype, weights, data, lr=2.0):
    model = build(lib, dtype)
    model.load_state_dict({k: lib.tensor(v) for k, v in weights.items()})
    opt = lib.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for batch in data:
        x, y = lib.tensor(batch[:-1]), lib.tensor(batch[1:].reshape(-1))
        opt.zero_grad()
        loss = lib.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    return np.array(losses), {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_lstm_language_model_trains_like_torch(torch, dtype):
    torch.manual_seed(0)
    weights = {k: v.detach().numpy().copy()
               for k, v in build(torch, getattr(torch, dtype)).state_dict().items()}
    data = _lm_data(6)
    lt, wt = _train_lm(torch, getattr(torch, dtype), weights, data)
    lc, wc = _train_lm(cddp, getattr(cddp, dtype), weights, data)
    for k in wt:                                          # every parameter trained
        assert not np.allclose(wt[k], weights[k]), k
    rtol = 1e-10 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(lc, lt, rtol=rtol, atol=0)
    for k in wt:
        np.testing.assert_allclose(wc[k], wt[k], rtol=rtol * 10, atol=rtol, err_msg=k)


def test_lstm_language_model_ddp_two_ranks(tmp_path):
    """2 ranks, each half of the batch, end with identical weights equal to one process
    training on the whole batch (float64, so the comparison is tight)."""
    cddp.manual_seed(0)
    weights = {k: n(v) for k, v in build(cddp, cddp.float64).state_dict().items()}
    np.savez(os.path.join(tmp_path, "w0.npz"), **weights)
    data = _lm_data(8, steps=6)
    np.save(os.path.join(tmp_path, "data.npy"), data)
    body = LM + """
import os
import numpy as np
import cddp
import cddp.distributed as dist
from cddp.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
model = build(cddp, cddp.float64)
w0 = np.load(os.path.join(OUT, "w0.npz"))
model.load_state_dict({k: cddp.tensor(w0[k]) for k in w0.files})
model = DDP(model)
opt = cddp.optim.SGD(model.parameters(), lr=2.0)
data = np.load(os.path.join(OUT, "data.npy"))
for batch in data:
    half = batch[:, rank * 4:(rank + 1) * 4]
    opt.zero_grad()
    loss = cddp.nn.functional.cross_entropy(model(cddp.tensor(half[:-1])),
                                            cddp.tensor(half[1:].reshape(-1)))
    loss.backward()
    opt.step()
sd = model.module.state_dict()
np.savez(os.path.join(OUT, f"r{rank}.npz"), **{k: v.numpy() for k, v in sd.items()})
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    _, want = _train_lm(cddp, cddp.float64, weights, data)
    r0, r1 = (np.load(os.path.join(tmp_path, f"r{i}.npz")) for i in (0, 1))
    assert sorted(r0.files) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(r0[k], r1[k], err_msg=k)            # identical ranks
        np.testing.assert_allclose(r0[k], want[k], rtol=1e-10, atol=1e-12, err_msg=k)
    assert not np.allclose(r0["rnn.weight_hh_l1"], weights["rnn.weight_hh_l1"])
