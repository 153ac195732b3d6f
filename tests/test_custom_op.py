"""torch.library custom operators and torch.ops (cddp/library.py, cddp/ops.py).

Oracles: the values and gradients the registered Python functions define (computed by hand
or with NumPy), finite differences through the registered backward, and torch
(importorskip) running the same script.
"""
import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t


def _sin_op(name):
    @cddp.library.custom_op(f"cddptest::{name}", mutates_args=())
    def op(x: cddp.Tensor) -> cddp.Tensor:
        assert not cddp.is_grad_enabled()          # the body runs below autograd
        return cddp.from_numpy(np.sin(x.detach().numpy()))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * x.cos()
    op.register_autograd(backward, setup_context=setup_context)
    return op


def test_custom_op_values_gradients_and_namespace():
    op = _sin_op("sin1")
    x = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(n(op(t(x))), np.sin(x))
    gradcheck(lambda v: op(v) * 3.0, x)
    assert cddp.ops.cddptest.sin1 is op and cddp.ops.cddptest.sin1.default is op
    np.testing.assert_allclose(n(cddp.ops.cddptest.sin1(t(x))), np.sin(x))

    @op.register_fake
    def _(v):
        return cddp.empty_like(v)
    assert op._fake is _                            # recorded (no fake tensors here)


def test_multiple_outputs_non_tensor_arguments_and_kernels():
    @cddp.library.custom_op("cddptest::affine", mutates_args=())
    def affine(x: cddp.Tensor, k: float) -> tuple:
        return x * k, x + k

    def setup(ctx, inputs, output):
        ctx.k = inputs[1]
    affine.register_autograd(lambda ctx, g1, g2: (g1 * ctx.k + g2, None), setup_context=setup)
    x = t(np.array([1.0, 2.0]), requires_grad=True)
    a, b = affine(x, 3.0)
    (a.sum() + 2 * b.sum()).backward()
    np.testing.assert_allclose(n(x.grad), [5.0, 5.0])

    @affine.register_kernel("cpu")
    def _(x, k):
        return x * (2 * k), x
    np.testing.assert_allclose(n(affine(t(np.array([1.0])), 3.0)[0]), [6.0])


def test_missing_backward_and_bad_names():
    @cddp.library.custom_op("cddptest::double", mutates_args=())
    def double(x: cddp.Tensor) -> cddp.Tensor:
        return x * 2
    np.testing.assert_allclose(n(double(t(np.array([1.5])))), [3.0])
    x = t(np.array([1.0]), requires_grad=True)
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        double(x).sum().backward()
    with pytest.raises(ValueError, match="namespace"):
        cddp.library.custom_op("nonamespace", mutates_args=())
    with pytest.raises(AttributeError, match="aten operator registry"):
        cddp.ops.aten.add
    with pytest.raises(AttributeError):
        cddp.ops.cddptest.not_defined


def test_library_define_impl_and_module_functions():
    lib = cddp.library.Library("cddptest2", "DEF")
    lib.define("plus1(Tensor x) -> Tensor")
    lib.impl("plus1", lambda x: x + 1, "CPU")
    np.testing.assert_allclose(n(cddp.ops.cddptest2.plus1(t(np.array([1.0])))), [2.0])
    op = _sin_op("sin2")
    cddp.library.register_autograd("cddptest::sin2", lambda ctx, g: g * 0 + 7,
                                   setup_context=lambda ctx, i, o: None)
    x = t(np.array([0.3]), requires_grad=True)
    op(x).sum().backward()
    assert x.grad.tolist() == [7.0]
    assert set(cddp.library.opcheck(op, (t(np.array([0.1])),)).values()) == {"SKIPPED"}


SCRIPT = """
import sys
import numpy as np
torch = __import__(sys.argv[1])

@torch.library.custom_op("scripttest::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    return x * x * x

def setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])

def backward(ctx, grad):
    x, = ctx.saved_tensors
    return 3 * grad * x * x

cube.register_autograd(backward, setup_context=setup_context)
x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
y = torch.ops.scripttest.cube(x)
y.sum().backward()
print(np.array2string(y.detach().numpy(), precision=12), np.array2string(x.grad.numpy(), precision=12))
"""


def test_same_script_as_torch(torch, tmp_path):
    import subprocess
    import sys
    from conftest import subprocess_env
    path = tmp_path / "s.py"
    path.write_text(SCRIPT)
    outs = [subprocess.run([sys.executable, str(path), lib], capture_output=True, text=True,
                           timeout=120, env=subprocess_env()).stdout for lib in ("torch", "cddp")]
    assert outs[0] == outs[1] and outs[0].strip()
