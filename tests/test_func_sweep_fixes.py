"""What the sixteenth session's torch.func / autograd sweep found, fixed: a custom Function's
jvp staticmethod in the setup_context style and with ctx.save_for_forward, vmap writing in
place into an unmapped input (once per sample, silently), and torch.func.linearize.

Oracles: closed forms (d exp = exp, d x^2 = 2x, the Jacobian of sin), and torch where it is
installed.
"""
import numpy as np
import pytest

import cddp
from cddp import func

fa = cddp.autograd.forward_ad


def _exp_setup_context_style():
    class Exp(cddp.autograd.Function):
        @staticmethod
        def forward(x):
            return x.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_forward(output)

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("forward mode must not call backward")

        @staticmethod
        def jvp(ctx, tx):
            r, = ctx.saved_tensors
            return tx * r
    return Exp


def test_custom_function_jvp_setup_context_style():
    Exp = _exp_setup_context_style()
    x0 = np.array([0.0, 1.0, -0.5])
    t0 = np.array([1.0, 2.0, 3.0])
    with fa.dual_level():
        x = fa.make_dual(cddp.tensor(x0), cddp.tensor(t0))
        y = Exp.apply(x)
        p, t = fa.unpack_dual(y)
    np.testing.assert_allclose(p.numpy(), np.exp(x0), rtol=1e-15)
    np.testing.assert_allclose(t.numpy(), t0 * np.exp(x0), rtol=1e-15)


def test_custom_function_jvp_reads_save_for_forward():
    class Sq(cddp.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_forward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("forward mode must not call backward")

        @staticmethod
        def jvp(ctx, tx):
            x, = ctx.saved_tensors
            return 2 * x * tx
    with fa.dual_level():
        x = fa.make_dual(cddp.tensor([1.0, 2.0]), cddp.tensor([1.0, -1.0]))
        t = fa.unpack_dual(Sq.apply(x)).tangent
    assert t.tolist() == [2.0, -4.0]


def test_vmap_refuses_in_place_write_into_unmapped_input():
    def f(x, y):
        x.add_(y)
        return x
    x = cddp.zeros(2)
    y = cddp.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    with pytest.raises(RuntimeError, match="not mapped"):
        func.vmap(f, in_dims=(None, 0))(x, y)


def test_vmap_in_place_on_mapped_input_still_writes_through():
    def f(x):
        return x.mul_(2)
    x = cddp.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = func.vmap(f)(x)
    assert x.tolist() == [[2.0, 4.0], [6.0, 8.0]]
    assert out.tolist() == [[2.0, 4.0], [6.0, 8.0]]


def test_linearize_is_the_jacobian_at_the_point():
    x0 = np.array([0.3, -1.2, 2.0])
    out, jvp_fn = func.linearize(lambda x: x.sin() * x, cddp.tensor(x0))
    np.testing.assert_allclose(out.numpy(), np.sin(x0) * x0, rtol=1e-15)
    for t0 in (np.ones(3), np.array([0.5, -2.0, 1.0])):
        want = (np.cos(x0) * x0 + np.sin(x0)) * t0
        np.testing.assert_allclose(jvp_fn(cddp.tensor(t0)).numpy(), want, rtol=1e-13)
    with pytest.raises(RuntimeError, match="shape"):
        jvp_fn(cddp.ones(4, dtype=cddp.float64))


def test_linearize_matches_torch():
    torch = pytest.importorskip("torch")
    x0 = np.array([[0.3, -1.2], [2.0, 0.1]])
    t0 = np.array([[1.0, 0.5], [-1.0, 2.0]])
    _, jt = torch.func.linearize(lambda x: (x @ x).tanh(), torch.tensor(x0))
    _, jc = func.linearize(lambda x: (x @ x).tanh(), cddp.tensor(x0))
    np.testing.assert_allclose(jc(cddp.tensor(t0)).numpy(), jt(torch.tensor(t0)).numpy(),
                               rtol=1e-12)


def test_grad_through_op_without_double_backward_with_trainable_closure():
    """func.grad w.r.t. an LSTM's input while its parameters require grad: the gradient is the
    plain backward's, and only differentiating it again raises (naming the op)."""
    cddp.manual_seed(0)
    m = cddp.nn.LSTM(2, 3).double()
    x = cddp.randn(4, 1, 2, dtype=cddp.float64)
    g = func.grad(lambda x: m(x)[0].sum())(x)
    xx = x.clone().requires_grad_()
    m(xx)[0].sum().backward()
    np.testing.assert_array_equal(g.detach().numpy(), xx.grad.numpy())
    with pytest.raises(RuntimeError, match="LstmLayerBackward0"):
        g.sum().backward()


def test_jacrev_through_copy_with_trainable_closure():
    cddp.manual_seed(0)
    lin = cddp.nn.Linear(3, 3).double()
    x = cddp.ones(3, dtype=cddp.float64)
    J = func.jacrev(lambda x: cddp.zeros(3, dtype=cddp.float64).copy_(lin(x)))(x)
    np.testing.assert_array_equal(J.detach().numpy(), lin.weight.detach().numpy())
