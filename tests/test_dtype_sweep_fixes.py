"""What a systematic sweep of result dtypes, in-place operators and CPU autocast against torch
2.13 found (fifteenth session): the autocast weight cache filled under no_grad, augmented
assignments that were not in place, descending sort with NaN / the integer minimum, torch's
autocast fp32 and promote lists, RNNs on low-precision input under autocast, complex
scalars in ==, NaN clamp bounds, negative shifts, copysign / hypot / logaddexp promotion,
round(decimals=), the legacy autocast setters.

Oracles: NumPy and closed forms where they decide it; torch 2.13 (importorskip) for result
dtypes and the values of autocast regions."""
import math

import numpy as np
import pytest

import cddp


def _np(t):
    return t.detach().float().numpy() if t.dtype == cddp.bfloat16 else t.detach().numpy()


# ---- autocast ---------------------------------------------------------------------------------

def test_autocast_cast_made_under_no_grad_is_not_reused_by_a_training_pass():
    cddp.manual_seed(0)
    lin1, lin2 = cddp.nn.Linear(4, 4), cddp.nn.Linear(4, 1)
    x = cddp.ones(3, 4)
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        with cddp.no_grad():
            lin1(x)                         # an eval pass inside the region
        loss = lin2(lin1(x)).float().sum()
    loss.backward()
    assert lin1.weight.grad is not None
    # d loss / d W1 = sum over rows of (W2^T outer x): every entry is sum(W2) * 3 in bfloat16
    w2 = lin2.weight.detach().to(cddp.bfloat16).float().numpy()
    want = np.repeat(w2.T * 3.0, 4, axis=1)
    np.testing.assert_allclose(lin1.weight.grad.numpy(), want, rtol=2e-2, atol=1e-3)


def test_autocast_cache_still_shares_one_cast_in_grad_mode():
    lin = cddp.nn.Linear(4, 4)
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        a, b = lin(cddp.ones(2, 4)), lin(cddp.ones(2, 4))
    (a.float().sum() + b.float().sum()).backward()
    np.testing.assert_allclose(lin.bias.grad.numpy(), np.full(4, 4.0))


_A = (np.random.default_rng(0).standard_normal((4, 4)) + 4 * np.eye(4)).astype(np.float32)


@pytest.mark.parametrize("name,fn", [
    ("linalg.inv", lambda L, a, s: L.linalg.inv(a)),
    ("inverse", lambda L, a, s: L.inverse(a)),
    ("linalg.cholesky", lambda L, a, s: L.linalg.cholesky(s)),
    ("linalg.solve", lambda L, a, s: L.linalg.solve(a, a)),
    ("linalg.eigvalsh", lambda L, a, s: L.linalg.eigvalsh(s)),
    ("linalg.svdvals", lambda L, a, s: L.linalg.svdvals(a)),
    ("linalg.qr", lambda L, a, s: L.linalg.qr(a)[1]),
    ("linalg.lstsq", lambda L, a, s: L.linalg.lstsq(a, a).solution),
    ("pinverse", lambda L, a, s: L.pinverse(a)),
    ("trace", lambda L, a, s: L.trace(a)),
    ("quantile", lambda L, a, s: L.quantile(a, 0.3)),
    ("cdist", lambda L, a, s: L.cdist(a, a)),
])
def test_autocast_fp32_list_runs_in_float32(name, fn):
    a = cddp.tensor(_A).to(cddp.bfloat16)
    s = cddp.tensor(_A @ _A.T).to(cddp.bfloat16)
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        got = fn(cddp, a, s)
    # the same op on the float32 copies of the bfloat16 inputs, outside any region
    want = fn(cddp, a.float(), s.float())
    assert got.dtype == cddp.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_autocast_fp32_op_keeps_its_inner_matmuls_in_float32():
    # lstsq is pinv(A) @ B inside: under a bfloat16 region the product must not round
    a = cddp.tensor(_A)
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        x = cddp.linalg.lstsq(a, a).solution
    np.testing.assert_allclose(x.numpy(), np.eye(4), atol=1e-5)


def test_cholesky_of_an_autocast_product_works():
    x = cddp.tensor(_A)
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        c = cddp.linalg.cholesky(x @ x.T + 4 * cddp.eye(4))
    assert c.dtype == cddp.float32
    assert np.allclose(np.triu(c.numpy(), 1), 0)


def test_index_copy_promotes_under_autocast():
    base = cddp.zeros(3, 2)
    src = cddp.tensor([[1.5, 2.5]]).to(cddp.bfloat16)
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        out = cddp.index_copy(base, 0, cddp.tensor([1]), src)
    assert out.dtype == cddp.float32
    np.testing.assert_array_equal(out.numpy(), [[0, 0], [1.5, 2.5], [0, 0]])
    with pytest.raises(RuntimeError):       # outside a region: torch's same-dtype rule
        cddp.index_copy(base, 0, cddp.tensor([1]), src)


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_rnn_takes_low_precision_input_under_autocast(cls):
    cddp.manual_seed(0)
    m = getattr(cddp.nn, cls)(8, 6)
    x = cddp.ones(5, 2, 8)
    with cddp.autocast("cpu", dtype=cddp.bfloat16):
        y_lo = m(x.to(cddp.bfloat16))[0]
    y_f32 = m(x)[0]
    assert y_lo.dtype == cddp.bfloat16
    np.testing.assert_allclose(_np(y_lo), _np(y_f32), rtol=3e-2, atol=1e-2)
    with pytest.raises(ValueError, match="does not match weight dtype"):
        m(x.to(cddp.bfloat16))              # outside a region torch raises too


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_legacy_autocast_setters():
    assert not cddp.is_autocast_cpu_enabled()
    cddp.set_autocast_cpu_enabled(True)
    try:
        cddp.set_autocast_cpu_dtype(cddp.float16)
        assert cddp.is_autocast_cpu_enabled() and cddp.get_autocast_cpu_dtype() == cddp.float16
        assert (cddp.ones(2, 2) @ cddp.ones(2, 2)).dtype == cddp.float16
    finally:
        cddp.set_autocast_cpu_dtype(cddp.bfloat16)
        cddp.set_autocast_cpu_enabled(False)
    assert (cddp.ones(2, 2) @ cddp.ones(2, 2)).dtype == cddp.float32


# ---- augmented assignment -----------------------------------------------------------------------

@pytest.mark.parametrize("op,a,b,want", [
    ("//=", np.array([7, -7]), np.array([2, 2]), [3, -4]),
    ("%=", np.array([7, -7]), np.array([3, 3]), [1, 2]),
    ("**=", np.array([3.0, 2.0], np.float16), np.array([2.0, 2.0], np.float32), [9, 4]),
    ("&=", np.array([6, 3], np.int32), np.array([3, 1], np.int32), [2, 1]),
    ("|=", np.array([5, 6], np.int8), np.array([2, 1], np.int64), [7, 7]),
    ("^=", np.array([6, 5]), np.array([3, 3]), [5, 6]),
])
def test_augmented_assignment_is_in_place_and_keeps_the_dtype(op, a, b, want):
    x = cddp.tensor(a)
    alias, view, dt = x, x[:], x.dtype
    ns = {"x": x, "y": cddp.tensor(b)}
    exec(f"x {op} y", ns)
    assert ns["x"] is alias and ns["x"].dtype == dt
    np.testing.assert_array_equal(view.numpy(), np.array(want, dtype=a.dtype))


@pytest.mark.parametrize("op,a,b", [("//=", [7], [2.5]), ("%=", [7], [2.5]), ("&=", [True], [3])])
def test_augmented_assignment_refuses_a_result_it_cannot_hold(op, a, b):
    ns = {"x": cddp.tensor(a), "y": cddp.tensor(b)}
    with pytest.raises(RuntimeError, match="can't be cast"):
        exec(f"x {op} y", ns)


# ---- sort / topk ---------------------------------------------------------------------------------

def test_descending_sort_puts_nan_first_and_keeps_ties_in_order():
    a = np.array([1.0, np.nan, 3.0, 1.0, np.nan, -np.inf, np.inf], np.float32)
    r = cddp.sort(cddp.tensor(a), descending=True, stable=True)
    np.testing.assert_array_equal(r.indices.numpy(), [1, 4, 6, 2, 0, 3, 5])
    t = cddp.topk(cddp.tensor([np.nan, -1.0, 3.0, 0.0]), 2)
    assert math.isnan(t.values[0].item()) and t.values[1].item() == 3.0


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8])
def test_descending_sort_of_the_integer_minimum(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, 5, 0, info.max, info.min, 3], dtype)
    got = cddp.sort(cddp.tensor(a), descending=True, stable=True)
    want_idx = np.argsort(-a.astype(np.float64), kind="stable")   # exact in float64 here
    np.testing.assert_array_equal(got.indices.numpy(), want_idx)
    assert cddp.topk(cddp.tensor(a), 1).values.item() == info.max


def test_descending_sort_matches_a_reference_along_every_dim():
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 3, (4, 5, 6)).astype(np.float32)
    a[a == 2] = np.nan
    for dim in range(3):
        got = cddp.sort(cddp.tensor(a), dim=dim, descending=True, stable=True).indices.numpy()
        key = np.where(np.isnan(a), -np.inf, -a)       # NaN first, then descending
        want = np.argsort(key, axis=dim, kind="stable")
        np.testing.assert_array_equal(got, want)


# ---- pointwise -------------------------------------------------------------------------------

def test_compare_with_a_complex_scalar_is_elementwise():
    t = cddp.tensor([1.0, 2.0, np.nan])
    np.testing.assert_array_equal((t == (1 + 0j)).numpy(), [True, False, False])
    np.testing.assert_array_equal((t != 1j).numpy(), [True, True, True])
    np.testing.assert_array_equal((t == 1j).numpy(), [False, False, False])
    np.testing.assert_array_equal(((2 + 0j) == t).numpy(), [False, True, False])


def test_clamp_with_a_nan_bound_is_nan():
    x = cddp.tensor([-1.0, 1.0, 3.0])
    assert np.isnan(cddp.clamp(x, min=math.nan).numpy()).all()
    assert np.isnan(cddp.clamp(x, max=math.nan).numpy()).all()
    got = cddp.clamp(x, min=cddp.tensor([math.nan, 0.0, 0.0]))
    np.testing.assert_array_equal(got.numpy(), [np.nan, 1.0, 3.0])
    y = x.clone()
    y.clamp_(min=cddp.tensor([0.0, math.nan, 0.0]), max=cddp.tensor([2.0, 2.0, 2.0]))
    np.testing.assert_array_equal(y.numpy(), [0.0, np.nan, 2.0])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.int64])
def test_shifts_out_of_range(dtype):
    bits = np.dtype(dtype).itemsize * 8
    a = np.array([-100 if dtype != np.uint8 else 200, 7, 7, 100], dtype)
    s = np.array([bits, bits + 1, 3, 1], dtype)
    want_l = [0, 0, 56, np.array(100, dtype) << 1]
    want_r = [-1 if dtype != np.uint8 else 0, 0, 0, 50]
    np.testing.assert_array_equal((cddp.tensor(a) << cddp.tensor(s)).numpy(),
                                  np.array(want_l).astype(dtype))
    np.testing.assert_array_equal((cddp.tensor(a) >> cddp.tensor(s)).numpy(),
                                  np.array(want_r).astype(dtype))
    if dtype != np.uint8:                  # negative amounts: 0, and the sign fill
        neg = cddp.tensor(np.array([-1, -1], dtype))
        v = cddp.tensor(np.array([5, -5], dtype))
        np.testing.assert_array_equal((v << neg).numpy(), [0, 0])
        np.testing.assert_array_equal((v >> neg).numpy(), [0, -1])


def test_copysign_hypot_logaddexp_promote_like_other_binary_ops():
    i = cddp.tensor([1, -2])
    assert cddp.copysign(i, cddp.tensor([-1.0, 1.0]).half()).dtype == cddp.float16
    assert cddp.copysign(i, cddp.tensor([-1.0, 1.0]).bfloat16()).dtype == cddp.bfloat16
    assert cddp.copysign(i, cddp.tensor(-1.0, dtype=cddp.float64)).dtype == cddp.float64
    np.testing.assert_array_equal(cddp.copysign(i, -1.0).numpy(), [-1.0, -2.0])
    b, f = cddp.tensor([True, False]), cddp.tensor([3.0, 4.0])
    np.testing.assert_allclose(cddp.hypot(b, f).numpy(), np.hypot([1, 0], [3, 4]), rtol=1e-6)
    np.testing.assert_allclose(cddp.logaddexp(b, f).numpy(), np.logaddexp([1, 0], [3, 4]),
                               rtol=1e-6)
    np.testing.assert_allclose(cddp.logaddexp2(b, f).numpy(), np.logaddexp2([1, 0], [3, 4]),
                               rtol=1e-6)
    h = cddp.hypot(cddp.tensor([70000], dtype=cddp.int32), cddp.tensor([3.0]).half())
    assert h.dtype == cddp.float16 and np.isinf(h.numpy()).all()


@pytest.mark.parametrize("decimals", [-2, -1, 1, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_round_decimals_matches_the_kernel_formula(decimals, dtype):
    a = np.random.default_rng(0).standard_normal(200).astype(np.float32) * 1000
    x = cddp.tensor(a).to(getattr(cddp, dtype))
    got = cddp.round(x, decimals=decimals)
    assert got.dtype == x.dtype
    v = x.float().numpy() if dtype in ("bfloat16", "float16") else x.numpy()
    p = v.dtype.type(10.0 ** abs(decimals))
    want = np.rint(v * p) / p if decimals > 0 else np.rint(v / p) * p
    want = cddp.tensor(want).to(x.dtype)
    np.testing.assert_array_equal(_np(got), _np(want))
    np.testing.assert_array_equal(_np(x.round(decimals=decimals)), _np(want))
    y = x.clone()
    y.round_(decimals=decimals)
    np.testing.assert_array_equal(_np(y), _np(want))


def test_round_without_decimals_is_half_to_even():
    x = cddp.tensor([0.5, 1.5, 2.5, -0.5])
    np.testing.assert_array_equal(cddp.round(x).numpy(), [0.0, 2.0, 2.0, -0.0])
    out = cddp.empty(4)
    cddp.round(x, decimals=0, out=out)
    np.testing.assert_array_equal(out.numpy(), [0.0, 2.0, 2.0, -0.0])


# ---- against torch -------------------------------------------------------------------------------

def test_autocast_fp32_and_promote_lists_match_torch():
    torch = pytest.importorskip("torch")
    A = _A
    V = np.abs(np.random.default_rng(2).standard_normal((1, 2, 4, 4, 4))).astype(np.float32)

    def ops(L):
        F = L.nn.functional
        a = L.tensor(A).to(L.bfloat16)
        s = L.tensor(A @ A.T).to(L.bfloat16)
        v = L.tensor(V).to(L.bfloat16)
        return {
            "trace": lambda: L.trace(a), "quantile": lambda: L.quantile(a, 0.3),
            "nanquantile": lambda: L.nanquantile(a, 0.3),
            "adaptive_max_pool3d": lambda: F.adaptive_max_pool3d(v, 2),
            "fractional_max_pool2d": lambda: F.fractional_max_pool2d(v[0], 2, output_size=2),
            "max_unpool2d": lambda: F.max_unpool2d(*F.max_pool2d(v[0], 2, return_indices=True),
                                                   2),
            "inverse": lambda: L.inverse(a), "linalg.inv_ex": lambda: L.linalg.inv_ex(a)[0],
            "linalg.cholesky_ex": lambda: L.linalg.cholesky_ex(s)[0],
            "linalg.eigh": lambda: L.linalg.eigh(s)[0], "linalg.svd": lambda: L.linalg.svd(a)[1],
            "linalg.cond": lambda: L.linalg.cond(a),
            "linalg.matrix_rank": lambda: L.linalg.matrix_rank(a),
            "geqrf": lambda: L.geqrf(a)[0],
            "cholesky_inverse": lambda: L.cholesky_inverse(L.linalg.cholesky(s)),
            "polar": lambda: L.polar(a.abs(), a),
            "index_copy": lambda: L.index_copy(L.tensor(A), 0, L.tensor([0]), a[:1]),
        }
    for name in ops(torch):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            t = ops(torch)[name]()
        with cddp.autocast("cpu", dtype=cddp.bfloat16):
            c = ops(cddp)[name]()
        assert str(c.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], name


def test_inplace_and_sort_fixes_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    for dt in (np.float32, np.float64, np.int8, np.int64, np.uint8):
        a = rng.integers(-3, 3, (3, 7)).astype(dt)
        if dt in (np.float32, np.float64):
            a[a == 2] = np.nan
        for dim in (0, 1):
            for desc in (False, True):
                t = torch.sort(torch.tensor(a), dim=dim, descending=desc, stable=True)
                c = cddp.sort(cddp.tensor(a), dim=dim, descending=desc, stable=True)
                np.testing.assert_array_equal(c.indices.numpy(), t.indices.numpy())
    for op in ("//=", "%=", "**=", "&=", "|=", "^="):
        a, b = np.array([7, -7]), np.array([2, 3])
        if op == "**=":
            a, b = np.abs(a), np.abs(b)
        nt, nc = {"x": torch.tensor(a), "y": torch.tensor(b)}, {"x": cddp.tensor(a),
                                                                 "y": cddp.tensor(b)}
        exec(f"x {op} y", nt)
        exec(f"x {op} y", nc)
        np.testing.assert_array_equal(nc["x"].numpy(), nt["x"].numpy())


# ---- what a layout fuzz against torch found ----------------------------------------------------

def _overlapping_view_of(base):
    return cddp.as_strided(base, (2, 3, 1), (4, 2, 3), 3)     # positions 3 5 7 7 9 11


@pytest.mark.parametrize("op", [
    lambda v: v.add_(1), lambda v: v.mul_(2),
    lambda v: v.scatter_add_(0, cddp.zeros(1, 1, 1, dtype=cddp.int64), cddp.ones(1, 1, 1)),
    lambda v: v.index_add_(0, cddp.tensor([0]), cddp.ones(1, 3, 1)),
])
def test_inplace_through_an_overlapping_view_of_a_leaf_is_refused(op):
    b = cddp.ones(12, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        op(_overlapping_view_of(b))
    assert b.detach().sum().item() == 12               # nothing was written behind autograd
    with cddp.no_grad():                               # no grad mode: a plain write
        op(_overlapping_view_of(b))
    assert b.detach().sum().item() > 12


def test_inplace_through_an_overlapping_view_of_a_non_leaf_is_refused():
    x = cddp.ones(12, requires_grad=True)
    b = x * 2
    with pytest.raises(RuntimeError, match="does not track in-place operations on a view that "
                                           "overlaps itself"):
        _overlapping_view_of(b).add_(1)
    b.sum().backward()                                 # the graph is intact
    np.testing.assert_array_equal(x.grad.numpy(), np.full(12, 2.0))


@pytest.mark.parametrize("write", [
    lambda e: e.copy_(cddp.ones(3)),
    lambda e: cddp.add(cddp.ones(3), 1, out=e),
    lambda e: e.scatter_(0, cddp.tensor([0]), cddp.ones(1)),
    lambda e: e.scatter_add_(0, cddp.tensor([0]), cddp.ones(1)),
    lambda e: e.index_add_(0, cddp.tensor([0]), cddp.ones(1)),
    lambda e: e.index_copy_(0, cddp.tensor([0]), cddp.ones(1)),
    lambda e: e.masked_fill_(cddp.tensor([True, False, False]), 1.0),
    lambda e: e.put_(cddp.tensor([0]), cddp.ones(1)),
    lambda e: e.__setitem__(slice(None), 5.0),     # (e[0] = 5 writes one element: allowed)
])
def test_writes_into_an_expanded_tensor_are_refused(write):
    base = cddp.zeros(1)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        write(base.expand(3))
    assert base.item() == 0.0


def test_an_empty_expanded_tensor_takes_writes():
    e = cddp.zeros(1, 0).expand(3, 0)
    e.mul_(2)
    assert tuple(e.shape) == (3, 0)


def test_empty_slices_keep_their_start_as_offset():
    x = cddp.arange(10.0)
    assert x[7:7].storage_offset() == 7
    assert x.view(2, 5)[:, 4:4].storage_offset() == 4
    assert x.view(2, 5)[2:].storage_offset() == 10
    assert x[12:20].storage_offset() == 10              # clamped to the end, as torch
    assert x[5:2].numel() == 0 and x[5:2].storage_offset() == 5


@pytest.mark.parametrize("call", [
    lambda: cddp.where(cddp.tensor([True, False]), cddp.tensor([1, 2], dtype=cddp.int8), 1000),
    lambda: cddp.where(cddp.tensor([True]), 300, cddp.tensor([1], dtype=cddp.uint8)),
    lambda: cddp.tensor([1], dtype=cddp.int8).masked_fill(cddp.tensor([True]), 300),
    lambda: cddp.tensor([1.0], dtype=cddp.float16).masked_fill(cddp.tensor([True]), -1e9),
])
def test_out_of_range_python_numbers_raise_instead_of_wrapping(call):
    with pytest.raises(RuntimeError, match="cannot be converted to type .* without overflow"):
        call()


def test_in_range_python_numbers_still_work():
    got = cddp.where(cddp.tensor([True, False]), cddp.tensor([1, 2], dtype=cddp.int8), -128)
    assert got.dtype == cddp.int8 and got.tolist() == [1, -128]
    m = cddp.tensor([1.0, 2.0], dtype=cddp.bfloat16).masked_fill(cddp.tensor([True, False]), -1e9)
    assert m.float().tolist()[0] == pytest.approx(-1e9, rel=1e-2)
    assert cddp.tensor([1], dtype=cddp.int8).masked_fill(cddp.tensor([True]), -5).tolist() == [-5]
