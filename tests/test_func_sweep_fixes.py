"""What the sixteenth session's torch.func / autograd sweep found, fixed: a custom Function's
jvp staticmethod in the setup_context style and with ctx.save_for_forward, vmap writing in
place into an unmapped input (once per sample, silently), torch.func.linearize, func.grad
through ops without double backward under trainable closures, gradcheck's forward-mode and
batched checks, jacobian's forward-mode strategy.

Oracles: closed forms (d exp = exp, d x^2 = 2x, the Jacobian of sin), and torch where it is
installed.
"""
import numpy as np
import pytest

import cddp
from cddp import func

fa = cddp.autograd.forward_ad


def test_custom_function_jvp_setup_context_style():
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


def _bad_jvp_function():
    class Cube(cddp.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            ctx.save_for_forward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * x * x * g

        @staticmethod
        def jvp(ctx, t):
            x, = ctx.saved_tensors
            return 2 * x * x * t          # wrong on purpose: 3 x^2 is right
    return Cube


def test_gradcheck_forward_ad_and_batched_checks():
    gc = cddp.autograd.gradcheck
    x = cddp.randn(3, 4, dtype=cddp.float64, requires_grad=True)
    w = cddp.randn(4, 2, dtype=cddp.float64, requires_grad=True)
    f = lambda x, w: (x @ w).tanh() * x.sum()          # noqa: E731
    assert gc(f, (x, w), check_forward_ad=True, check_batched_grad=True,
              check_batched_forward_grad=True)
    assert cddp.autograd.gradgradcheck(f, (x, w), check_batched_grad=True,
                                       check_fwd_over_rev=True)
    # a wrong jvp is caught by the forward-mode check only
    Cube = _bad_jvp_function()
    y = cddp.randn(5, dtype=cddp.float64, requires_grad=True)
    assert gc(Cube.apply, (y,))
    with pytest.raises(RuntimeError, match="forward mode"):        # GradcheckError
        gc(Cube.apply, (y,), check_forward_ad=True, check_backward_ad=False)


def test_jacobian_forward_mode_strategy():
    F = cddp.autograd.functional
    x = cddp.tensor([1.0, 2.0], dtype=cddp.float64)
    J = F.jacobian(lambda x: x.exp() * x.sum(), x, vectorize=True, strategy="forward-mode")
    x0 = np.array([1.0, 2.0])
    want = np.diag(np.exp(x0) * x0.sum()) + np.exp(x0)[:, None]
    np.testing.assert_allclose(J.numpy(), want, rtol=1e-14)
    with pytest.raises(NotImplementedError, match="vectorize=True"):
        F.jacobian(lambda x: x.exp(), x, strategy="forward-mode")
    with pytest.raises(AssertionError, match="forward-mode"):
        F.jacobian(lambda x: x.exp(), x, strategy="sideways")
    H = F.hessian(lambda x: (x ** 3).sum(), x, vectorize=True,
                  outer_jacobian_strategy="forward-mode")
    np.testing.assert_allclose(H.numpy(), np.diag(6 * x0), rtol=1e-14)


def _node_hook_run(lib):
    """Node hooks as apex / Horovod-style code uses them; returns what they saw and did."""
    seen = []
    x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
    y = x * 2
    z = (y * y).sum()
    mul = y.grad_fn                                   # MulBackward0 of x * 2

    def pre(gouts):
        seen.append(("pre", [float(g.sum()) for g in gouts]))
        return (gouts[0] * 10,)

    def post(gins, gouts):
        seen.append(("post", [None if g is None else float(g.sum()) for g in gins]))
    h1 = mul.register_prehook(pre)
    mul.register_hook(post)
    acc = x.expand_as(x).grad_fn.next_functions[0][0]          # x's AccumulateGrad
    acc.register_hook(lambda *unused: seen.append(("acc", float(x.grad.sum()))))
    z.backward()
    g1 = x.grad.tolist()
    h1.remove()
    x.grad = None
    (x * 2).pow(2).sum().backward()
    return seen, g1, x.grad.tolist()


def test_node_register_hook_and_prehook():
    seen, g1, g2 = _node_hook_run(cddp)
    # d/dx sum((2x)^2) = 8x; the prehook scales MulBackward0's incoming gradient by 10
    assert g1 == [80.0, 160.0, 240.0]
    assert seen[0] == ("pre", [24.0])                 # 2 * y = 4x summed: 4 * 6
    assert seen[1] == ("post", [480.0, None])         # the scalar 2 gets no gradient
    assert seen[2] == ("acc", 480.0)
    assert g2 == [8.0, 16.0, 24.0]                    # a new graph: the removed hook is gone


def test_node_hooks_match_torch():
    torch = pytest.importorskip("torch")
    assert _node_hook_run(cddp) == _node_hook_run(torch)


def test_node_hooks_bad_result():
    x = cddp.ones(2, requires_grad=True)
    y = x * 3
    y.grad_fn.register_prehook(lambda g: (g[0], g[0]))
    with pytest.raises(RuntimeError, match="expected a tuple of 1"):
        y.sum().backward()


def test_detect_anomaly_check_nan_false_keeps_mode_on_without_the_check():
    import warnings
    x = cddp.tensor([0.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with cddp.autograd.detect_anomaly(check_nan=False):
            assert cddp.is_anomaly_enabled() and not cddp.is_anomaly_check_nan_enabled()
            (x / x).sum().backward()                  # NaN gradient: no check, no error
        assert not cddp.is_anomaly_enabled() and cddp.is_anomaly_check_nan_enabled()
        with cddp.autograd.detect_anomaly():
            x.grad = None
            with pytest.raises(RuntimeError, match="nan"):
                (x / x).sum().backward()


def test_grad_materialize_grads_refuses_allow_unused_false():
    x = cddp.ones(2, requires_grad=True)
    y = cddp.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="allow_unused"):
        cddp.autograd.grad(x.sum(), [x, y], materialize_grads=True, allow_unused=False)
    gx, gy = cddp.autograd.grad(x.sum(), [x, y], materialize_grads=True)
    assert gx.tolist() == [1.0, 1.0] and gy.tolist() == [0.0, 0.0]
