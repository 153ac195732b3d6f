"""torch.autograd.gradcheck (finite differences against autograd), gradgradcheck (gradcheck of
the create_graph gradients), and `with cddp.device(...)` as a context manager.

Oracles: functions whose gradients are right (cddp's own ops) pass, custom Functions with a
wrong backward fail with torch's message; the Jacobians in the message are checked against
hand-computed ones; torch, when installed, gives the same verdicts and message.
"""
import warnings

import numpy as np
import pytest

import cddp
from cddp.autograd import Function

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


def make_bad(lib):
    class Scale(lib.autograd.Function):
        """forward 2x, backward claims 3 (wrong)."""
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 3
    return Scale


def verdicts(lib):
    gc = lib.autograd.gradcheck
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    w = lib.tensor(rng.standard_normal((2, 4)), requires_grad=True)
    c = lib.tensor(rng.standard_normal(4))          # needs no grad: not checked
    out = [gc(lambda a, b, k: (a @ b + k).tanh(), (x, w, c)),
           gc(lambda a: (a.sin(), a.exp().sum(), a.detach()), (x,)),
           gc(lambda a, b: a.sum() * 2, (x, w)),             # b unused: zero gradient
           gc(make_bad(lib).apply, (x,), raise_exception=False)]
    one = lib.tensor([[0.5]], dtype=lib.float64, requires_grad=True)
    try:
        gc(make_bad(lib).apply, (one,))
    except RuntimeError as e:
        out.append((type(e).__name__, str(e).replace("torch.", "").replace("cddp.", "")))
    try:
        gc(lambda a: a * 2, (lib.ones(2, dtype=lib.float64),))
    except ValueError as e:
        out.append(str(e))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out.append(gc(lambda a: a * 2, (lib.ones(2, requires_grad=True),), atol=1e-2,
                      eps=1e-3))
    out.append(str(rec[0].message)[:40])
    return out


def test_gradcheck_verdicts():
    out = verdicts(cddp)
    assert out[:4] == [True, True, True, False]
    assert out[4] == ("GradcheckError", "Jacobian mismatch for output 0 with respect to input "
                      "0,\nnumerical:tensor([[2.0000]], dtype=float64)\nanalytical:"
                      "tensor([[3.]], dtype=float64)\n")
    assert out[5] == ("gradcheck expects at least one input tensor to require gradient, but "
                      "none of them have requires_grad=True.")
    assert out[6] is True
    assert out[7] == "Input #0 requires gradient and is not a "


@needs_torch
def test_gradcheck_verdicts_torch():
    assert verdicts(cddp) == verdicts(torch)


def test_gradcheck_jacobian_of_a_wrong_backward():
    """A backward that drops one input's cross term: the message shows both Jacobians."""
    class Mul(Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g          # d/db should be g * a

    a = cddp.tensor([1.0, 2.0], dtype=cddp.float64, requires_grad=True)
    b = cddp.tensor([3.0, 5.0], dtype=cddp.float64, requires_grad=True)
    from cddp.autograd.gradcheck import gradcheck, GradcheckError
    with pytest.raises(GradcheckError, match="output 0 with respect to input 1") as info:
        gradcheck(Mul.apply, (a, b))
    msg = str(info.value)
    assert "numerical:tensor([[1.0000, 0.0000],\n        [0.0000, 2.0000]]" in msg
    assert "analytical:tensor([[1., 0.],\n        [0., 1.]]" in msg
    # the input was restored exactly after the perturbations
    np.testing.assert_array_equal(a.detach().numpy(), [1.0, 2.0])


def test_gradcheck_module_path_and_nondeterminism():
    import cddp.autograd.gradcheck as gmod        # the function, as torch's attribute lookup
    from cddp.autograd.gradcheck import gradcheck
    assert gmod is gradcheck is cddp.autograd.gradcheck
    calls = [0]

    class Flaky(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            calls[0] += 1
            return g * (1 + 1e-9 * calls[0])   # matches numerically, not reentrant
    x = cddp.ones(2, dtype=cddp.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="Backward is not reentrant"):
        gradcheck(Flaky.apply, (x,))
    assert gradcheck(Flaky.apply, (x,), nondet_tol=1e-6)
    # forward-mode checks run now (tests/test_func_sweep_fixes.py has a failing one)
    assert gradcheck(lambda a: a * a, (x,), check_forward_ad=True)


def test_gradgradcheck_verdicts_match_torch():
    # the same two functions through both libraries: one whose double backward is right, one
    # custom Function whose backward is right once but detaches its saved input
    x0 = np.array([0.3, -0.8, 1.1])

    def verdicts(lib):
        class Detached(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                return a * a * a

            @staticmethod
            def backward(ctx, g):
                (a,) = ctx.saved_tensors
                return g * 3 * (a * a).detach()

        x = lib.tensor(x0, requires_grad=True)
        return (lib.autograd.gradgradcheck(lambda a: lib.tanh(a) * a, (x,)),
                lib.autograd.gradgradcheck(Detached.apply, (x,), raise_exception=False))

    assert verdicts(cddp) == (True, False)
    torch = pytest.importorskip("torch")
    assert verdicts(torch) == (True, False)


# ---- torch.device as a context manager ---------------------------------------------------

def test_device_context_manager():
    with cddp.device("cpu") as d:
        assert d == cddp.device("cpu")
        assert cddp.get_default_device() == cddp.device("cpu")
        assert cddp.zeros(2).device == cddp.device("cpu")
        with cddp.device("cpu"):
            assert cddp.ones(1).device.type == "cpu"
        assert cddp._device._context_stack == [d]
    assert cddp._device._context_stack == []
    with pytest.raises(ValueError):
        with cddp.device("cpu"):
            raise ValueError("propagates")
    assert cddp._device._context_stack == []


@needs_torch
def test_device_context_manager_torch():
    for lib in (cddp, torch):
        with lib.device("cpu") as d:
            assert str(d) == "cpu" and str(lib.get_default_device()) == "cpu"
            assert str(lib.zeros(2).device) == "cpu"
