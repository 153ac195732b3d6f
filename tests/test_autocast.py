"""Autocast (cddp.autocast / cddp.amp.autocast, cddp.cpu.amp / cddp.cuda.amp aliases): which
ops run in which dtype (a table from torch's CPU lists, and torch itself when installed), the
values those ops give, the weight-cast cache, nesting, enabled=False, dtype checks, autograd
through the casts (parameter grads in float32), small models vs torch under autocast, and the
CUDA fallback (one warning; CDDP_STRICT_DEVICE=1 refuses)."""
import subprocess
import sys
import tempfile
import threading
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import n, subprocess_env, t

LOW = ("bfloat16", "float16")


def _ops(lib, dt_in):
    """op name -> thunk over fixed inputs of dtype dt_in (a name), for cddp or torch."""
    rng = np.random.default_rng(0)
    f = (lambda *s: lib.tensor(rng.standard_normal(s).astype(np.float32)).to(getattr(lib, dt_in)))
    a, b, v, B = f(4, 4), f(4, 4), f(4), f(2, 4, 4)
    p, q = lib.sigmoid(f(4, 4)), lib.sigmoid(f(4, 4))
    tgt = lib.tensor([0, 3, 1, 2])
    V, img, grid = f(1, 2, 4, 4, 4), f(1, 2, 4, 4), f(1, 3, 3, 2) * 0.5
    labels = lib.tensor([[0, 1, -1, 0], [3, -1, 0, 0], [2, 1, 0, -1], [1, -1, 0, 0]])
    fn = lib.nn.functional
    return {
        "baddbmm": lambda: lib.baddbmm(B, B, B), "addbmm": lambda: lib.addbmm(a, B, B),
        "Tensor.baddbmm": lambda: B.baddbmm(B, B),
        "smooth_l1_loss": lambda: fn.smooth_l1_loss(a, b), "huber_loss": lambda: fn.huber_loss(a, b),
        "kl_div": lambda: fn.kl_div(a, b, reduction="batchmean"),
        "poisson_nll_loss": lambda: fn.poisson_nll_loss(a, b),
        "soft_margin_loss": lambda: fn.soft_margin_loss(a, b.sign()),
        "hinge_embedding_loss": lambda: fn.hinge_embedding_loss(a, b.sign()),
        "margin_ranking_loss": lambda: fn.margin_ranking_loss(v, v * 2, v.sign()),
        "cosine_embedding_loss": lambda: fn.cosine_embedding_loss(a, b, v.sign()),
        "triplet_margin_loss": lambda: fn.triplet_margin_loss(a, b, p),
        "multi_margin_loss": lambda: fn.multi_margin_loss(a, tgt),
        "multilabel_margin_loss": lambda: fn.multilabel_margin_loss(a, labels),
        "cdist": lambda: lib.cdist(a, b), "max_pool3d": lambda: fn.max_pool3d(V, 2),
        "avg_pool3d": lambda: fn.avg_pool3d(V, 2),
        "adaptive_avg_pool3d": lambda: fn.adaptive_avg_pool3d(V, 1),
        "pad_reflect": lambda: fn.pad(B, (1, 1), mode="reflect"),
        "pad_replicate": lambda: fn.pad(B, (1, 1), mode="replicate"),
        "pad_circular": lambda: fn.pad(B, (1, 1), mode="circular"),
        "grid_sample": lambda: fn.grid_sample(img, grid, align_corners=False),
        "mm": lambda: lib.mm(a, b), "bmm": lambda: lib.bmm(B, B),
        "matmul": lambda: lib.matmul(a, b),
        "@": lambda: a @ b, "Tensor.mm": lambda: a.mm(b), "addmm": lambda: lib.addmm(v, a, b),
        "linear": lambda: fn.linear(a, b, v),
        "cross_entropy": lambda: fn.cross_entropy(a, tgt), "nll_loss": lambda: fn.nll_loss(a, tgt),
        "mse_loss": lambda: fn.mse_loss(a, b), "l1_loss": lambda: fn.l1_loss(a, b),
        "binary_cross_entropy": lambda: fn.binary_cross_entropy(p, q),
        "bce_with_logits": lambda: fn.binary_cross_entropy_with_logits(a, q),
        "prod": lambda: a.prod(), "prod_dim": lambda: lib.prod(a, 1),
        "softmax": lambda: a.softmax(0), "sum": lambda: a.sum(), "add": lambda: a + b,
        "relu": lambda: a.relu(), "exp": lambda: a.exp(), "cat": lambda: lib.cat([a, b]),
    }


LOWER_OPS = {"mm", "bmm", "matmul", "@", "Tensor.mm", "addmm", "linear", "baddbmm", "addbmm",
             "Tensor.baddbmm"}
FP32_OPS = {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy",
            "bce_with_logits", "prod", "prod_dim", "smooth_l1_loss", "huber_loss", "kl_div",
            "poisson_nll_loss", "soft_margin_loss", "hinge_embedding_loss",
            "margin_ranking_loss", "cosine_embedding_loss", "triplet_margin_loss",
            "multi_margin_loss", "multilabel_margin_loss", "cdist", "max_pool3d", "avg_pool3d",
            "adaptive_avg_pool3d", "pad_reflect", "pad_replicate", "grid_sample"}


def _expected(op, dt_in, fast):
    """torch's CPU policy: lower ops -> fast dtype, fp32 ops -> float32, the rest keep theirs."""
    return fast if op in LOWER_OPS else "float32" if op in FP32_OPS else dt_in


COMBOS = [(f, d) for f in LOW for d in ("float32", f)]     # (autocast dtype, input dtype)


@pytest.mark.parametrize("fast,dt_in", COMBOS)
def test_op_dtypes_follow_the_cpu_lists(fast, dt_in):
    with cddp.autocast("cpu", dtype=getattr(cddp, fast)):
        got = {k: str(f().dtype).split(".")[1] for k, f in _ops(cddp, dt_in).items()}
    assert got == {k: _expected(k, dt_in, fast) for k in got}
    assert str(_ops(cddp, dt_in)["mm"]().dtype) == f"cddp.{dt_in}"        # outside: no cast


@pytest.mark.parametrize("fast,dt_in", COMBOS)
def test_op_dtypes_match_torch(torch, fast, dt_in):
    with torch.autocast("cpu", dtype=getattr(torch, fast)):
        want = {k: str(f().dtype).split(".")[1] for k, f in _ops(torch, dt_in).items()}
    with cddp.autocast("cpu", dtype=getattr(cddp, fast)):
        got = {k: str(f().dtype).split(".")[1] for k, f in _ops(cddp, dt_in).items()}
    assert got == want


@pytest.mark.parametrize("fast", LOW)
def test_values_are_the_ops_on_cast_inputs(fast):
    """Under autocast an op gives exactly what it gives on inputs cast by hand (NumPy-free
    oracle: the cast is the only thing autocast adds)."""
    dt = getattr(cddp, fast)
    ops = _ops(cddp, "float32")
    with cddp.autocast("cpu", dtype=dt):
        under = {k: f() for k, f in ops.items() if k in LOWER_OPS | FP32_OPS}
    rng = np.random.default_rng(0)
    a = t(rng.standard_normal((4, 4)).astype(np.float32))
    b = t(rng.standard_normal((4, 4)).astype(np.float32))
    v = t(rng.standard_normal(4).astype(np.float32))
    assert np.array_equal(n(under["mm"].float()), n(cddp.mm(a.to(dt), b.to(dt)).float()))
    assert np.array_equal(n(under["linear"].float()),
                          n(F.linear(a.to(dt), b.to(dt), v.to(dt)).float()))
    assert np.array_equal(n(under["addmm"].float()),
                          n(cddp.addmm(v.to(dt), a.to(dt), b.to(dt)).float()))
    assert np.array_equal(n(under["mse_loss"]), n(F.mse_loss(a, b)))     # float32 all along


@pytest.mark.parametrize("fast", LOW)
def test_values_match_torch(torch, fast):
    with torch.autocast("cpu", dtype=getattr(torch, fast)):
        want = {k: f().float().numpy() for k, f in _ops(torch, "float32").items()}
    with cddp.autocast("cpu", dtype=getattr(cddp, fast)):
        got = {k: n(f().float()) for k, f in _ops(cddp, "float32").items()}
    for k in want:
        # one rounding of the output to the autocast dtype apart at most (BLAS sums may differ)
        np.testing.assert_allclose(got[k], want[k], rtol=1e-2 if fast == "bfloat16" else 2e-3,
                                   atol=1e-2, err_msg=k)


def test_mixed_dtype_baddbmm_under_autocast():
    """torch casts every operand of baddbmm / addbmm: a bf16 batch with float32 input and
    batch (a relative-position bias added to bf16 scores) runs, in bf16."""
    rng = np.random.default_rng(3)
    bias, eye = (t(rng.standard_normal((2, 4, 4)).astype(np.float32)) for _ in range(2))
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        s = cddp.bmm(bias, bias)                       # bf16 scores
        y = cddp.baddbmm(bias, s, eye)
        z = cddp.addbmm(bias[0], eye, s)
    bf = cddp.bfloat16
    assert y.dtype == z.dtype == bf
    assert np.array_equal(n(y.float()), n(cddp.baddbmm(bias.to(bf), s, eye.to(bf)).float()))
    assert np.array_equal(n(z.float()), n(cddp.addbmm(bias[0].to(bf), eye.to(bf), s).float()))


def test_linalg_norms_take_reduced_dtypes():
    """As torch: vector norms and the matrix norms without singular values on bfloat16 /
    float16 give their dtype (float32 accumulation, one rounding); 2 / nuc refuse them."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    for dt in (cddp.bfloat16, cddp.float16):
        xr = t(x).to(dt)
        exact = np.asarray(n(xr.float()), np.float64)
        for got, ref in ((cddp.linalg.vector_norm(xr), np.linalg.norm(exact)),
                         (cddp.linalg.norm(xr[0]), np.linalg.norm(exact[0])),
                         (cddp.linalg.vector_norm(xr, 1, dim=1), np.abs(exact).sum(1)),
                         (cddp.linalg.matrix_norm(xr), np.linalg.norm(exact)),
                         (cddp.linalg.matrix_norm(xr, 1), np.abs(exact).sum(0).max())):
            assert got.dtype == dt
            np.testing.assert_allclose(n(got.float()), ref, rtol=2 ** -7)
        with pytest.raises(RuntimeError, match="Low precision dtypes not supported"):
            cddp.linalg.matrix_norm(xr, 2)


def test_float64_and_integers_are_not_cast():
    a = cddp.randn(3, 3, dtype=cddp.float64)
    i = cddp.ones(3, 3, dtype=cddp.int64)
    with cddp.autocast("cpu"):
        assert (a @ a).dtype == cddp.float64
        assert (i @ i).dtype == cddp.int64
        assert F.mse_loss(a, a).dtype == cddp.float64


def test_state_nesting_enabled_false_and_restore():
    assert not cddp.is_autocast_enabled("cpu")
    x = cddp.randn(2, 2)
    with cddp.autocast("cpu", dtype=cddp.float16):
        assert cddp.is_autocast_enabled("cpu") and cddp.get_autocast_dtype("cpu") == cddp.float16
        with cddp.autocast("cpu", enabled=False):
            assert not cddp.is_autocast_enabled("cpu")
            assert (x @ x).dtype == cddp.float32
            with cddp.autocast("cpu", dtype=cddp.bfloat16):
                assert (x @ x).dtype == cddp.bfloat16
            assert (x @ x).dtype == cddp.float32
        assert (x @ x).dtype == cddp.float16
        assert cddp.get_autocast_dtype("cpu") == cddp.float16
    assert not cddp.is_autocast_enabled("cpu") and cddp.get_autocast_dtype("cpu") == cddp.bfloat16
    with pytest.raises(ZeroDivisionError):
        with cddp.amp.autocast("cpu"):
            1 / 0
    assert not cddp.is_autocast_enabled("cpu") and (x @ x).dtype == cddp.float32


def test_decorator_and_thread_locality():
    @cddp.autocast("cpu")
    def f(a):
        return a @ a, cddp.is_autocast_enabled("cpu")

    x = cddp.randn(2, 2)
    y, on = f(x)
    assert on and y.dtype == cddp.bfloat16 and not cddp.is_autocast_enabled("cpu")
    seen = []
    with cddp.autocast("cpu"):
        th = threading.Thread(target=lambda: seen.append((x @ x).dtype))
        th.start()
        th.join(30)
    assert seen == [cddp.float32]                       # another thread: not autocast


def test_argument_checks_as_torch():
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        cddp.autocast(0)
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'tpu'"):
        cddp.autocast("tpu")
    with pytest.warns(UserWarning, match="In CPU autocast, but the target dtype is not supported"):
        ac = cddp.autocast("cpu", dtype=cddp.float32)
    with ac:
        assert not cddp.is_autocast_enabled("cpu")
    with pytest.raises(RuntimeError, match="unsupported autocast device_type"):
        cddp.is_autocast_enabled("tpu")
    assert cddp.amp.is_autocast_available("cpu") and not cddp.amp.is_autocast_available("tpu")


def test_cpu_amp_alias_is_deprecated_bf16():
    with pytest.warns(FutureWarning, match="torch.cpu.amp.autocast"):
        ac = cddp.cpu.amp.autocast()
    with ac:
        assert cddp.get_autocast_dtype("cpu") == cddp.bfloat16
        assert (cddp.randn(2, 2) @ cddp.randn(2, 2)).dtype == cddp.bfloat16


def test_autograd_through_casts_gives_float32_grads():
    rng = np.random.default_rng(1)
    xa = rng.standard_normal((5, 3)).astype(np.float32)
    wa = rng.standard_normal((4, 3)).astype(np.float32)
    x, w = t(xa, True), t(wa, True)
    with cddp.autocast("cpu"):
        y = F.linear(x, w)
        loss = (y.float() ** 2).sum()
    assert y.dtype == cddp.bfloat16 and loss.dtype == cddp.float32
    loss.backward()
    assert w.grad.dtype == cddp.float32 and x.grad.dtype == cddp.float32
    # reference: the same chain written with explicit casts
    x2, w2 = t(xa, True), t(wa, True)
    (F.linear(x2.bfloat16(), w2.bfloat16()).float() ** 2).sum().backward()
    assert np.array_equal(n(w.grad), n(w2.grad)) and np.array_equal(n(x.grad), n(x2.grad))


def test_weight_cache_within_a_region_as_torch(torch):
    """A parameter is cast once per region: an in-place change inside the region is not seen
    by later ops of the same region (torch's cache semantics); a new region sees it."""
    wa = np.ones((2, 2), np.float32)

    def run(lib):
        w = lib.tensor(wa).requires_grad_()
        x = lib.ones(1, 2)
        with lib.autocast("cpu"):
            a = lib.nn.functional.linear(x, w)
            with lib.no_grad():
                w.add_(1.0)
            b = lib.nn.functional.linear(x, w)
            (a.float().sum() + b.float().sum()).backward()
        with lib.autocast("cpu"):
            c = lib.nn.functional.linear(x, w)
        return a.float().tolist(), b.float().tolist(), c.float().tolist(), w.grad.tolist()

    got = run(cddp)
    assert got == run(torch)
    assert got[1] == got[0] and got[2] != got[0]
    assert got[3] == [[2.0, 2.0], [2.0, 2.0]]           # both uses reach the one weight


def test_cache_disabled_sees_inplace_change():
    w = cddp.ones(2, 2).requires_grad_()
    x = cddp.ones(1, 2)
    with cddp.autocast("cpu", cache_enabled=False):
        a = F.linear(x, w)
        with cddp.no_grad():
            w.add_(1.0)
        b = F.linear(x, w)
    assert b.float().tolist() == [[4.0, 4.0]] and a.float().tolist() == [[2.0, 2.0]]


def test_custom_fwd_bwd():
    class Ctx:
        pass

    @cddp.amp.custom_fwd(device_type="cpu", cast_inputs=cddp.float32)
    def fwd(ctx, a, b):
        return a @ b, cddp.is_autocast_enabled("cpu")

    @cddp.amp.custom_bwd(device_type="cpu")
    def bwd(ctx, g):
        return cddp.is_autocast_enabled("cpu"), cddp.get_autocast_dtype("cpu")

    a = cddp.randn(2, 2).bfloat16()
    ctx = Ctx()
    with cddp.autocast("cpu"):
        out, on = fwd(ctx, a, a)
    assert out.dtype == cddp.float32 and not on and ctx._fwd_used_autocast is False
    ctx2 = Ctx()

    @cddp.amp.custom_fwd(device_type="cpu")
    def fwd2(ctx, a):
        return a @ a

    with cddp.autocast("cpu", dtype=cddp.float16):
        assert fwd2(ctx2, cddp.randn(2, 2)).dtype == cddp.float16
    assert ctx2._fwd_used_autocast is True and ctx2._dtype == cddp.float16
    assert bwd(ctx2, None) == (True, cddp.float16)
    with pytest.raises(ValueError):
        cddp.amp.custom_fwd(device_type=None)


# ---- small models vs torch -------------------------------------------------------------


def _mlp_params(rng):
    shapes = ((32, 16), (32,), (8, 32), (8,))
    return [rng.standard_normal(s).astype(np.float32) * 0.3 for s in shapes]


def _mlp(lib, ps, x, y, fast):
    w1, b1, w2, b2 = [lib.tensor(p).requires_grad_() for p in ps]
    fn = lib.nn.functional
    with lib.autocast("cpu", dtype=getattr(lib, fast)):
        h = fn.relu(fn.linear(lib.tensor(x), w1, b1))
        out = fn.linear(h, w2, b2)
        loss = fn.cross_entropy(out, lib.tensor(y))
    loss.backward()
    return loss.item(), [p.grad.numpy() if lib is not cddp else n(p.grad) for p in (w1, b1, w2, b2)]


def _attn(lib, ps, x, y, fast):
    wq, wk, wv, wo, wh = [lib.tensor(p).requires_grad_() for p in ps]
    fn = lib.nn.functional
    with lib.autocast("cpu", dtype=getattr(lib, fast)):
        xt = lib.tensor(x)                                           # (B, T, D)
        q, k, v = fn.linear(xt, wq), fn.linear(xt, wk), fn.linear(xt, wv)
        att = lib.softmax(lib.matmul(q, k.transpose(1, 2)) * 0.25, -1)    # (B, T, T)
        h = fn.linear(lib.bmm(att, v), wo) + xt                     # residual: promotes
        logits = fn.linear(fn.relu(h), wh).reshape(-1, 5)
        loss = fn.cross_entropy(logits, lib.tensor(y))
    loss.backward()
    return loss.item(), [p.grad.numpy() if lib is not cddp else n(p.grad)
                         for p in (wq, wk, wv, wo, wh)]


@pytest.mark.parametrize("fast", LOW)
def test_mlp_forward_backward_vs_torch(torch, fast):
    rng = np.random.default_rng(2)
    ps = _mlp_params(rng)
    x = rng.standard_normal((12, 16)).astype(np.float32)
    y = rng.integers(0, 8, 12)
    lc, gc = _mlp(cddp, ps, x, y, fast)
    lt, gt = _mlp(torch, ps, x, y, fast)
    # measured: loss equal to 1e-7, gradients equal (same casts, fp32-accumulated GEMMs rounded
    # once, as torch's CPU kernels); the bound leaves room for a BLAS summing in another order
    assert abs(lc - lt) <= 1e-5 * abs(lt)
    for a, b in zip(gc, gt):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-3 * np.abs(b).max())


@pytest.mark.parametrize("fast", LOW)
def test_attention_block_forward_backward_vs_torch(torch, fast):
    rng = np.random.default_rng(3)
    ps = [rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((16, 16),) * 4 + ((5, 16),)]
    x = rng.standard_normal((2, 6, 16)).astype(np.float32)
    y = rng.integers(0, 5, 12)
    lc, gc = _attn(cddp, ps, x, y, fast)
    lt, gt = _attn(torch, ps, x, y, fast)
    # measured: loss equal; gradients equal for bf16, within 8e-4 of the largest for fp16 (one
    # fp16 rounding of a softmax/bmm intermediate apart)
    assert abs(lc - lt) <= 1e-5 * abs(lt)
    for a, b in zip(gc, gt):
        np.testing.assert_allclose(a, b, rtol=1e-2, atol=2e-3 * np.abs(b).max())


def test_mlp_under_autocast_tracks_float32_without_torch():
    """Non-torch oracle: the bf16 autocast loss stays within bf16's rounding of the float32 loss."""
    rng = np.random.default_rng(4)
    ps = _mlp_params(rng)
    x = rng.standard_normal((12, 16)).astype(np.float32)
    y = rng.integers(0, 8, 12)
    l16, g16 = _mlp(cddp, ps, x, y, "bfloat16")
    w1, b1, w2, b2 = [t(p, True) for p in ps]
    l32 = F.cross_entropy(F.linear(F.relu(F.linear(t(x), w1, b1)), w2, b2), t(y))
    l32.backward()
    assert abs(l16 - l32.item()) < 2e-2 * abs(l32.item())
    np.testing.assert_allclose(g16[0], n(w1.grad), atol=3e-2 * np.abs(n(w1.grad)).max())


# ---- the CUDA fallback -----------------------------------------------------------------

PROBE = """
import warnings, cddp
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with cddp.cuda.amp.autocast():
        y = cddp.randn(2, 2) @ cddp.randn(2, 2)
        on = cddp.is_autocast_enabled(), cddp.is_autocast_enabled("cuda")
    with cddp.autocast("cuda", dtype=cddp.bfloat16):
        z = cddp.randn(2, 2) @ cddp.randn(2, 2)
    with cddp.amp.autocast("cuda", enabled=False):
        u = cddp.randn(2, 2) @ cddp.randn(2, 2)
msgs = [str(i.message) for i in w]
print(sum("CUDA requested" in m for m in msgs), sum("deprecated" in m for m in msgs),
      y.dtype, z.dtype, u.dtype, *on)
"""


def test_cuda_autocast_falls_back_with_one_warning():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=subprocess_env(), cwd=tempfile.gettempdir(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "1", "cddp.float16", "cddp.bfloat16", "cddp.float32",
                                "True", "True"]


def test_cuda_autocast_strict_refuses():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=subprocess_env(CDDP_STRICT_DEVICE=1), cwd=tempfile.gettempdir(),
                       timeout=60)
    assert r.returncode != 0 and "CDDP_STRICT_DEVICE" in r.stderr and "RuntimeError" in r.stderr


# ---- ops that joined after the autocast gate: conv, conv_transpose, prelu, sdpa ----------

def _lower_ops(lib):
    F = lib.nn.functional
    rng = np.random.default_rng(11)
    x = lib.tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32), requires_grad=True)
    w = lib.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    wt = lib.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), requires_grad=True)
    a = lib.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    q = lib.tensor(rng.standard_normal((2, 5, 4)).astype(np.float32), requires_grad=True)
    outs = [F.conv2d(x, w, padding=1), F.conv_transpose2d(x, wt, stride=2),
            F.prelu(x, a), F.scaled_dot_product_attention(q, q, q)]
    return outs, [x, w, wt, a, q]


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_conv_prelu_sdpa_run_in_the_autocast_dtype_like_torch(dt):
    torch = pytest.importorskip("torch")
    with cddp.autocast("cpu", dtype=getattr(cddp, dt)):
        cout, cin = _lower_ops(cddp)
    with torch.autocast("cpu", dtype=getattr(torch, dt)):
        tout, tin = _lower_ops(torch)
    for c, r in zip(cout, tout):
        assert str(c.dtype).split(".")[-1] == str(r.dtype).split(".")[-1] == dt
        np.testing.assert_allclose(c.detach().float().numpy(), r.detach().float().numpy(),
                                   rtol=2e-2, atol=2e-2)
    sum(o.float().sum() for o in cout).backward()
    sum(o.float().sum() for o in tout).backward()
    for c, r in zip(cin, tin):
        assert c.grad.dtype == cddp.float32                     # grads in the leaves' dtype
        scale = max(1.0, float(np.abs(r.grad.numpy()).max()))
        np.testing.assert_allclose(c.grad.numpy() / scale, r.grad.numpy() / scale, atol=2e-2)


def test_conv_outside_autocast_keeps_float32_and_half_inputs_compute_in_float32():
    outs, _ = _lower_ops(cddp)
    assert all(o.dtype == cddp.float32 for o in outs)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    xh, wh = x.astype(np.float16), w.astype(np.float16)
    got = cddp.nn.functional.conv2d(cddp.tensor(xh), cddp.tensor(wh))
    assert got.dtype == cddp.float16
    want = cddp.nn.functional.conv2d(cddp.tensor(xh.astype(np.float32)),
                                     cddp.tensor(wh.astype(np.float32)))
    np.testing.assert_array_equal(got.float().numpy(), want.numpy().astype(np.float16)
                                  .astype(np.float32))         # float32 sums, rounded once
