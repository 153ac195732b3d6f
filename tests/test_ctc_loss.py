"""F.ctc_loss and nn.CTCLoss (csrc/nn/ctc.c): the loss against a brute-force sum over every
alignment (NumPy, float64), the gradient against central differences, and, when torch is
importable, losses and gradients equal torch's for every reduction, zero_infinity, padded and
concatenated targets, unbatched input, float32/float64, repeated labels, blank != 0 and raw
(not log-softmaxed) inputs; bad arguments raise torch's exception types, never crash.

torch's backward is exp(log_probs) - posterior occupancy (the gradient w.r.t. the logits of a
log_softmax), not d loss / d log_probs: cddp returns the same numbers, and the finite-difference
test checks the identity that links the two.
"""
import itertools

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F
from conftest import n, t

RNG = np.random.default_rng(7)


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def collapse(path, blank):
    out, prev = [], None
    for c in path:
        if c != prev and c != blank:
            out.append(c)
        prev = c
    return out


def brute_nll(lp, target, blank):
    """-log sum over all C^T paths through lp (T, C) that collapse to target."""
    T, C = lp.shape
    total = 0.0
    for path in itertools.product(range(C), repeat=T):
        if collapse(path, blank) == list(target):
            total += np.exp(sum(lp[k, c] for k, c in enumerate(path)))
    return -np.log(total) if total > 0 else np.inf


def cddp_losses(lp, targets, il, tl, **kw):
    return F.ctc_loss(t(lp), t(targets), t(np.array(il, dtype=np.int64)),
                      t(np.array(tl, dtype=np.int64)), reduction="none", **kw)


# (input length, target) pairs for a T = 5, C = 3 brute force; blank chosen per case
CASES = [(5, [1, 2]), (5, [1, 1]), (4, [2, 1, 2]), (3, [1, 1]), (5, []), (2, [1, 1, 1]),
         (1, [2]), (0, []), (0, [1]), (5, [2, 2, 2])]


@pytest.mark.parametrize("blank", [0, 2])
@pytest.mark.parametrize("normalised", [True, False])
def test_loss_equals_brute_force_sum_over_alignments(blank, normalised):
    T, C = 5, 3
    x = RNG.standard_normal((T, len(CASES), C))
    lp = log_softmax(x) if normalised else x
    # relabel so the blank index is never used as a label (swap blank and 0)
    tgts = [[(0 if c == blank else c) if blank else c for c in tg] for _, tg in CASES]
    S = max(len(tg) for tg in tgts)
    padded = np.full((len(CASES), S), -1, dtype=np.int64)   # -1 padding is never read
    for b, tg in enumerate(tgts):
        padded[b, :len(tg)] = tg
    il = [k for k, _ in CASES]
    tl = [len(tg) for tg in tgts]
    got = n(cddp_losses(lp, padded, il, tl, blank=blank))
    want = [brute_nll(lp[:il[b], b], tgts[b], blank) if il[b] else (0.0 if not tgts[b] else np.inf)
            for b in range(len(CASES))]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.isinf(got[5]) and np.isinf(got[8])        # impossible targets


def test_gradient_by_finite_differences():
    """d loss / d logits through log_softmax equals central differences of the loss; and
    torch's (and cddp's) d / d log_probs minus exp(log_probs) is the true d nll / d lp."""
    T, N, C = 5, 3, 4
    z = RNG.standard_normal((T, N, C))
    tg = np.array([[1, 1, 3], [2, 3, 0], [3, 0, 0]])
    il, tl = [5, 4, 2], [3, 2, 1]
    w = RNG.standard_normal(N)

    def f(zz, ls):
        with cddp.no_grad():
            lp = t(zz).log_softmax(2) if ls else t(zz)
            return float((n(F.ctc_loss(lp, t(tg), t(np.array(il)), t(np.array(tl)),
                                       reduction="none")) * w).sum())

    def fd(ls, h=1e-6):
        g = np.zeros_like(z)
        for idx in np.ndindex(z.shape):
            a, b = z.copy(), z.copy()
            a[idx] += h
            b[idx] -= h
            g[idx] = (f(a, ls) - f(b, ls)) / (2 * h)
        return g

    zt = t(z, requires_grad=True)
    (F.ctc_loss(zt.log_softmax(2), t(tg), t(np.array(il)), t(np.array(tl)), reduction="none") *
     t(w)).sum().backward()
    np.testing.assert_allclose(n(zt.grad), fd(True), rtol=1e-6, atol=1e-8)

    lt = t(z, requires_grad=True)     # raw inputs: grad - exp(lp) * w is d nll / d lp
    (F.ctc_loss(lt, t(tg), t(np.array(il)), t(np.array(tl)), reduction="none") *
     t(w)).sum().backward()
    mask = (np.arange(T)[:, None] < np.array(il)[None, :])[..., None]
    np.testing.assert_allclose(n(lt.grad) - mask * np.exp(z) * w[None, :, None], fd(False),
                               rtol=1e-6, atol=1e-8)
    assert (n(lt.grad)[2:, 2] == 0).all() and (n(lt.grad)[4:, 1] == 0).all()   # t >= length


def test_reductions_and_zero_infinity():
    T, C = 4, 3
    lp = log_softmax(RNG.standard_normal((T, 3, C)))
    tg = np.array([[1, 2, 0], [1, 1, 1], [0, 0, 0]])
    il, tl = [4, 4, 3], [2, 3, 0]                # sample 1 impossible: [1, 1, 1] needs 5 steps
    per = n(cddp_losses(lp, tg, il, tl))
    assert np.isinf(per[1])
    zi = n(cddp_losses(lp, tg, il, tl, zero_infinity=True))
    assert zi[1] == 0 and zi[0] == per[0] and zi[2] == per[2]
    args = (t(lp), t(tg), t(np.array(il)), t(np.array(tl)))
    assert F.ctc_loss(*args, reduction="sum", zero_infinity=True).item() == pytest.approx(zi.sum())
    mean = F.ctc_loss(*args, reduction="mean", zero_infinity=True).item()
    assert mean == pytest.approx(np.mean(zi / np.maximum(tl, 1)))
    x = t(lp, requires_grad=True)
    F.ctc_loss(x, *args[1:], reduction="sum", zero_infinity=True).backward()
    assert np.isfinite(n(x.grad)).all() and (n(x.grad)[:, 1] == 0).all()
    x = t(lp, requires_grad=True)
    F.ctc_loss(x, *args[1:], reduction="none").sum().backward()
    assert np.isnan(n(x.grad)[:, 1]).all() and np.isfinite(n(x.grad)[:, [0, 2]]).all()


def test_concatenated_targets_unbatched_and_module():
    lp = log_softmax(RNG.standard_normal((6, 2, 4)))
    padded = np.array([[1, 2, 3], [3, 3, -7]])
    il, tl = [6, 5], [3, 2]
    a = n(cddp_losses(lp, padded, il, tl))
    b = n(cddp_losses(lp, np.array([1, 2, 3, 3, 3]), il, tl))
    c = n(F.ctc_loss(t(lp), t(padded), (6, 5), [3, 2], reduction="none"))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    u = F.ctc_loss(t(lp[:, 1]), t(padded[1, :2]), (5,), (2,), reduction="none")
    assert u.shape == () and u.item() == pytest.approx(a[1], rel=1e-12)
    m = cddp.nn.CTCLoss(blank=0, reduction="sum", zero_infinity=True)
    assert (m.blank, m.reduction, m.zero_infinity) == (0, "sum", True)
    assert repr(m) == "CTCLoss()"
    assert m(t(lp), t(padded), t(np.array(il)), t(np.array(tl))).item() == pytest.approx(a.sum())
    assert F.ctc_loss(t(lp), t(padded), (6, 5), (3, 2)).grad_fn is None


def test_float32_and_grad_fn():
    lp = log_softmax(RNG.standard_normal((6, 2, 4))).astype(np.float32)
    x = t(lp, requires_grad=True)
    out = F.ctc_loss(x, t(np.array([[1, 2], [3, 3]])), (6, 5), (2, 2), reduction="none")
    assert out.dtype == cddp.float32 and out.grad_fn.name() == "CtcLossBackward0"
    want = n(cddp_losses(lp.astype(np.float64), np.array([[1, 2], [3, 3]]), [6, 5], [2, 2]))
    np.testing.assert_allclose(n(out), want, rtol=1e-6)
    out.sum().backward()
    assert x.grad.dtype == cddp.float32


def test_target_values_out_of_range_are_refused():
    lp = t(log_softmax(RNG.standard_normal((4, 2, 3))))
    for bad in ([[1, 3], [1, 2]], [[1, 2], [-1, 2]]):
        with pytest.raises(RuntimeError, match="label range"):
            F.ctc_loss(lp, t(np.array(bad)), (4, 4), (2, 2))
    with pytest.raises(RuntimeError, match="label range"):
        F.ctc_loss(lp, t(np.array([1, 2, 99])), (4, 4), (2, 1))


def test_huge_lengths_do_not_crash():
    lp = t(log_softmax(RNG.standard_normal((4, 2, 3))))
    big = 2 ** 62
    for il, tl, tg in [((big, 4), (1, 1), [[1], [2]]), ((4, 4), (big, 1), [1, 2]),
                       ((4, 4), (big, big), [1, 2]), ((-big, 4), (1, 1), [[1], [2]]),
                       ((4, 4), (1, -big), [1, 2])]:
        with pytest.raises(RuntimeError):
            F.ctc_loss(lp, t(np.array(tg)), il, tl)


def test_saved_log_probs_modified_in_place_is_caught():
    x = t(log_softmax(RNG.standard_normal((4, 1, 3))), requires_grad=True)
    y = x * 1.0
    loss = F.ctc_loss(y, t(np.array([[1]])), (4,), (1,))
    with cddp.no_grad():
        y.add_(1.0)
    with pytest.raises(RuntimeError):
        loss.backward()


# ---- torch as the oracle ---------------------------------------------------------------


def _both(torch, lp, tg, il, tl, lengths_as, **kw):
    """(torch loss, torch grad, cddp loss, cddp grad) for the same arguments."""
    tx = torch.tensor(lp, requires_grad=True)
    cx = t(lp, requires_grad=True)
    if lengths_as == "tensor":
        ta = (torch.tensor(il), torch.tensor(tl))
        ca = (t(np.array(il, dtype=np.int64)), t(np.array(tl, dtype=np.int64)))
    else:
        ta = ca = (tuple(il), list(tl))
    tout = torch.nn.functional.ctc_loss(tx, torch.tensor(tg), *ta, **kw)
    cout = F.ctc_loss(cx, t(tg), *ca, **kw)
    w = RNG.standard_normal(tuple(tout.shape))
    (tout * torch.tensor(w, dtype=tout.dtype)).sum().backward()
    (cout * t(w.astype(n(cout).dtype))).sum().backward()
    return tout.detach().numpy(), tx.grad.numpy(), n(cout), n(cx.grad)


def _close(a, b, dtype):
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a, b, equal_nan=True, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("concat", [False, True])
def test_against_torch(torch, dtype, reduction, zero_infinity, concat):
    T, N, C, S = 12, 5, 6, 5
    for normalised, blank in [(True, 0), (False, 0), (True, 3), (False, C - 1)]:
        x = RNG.standard_normal((T, N, C)) * 2
        lp = (log_softmax(x) if normalised else x).astype(dtype)
        labels = [c for c in range(C) if c != blank]
        tg = RNG.choice(labels, (N, S)).astype(np.int64)
        tg[1, :3] = labels[1]                              # a repeated label run
        il = [12, 9, 12, 3, 7]
        tl = [5, 3, 0, 3, 4]                               # sample 3 impossible: 3 repeats
        if concat:
            tg = np.concatenate([tg[b, :tl[b]] for b in range(N)])
        else:
            tg[0, tl[0]:] = -1
        for lengths_as in ("tensor", "tuple"):
            tl_, tg_, cl, cg = _both(torch, lp, tg, il, tl, lengths_as, blank=blank,
                                     reduction=reduction, zero_infinity=zero_infinity)
            _close(cl, tl_, dtype)
            _close(cg, tg_, dtype)
            assert np.array_equal(np.isnan(cg), np.isnan(tg_))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unbatched_and_long_sequences_against_torch(torch, dtype):
    lp = log_softmax(RNG.standard_normal((7, 4))).astype(dtype)
    for reduction in ("none", "sum", "mean"):
        for tg, il, tl in [([1, 1, 2], 7, 3), ([2], 4, 1), ([], 5, 0)]:
            tg = np.array(tg, dtype=np.int64)
            a = _both(torch, lp, tg, [il], [tl], "tensor", reduction=reduction)
            for got, want in zip(a[2:], a[:2]):
                assert got.shape == want.shape
                _close(got, want, dtype)
    # long sequences: the log-space recursion must not underflow
    lp = log_softmax(RNG.standard_normal((300, 2, 30)) * 3).astype(dtype)
    tg = RNG.integers(1, 30, (2, 60))
    a = _both(torch, lp, tg, [300, 250], [60, 41], "tensor", reduction="mean")
    _close(a[2], a[0], dtype)
    _close(a[3], a[1], dtype)


def test_labels_equal_to_blank_and_odd_target_dtypes_as_torch(torch):
    lp = log_softmax(RNG.standard_normal((6, 2, 4)))
    tg = np.array([[0, 1, 2], [1, 0, 0]])              # torch accepts blank inside targets
    a = _both(torch, lp, tg, [6, 5], [3, 2], "tensor", reduction="none")
    _close(a[2], a[0], np.float64)
    _close(a[3], a[1], np.float64)
    for tdt, cdt in [(torch.int32, cddp.int32), (torch.float32, cddp.float32)]:
        want = torch.nn.functional.ctc_loss(torch.tensor(lp), torch.tensor(tg[:, 1:]).to(tdt),
                                            (6, 5), (2, 1), reduction="none")
        got = F.ctc_loss(t(lp), t(tg[:, 1:]).to(cdt), (6, 5), (2, 1), reduction="none")
        _close(n(got), want.numpy(), np.float64)


def _error_cases(lib, Fn):
    """(name, thunk) pairs that raise; lib is torch or cddp, Fn its nn.functional."""
    lp = log_softmax(np.random.default_rng(3).standard_normal((6, 2, 4)))
    T = lambda a, **kw: lib.tensor(np.array(a), **kw)   # noqa: E731
    x, tg, il, tl = T(lp), T([[1, 2, 3], [1, 2, 2]]), T([6, 5]), T([3, 2])
    return [
        ("negative input length", lambda: Fn.ctc_loss(x, tg, T([-1, 5]), tl)),
        ("input length > T", lambda: Fn.ctc_loss(x, tg, T([7, 5]), tl)),
        ("negative target length", lambda: Fn.ctc_loss(x, tg, il, T([-1, 2]))),
        ("target length > S", lambda: Fn.ctc_loss(x, tg, il, T([4, 2]))),
        ("concatenated too short", lambda: Fn.ctc_loss(x, T([1, 2, 3, 1]), il, tl)),
        ("concatenated too long", lambda: Fn.ctc_loss(x, T([1, 2, 3, 1, 2, 3]), il, tl)),
        ("input_lengths size", lambda: Fn.ctc_loss(x, tg, T([6]), tl)),
        ("target_lengths size", lambda: Fn.ctc_loss(x, tg, il, T([3, 2, 1]))),
        ("targets rows", lambda: Fn.ctc_loss(x, tg[:1], il, tl)),
        ("blank too big", lambda: Fn.ctc_loss(x, tg, il, tl, blank=4)),
        ("blank negative", lambda: Fn.ctc_loss(x, tg, il, tl, blank=-1)),
        ("float lengths", lambda: Fn.ctc_loss(x, tg, il.double(), tl)),
        ("bool lengths", lambda: Fn.ctc_loss(x, tg, il, tl.bool())),
        ("bad reduction", lambda: Fn.ctc_loss(x, tg, il, tl, reduction="avg")),
        ("float16 log_probs", lambda: Fn.ctc_loss(x.half(), tg, il, tl)),
        ("int64 log_probs", lambda: Fn.ctc_loss(x.long(), tg, il, tl)),
        ("4-D log_probs", lambda: Fn.ctc_loss(x[None], tg, il, tl)),
        ("1-D log_probs", lambda: Fn.ctc_loss(x[:, 0, 0], tg, il, tl)),
        ("0-D log_probs", lambda: Fn.ctc_loss(x[0, 0, 0], tg, il, tl)),
        ("empty log_probs", lambda: Fn.ctc_loss(x[:0], tg, T([0, 0]), T([0, 0]))),
        ("3-D targets", lambda: Fn.ctc_loss(x, tg[None], il, tl)),
        ("0-D targets", lambda: Fn.ctc_loss(x, tg[0, 0], il, tl)),
        ("int lengths", lambda: Fn.ctc_loss(x[:, 0], tg[0], 6, 3)),
        ("mixed lengths", lambda: Fn.ctc_loss(x, tg, il, [3, 2])),
        ("float list lengths", lambda: Fn.ctc_loss(x, tg, [6.0, 5.0], (3, 2))),
        ("unbatched, two lengths", lambda: Fn.ctc_loss(x[:, 0], tg[0], il, tl)),
        ("list targets", lambda: Fn.ctc_loss(x, [[1, 2, 3], [1, 2, 2]], il, tl)),
    ]


def test_errors_raise_without_crashing():
    for name, thunk in _error_cases(cddp, F):
        with pytest.raises((RuntimeError, ValueError, TypeError, NotImplementedError,
                            IndexError)):
            thunk()


def test_errors_have_torch_types(torch):
    mine = _error_cases(cddp, F)
    theirs = _error_cases(torch, torch.nn.functional)
    for (name, c), (_, tt) in zip(mine, theirs):
        with pytest.raises(Exception) as want:
            tt()
        with pytest.raises(Exception) as got:
            c()
        assert got.type is want.type, f"{name}: cddp raised {got.type.__name__}: {got.value}, "\
            f"torch {want.type.__name__}: {want.value}"
        if want.type is RuntimeError and "while checking" in str(want.value):
            assert str(got.value) == str(want.value), name
