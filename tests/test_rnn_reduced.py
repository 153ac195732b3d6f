"""Recurrent layers in float16 / bfloat16, and under CPU autocast.

cddp runs a reduced-precision layer stack or cell in float32 on float32 copies of its input,
states and weights and rounds the results once (cddp/nn/modules/rnn.py `_reduced_dtype`);
gradients come back through the casts, so each is the float32 gradient rounded once to its
tensor's dtype.

Oracle: the float64 layers (tests/test_rnn.py holds those to torch at 1e-10) run on the same
reduced-precision values. Every output and gradient is then the float64 value rounded to the
dtype up to float32 error: within half an ulp of the dtype (relative 2^-8 for bfloat16,
2^-11 for float16) plus a float32-sized absolute slack. torch (importorskip) is the oracle for
which layers autocast lowers (LSTM and Elman RNNs on padded input, and RNNCell; GRU, packed
sequences, LSTMCell and GRUCell stay float32) and, loosely, for values: its oneDNN kernels round the states to bf16
between steps, so they differ from the float64 result by a few bf16 ulps.
"""
import numpy as np
import pytest

import cddp
from conftest import t

MODES = ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"]
DTYPES = ["bfloat16", "float16"]
HALF_ULP = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def _cls(lib, mode):
    if mode.startswith("RNN_"):
        return lib.nn.RNN, {"nonlinearity": mode[4:].lower()}
    return getattr(lib.nn, mode), {}


def _f64(x):
    return np.array(x.detach().double().numpy(), copy=True)


def _close(got, ref, dtype, what):
    """got within half an ulp of `dtype` (and float32 error) of the float64 reference."""
    a, b = _f64(got), _f64(ref)
    assert a.shape == b.shape, what
    slack = 1e-5 * max(1.0, float(np.abs(b).max(initial=0.0)))
    err = np.abs(a - b) - (HALF_ULP[dtype] * 1.001 * np.abs(b) + slack)
    assert (err <= 0).all(), f"{what}: worst excess {err.max():.3g}"


def _pair(mode, dtype, **kw):
    """A layer stack in `dtype` and a float64 one holding the same (rounded) weights."""
    cls, extra = _cls(cddp, mode)
    cddp.manual_seed(0)
    low = cls(6, 8, **extra, **kw).to(getattr(cddp, dtype))
    ref = cls(6, 8, **extra, **kw).double()
    ref.load_state_dict({k: v.double() for k, v in low.state_dict().items()})
    return low, ref


def _run(m, x, h, lstm):
    out, hid = m(x, h) if h is not None else m(x)
    hs = list(hid) if lstm else [hid]
    return out, hs


def _loss(out, hs, rng, dtype):
    """sum of outputs and final states times fixed random weights that `dtype` holds exactly
    (the gradient reaching a reduced-precision output is rounded to its dtype; so the float64
    reference receives the same one)."""
    total = 0
    for v in [out] + hs:
        w = t(rng.standard_normal(tuple(v.shape)).astype(np.float32))
        total = total + (v.float() * w.to(getattr(cddp, dtype)).float()).sum()
    return total


def _check_stack(mode, dtype, low, ref, x_np, h_np=None, batch_first=False):
    dt = getattr(cddp, dtype)
    lstm = mode == "LSTM"
    x = t(x_np).to(dt).requires_grad_()
    x64 = x.detach().double().requires_grad_()
    h = h64 = None
    if h_np is not None:
        h = tuple(t(a).to(dt).requires_grad_() for a in h_np)
        h64 = tuple(v.detach().double().requires_grad_() for v in h)
        if not lstm:
            h, h64 = h[0], h64[0]
    out, hs = _run(low, x, h, lstm)
    out64, hs64 = _run(ref, x64, h64, lstm)
    assert out.dtype == dt and all(v.dtype == dt for v in hs)
    _close(out, out64, dtype, "output")
    for k, (a, b) in enumerate(zip(hs, hs64)):
        _close(a, b, dtype, f"final state {k}")
    _loss(out, hs, np.random.default_rng(1), dtype).backward()
    _loss(out64, hs64, np.random.default_rng(1), dtype).backward()
    assert x.grad.dtype == dt
    _close(x.grad, x64.grad, dtype, "input grad")
    if h is not None:
        for a, b in zip(h if lstm else (h,), h64 if lstm else (h64,)):
            assert a.grad.dtype == dt
            _close(a.grad, b.grad, dtype, "initial state grad")
    for (name, p), (_, p64) in zip(low.named_parameters(), ref.named_parameters()):
        assert p.grad.dtype == dt, name
        _close(p.grad, p64.grad, dtype, f"{name} grad")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_layers_in_reduced_dtype_match_float64(mode, dtype):
    """Two layers, both directions, with and without initial states: outputs, final states,
    and the gradients of input, states and every weight, each in the layer's dtype."""
    low, ref = _pair(mode, dtype, num_layers=2, bidirectional=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3, 6)).astype(np.float32)
    _check_stack(mode, dtype, low, ref, x)
    low.zero_grad()
    ref.zero_grad()
    h = [rng.standard_normal((4, 3, 8)).astype(np.float32) for _ in range(2)]
    _check_stack(mode, dtype, low, ref, x, h)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lstm_projection_and_batch_first_in_reduced_dtype(dtype):
    low, ref = _pair("LSTM", dtype, proj_size=3, batch_first=True)
    x = np.random.default_rng(2).standard_normal((3, 4, 6)).astype(np.float32)
    _check_stack("LSTM", dtype, low, ref, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_packed_sequences_in_reduced_dtype(mode, dtype):
    from cddp.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
    dt = getattr(cddp, dtype)
    low, ref = _pair(mode, dtype)
    x = t(np.random.default_rng(3).standard_normal((5, 3, 6)).astype(np.float32)).to(dt)
    lens = [5, 3, 2]
    out, _ = low(pack_padded_sequence(x, lens))
    out64, _ = ref(pack_padded_sequence(x.double(), lens))
    assert out.data.dtype == dt
    _close(pad_packed_sequence(out)[0], pad_packed_sequence(out64)[0], dtype, "packed output")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["LSTMCell", "GRUCell", "RNNCell"])
def test_cells_in_reduced_dtype(name, dtype):
    dt = getattr(cddp, dtype)
    cddp.manual_seed(0)
    low = getattr(cddp.nn, name)(6, 8).to(dt)
    ref = getattr(cddp.nn, name)(6, 8).double()
    ref.load_state_dict({k: v.double() for k, v in low.state_dict().items()})
    x = t(np.random.default_rng(4).standard_normal((3, 6)).astype(np.float32)).to(dt)
    x.requires_grad_()
    x64 = x.detach().double().requires_grad_()
    got, want = low(x), ref(x64)
    got = list(got) if isinstance(got, tuple) else [got]
    want = list(want) if isinstance(want, tuple) else [want]
    for a, b in zip(got, want):
        assert a.dtype == dt
        _close(a, b, dtype, name)
    _loss(got[0], got[1:], np.random.default_rng(5), dtype).backward()
    _loss(want[0], want[1:], np.random.default_rng(5), dtype).backward()
    _close(x.grad, x64.grad, dtype, "input grad")
    _close(low.weight_hh.grad, ref.weight_hh.grad, dtype, "weight_hh grad")


def test_mixed_dtypes_are_refused():
    m = cddp.nn.LSTM(6, 8).bfloat16()
    x = cddp.randn(5, 3, 6)
    with pytest.raises(ValueError, match="does not match weight dtype"):
        m(x)
    with pytest.raises(RuntimeError, match=r"h0 dtype \(cddp.float32\) does not match input"):
        m(x.bfloat16(), (cddp.zeros(1, 3, 8), cddp.zeros(1, 3, 8)))


@pytest.mark.parametrize("mode", ["LSTM", "RNN_TANH", "RNN_RELU"])
def test_autocast_lowers_lstm_and_rnn(mode):
    """Inside autocast("cpu", bfloat16) a float32 LSTM / RNN runs on bf16 casts of input,
    states and weights: bf16 results equal to the float64 layer on those rounded values, and
    float32 parameter gradients (through the casts) equal to its gradients, rounded to bf16."""
    cls, extra = _cls(cddp, mode)
    cddp.manual_seed(0)
    m = cls(6, 8, num_layers=2, bidirectional=True, **extra)
    ref = cls(6, 8, num_layers=2, bidirectional=True, **extra).double()
    ref.load_state_dict({k: v.bfloat16().double() for k, v in m.state_dict().items()})
    rng = np.random.default_rng(6)
    x = t(rng.standard_normal((5, 3, 6)).astype(np.float32), requires_grad=True)
    h = t(rng.standard_normal((4, 3, 8)).astype(np.float32))
    x64 = x.detach().bfloat16().double().requires_grad_()
    h64 = h.bfloat16().double()
    lstm = mode == "LSTM"
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        out, hs = _run(m, x, (h, h) if lstm else h, lstm)
    out64, hs64 = _run(ref, x64, (h64, h64) if lstm else h64, lstm)
    assert out.dtype == cddp.bfloat16 and all(v.dtype == cddp.bfloat16 for v in hs)
    _close(out, out64, "bfloat16", "output")
    _loss(out, hs, np.random.default_rng(7), "bfloat16").backward()
    _loss(out64, hs64, np.random.default_rng(7), "bfloat16").backward()
    assert x.grad.dtype == cddp.float32
    _close(x.grad, x64.grad, "bfloat16", "input grad")
    for (name, p), (_, p64) in zip(m.named_parameters(), ref.named_parameters()):
        assert p.grad.dtype == cddp.float32, name
        _close(p.grad, p64.grad, "bfloat16", f"{name} grad")


def test_autocast_keeps_gru_packed_and_gated_cells_float32():
    """What torch's CPU autocast leaves in float32 gives the float32 results, bit for bit."""
    from cddp.nn.utils.rnn import pack_padded_sequence
    cddp.manual_seed(0)
    x = cddp.randn(5, 3, 6)
    cases = [(cddp.nn.GRU(6, 8), lambda m: m(x)[0]),
             (cddp.nn.LSTM(6, 8), lambda m: m(pack_padded_sequence(x, [5, 4, 2]))[0].data),
             (cddp.nn.LSTMCell(6, 8), lambda m: m(x[0])[0]),
             (cddp.nn.GRUCell(6, 8), lambda m: m(x[0]))]
    for m, f in cases:
        plain = f(m)
        with cddp.autocast("cpu", dtype=cddp.bfloat16):
            got = f(m)
        assert got.dtype == cddp.float32, type(m).__name__
        assert np.array_equal(got.detach().numpy(), plain.detach().numpy()), type(m).__name__


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_autocast_lowers_rnn_cell(nonlinearity):
    """torch lowers RNNCell (two linears) but not LSTMCell / GRUCell: bf16 results, float32
    parameter gradients, against the float64 cell on the bf16-rounded values."""
    cddp.manual_seed(0)
    m = cddp.nn.RNNCell(6, 8, nonlinearity=nonlinearity)
    ref = cddp.nn.RNNCell(6, 8, nonlinearity=nonlinearity).double()
    ref.load_state_dict({k: v.bfloat16().double() for k, v in m.state_dict().items()})
    rng = np.random.default_rng(9)
    x = t(rng.standard_normal((3, 6)).astype(np.float32))
    h = t(rng.standard_normal((3, 8)).astype(np.float32))
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        got = m(x, h)
    want = ref(x.bfloat16().double(), h.bfloat16().double())
    assert got.dtype == cddp.bfloat16
    _close(got, want, "bfloat16", "RNNCell")
    _loss(got, [], np.random.default_rng(10), "bfloat16").backward()
    _loss(want, [], np.random.default_rng(10), "bfloat16").backward()
    assert m.weight_ih.grad.dtype == cddp.float32
    _close(m.weight_ih.grad, ref.weight_ih.grad, "bfloat16", "weight_ih grad")


def test_autocast_float64_layer_is_untouched():
    m = cddp.nn.LSTM(6, 8).double()
    x = cddp.randn(5, 3, 6, dtype=cddp.float64)
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        out, _ = m(x)
    assert out.dtype == cddp.float64


def test_autocast_dtypes_match_torch(torch):
    """The dtype of each output inside autocast("cpu", bfloat16), case by case, as torch."""
    import warnings

    def cases(lib):
        from_pack = lib.nn.utils.rnn.pack_padded_sequence
        lib.manual_seed(0)
        x = lib.randn(5, 3, 6)
        h = lib.zeros(1, 3, 8)
        return [
            ("LSTM", lambda: lib.nn.LSTM(6, 8)(x)[0]),
            ("LSTM 2 layers bidirectional", lambda: lib.nn.LSTM(6, 8, 2, bidirectional=True)(x)[1][1]),
            ("LSTM proj_size", lambda: lib.nn.LSTM(6, 8, proj_size=4)(x)[0]),
            ("LSTM given float32 states", lambda: lib.nn.LSTM(6, 8)(x, (h, h))[1][0]),
            ("LSTM packed", lambda: lib.nn.LSTM(6, 8)(from_pack(x, [5, 4, 2]))[0].data),
            ("RNN tanh", lambda: lib.nn.RNN(6, 8)(x)[0]),
            ("RNN relu", lambda: lib.nn.RNN(6, 8, nonlinearity="relu")(x)[1]),
            ("GRU", lambda: lib.nn.GRU(6, 8)(x)[0]),
            ("LSTMCell", lambda: lib.nn.LSTMCell(6, 8)(x[0])[0]),
            ("GRUCell", lambda: lib.nn.GRUCell(6, 8)(x[0])),
            ("RNNCell", lambda: lib.nn.RNNCell(6, 8)(x[0])),
            ("RNNCell relu", lambda: lib.nn.RNNCell(6, 8, nonlinearity="relu")(x[0], h[0])),
        ]

    def dtypes(lib):
        out = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")    # torch: "LSTM with projections is not supported with oneDNN"
            with lib.autocast("cpu", dtype=lib.bfloat16):
                for name, f in cases(lib):
                    try:
                        out[name] = str(f().dtype).split(".")[-1]
                    except RuntimeError as e:    # torch's oneDNN has no bf16 LSTM kernel
                        if lib is cddp or "primitive descriptor" not in str(e):   # for
                            raise                # some CPUs (no AVX-512): no answer there
        return out

    theirs = dtypes(torch)
    ours = dtypes(cddp)
    assert len(theirs) >= 6, theirs
    assert {k: ours[k] for k in theirs} == theirs


@pytest.mark.parametrize("mode", MODES)
def test_bfloat16_layers_agree_with_torch(torch, mode):
    """Same bf16 weights and input as torch's bf16 layer: torch rounds the states to bf16 at
    every step, cddp does not, so they agree to a few bf16 ulps (|out| < 1 here)."""
    tcls, extra = _cls(torch, mode)
    ccls, _ = _cls(cddp, mode)
    torch.manual_seed(0)
    tm = tcls(6, 8, num_layers=2, **extra).bfloat16()
    cm = ccls(6, 8, num_layers=2, **extra).bfloat16()
    cm.load_state_dict({k: t(v.float().numpy()).bfloat16() for k, v in tm.state_dict().items()})
    x = np.random.default_rng(8).standard_normal((7, 3, 6)).astype(np.float32)
    got, _ = cm(t(x).bfloat16())
    want, _ = tm(torch.tensor(x).bfloat16())
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1] == "bfloat16"
    np.testing.assert_allclose(_f64(got), want.detach().double().numpy(), atol=4e-2, rtol=0)
