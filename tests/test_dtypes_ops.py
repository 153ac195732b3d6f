"""Every op family on float16, bfloat16, uint8, int8 and int16: elementwise, reductions,
indexing and shape ops, random draws, matrix products, autograd, nn losses and clipping,
optimizer steps.

Against torch (same inputs, bit for bit):
  * exact: arithmetic, comparisons, bitwise/logical ops, rounding ops, sqrt/reciprocal,
    clamp/where, scalar operands (torch's rules: add rounds a Python scalar to the dtype first,
    mul/div read it unrounded), sum/mean/var/std/norm/softmax/log_softmax/logsumexp/max/
    argmax/cumsum, prod over rows of up to 32, data movement, every random draw for a seed,
    small matrix products, clip_grad_norm_;
  * within 1 ulp: transcendental ops (torch's SLEEF vs libm/Cephes in float32, then rounded);
  * within a few ulps, documented per test: losses and backward formulas (computed in float32
    and rounded once; torch rounds after each op of its composite formulas), optimizer steps
    (float32 math, each state rounded once per step; torch rounds after every op).
Without torch: NumPy in float32 rounded with np.float16 / dtype_util.bf16_round, NumPy
integer arithmetic for the wrap-around of small integers, closed forms.
"""
import warnings

import numpy as np
import pytest

import cddp
from dtype_util import (FLOATS, NEW, SMALL_INTS, bf16_round, bits, cd, data, make, round_to,
                        same_bits, to_torch, ulps, vals)


def run(f, *a):
    try:
        return f(*a)
    except Exception as e:  # noqa: BLE001 — compared against the other library's error
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"


# error texts compared word for word (the dtype-specific ones; others by exception type)
DTYPE_ERRORS = ("not implemented for", "cannot be converted", "Got unsupported", "Expected dtype",
                "only supports", "dtype must be")


def compare(label, cr, tr, tol=0):
    """cddp result cr vs torch result tr: both the same error, or same dtype/shape and bits
    (float results within `tol` ulps of their dtype)."""
    if isinstance(cr, str) or isinstance(tr, str):
        assert isinstance(cr, str) and isinstance(tr, str), (label, cr, tr)
        assert cr.split(":")[0] == tr.split(":")[0], (label, cr, tr)
        if any(k in tr for k in DTYPE_ERRORS):
            assert cr == tr.replace("torch", "cddp"), (label, cr, tr)
        return
    name = str(cr.dtype).split(".")[-1]
    if tol and name in FLOATS + ["float32"]:
        assert str(tr.dtype).endswith(name) and tuple(cr.shape) == tuple(tr.shape), label
        d = ulps(name, vals(cr), tr.detach().double().numpy())
        assert d.max(initial=0) <= tol, (label, d.max(), vals(cr)[d > tol][:4])
    else:
        assert same_bits(cr, tr), (label, vals(cr).ravel()[:6], tr.ravel()[:6])


# ---- elementwise ------------------------------------------------------------------------------

EXACT_UNARY = ["neg", "abs", "sign", "relu", "square", "floor", "ceil", "round", "trunc",
               "reciprocal", "sqrt", "logical_not", "bitwise_not", "isnan", "isinf", "isfinite"]
ULP_UNARY = ["exp", "log", "log2", "log10", "log1p", "expm1", "rsqrt", "sin", "cos", "tan",
             "tanh", "sigmoid", "erf"]
BINARY = ["add", "sub", "mul", "div", "remainder", "fmod", "floor_divide", "maximum", "minimum",
          "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor",
          "logical_and", "logical_or", "logical_xor", "pow"]
SCALARS = [3, -2, 300, 0.1, 1.0001, 2.5, True]


@pytest.mark.parametrize("name", NEW)
def test_elementwise_ops_vs_torch(torch, name):
    rng = np.random.default_rng(10)
    a, b, p = data(name, (7, 9), rng), data(name, (7, 9), rng), data(name, (7, 9), rng, pos=True)
    x, y, z = make(name, a), make(name, b), make(name, p)
    tx, ty, tz = (to_torch(torch, v) for v in (x, y, z))
    fl = name in FLOATS
    for op in EXACT_UNARY + ULP_UNARY:
        tol = 1 if op in ULP_UNARY or (not fl and op == "sqrt") else 0
        for cin, tin in ((x, tx), (x.t(), tx.t())):           # contiguous and transposed
            compare(f"{name} {op}", run(getattr(cddp, op), cin), run(getattr(torch, op), tin),
                    tol * (2 if not fl else 1))
    for op in BINARY:
        pos = op in ("div", "remainder", "fmod", "floor_divide")
        other, tother = (z, tz) if pos else (y, ty)
        # pow: 1 ulp of float16; float32 results of integer pow come from libm vs torch's SLEEF
        tol = (1 if fl else 4) if op == "pow" else 0
        cases = [(x, other, tx, tother), (x.t(), other.t(), tx.t(), tother.t()),
                 (x, other[:1], tx, tother[:1]), (x[0, 0], other, tx[0, 0], tother)]
        if not op.startswith("logical"):      # (torch takes no number there; cddp does)
            cases += [(x, s, tx, s) for s in SCALARS]
        for ca, cb, ta, tb in cases:
            compare(f"{name} {op} {cb if not hasattr(cb, 'shape') else tuple(cb.shape)}",
                    run(getattr(cddp, op), ca, cb), run(getattr(torch, op), ta, tb), tol)
    for s in (0.1, 1.0001, 3):            # reflected operators: number op tensor
        compare(f"{name} rmul", run(lambda: s * x), run(lambda: s * tx))
        compare(f"{name} rsub", run(lambda: s - x), run(lambda: s - tx))
        # float16: torch's reciprocal(x) * s, reproduced; integers give float32, where cddp
        # divides once (within 1 ulp of torch's two roundings)
        compare(f"{name} rdiv", run(lambda: s / z), run(lambda: s / tz), 0 if fl else 1)
    lo, hi = (-1.5, 2.0) if fl else (3, 100)
    compare(f"{name} clamp", run(cddp.clamp, x, lo, hi), run(torch.clamp, tx, lo, hi))
    compare(f"{name} clamp t", run(cddp.clamp, x, y, z), run(torch.clamp, tx, ty, tz))
    m, tm = x > y, tx > ty
    compare(f"{name} where", cddp.where(m, x, y), torch.where(tm, tx, ty))
    compare(f"{name} where s", run(cddp.where, m, x, 2.5), run(torch.where, tm, tx, 2.5))


@pytest.mark.parametrize("name", NEW)
def test_inplace_and_mixed_dtypes_vs_torch(torch, name):
    rng = np.random.default_rng(11)
    a, b = data(name, (4, 5), rng), data(name, (4, 5), rng, pos=True)
    for meth, arg in [("add_", 3), ("sub_", 2), ("mul_", 0.7), ("mul_", 2), ("div_", 3),
                      ("clamp_", 1), ("abs_", None), ("neg_", None)]:
        x, tx = make(name, a), to_torch(torch, make(name, a))
        args = () if arg is None else (arg,)
        compare(f"{name} {meth}{args}", run(lambda: getattr(x, meth)(*args)),
                run(lambda: getattr(tx, meth)(*args)))
        if not isinstance(x, str):
            compare(f"{name} {meth} self", x, tx)
    x, y = make(name, a), make(name, b)
    for other in ["float32", "float64", "int64", "int32", "bool"] + NEW:
        o = y.to(cd(other))
        for op in ("add", "mul", "maximum", "lt"):
            compare(f"{name} {op} {other}", run(getattr(cddp, op), x, o),
                    run(getattr(torch, op), to_torch(torch, x), to_torch(torch, o)))
        o0 = o[0, 0]                      # a 0-dim operand of another dtype
        for op in ("add", "mul", "div"):
            compare(f"{name} {op} 0-dim {other}", run(getattr(cddp, op), x, o0),
                    run(getattr(torch, op), to_torch(torch, x), to_torch(torch, o0)))


@pytest.mark.parametrize("name", FLOATS)
def test_float16_arithmetic_against_numpy(name):
    """Computed in float32 and rounded once: NumPy's float32 result rounded to the dtype."""
    rng = np.random.default_rng(12)
    a, b = data(name, (500,), rng), data(name, (500,), rng, pos=True)
    x, y = make(name, a), make(name, b)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    for got, want in [(x + y, a32 + b32), (x - y, a32 - b32), (x * y, a32 * b32),
                      (x / y, a32 / b32), (y.sqrt(), np.sqrt(b32)), (x * 0.1, a32 * np.float32(0.1)),
                      (x + 0.1, a32 + round_to(name, 0.1)[0]), (x.abs(), np.abs(a32)),
                      (cddp.maximum(x, y), np.maximum(a32, b32))]:
        assert np.array_equal(vals(got), round_to(name, want).astype(np.float64))
    e = vals(y.neg().exp())
    assert ulps(name, e, round_to(name, np.exp(-b32.astype(np.float64)))).max() <= 1
    assert np.array_equal(vals(make(name, [70000.0]) if name == "bfloat16" else
                               make(name, [60000.0]) * 2), [np.inf if name == "float16" else
                                                            float(bf16_round(70000.0)[0])])


@pytest.mark.parametrize("name", SMALL_INTS)
def test_small_integer_arithmetic_wraps_as_numpy(name):
    rng = np.random.default_rng(13)
    a = rng.integers(np.iinfo(name).min, np.iinfo(name).max + 1, 400).astype(name)
    b = rng.integers(1, np.iinfo(name).max + 1, 400).astype(name)
    x, y = cddp.from_numpy(a.copy()), cddp.from_numpy(b.copy())
    with np.errstate(over="ignore"):
        for got, want in [(x + y, a + b), (x - y, a - b), (x * y, a * b), (-x, -a), (~x, ~a),
                          (x // y, a // b), (x % y, a % b), (x & y, a & b), (x * 3, a * name_t(name, 3)),
                          (x + 300, a + name_t(name, 300 % 256 if name != "int16" else 300))]:
            assert got.dtype is cd(name) and np.array_equal(got.numpy(), want)
    assert (x / y).dtype is cddp.float32                  # true division is floating
    assert np.allclose((x / y).numpy(), a.astype(np.float64) / b, rtol=1e-6)


def name_t(name, v):
    return np.array(v).astype(name)


def test_scalar_overflow_checks_as_torch(torch):
    for name in NEW:
        x, tx = cddp.ones(3, dtype=cd(name)), torch.ones(3, dtype=getattr(torch, name))
        for f in (lambda L, t: t.add(1, alpha=300), lambda L, t: t.add(1, alpha=1e6),
                  lambda L, t: L.clamp(t, min=300), lambda L, t: L.clamp(t, min=1e6),
                  lambda L, t: t.pow(300), lambda L, t: t + 2 ** 40, lambda L, t: t < 300):
            compare(f"{name}", run(f, cddp, x), run(f, torch, tx))


# ---- reductions -----------------------------------------------------------------------------

REDUCTIONS = [("sum", {}), ("sum", {"dim": 1}), ("sum", {"dim": 0, "keepdim": True}),
              ("mean", {}), ("mean", {"dim": 0}), ("prod", {"dim": 1}), ("cumsum", {"dim": 1}),
              ("cumsum", {"dim": 0}), ("max", {}), ("min", {}), ("amax", {"dim": 1}),
              ("amin", {"dim": 0}), ("argmax", {"dim": 1}), ("argmin", {}), ("std", {}),
              ("var", {"dim": 1}), ("norm", {}), ("norm", {"dim": 1}), ("norm", {"p": 1}),
              ("softmax", {"dim": 1}), ("softmax", {"dim": 0}), ("log_softmax", {"dim": 1}),
              ("log_softmax", {"dim": 0}), ("logsumexp", {"dim": 1}), ("all", {}),
              ("any", {"dim": 1}), ("sum", {"dtype": "float32"})]


@pytest.mark.parametrize("name", NEW)
def test_reductions_vs_torch(torch, name):
    rng = np.random.default_rng(20)
    a = data(name, (20, 30), rng) / (100 if name in FLOATS else 1)
    x = make(name, round_to(name, a) if name in FLOATS else a)
    tx = to_torch(torch, x)
    for op, kw in REDUCTIONS:
        ck = {k: cd(v) if k == "dtype" else v for k, v in kw.items()}
        tk = {k: getattr(torch, v) if k == "dtype" else v for k, v in kw.items()}
        for k, (cin, tin) in enumerate(((x, tx), (x.t().contiguous().t(), tx.t().contiguous().t()))):
            # torch's softmax over a non-last (or strided) dim rounds the exponentials to the
            # dtype before summing: within 1 ulp there, bit for bit elsewhere
            soft = op in ("softmax", "log_softmax") and (kw["dim"] == 0 or k == 1)
            # sum(dtype=float32): float32's own sum (double accumulation here, float in torch)
            tol = 1 if (soft and name in FLOATS) or "dtype" in kw else 0
            compare(f"{name} {op} {kw}", run(lambda: getattr(cin, op)(**ck)),
                    run(lambda: getattr(tin, op)(**tk)), tol)


def test_integer_reduction_dtypes_closed_form():
    u = cddp.tensor([200, 100, 3], dtype=cddp.uint8)
    assert u.sum().dtype is cddp.int64 and u.sum().item() == 303
    assert u.cumsum(0).tolist() == [200, 300, 303] and u.prod().item() == 60000
    assert u.all().dtype is cddp.uint8 and u.any(0).item() == 1       # torch keeps uint8
    assert cddp.tensor([-1, 0], dtype=cddp.int8).all().dtype is cddp.bool
    assert u.max().dtype is cddp.uint8 and u.argmax().item() == 0
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype.*Byte"):
        u.mean()
    with pytest.raises(RuntimeError, match="std and var only support floating point"):
        u.std()
    with pytest.raises(NotImplementedError, match="softmax_lastdim_kernel_impl.*Char"):
        u.char().softmax(0)
    with pytest.raises(RuntimeError, match="vector_norm: Expected a floating point.*Short"):
        u.short().norm()


@pytest.mark.parametrize("name", FLOATS)
def test_float16_reductions_accumulate_in_float(name):
    """Sums far past float16's range of exact integers: accumulated in float (not rounded per
    step), one rounding at the end."""
    x = cddp.ones(5000, dtype=cd(name))
    assert x.sum().item() == float(round_to(name, 5000.0)[0])      # per-step rounding stalls at 2048 / 256
    assert x.mean().item() == 1.0 and x.sum().dtype is cd(name)
    rng = np.random.default_rng(21)
    a = data(name, (8, 50), rng) / 300
    s = vals(make(name, a).softmax(1))
    e = np.exp(a - a.max(1, keepdims=True))
    assert ulps(name, s, round_to(name, e / e.sum(1, keepdims=True))).max() <= 1
    assert ulps(name, vals(make(name, a).var(1)), round_to(name, a.var(1, ddof=1))).max() <= 1


# ---- indexing and shape ops (pure data movement: any dtype, every bit) ------------------------

@pytest.mark.parametrize("name", NEW)
def test_data_movement_keeps_every_bit(name):
    rng = np.random.default_rng(30)
    a = data(name, (6, 5), rng)
    if name in FLOATS:
        a[0, :3] = [np.nan, np.inf, -np.inf]
    x = make(name, a)
    raw = bits(x)
    idx = cddp.tensor([[0, 4], [2, 2], [1, 0], [3, 1], [4, 4], [0, 0]])
    m = cddp.from_numpy(raw % 3 == 0)
    cases = [(x.t().contiguous(), raw.T), (x.gather(1, idx), np.take_along_axis(raw, idx.numpy(), 1)),
             (x.index_select(0, cddp.tensor([5, 0, 3])), raw[[5, 0, 3]]), (x[m], raw[m.numpy()]),
             (x[[1, 1, 4]], raw[[1, 1, 4]]), (cddp.cat([x, x[:2]]), np.concatenate([raw, raw[:2]])),
             (cddp.stack([x, x]), np.stack([raw, raw])), (x.flatten(), raw.reshape(-1)),
             (x[:, ::2].clone(), raw[:, ::2]), (x.unsqueeze(0).expand(3, 6, 5).contiguous(),
                                                np.broadcast_to(raw, (3, 6, 5))),
             (x.narrow(1, 1, 3).contiguous(), raw[:, 1:4]), (cddp.chunk(x, 3)[1], raw[2:4]),
             (x.unbind(1)[2], raw[:, 2]), (x.permute(1, 0).reshape(-1), raw.T.reshape(-1))]
    for i, (got, want) in enumerate(cases):
        assert got.dtype is x.dtype and np.array_equal(bits(got), want), (name, i)
    y = x.clone()
    y[[0, 2]] = x[[3, 4]]
    want = raw.copy()
    want[[0, 2]] = raw[[3, 4]]
    assert np.array_equal(bits(y), want)
    z = cddp.zeros(6, 5, dtype=x.dtype).scatter(1, idx, x[:, :2])
    assert z.dtype is x.dtype
    mf = x.masked_fill(m, 1)
    assert np.array_equal(vals(mf)[m.numpy()], np.ones(int(m.numpy().sum())))
    assert np.array_equal(bits(mf)[~m.numpy()], raw[~m.numpy()])


def test_accumulating_index_ops_vs_torch(torch):
    for name in NEW:
        rng = np.random.default_rng(31)
        src = make(name, data(name, (40,), rng) / (30 if name in FLOATS else 1))
        idx = cddp.from_numpy(rng.integers(0, 5, 40))
        base = make(name, np.zeros(5))
        tsrc, tidx, tbase = to_torch(torch, src), torch.from_numpy(idx.numpy()), to_torch(torch, base)
        compare(f"{name} scatter_add", base.scatter_add(0, idx, src), tbase.scatter_add(0, tidx, tsrc))
        compare(f"{name} index_put acc", base.clone().index_put_((idx,), src, accumulate=True),
                tbase.clone().index_put_((tidx,), tsrc, accumulate=True))


def test_index_dtype_rules_as_torch(torch):
    x, tx = cddp.arange(5.0), torch.arange(5.0)
    for name in SMALL_INTS:
        k = [1, 0, 1, 0, 1]
        ck, tk = cddp.tensor(k, dtype=cd(name)), torch.tensor(k, dtype=getattr(torch, name))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compare(f"{name} getitem", run(lambda: x[ck]), run(lambda: tx[tk]))
            compare(f"{name} where", run(cddp.where, ck, x, 0.0), run(torch.where, tk, tx, 0.0))
        for f in (lambda L, a, i: a.index_select(0, i[:2]), lambda L, a, i: a.gather(0, i[:2]),
                  lambda L, a, i: a.masked_fill(i, 0.0)):
            compare(f"{name}", run(f, cddp, x, ck), run(f, torch, tx, tk))


# ---- random ---------------------------------------------------------------------------------

def random_cases(name):
    fl = name in FLOATS
    cases = [("randint", lambda L, d: L.randint(0, 10, (20,), dtype=d)),
             ("randperm", lambda L, d: L.randperm(20, dtype=d)),
             ("randperm big", lambda L, d: L.randperm(3000, dtype=d)),
             ("bernoulli_", lambda L, d: L.empty(20, dtype=d).bernoulli_(0.3)),
             ("exponential_", lambda L, d: L.empty(20, dtype=d).exponential_())]
    cases += [(f"random_{a}", lambda L, d, a=a: L.empty(20, dtype=d).random_(*a))
              for a in [(0, 300), (-1, 5), (5,), (3000,), (0, 70000), ()]]
    if fl:
        for k in (5, 16, 17, 37, 100):
            cases += [(f"randn {k}", lambda L, d, k=k: L.randn(k, dtype=d)),
                      (f"rand {k}", lambda L, d, k=k: L.rand(k, dtype=d)),
                      (f"normal_ {k}", lambda L, d, k=k: L.empty(k, dtype=d).normal_(1.5, 0.3)),
                      (f"uniform_ {k}", lambda L, d, k=k: L.empty(k, dtype=d).uniform_(-2.3, 3.7)),
                      (f"strided {k}", lambda L, d, k=k: L.empty(2 * k, dtype=d)[::2].normal_())]
        cases += [("randn 2d", lambda L, d: L.randn(7, 9, dtype=d)),
                  ("normal t", lambda L, d: L.normal(L.zeros(20, dtype=d), L.full((20,), 0.7, dtype=d))),
                  ("bernoulli t", lambda L, d: L.empty(20, dtype=d).bernoulli_(L.full((20,), 0.3, dtype=d))),
                  ("multinomial", lambda L, d: L.multinomial(L.ones(5, dtype=d), 3, replacement=True)),
                  ("rand_like", lambda L, d: L.rand_like(L.zeros(20, dtype=d))),
                  ("randn_like", lambda L, d: L.randn_like(L.zeros(20, dtype=d)))]
    else:
        cases += [("rand", lambda L, d: L.rand(3, dtype=d)), ("randn", lambda L, d: L.randn(3, dtype=d))]
    return cases


@pytest.mark.parametrize("name", NEW)
def test_random_draws_bit_for_bit_vs_torch(torch, name):
    for label, f in random_cases(name):
        res = []
        for lib in (cddp, torch):
            lib.manual_seed(7)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res.append(run(f, lib, getattr(lib, name)))
        compare(f"{name} {label}", *res)


@pytest.mark.parametrize("name", FLOATS)
def test_reduced_random_closed_forms(name):
    """rand(dtype) is the float32 draw rounded, kept half-open ([0, 1)); randn of 16k values is
    the float32 kernel's blocks rounded (torch's scheme)."""
    cddp.manual_seed(3)
    r = vals(cddp.rand(4000, dtype=cd(name)))
    cddp.manual_seed(3)
    f = round_to(name, cddp.rand(4000).numpy()).astype(np.float64)
    f[f >= 1.0] = 0.0
    assert np.array_equal(r, f) and r.max() < 1
    cddp.manual_seed(5)
    g = vals(cddp.randn(64, dtype=cd(name)))
    cddp.manual_seed(5)
    assert np.array_equal(g, round_to(name, cddp.randn(64).numpy()))


# ---- matrix products --------------------------------------------------------------------------

def matrices(name, rng, *shape):
    if name in FLOATS:
        return data(name, shape, rng, specials=False) / 64
    return rng.integers(0 if name == "uint8" else -5, 6, shape).astype(np.float64)


@pytest.mark.parametrize("name", NEW)
def test_matrix_products_vs_torch(torch, name):
    rng = np.random.default_rng(40)
    M = {k: make(name, round_to(name, v) if name in FLOATS else v) for k, v in
         [("a", matrices(name, rng, 8, 33)), ("b", matrices(name, rng, 33, 5)),
          ("v", matrices(name, rng, 33)), ("w", matrices(name, rng, 5)),
          ("x3", matrices(name, rng, 3, 8, 33)), ("y3", matrices(name, rng, 3, 33, 5)),
          ("i", matrices(name, rng, 8, 5))]}
    T = {k: to_torch(torch, v) for k, v in M.items()}
    cases = [lambda L, m: m["a"] @ m["b"], lambda L, m: m["a"].mm(m["b"]), lambda L, m: m["a"].mv(m["v"]),
             lambda L, m: m["v"].dot(m["v"]), lambda L, m: m["x3"].bmm(m["y3"]),
             lambda L, m: m["x3"] @ m["b"], lambda L, m: L.outer(m["v"], m["w"]),
             lambda L, m: m["b"].t() @ m["a"].t(),
             lambda L, m: L.addmm(m["i"], m["a"], m["b"]),
             lambda L, m: L.addmm(m["i"], m["a"], m["b"], beta=2, alpha=3)]
    for k, f in enumerate(cases):
        compare(f"{name} product {k}", run(f, cddp, M), run(f, torch, T))


@pytest.mark.parametrize("name", NEW)
def test_matrix_products_against_numpy(name):
    """float16/bfloat16: the float32 product rounded (within 1 ulp: summation order); small
    integers: exact, modulo 2^bits."""
    rng = np.random.default_rng(41)
    a, b = matrices(name, rng, 16, 64), matrices(name, rng, 64, 7)
    if name in FLOATS:
        a, b = round_to(name, a).astype(np.float64), round_to(name, b).astype(np.float64)
    got = (make(name, a) @ make(name, b))
    if name in FLOATS:
        want = round_to(name, a.astype(np.float32) @ b.astype(np.float32))
        assert ulps(name, vals(got), want).max() <= 1
    else:
        want = (a.astype(np.int64) @ b.astype(np.int64)).astype(name)
        assert got.dtype is cd(name) and np.array_equal(got.numpy(), want)


# ---- autograd, nn, optim ------------------------------------------------------------------------

@pytest.mark.parametrize("name", FLOATS)
def test_autograd_in_float16(torch, name):
    rng = np.random.default_rng(50)
    a = round_to(name, rng.standard_normal((4, 6)))
    w = round_to(name, rng.standard_normal((3, 6)) / 3)

    def model(L, x, W, b):
        h = L.nn.functional.linear(x, W, b).tanh() * 2 + x[:, :3].sigmoid()
        return (h.softmax(1) * h).sum() + (x * x).mean() + h.exp().sum() / 10

    grads = []
    for L in (cddp, torch):
        d = getattr(L, name)
        x = L.tensor(a.astype(np.float64).tolist(), dtype=d, requires_grad=True)
        W = L.tensor(w.astype(np.float64).tolist(), dtype=d, requires_grad=True)
        b = L.zeros(3, dtype=d, requires_grad=True)
        out = model(L, x, W, b)
        out.backward()
        assert out.dtype == d and x.grad.dtype == d and W.grad.dtype == d and b.grad.dtype == d
        grads.append([vals(g.grad) if L is cddp else g.grad.double().numpy() for g in (x, W, b)])
    for g1, g2 in zip(*grads):           # float32-then-round vs torch's per-op rounding
        assert np.allclose(g1, g2, rtol=2 ** -6, atol=2 ** -9), (g1, g2)


def test_accumulate_grad_rounds_each_sum():
    x = cddp.tensor([1.0, 2048.0], dtype=cddp.float16, requires_grad=True)
    (x * 1.0009765625).sum().backward()                   # grads 1 + 2^-10, exact in float16
    (x * 0.0009765625).sum().backward()                   # + 2^-10: the sum is a half tie
    assert x.grad.dtype is cddp.float16
    assert vals(x.grad).tolist() == [1.001953125, 1.001953125]
    y = cddp.ones(3, dtype=cddp.bfloat16, requires_grad=True)
    y.float().sum().backward()                            # ToCopyBackward casts back
    assert y.grad.dtype is cddp.bfloat16 and vals(y.grad).tolist() == [1, 1, 1]


@pytest.mark.parametrize("name", FLOATS)
def test_losses_and_clipping_vs_torch(torch, name):
    rng = np.random.default_rng(51)
    logits = round_to(name, rng.standard_normal((6, 5)) * 2)
    target = rng.integers(0, 5, 6)
    res = []
    for L in (cddp, torch):
        d = getattr(L, name)
        x = L.tensor(logits.astype(np.float64).tolist(), dtype=d, requires_grad=True)
        t = L.tensor(target.tolist())
        F = L.nn.functional
        losses = [F.cross_entropy(x, t), F.nll_loss(x.log_softmax(1), t),
                  F.mse_loss(x, L.zeros(6, 5, dtype=d)), F.cross_entropy(x, t, reduction="none")]
        sum(l.sum() for l in losses).backward()
        res.append([vals(l) if L is cddp else l.detach().double().numpy() for l in losses] +
                   [vals(x.grad) if L is cddp else x.grad.double().numpy()])
    # torch rounds log-softmax's sum to the dtype before its log (and each op after): within
    # two ulps of the dtype at max(1, |value|) of cddp's once-rounded results
    eps = cddp.finfo(cd(name)).eps
    for k, (u, v) in enumerate(zip(*res)):
        assert np.all(np.abs(u - v) <= 2 * eps * np.maximum(1, np.abs(v))), (k, u, v)
    # clip_grad_norm_ / clip_grad_value_: torch's sequence of rounded steps, bit for bit
    for p_norm, mx in [(2.0, 1.0), (1.0, 0.1), (float("inf"), 100.0), (3.0, 0.5)]:
        gs = [round_to(name, rng.standard_normal(s) * 3) for s in [(5, 3), (7,), (2, 2, 2)]]
        out = []
        for L in (cddp, torch):
            ps = [L.nn.Parameter(L.zeros(g.shape, dtype=getattr(L, name))) for g in gs]
            for p, g in zip(ps, gs):
                p.grad = L.tensor(g.astype(np.float64).tolist(), dtype=getattr(L, name))
            out.append((L.nn.utils.clip_grad_norm_(ps, mx, norm_type=p_norm), ps))
        assert same_bits(out[0][0], out[1][0]), (p_norm, mx)
        for a, b in zip(out[0][1], out[1][1]):
            assert same_bits(a.grad, b.grad), (p_norm, mx)


def sgd_reference(w, g, b, lr, mom, wd, nesterov, name):
    """One SGD step in NumPy float32 with each state rounded once (the documented contract)."""
    w32, g32 = w.astype(np.float32), g.astype(np.float32)
    d = g32 + np.float32(wd) * w32
    v = d if b is None else b.astype(np.float32) * np.float32(mom) + np.float32(1) * d
    step = d + np.float32(mom) * v if nesterov else v
    return round_to(name, w32 + np.float32(-lr) * step), round_to(name, v)


@pytest.mark.parametrize("name", FLOATS)
def test_optimizer_steps_on_float16_params(torch, name):
    rng = np.random.default_rng(52)
    w0 = round_to(name, rng.standard_normal(40))
    grads = [round_to(name, rng.standard_normal(40)) for _ in range(3)]
    p = cddp.nn.Parameter(make(name, w0))
    opt = cddp.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
    w, b = w0, None
    for g in grads:                                        # NumPy oracle: float32 math, rounded
        p.grad = make(name, g)
        opt.step()
        w, b = sgd_reference(w, g, b, 0.1, 0.9, 0.01, True, name)
        assert np.array_equal(vals(p), w)
        assert opt.state[p]["momentum_buffer"].dtype is cd(name)
        assert np.array_equal(vals(opt.state[p]["momentum_buffer"]), b)
    for cls, kw in [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=1e-2)),
                    ("AdamW", dict(lr=1e-2, amsgrad=True, weight_decay=0.1))]:
        got = []
        for L in (cddp, torch):
            q = L.nn.Parameter(L.tensor(w0.astype(np.float64).tolist(), dtype=getattr(L, name)))
            o = getattr(L.optim, cls)([q], **kw)
            for g in grads:
                q.grad = L.tensor(g.astype(np.float64).tolist(), dtype=getattr(L, name))
                o.step()
            st = o.state[q]
            assert all(v.dtype == getattr(L, name) for k, v in st.items() if k != "step")
            got.append(vals(q) if L is cddp else q.detach().double().numpy())
        # float32 math rounded once per state vs torch's rounding after every op
        assert ulps(name, got[0], got[1]).max() <= 4, cls
