"""Matrix products (matmul/@, mm, bmm, mv, dot, outer, addmm) and the BLAS behind them.

Oracles: NumPy's matmul for forward values over every shape combination torch.matmul accepts
(incl. broadcast batches, empty dims, transposed/sliced NumPy views), central finite
differences for every backward, and torch (values, gradients, grad_fn names, error messages)
when it is importable. A subprocess with CDDP_BLAS=none checks the portable GEMM the same way.
"""
import os
import subprocess
import tempfile
import sys

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t

RNG = np.random.default_rng(1234)

# (a shape, b shape): every dims case of torch.matmul
MATMUL_SHAPES = [
    ((3,), (3,)),                      # dot
    ((2, 3), (3,)),                    # mv
    ((3,), (3, 4)),                    # vector @ matrix
    ((2, 3), (3, 4)),                  # mm
    ((2, 2, 3), (3, 4)),               # batched @ matrix (folded into one GEMM)
    ((2, 2, 3), (3,)),                 # batched @ vector
    ((3,), (2, 3, 4)),                 # vector @ batched
    ((2, 3), (2, 3, 4)),               # matrix @ batched
    ((2, 2, 3), (2, 3, 4)),            # bmm
    ((1, 2, 3), (2, 3, 4)),            # broadcast batch of a
    ((2, 2, 3), (1, 3, 4)),            # broadcast batch of b
    ((2, 1, 2, 3), (3, 3, 4)),         # 4-D x 3-D broadcast
    ((4, 1, 2, 3), (1, 5, 3, 2)),      # 4-D x 4-D broadcast both ways
    ((3, 1, 3), (3, 3, 1)),            # size-1 M and N
]

EMPTY_SHAPES = [
    ((0, 3), (3, 4)),
    ((2, 3), (3, 0)),
    ((2, 0), (0, 4)),                  # K = 0: zeros
    ((0,), (0,)),                      # empty dot: 0
    ((2, 0), (0,)),
    ((0, 2, 3), (3, 4)),
    ((2, 2, 0), (2, 0, 4)),
    ((0, 2, 3), (1, 3, 4)),
]

DTYPES = [np.float32, np.float64, np.int64, np.int32]


def rand(shape, dtype=np.float64):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-5, 6, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def check_close(got, want, dtype):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if np.issubdtype(dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def copies():
    return cddp._C._blas_info()["operand_copies"]


# ---- forward against NumPy -------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES + EMPTY_SHAPES)
def test_matmul_matches_numpy(sa, sb, dtype):
    a, b = rand(sa, dtype), rand(sb, dtype)
    want = np.matmul(a, b)
    check_close(n(t(a) @ t(b)), np.asarray(want), dtype)
    check_close(n(cddp.matmul(t(a), t(b))), np.asarray(want), dtype)
    check_close(n(t(a).matmul(t(b))), np.asarray(want), dtype)


def test_k_zero_gives_zeros_and_empty_dot_is_zero():
    out = n(t(np.ones((2, 0))) @ t(np.ones((0, 3))))
    np.testing.assert_array_equal(out, np.zeros((2, 3)))
    out = t(np.ones(0, np.float32)) @ t(np.ones(0, np.float32))
    assert out.shape == () and out.item() == 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposed_views_are_not_copied(dtype):
    """NumPy .T (strides (1, ld)), row-sliced blocks (ld > cols) and batched swapaxes must reach
    BLAS as Trans/ld flags: no operand copies, same values as NumPy."""
    big = rand((7, 9), dtype)
    cases = [
        (rand((4, 3), dtype).T, rand((4, 5), dtype)),               # A^T @ B
        (rand((3, 4), dtype), rand((5, 4), dtype).T),               # A @ B^T
        (rand((4, 3), dtype).T, rand((5, 4), dtype).T),             # A^T @ B^T
        (big[1:4, 2:6], big[2:6, 1:8]),                             # ld > cols
        (big[1:5, 2:6].T, big[0:4, 3:5]),                           # transposed slice
        (np.swapaxes(rand((2, 4, 3), dtype), 1, 2), rand((2, 4, 5), dtype)),
        (rand((2, 3, 4), dtype), np.swapaxes(rand((2, 5, 4), dtype), 1, 2)),
        (rand((6, 4), dtype)[::2], rand((4, 2), dtype)),            # every other row: ld = 8
        (rand((3, 5), dtype)[:, 1], rand((3, 2), dtype)),           # strided vector @ matrix
        (rand((2, 3), dtype), rand((3, 5), dtype)[:, 2]),           # matrix @ column slice
        (rand((5, 3), dtype).T, rand((5,), dtype)),                 # gemv Trans
        (rand((3,), dtype), rand((5, 3), dtype).T),                 # vector @ A^T
        (rand((4, 6), dtype)[:, ::3][1], rand((6, 2), dtype)[::3, 1]),  # strided dot
        (rand((2, 4, 3), dtype), rand((3, 2), dtype)[:, 1]),        # batched @ column slice
        (rand((3, 2), dtype)[:, 0], np.swapaxes(rand((2, 5, 3), dtype), 1, 2)),
    ]
    for a, b in cases:
        before = copies()
        got = n(cddp.from_numpy(a) @ cddp.from_numpy(b))
        assert copies() == before, f"copied an operand for strides {a.strides} {b.strides}"
        check_close(got, np.matmul(a, b), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unaddressable_layouts_are_copied_and_correct(dtype):
    """Every-other-column slices and stride-0 broadcasts cannot go to BLAS directly; floats are
    made contiguous once (integers use the strided kernel), and values stay right."""
    a = rand((3, 8), dtype)[:, ::2]                       # column stride 2
    b = np.broadcast_to(rand((1, 5), dtype), (4, 5))      # row stride 0
    c = np.broadcast_to(rand((4, 1), dtype), (4, 5))      # column stride 0
    before = copies()
    check_close(n(cddp.from_numpy(a) @ cddp.from_numpy(b)), a @ b, dtype)
    check_close(n(cddp.from_numpy(a) @ cddp.from_numpy(c)), a @ c, dtype)
    batched = np.broadcast_to(rand((3, 4), dtype), (2, 3, 4))  # batch stride 0
    check_close(n(cddp.from_numpy(batched) @ cddp.from_numpy(b)), batched @ b, dtype)
    if dtype in (np.float32, np.float64):
        assert copies() > before


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_bmm_mv_dot_outer_match_numpy(dtype):
    a, b = rand((3, 4), dtype), rand((4, 5), dtype)
    check_close(n(cddp.mm(t(a), t(b))), a @ b, dtype)
    check_close(n(t(a).mm(t(b))), a @ b, dtype)
    x, y = rand((2, 3, 4), dtype), rand((2, 4, 5), dtype)
    check_close(n(cddp.bmm(t(x), t(y))), x @ y, dtype)
    check_close(n(t(x).bmm(t(y))), x @ y, dtype)
    v = rand((4,), dtype)
    check_close(n(cddp.mv(t(a), t(v))), a @ v, dtype)
    check_close(n(t(a).mv(t(v))), a @ v, dtype)
    w = rand((4,), dtype)
    check_close(n(cddp.dot(t(v), t(w))), np.asarray(v @ w), dtype)
    check_close(n(t(v).dot(t(w))), np.asarray(v @ w), dtype)
    u = rand((3,), dtype)
    check_close(n(cddp.outer(t(u), t(v))), np.outer(u, v), dtype)
    check_close(n(t(u).outer(t(v))), np.outer(u, v), dtype)


def test_outer_promotes_and_handles_bool():
    u, v = rand((3,), np.float32), rand((2,), np.float64)
    out = cddp.outer(t(u), t(v))
    assert out.dtype == cddp.float64
    np.testing.assert_allclose(n(out), np.outer(u.astype(np.float64), v))
    bu, bv = np.array([True, False, True]), np.array([True, False])
    out = cddp.outer(t(bu), t(bv))
    assert out.dtype == cddp.bool
    np.testing.assert_array_equal(n(out), np.outer(bu, bv))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("M,N", [(3, 5), (1, 5), (3, 1), (1, 1)])   # gemm, gemv x2, dot
def test_addmm_matches_numpy(dtype, M, N):
    m1, m2 = rand((M, 4), dtype), rand((4, N), dtype)
    for inp in (rand((M, N), dtype), rand((N,), dtype), rand((M, 1), dtype)):
        check_close(n(cddp.addmm(t(inp), t(m1), t(m2))), inp + m1 @ m2, dtype)
        check_close(n(cddp.addmm(t(inp), t(m1), t(m2), beta=2, alpha=3)),
                    (2 * inp + 3 * (m1 @ m2)).astype(dtype), dtype)
        check_close(n(t(inp).addmm(t(m1), t(m2), alpha=-1)), inp - m1 @ m2, dtype)


def test_addmm_integer_truncates_alpha_beta_as_torch():
    one = np.ones((2, 2), np.int64)
    out = cddp.addmm(t(one), t(np.ones((2, 3), np.int64)), t(np.ones((3, 2), np.int64)),
                     alpha=1.5, beta=2.7)
    np.testing.assert_array_equal(n(out), np.full((2, 2), 5))    # 2*1 + 1*3
    out = cddp.addmm(t(one), t(np.ones((2, 3), np.int64)), t(np.ones((3, 2), np.int64)),
                     beta=0.5)
    np.testing.assert_array_equal(n(out), np.full((2, 2), 3))    # beta truncates to 0


def test_addmm_beta_zero_ignores_nan_input():
    m1, m2 = rand((2, 3)), rand((3, 2))
    out = cddp.addmm(t(np.full((2, 2), np.nan)), t(m1), t(m2), beta=0, alpha=0.5)
    np.testing.assert_allclose(n(out), 0.5 * (m1 @ m2))


def test_integer_matmul_wraps_like_numpy():
    a = np.full((2, 3), 2**20, np.int32)
    b = np.full((3, 2), 2**12, np.int32)
    np.testing.assert_array_equal(n(t(a) @ t(b)), a @ b)     # 3 * 2**32 wraps to 0 in int32
    a = RNG.integers(-2**40, 2**40, size=(4, 5))
    b = RNG.integers(-2**30, 2**30, size=(5, 3))
    np.testing.assert_array_equal(n(t(a) @ t(b)), a @ b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_larger_products_fold_and_batches(dtype):
    """Sizes past the GIL-release threshold; the (B, M, K) @ (K, N) fold; a batch loop."""
    a, w = rand((4, 33, 65), dtype), rand((65, 17), dtype)
    check_close(n(t(a) @ t(w)), a @ w, dtype) if dtype == np.float64 else \
        np.testing.assert_allclose(n(t(a) @ t(w)), a @ w, rtol=1e-4, atol=1e-4)
    x, y = rand((3, 40, 50), dtype), rand((3, 50, 30), dtype)
    np.testing.assert_allclose(n(t(x) @ t(y)), x @ y, rtol=1e-4, atol=1e-4)


# ---- autograd --------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES + [((2, 0), (0, 3)), ((0, 2, 3), (3, 2))])
def test_matmul_gradcheck(sa, sb):
    gradcheck(lambda a, b: a @ b, rand(sa), rand(sb))


def test_gradcheck_named_ops():
    gradcheck(cddp.mm, rand((3, 4)), rand((4, 2)))
    gradcheck(cddp.bmm, rand((2, 3, 4)), rand((2, 4, 2)))
    gradcheck(cddp.mv, rand((3, 4)), rand((4,)))
    gradcheck(cddp.dot, rand((5,)), rand((5,)))
    gradcheck(cddp.outer, rand((3,)), rand((4,)))
    gradcheck(lambda i, a, b: cddp.addmm(i, a, b, beta=0.5, alpha=-2.0),
              rand((2, 3)), rand((2, 4)), rand((4, 3)))
    gradcheck(lambda i, a, b: cddp.addmm(i, a, b), rand((3,)), rand((2, 4)), rand((4, 3)))


def test_backward_through_transposed_views_without_copies():
    """Gradients of NumPy-transposed operands: the backward products use Trans flags too."""
    a = rand((4, 3)).T                       # (3, 4) with strides (1, 3)
    b = rand((5, 4)).T                       # (4, 5) with strides (1, 4)
    x, y = cddp.from_numpy(a), cddp.from_numpy(b)
    x.requires_grad_(True)
    y.requires_grad_(True)
    out = x @ y
    g = rand((3, 5))
    before = copies()
    out.backward(t(g))
    assert copies() == before
    np.testing.assert_allclose(n(x.grad), g @ b.T, rtol=1e-12)
    np.testing.assert_allclose(n(y.grad), a.T @ g, rtol=1e-12)


def test_shared_weight_gradient_sums_over_batch():
    """dW of x (B, T, K) @ W (K, N) sums over B and T (the fused single-GEMM path)."""
    x, w, g = rand((3, 5, 4)), rand((4, 6)), rand((3, 5, 6))
    xt, wt = t(x), t(w, requires_grad=True)
    (xt @ wt).backward(t(g))
    np.testing.assert_allclose(n(wt.grad), np.einsum("btk,btn->kn", x, g), rtol=1e-12)


def test_integer_and_no_grad_products_record_no_history():
    a = t(rand((2, 3), np.int64))
    assert (a @ t(rand((3, 2), np.int64))).grad_fn is None
    x = t(rand((2, 3)), requires_grad=True)
    with cddp.no_grad():
        assert (x @ t(rand((3, 2)))).grad_fn is None
    assert (x @ t(rand((3, 2)))).grad_fn is not None


# ---- torch oracle ----------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_values_grads_and_names_match_torch(torch, sa, sb):
    a, b = rand(sa, np.float32), rand(sb, np.float32)
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    tout = ta @ tb
    g = rand(tuple(tout.shape), np.float32)
    tout.backward(torch.tensor(g))
    ca, cb = t(a, requires_grad=True), t(b, requires_grad=True)
    out = ca @ cb
    out.backward(t(g))
    np.testing.assert_allclose(n(out), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(n(ca.grad), ta.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(n(cb.grad), tb.grad.numpy(), rtol=1e-5, atol=1e-5)
    if len(sa) <= 2 and len(sb) <= 2:
        # batched names depend on torch's fold/copy heuristics (UnsafeView/Clone/...)
        assert out.grad_fn.name() == tout.grad_fn.name()


def test_named_ops_match_torch(torch):
    def both(fn_c, fn_t, *arrays):
        cs = [t(x, requires_grad=True) for x in arrays]
        ts = [torch.tensor(x, requires_grad=True) for x in arrays]
        co, to = fn_c(*cs), fn_t(*ts)
        g = rand(tuple(to.shape), np.float32)
        co.backward(t(g))
        to.backward(torch.tensor(g))
        np.testing.assert_allclose(n(co), to.detach().numpy(), rtol=1e-5, atol=1e-5)
        for c, x in zip(cs, ts):
            np.testing.assert_allclose(n(c.grad), x.grad.numpy(), rtol=1e-5, atol=1e-5)
        assert co.grad_fn.name() == to.grad_fn.name()

    f = np.float32
    both(cddp.mm, torch.mm, rand((3, 4), f), rand((4, 2), f))
    both(cddp.bmm, torch.bmm, rand((2, 3, 4), f), rand((2, 4, 2), f))
    both(cddp.mv, torch.mv, rand((3, 4), f), rand((4,), f))
    both(cddp.dot, torch.dot, rand((6,), f), rand((6,), f))
    both(cddp.outer, torch.outer, rand((3,), f), rand((5,), f))
    both(lambda i, a, b: cddp.addmm(i, a, b, beta=0.5, alpha=2.0),
         lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=2.0),
         rand((4,), f), rand((3, 2), f), rand((2, 4), f))


BAD_CALLS = [
    # (call on module `m` and array-maker `r`, exception type)
    (lambda m, r: m.matmul(r(2, 3), r(4, 5)), RuntimeError),
    (lambda m, r: m.matmul(r(2, 3), r(3, 5).double()), RuntimeError),
    (lambda m, r: m.matmul(r(2, 3).long(), r(3, 5)), RuntimeError),
    (lambda m, r: m.matmul(r(2, 3).bool(), r(3, 2).bool()), NotImplementedError),
    (lambda m, r: m.matmul(r(3), r(4)), RuntimeError),
    (lambda m, r: m.matmul(r(3), r(3).double()), RuntimeError),
    (lambda m, r: m.matmul(r(2, 3), r(4)), RuntimeError),
    (lambda m, r: m.matmul(r(2, 3), r(3).double()), RuntimeError),
    (lambda m, r: m.matmul(r(3), r(4, 5)), RuntimeError),
    (lambda m, r: m.matmul(r(2, 2, 3), r(4, 5)), RuntimeError),
    (lambda m, r: m.matmul(r(2, 2, 3), r(4)), RuntimeError),
    (lambda m, r: m.matmul(r(4, 2, 3), r(3, 3, 5)), RuntimeError),
    (lambda m, r: m.matmul(r(2, 2, 3), r(2, 4, 5)), RuntimeError),
    (lambda m, r: m.matmul(r(2, 2, 3), r(2, 3, 5).double()), RuntimeError),
    (lambda m, r: m.matmul(r(2, 2, 3).bool(), r(2, 3, 5).bool()), NotImplementedError),
    (lambda m, r: m.matmul(r(), r(3)), RuntimeError),
    (lambda m, r: m.matmul(r(3), r()), RuntimeError),
    (lambda m, r: m.mm(r(3), r(3, 3)), RuntimeError),
    (lambda m, r: m.mm(r(3, 3), r(3)), RuntimeError),
    (lambda m, r: m.mm(r(2, 3), r(4, 3)), RuntimeError),
    (lambda m, r: m.bmm(r(2, 3), r(4, 3)), RuntimeError),
    (lambda m, r: m.bmm(r(2, 2, 3), r(4, 3)), RuntimeError),
    (lambda m, r: m.bmm(r(2, 2, 3), r(3, 3, 3)), RuntimeError),
    (lambda m, r: m.bmm(r(1, 2, 3), r(2, 3, 3)), RuntimeError),
    (lambda m, r: m.bmm(r(2, 2, 3), r(2, 3, 3).double()), RuntimeError),
    (lambda m, r: m.mv(r(2, 3), r(4)), RuntimeError),
    (lambda m, r: m.mv(r(3), r(3)), RuntimeError),
    (lambda m, r: m.mv(r(2, 3), r(3).double()), RuntimeError),
    (lambda m, r: m.dot(r(2, 3), r(3)), RuntimeError),
    (lambda m, r: m.dot(r(3), r(4)), RuntimeError),
    (lambda m, r: m.dot(r(3), r(3).double()), RuntimeError),
    (lambda m, r: m.dot(r(3).bool(), r(3).bool()), NotImplementedError),
    (lambda m, r: m.outer(r(3, 1), r(4)), RuntimeError),
    (lambda m, r: m.addmm(r(4), r(2, 3), r(3, 3)), RuntimeError),
    (lambda m, r: m.addmm(r(3), r(3), r(3, 3)), RuntimeError),
    (lambda m, r: m.addmm(r(2, 3).double(), r(2, 3), r(3, 3)), RuntimeError),
    (lambda m, r: m.addmm(r(3, 3), r(2, 3), r(3, 3)), RuntimeError),
    (lambda m, r: m.set_num_threads(0), RuntimeError),
    (lambda m, r: m.set_num_threads(1.5), RuntimeError),
]


@pytest.mark.parametrize("i", range(len(BAD_CALLS)))
def test_errors_match_torch(torch, i):
    call, exc = BAD_CALLS[i]

    class R:                      # builds the same-shaped tensors in either library
        def __init__(self, lib, make):
            self.lib, self.make = lib, make

        def __call__(self, *shape):
            return Wrap(self.lib, self.make(np.ones(shape, np.float32)))

    class Wrap:
        def __init__(self, lib, x):
            self.lib, self.x = lib, x

        def cast(self, dt):
            return self.x.to(getattr(torch, dt)) if self.lib is torch else \
                cddp.from_numpy(self.x.numpy().astype(
                    {"double": np.float64, "long": np.int64, "bool": np.bool_}[dt]))

        def double(self):
            return self.cast("double")

        def long(self):
            return self.cast("long")

        def bool(self):
            return self.cast("bool")

    class Lib:                    # unwraps Wrap arguments before calling the library function
        def __init__(self, lib):
            self.lib = lib

        def __getattr__(self, name):
            fn = getattr(self.lib, name)

            def call_(*args, **kw):
                return fn(*[a.x if isinstance(a, Wrap) else a for a in args], **kw)
            return call_

    with pytest.raises(exc) as want:
        call(Lib(torch), R(torch, torch.from_numpy))
    with pytest.raises(exc) as got:
        call(Lib(cddp), R(cddp, lambda a: cddp.from_numpy(a.copy())))
    w, g = str(want.value).split("\n")[0], str(got.value).split("\n")[0]
    # torch's wording, up to cddp's extra detail after the shared prefix (broadcast shapes)
    assert g.startswith(w[:60]), (g, w)


def test_non_tensor_operands():
    x = t(rand((2, 3)))
    with pytest.raises(TypeError, match="@"):
        x @ [1, 2, 3]
    with pytest.raises(TypeError, match="must be Tensor, not list"):
        cddp.matmul(x, [1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="unexpected keyword"):
        cddp.mm(x, mat3=x)
    with pytest.raises(TypeError, match="missing required"):
        cddp.mm(x)
    assert cddp.matmul(input=x, other=t(rand((3,)))).shape == (2,)


# ---- the BLAS library and threads ------------------------------------------------------

def test_blas_info_reports_openblas_ilp64():
    info = cddp._C._blas_info()
    assert info["backend"] == "blas"
    assert "openblas" in os.path.basename(info["library"]).lower()
    assert os.path.exists(info["library"])
    assert "sgemm" in info["sgemm"] and "dgemm" in info["dgemm"]
    assert info["ilp64"] is True          # NumPy's wheels ship ILP64 OpenBLAS
    assert info["threads"] >= 1


def test_num_threads_round_trip():
    old = cddp.get_num_threads()
    try:
        cddp.set_num_threads(1)
        assert cddp.get_num_threads() == 1
        assert cddp._C._blas_info()["threads"] == 1
        a = rand((64, 64))
        np.testing.assert_allclose(n(t(a) @ t(a)), a @ a, rtol=1e-12)
        cddp.set_num_threads(2)
        assert cddp.get_num_threads() in (1, 2)      # OpenBLAS caps at its pool size
    finally:
        cddp.set_num_threads(old)
    assert cddp.get_num_threads() == old
    with pytest.raises(RuntimeError, match="positive"):
        cddp.set_num_threads(-3)
    with pytest.raises(RuntimeError, match="expects an int"):
        cddp.set_num_threads("2")


FALLBACK_SCRIPT = r"""
import numpy as np, cddp
info = cddp._C._blas_info()
assert info["backend"].startswith("fallback") and info["library"] is None, info
assert not info["ilp64"]
rng = np.random.default_rng(0)
def chk(a, b, tol):
    got = (cddp.from_numpy(a) @ cddp.from_numpy(b)).numpy()
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=tol, atol=tol)
for dt, tol in ((np.float32, 1e-4), (np.float64, 1e-11)):
    chk(rng.standard_normal((37, 300)).astype(dt), rng.standard_normal((300, 290)).astype(dt), tol)
    chk(rng.standard_normal((300, 37)).astype(dt).T, rng.standard_normal((290, 300)).astype(dt).T, tol)
    chk(rng.standard_normal((3, 5, 8)).astype(dt)[:, :, ::2], rng.standard_normal((4, 6)).astype(dt), tol)
    chk(rng.standard_normal((2, 1, 4, 3)).astype(dt), rng.standard_normal((5, 3, 2)).astype(dt), tol)
    chk(np.ones((2, 0), dt), np.ones((0, 3), dt), tol)
x = cddp.from_numpy(rng.standard_normal((4, 3)))
w = cddp.from_numpy(rng.standard_normal((3, 2)))
x.requires_grad_(True); w.requires_grad_(True)
g = rng.standard_normal((4, 2))
cddp.addmm(cddp.from_numpy(np.zeros(2)), x, w, alpha=2.0).backward(cddp.from_numpy(g))
np.testing.assert_allclose(x.grad.numpy(), 2 * g @ w.detach().numpy().T, rtol=1e-12)
np.testing.assert_allclose(w.grad.numpy(), 2 * x.detach().numpy().T @ g, rtol=1e-12)
cddp.set_num_threads(3)
assert cddp.get_num_threads() == 3
print("fallback ok")
"""


def test_portable_gemm_without_blas():
    from conftest import subprocess_env
    env = subprocess_env(CDDP_BLAS="none")
    r = subprocess.run([sys.executable, "-c", FALLBACK_SCRIPT], cwd=tempfile.gettempdir(), env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "fallback ok" in r.stdout, r.stderr


# ---- cddp's own AVX-512 float32 GEMM (ops/linalg/sgemm_avx512.c) ------------------------

OWN_SGEMM = cddp._C._blas_info()["sgemm_kernel"].startswith("cddp avx512")
needs_own_sgemm = pytest.mark.skipif(not OWN_SGEMM, reason="CPU without AVX-512 (or CDDP_GEMM=blas)")


@pytest.fixture
def one_gemm_thread():
    old = cddp.get_num_threads()
    cddp.set_num_threads(1)          # the kernel is single-threaded: blas.c uses it only then
    yield
    cddp.set_num_threads(old)


def _f64_rel_err(got, ref):
    return np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max()


@needs_own_sgemm
@pytest.mark.parametrize("M,K,N", [(16, 32, 48), (17, 33, 49), (24, 256, 64), (25, 257, 65),
                                   (64, 576, 192), (200, 700, 1000), (193, 513, 4100)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_own_sgemm_matches_float64(one_gemm_thread, M, K, N, ta, tb):
    """Every edge of the blocking (MR=12 rows, NR=32 columns, KC=256, MC=192, NC=4096) and both
    operand orientations (packing reads along the unit stride) against a float64 product."""
    a = RNG.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
    b = RNG.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
    a, b = (a.T if ta else a), (b.T if tb else b)
    calls = cddp._C._blas_info()["own_sgemm_calls"]
    ca = cddp.from_numpy(np.ascontiguousarray(a.T)).t() if ta else cddp.from_numpy(a.copy())
    cb = cddp.from_numpy(np.ascontiguousarray(b.T)).t() if tb else cddp.from_numpy(b.copy())
    got = (ca @ cb).numpy()
    assert cddp._C._blas_info()["own_sgemm_calls"] == calls + 1
    ref = a.astype(np.float64) @ b.astype(np.float64)
    # float32 accumulation over K terms: a few ulps of the row norms
    assert _f64_rel_err(got, ref) < 2e-6 * np.sqrt(K), _f64_rel_err(got, ref)


@needs_own_sgemm
def test_own_sgemm_alpha_beta_and_nan_in_c(one_gemm_thread):
    """addmm's alpha and beta go through the kernel; beta=0 ignores C (NaN does not leak), and
    beta=1 accumulates onto it across K slices (K > 256)."""
    a, b = rand((40, 600)).astype(np.float32), rand((600, 70)).astype(np.float32)
    c = rand((40, 70)).astype(np.float32)
    ref = 0.5 * (a.astype(np.float64) @ b) + 2.0 * c
    calls = cddp._C._blas_info()["own_sgemm_calls"]
    got = cddp.addmm(t(c), t(a), t(b), beta=2.0, alpha=0.5).numpy()
    assert _f64_rel_err(got, ref) < 1e-5
    nan_c = np.full((40, 70), np.nan, np.float32)
    got0 = cddp.addmm(t(nan_c), t(a), t(b), beta=0.0).numpy()
    assert np.isfinite(got0).all()
    assert _f64_rel_err(got0, a.astype(np.float64) @ b) < 1e-5
    assert cddp._C._blas_info()["own_sgemm_calls"] == calls + 2


@needs_own_sgemm
def test_own_sgemm_leaves_small_and_threaded_products_to_blas():
    old = cddp.get_num_threads()
    try:
        cddp.set_num_threads(1)
        calls = cddp._C._blas_info()["own_sgemm_calls"]
        a = rand((64, 64)).astype(np.float32)
        np.testing.assert_allclose(n(t(a)[:, :40] @ t(a)[:40, :40]), a[:, :40] @ a[:40, :40],
                                   rtol=1e-4, atol=1e-4)           # N = 40 < 48
        d = rand((64, 64))
        np.testing.assert_allclose(n(t(d) @ t(d)), d @ d, rtol=1e-12)   # float64: BLAS
        assert cddp._C._blas_info()["own_sgemm_calls"] == calls
        cddp.set_num_threads(2)
        if cddp.get_num_threads() == 2:
            b = rand((128, 128)).astype(np.float32)
            np.testing.assert_allclose(n(t(b) @ t(b)), b @ b, rtol=1e-4, atol=1e-3)
            assert cddp._C._blas_info()["own_sgemm_calls"] == calls
    finally:
        cddp.set_num_threads(old)


GEMM_CHOICE_SCRIPT = """
import numpy as np, cddp
cddp.set_num_threads(1)
a = np.ones((100, 100), np.float32)
assert ((cddp.from_numpy(a) @ cddp.from_numpy(a)).numpy() == 100).all()
info = cddp._C._blas_info()
print(info["core"], info["own_sgemm_calls"], info["sgemm_kernel"])
"""


def _gemm_choice(**env):
    from conftest import subprocess_env
    e = subprocess_env(**env)
    for k, v in env.items():
        if v is None:
            del e[k]
    r = subprocess.run([sys.executable, "-c", GEMM_CHOICE_SCRIPT], cwd=tempfile.gettempdir(),
                       env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    core, calls, kernel = r.stdout.split(" ", 2)
    return core, int(calls), kernel.strip()


def test_cddp_gemm_blas_turns_the_own_kernel_off():
    core, calls, kernel = _gemm_choice(CDDP_GEMM="blas")
    assert (calls, kernel) == (0, "the library")


@needs_own_sgemm
@pytest.mark.parametrize("openblas_core,own", [("Haswell", True), ("SkylakeX", False)])
def test_own_sgemm_chosen_only_when_openblas_runs_older_kernels(openblas_core, own):
    """Without CDDP_GEMM the kernel runs only when OpenBLAS's kernel family predates AVX-512:
    its SkylakeX kernels are as fast, its Haswell (AVX2) ones half as fast."""
    core, calls, kernel = _gemm_choice(CDDP_GEMM=None, OPENBLAS_CORETYPE=openblas_core)
    if core != openblas_core:
        pytest.skip(f"the BLAS is not an OpenBLAS that reports its kernel family ({core})")
    assert (calls == 1) == own and kernel.startswith("cddp avx512") == own, (calls, kernel)


@pytest.mark.parametrize("scale", [0.05, 1.0, 30.0])
def test_matrix_exp_against_the_eigendecomposition(scale):
    rng = np.random.default_rng(3)
    m = rng.standard_normal((3, 5, 5))
    a = (m + m.transpose(0, 2, 1)) * scale / 2                 # symmetric: exp = V e^L V^T
    lam, v = np.linalg.eigh(a)
    want = np.einsum("bij,bj,bkj->bik", v, np.exp(lam), v)
    got = n(cddp.linalg.matrix_exp(cddp.tensor(a)))
    np.testing.assert_allclose(got, want, rtol=1e-11 * max(1.0, scale), atol=1e-13)
    th = 0.7                                                    # a rotation generator
    rot = n(cddp.matrix_exp(cddp.tensor([[0.0, -th], [th, 0.0]])))
    np.testing.assert_allclose(rot, [[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]],
                               atol=1e-15)
    assert cddp.tensor(a).matrix_exp().shape == (3, 5, 5)
    assert cddp.linalg.matrix_exp(cddp.zeros(0, 0)).shape == (0, 0)


def test_matrix_exp_gradient_and_errors():
    rng = np.random.default_rng(4)
    gradcheck(lambda x: cddp.linalg.matrix_exp(x), rng.standard_normal((2, 3, 3)))
    gradcheck(lambda x: cddp.linalg.matrix_exp(x), rng.standard_normal((4, 4)) * 8)  # squarings
    with pytest.raises(RuntimeError, match="must be batches of square matrices, but they are "
                                           "2 by 3 matrices"):
        cddp.linalg.matrix_exp(cddp.ones(2, 3))
    with pytest.raises(RuntimeError, match="Expected a floating point"):
        cddp.linalg.matrix_exp(cddp.ones(2, 2, dtype=cddp.int64))


def test_matrix_exp_matches_torch(torch):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 6, 6)) * 4
    w = rng.standard_normal((2, 6, 6))
    for dt in ("float64", "float32"):
        x = cddp.tensor(a).to(getattr(cddp, dt)).requires_grad_()
        xt = torch.tensor(a).to(getattr(torch, dt)).requires_grad_()
        y, yt = cddp.matrix_exp(x), torch.matrix_exp(xt)
        (y * cddp.tensor(w).to(y.dtype)).sum().backward()
        (yt * torch.tensor(w).to(yt.dtype)).sum().backward()
        tol = 1e-12 if dt == "float64" else 2e-5
        scale = np.abs(yt.detach().numpy()).max()
        assert np.abs(n(y) - yt.detach().numpy()).max() <= tol * scale
        gscale = np.abs(xt.grad.numpy()).max()
        assert np.abs(n(x.grad) - xt.grad.numpy()).max() <= tol * gscale
