"""float16 / bfloat16 through the nn layers and the ops main gained alongside them: linear and
the matrix family, layer/batch/group/instance norm, activations, softmax, losses, attention,
embedding, dropout, cumprod/cummax (cddp/nn/functional.py's float32 route, csrc/nn/*.c).

Oracles: torch's CPU kernels (values and gradients; bit for bit where torch rounds the same
way, else within `ULPS` units in the last place of the dtype at max(1, |x|)), NumPy references
computed from the same rounded inputs, and the kernels that refuse these dtypes (TypeError,
never a wrong read)."""
import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F

DTS = ["float16", "bfloat16"]
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}

# name -> (expression over x(*shape) and `torch`/`F`, ulps allowed: 0 = the same bits)
CASES = {
    "linear": ("F.linear(x(4, 8), x(3, 8), x(3))", 0),
    "matmul": ("x(4, 8) @ x(8, 3)", 0),
    "bmm": ("torch.bmm(x(2, 4, 8), x(2, 8, 3))", 0),
    "baddbmm": ("torch.baddbmm(x(2, 4, 3), x(2, 4, 8), x(2, 8, 3))", 0),
    "layer_norm": ("F.layer_norm(x(4, 8), (8,), x(8), x(8))", 1),
    "batch_norm": ("F.batch_norm(x(4, 3, 5), None, None, x(3), x(3), True)", 1),
    "group_norm": ("F.group_norm(x(2, 4, 5), 2, x(4), x(4))", 1),
    "instance_norm": ("F.instance_norm(x(2, 4, 5))", 1),
    "relu": ("F.relu(x(4, 8))", 0),
    "prelu": ("F.prelu(x(4, 3), x(3))", 1),
    "gelu": ("F.gelu(x(4, 8))", 0),
    "gelu_tanh": ("F.gelu(x(4, 8), approximate='tanh')", 0),
    "silu": ("F.silu(x(4, 8))", 0),
    "leaky_relu": ("F.leaky_relu(x(4, 8), 0.1)", 0),
    "softmax": ("F.softmax(x(4, 8), -1)", 0),
    "log_softmax": ("F.log_softmax(x(4, 8), -1)", 0),
    "cross_entropy": ("F.cross_entropy(x(4, 8), torch.tensor([1, 2, 3, 0]))", 1),
    "sdpa": ("F.scaled_dot_product_attention(x(2, 3, 4, 8), x(2, 3, 4, 8), x(2, 3, 4, 8))", 1),
    "sdpa_causal": ("F.scaled_dot_product_attention(x(2, 3, 5, 8), x(2, 3, 5, 8), x(2, 3, 5, 8),"
                    " is_causal=True)", 1),
    "embedding": ("F.embedding(torch.tensor([1, 2, 0, 1, 1]), x(5, 4))", 0),
    "dropout_eval": ("F.dropout(x(4, 8), 0.5, training=False)", 0),
    "add_mul": ("x(4, 8) * 1.5 + x(4, 8)", 0),
    "cumprod": ("torch.cumprod(x(4, 5), 1)", 2),
    "addmm": ("torch.addmm(x(4, 3), x(4, 8), x(8, 3), beta=0.5)", 0),
    "addmv": ("torch.addmv(x(4), x(4, 8), x(8), beta=2.0)", 0),
    "einsum": ("torch.einsum('bij,bjk->bik', x(2, 4, 8), x(2, 8, 3))", 0),
    "repeat": ("x(2, 3).repeat(3, 2)", 0),
    "index_select_add": ("torch.index_select(x(4, 3), 0, torch.tensor([2, 0, 2])) + 1", 0),
    "where": ("torch.where(torch.arange(12).reshape(3, 4) % 3 == 0, x(3, 4), x(3, 4))", 0),
    "losses": ("F.mse_loss(x(4, 8), x(4, 8)) + F.smooth_l1_loss(x(4, 8), x(4, 8))", 1),
    "tril_roll_flip": ("torch.flip(torch.roll(torch.tril(x(4, 4)), 1, 0), [1])", 0),
}


def _run(lib, F_, dt, expr):
    rng = np.random.default_rng(0)
    ins = []

    def x(*shape):
        t = lib.tensor(rng.standard_normal(shape).astype(np.float32)).to(getattr(lib, dt))
        t.requires_grad_(True)
        ins.append(t)
        return t

    r = eval(expr, {"torch": lib, "F": F_, "x": x})
    w = lib.linspace(-1, 1, r.numel()).reshape(r.shape).to(r.dtype)
    (r * w).sum().backward()
    return [r] + [i.grad for i in ins]


def _f64(t):
    return np.array(t.detach().float().tolist(), dtype=np.float64)


@pytest.mark.parametrize("dt", DTS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_grads_vs_torch(name, dt):
    torch = pytest.importorskip("torch")
    expr, ulps = CASES[name]
    ours = _run(cddp, F, dt, expr)
    ref = _run(torch, torch.nn.functional, dt, expr)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1], (i, a.dtype, b.dtype)
        u, v = _f64(a), b.detach().double().numpy()
        assert u.shape == v.shape
        if ulps == 0:
            np.testing.assert_array_equal(u, v, err_msg=f"{name} output {i}")
        else:
            bound = ulps * EPS[dt] * np.maximum(1.0, np.abs(v))
            assert (np.abs(u - v) <= bound).all(), (name, i, np.abs(u - v).max())


def _round16(a):
    return a.astype(np.float16).astype(np.float64)


def test_layer_norm_float16_vs_numpy():
    a = np.random.default_rng(1).standard_normal((6, 10)).astype(np.float16)
    out = F.layer_norm(cddp.tensor(a), (10,))
    x = a.astype(np.float64)
    ref = _round16((x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5))
    assert out.dtype == cddp.float16
    assert (np.abs(out.numpy().astype(np.float64) - ref) <= EPS["float16"]).all()


def test_cumprod_float16_vs_numpy():
    a = np.random.default_rng(2).uniform(0.5, 1.5, (3, 7)).astype(np.float16)
    out = cddp.cumprod(cddp.tensor(a), 1).numpy()
    # accumulated in float32, each output rounded once
    np.testing.assert_array_equal(out, np.cumprod(a.astype(np.float32), 1).astype(np.float16))
    best = cddp.cummax(cddp.tensor(a), 1)[0].numpy()
    np.testing.assert_array_equal(best, np.maximum.accumulate(a, 1))


def test_embedding_grad_rounds_each_addition():
    # four additions of 1/3 to one float16 row: each sum rounded to float16
    w = cddp.zeros(3, 2, dtype=cddp.float16, requires_grad=True)
    F.embedding(cddp.tensor([1, 1, 1, 1]), w).backward(cddp.full((4, 2), 1 / 3).half())
    acc = np.float16(0)
    for _ in range(4):
        acc = np.float16(acc + np.float16(1 / 3))
    assert w.grad.dtype == cddp.float16
    np.testing.assert_array_equal(w.grad.numpy()[1], [acc, acc])
    assert (w.grad.numpy()[[0, 2]] == 0).all()


@pytest.mark.parametrize("dt", DTS)
def test_batch_norm_running_stats(dt):
    """float32 running stats (torch's mixed CPU case) are updated in place; reduced ones get
    the float32 update rounded once."""
    d = getattr(cddp, dt)
    a = np.random.default_rng(3).standard_normal((8, 3)).astype(np.float32)
    x = cddp.tensor(a).to(d)
    xs = _f64(x)
    mean, var = xs.mean(0), xs.var(0, ddof=1)
    for sdt in (cddp.float32, d):
        rm, rv = cddp.zeros(3, dtype=sdt), cddp.ones(3, dtype=sdt)
        out = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
        assert out.dtype == d and rm.dtype == sdt
        tol = 1e-6 if sdt == cddp.float32 else EPS[dt]
        np.testing.assert_allclose(_f64(rm), 0.5 * mean, atol=tol, rtol=tol)
        np.testing.assert_allclose(_f64(rv), 0.5 + 0.5 * var, atol=tol, rtol=tol)


@pytest.mark.parametrize("dt", DTS)
def test_attention_modules(dt):
    torch = pytest.importorskip("torch")
    d = getattr(cddp, dt)
    cddp.manual_seed(0)
    m = nn.MultiheadAttention(8, 2)
    tm = torch.nn.MultiheadAttention(8, 2)
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    m, tm = m.to(d), tm.to(getattr(torch, dt))
    a = np.random.default_rng(4).standard_normal((5, 1, 8)).astype(np.float32)
    x, tx = cddp.tensor(a).to(d), torch.tensor(a).to(getattr(torch, dt))
    mask = np.triu(np.ones((5, 5), bool), 1)
    out = m(x, x, x, attn_mask=cddp.tensor(mask))[0]
    ref = tm(tx, tx, tx, attn_mask=torch.tensor(mask))[0]
    assert out.dtype == d
    v = ref.detach().double().numpy()
    assert (np.abs(_f64(out) - v) <= 4 * EPS[dt] * np.maximum(1, np.abs(v))).all()


@pytest.mark.parametrize("dt", DTS)
def test_refused_kernels_raise_type_error(dt):
    """Kernels with no reduced-float path name the dtype instead of misreading elements (the
    recurrent layers have one now: tests/test_rnn_reduced.py)."""
    d = getattr(cddp, dt)
    x = cddp.randn(2, 3, 4).to(d)
    with pytest.raises(TypeError, match=dt):
        cddp._C._batch_norm_stats(x, 1e-5)
    with pytest.raises(TypeError, match=dt):
        cddp._C._batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    with pytest.raises(TypeError, match=dt):
        cddp._C._group_norm(x, 1, None, None, 1e-5)
    with pytest.raises(TypeError, match=dt):
        cddp._C._prelu(x, cddp.ones(3).to(d))
    with pytest.raises(NotImplementedError, match=dt):
        cddp._C._layer_norm(x, (4,), None, None, 1e-5)
