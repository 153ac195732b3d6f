"""torch.autograd.Function: custom ops whose backward is Python, run as nodes of the C engine.

Oracles: finite differences (conftest.gradcheck, NumPy formulas) for every gradient, torch
running the same Function definitions when it is installed, torch's error messages, and a
single-process computation for the 2-rank PartialFC pattern (all_gather in forward,
all_reduce in backward).
"""
import gc
import weakref

import numpy as np
import pytest

import cddp
from cddp.autograd import Function
from cddp.autograd.function import FunctionCtx, once_differentiable
from conftest import gradcheck, n, t
from ddp_util import load, run_ranks


def make_functions(lib):
    """torch's documented examples (extending.html), written once for cddp and for torch."""

    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, i):
            result = i.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, grad_output):
            result, = ctx.saved_tensors
            return grad_output * result

    class LinearFunction(lib.autograd.Function):
        @staticmethod
        def forward(ctx, input, weight, bias=None):  # noqa: A002
            ctx.save_for_backward(input, weight, bias)
            output = input.mm(weight.t())
            if bias is not None:
                output += bias.unsqueeze(0).expand_as(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors  # noqa: A001
            grad_input = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_input = grad_output.mm(weight)
            if ctx.needs_input_grad[1]:
                grad_weight = grad_output.t().mm(input)
            if bias is not None and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum(0)
            return grad_input, grad_weight, grad_bias

    class LinearSetup(lib.autograd.Function):      # the setup_context style
        @staticmethod
        def forward(input, weight, bias=None):  # noqa: A002
            out = input.mm(weight.t())
            return out if bias is None else out + bias

        @staticmethod
        def setup_context(ctx, inputs, output):
            input, weight, bias = inputs  # noqa: A001
            ctx.save_for_backward(input, weight, bias)

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors  # noqa: A001
            gb = grad_output.sum(0) if bias is not None else None
            return grad_output.mm(weight), grad_output.t().mm(input), gb

    class MulConstant(lib.autograd.Function):
        @staticmethod
        def forward(ctx, tensor, constant):
            ctx.constant = constant
            return tensor * constant

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * ctx.constant, None

    class SplitThree(lib.autograd.Function):     # more outputs than a C node has
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x * w, x.sin(), (x * x).sum(), x + 1.0, 2 * w

        @staticmethod
        def backward(ctx, ga, gb, gc, gd, ge):
            x, w = ctx.saved_tensors
            gx = ga * w + gb * x.cos() + gc * 2 * x + gd
            gw = (ga * x).sum(0) + 2 * ge
            return gx, gw

    return dict(Exp=Exp, LinearFunction=LinearFunction, LinearSetup=LinearSetup,
                MulConstant=MulConstant, SplitThree=SplitThree)


F = make_functions(cddp)
RNG = np.random.default_rng(0)


# ---- torch's documented examples against finite differences and NumPy -----------------

def test_exp_values_and_gradient():
    a = RNG.standard_normal((3, 4))
    x = t(a, requires_grad=True)
    y = F["Exp"].apply(x)
    np.testing.assert_allclose(n(y), np.exp(a), rtol=1e-12)
    y.backward(cddp.ones_like(y))
    np.testing.assert_allclose(n(x.grad), np.exp(a), rtol=1e-12)
    gradcheck(F["Exp"].apply, a)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("style", ["LinearFunction", "LinearSetup"])
def test_linear_function_gradcheck(style, bias):
    fn = F[style].apply
    args = [RNG.standard_normal((5, 3)), RNG.standard_normal((4, 3))]
    if bias:
        args.append(RNG.standard_normal(4))
    gradcheck(fn, *args)


def test_mul_constant_non_tensor_argument():
    a = RNG.standard_normal((2, 3))
    x = t(a, requires_grad=True)
    y = F["MulConstant"].apply(x, 2.5)
    assert y.grad_fn.name() == "MulConstantBackward"
    assert len(y.grad_fn.next_functions) == 1          # edges only for tensor arguments
    y.sum().backward()
    np.testing.assert_allclose(n(x.grad), np.full((2, 3), 2.5))
    gradcheck(lambda v: F["MulConstant"].apply(v, -1.5), a)


def test_five_outputs_gradcheck():
    x, w = RNG.standard_normal((3, 2)), RNG.standard_normal(2)

    def loss_vector(xv, wv):
        a, b, c, d, e = F["SplitThree"].apply(xv, wv)
        return cddp.cat([a.reshape(-1), b.reshape(-1), c.reshape(1), d.reshape(-1), e])
    gradcheck(loss_vector, x, w)


def test_only_some_outputs_used_get_zeros():
    x = t(RNG.standard_normal((3, 2)), requires_grad=True)
    w = t(RNG.standard_normal(2), requires_grad=True)
    a, b, c, d, e = F["SplitThree"].apply(x, w)
    d.sum().backward()                                  # others materialised as zeros
    np.testing.assert_allclose(n(x.grad), np.ones((3, 2)))
    np.testing.assert_allclose(n(w.grad), np.zeros(2))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_against_torch(torch, dtype):
    T = make_functions(torch)
    a, b, c = (RNG.standard_normal(s).astype(dtype) for s in ((5, 3), (4, 3), (4,)))
    g = RNG.standard_normal((5, 4)).astype(dtype)
    for name in ("LinearFunction", "LinearSetup"):
        xs = [t(v, requires_grad=True) for v in (a, b, c)]
        ts = [torch.tensor(v, requires_grad=True) for v in (a, b, c)]
        out = F[name].apply(*xs)
        tout = T[name].apply(*ts)
        out.backward(t(g))
        tout.backward(torch.tensor(g))
        tol = 1e-12 if dtype == "float64" else 1e-5
        np.testing.assert_allclose(n(out), tout.detach().numpy(), rtol=tol, atol=tol)
        for x, tx in zip(xs, ts):
            np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=tol, atol=tol)
    x = t(a, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    outs = F["SplitThree"].apply(x, t(b[0], requires_grad=True))
    touts = T["SplitThree"].apply(tx, torch.tensor(b[0], requires_grad=True))
    (outs[1].sum() + outs[2] * 3).backward()
    (touts[1].sum() + touts[2] * 3).backward()
    np.testing.assert_allclose(n(x.grad), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_kwargs_are_bound_to_forward_parameters():
    x = t(RNG.standard_normal(3), requires_grad=True)
    y = F["MulConstant"].apply(constant=3.0, tensor=x)
    y.sum().backward()
    np.testing.assert_allclose(n(x.grad), np.full(3, 3.0))
    w = t(RNG.standard_normal((2, 3)), requires_grad=True)
    out = F["LinearSetup"].apply(x.reshape(1, 3), weight=w)     # bias defaults to None
    out.sum().backward()
    np.testing.assert_allclose(n(w.grad), np.tile(n(x), (2, 1)))


# ---- the ctx ---------------------------------------------------------------------------

class Recorder(Function):
    """Records what forward and backward saw."""
    seen = {}

    @staticmethod
    def forward(ctx, x, k, y):
        Recorder.seen["grad_enabled_fwd"] = cddp.is_grad_enabled()
        Recorder.seen["needs"] = ctx.needs_input_grad
        ctx.k = k
        ctx.anything = {"a": [1, 2]}
        ctx.save_for_backward(x, None, y)
        return x * k + y

    @staticmethod
    def backward(ctx, g):
        Recorder.seen["grad_enabled_bwd"] = cddp.is_grad_enabled()
        x, none, y = ctx.saved_tensors
        Recorder.seen["saved"] = (x, none, y)
        return g * ctx.k, None, g if ctx.needs_input_grad[2] else None


def test_ctx_attributes_needs_input_grad_and_grad_mode():
    x = t([1.0, 2.0], requires_grad=True)
    y = t([3.0, 4.0])
    out = Recorder.apply(x, 2.0, y)
    assert Recorder.seen["needs"] == (True, False, False)
    assert Recorder.seen["grad_enabled_fwd"] is False
    assert out.grad_fn.anything == {"a": [1, 2]}
    assert not hasattr(out.grad_fn, "to_save")          # forward-only state is dropped
    out.sum().backward()
    assert Recorder.seen["grad_enabled_bwd"] is False
    sx, none, sy = Recorder.seen["saved"]
    assert sx is x and none is None and sy is y          # inputs come back as themselves
    np.testing.assert_allclose(n(x.grad), [2.0, 2.0])


def test_saved_output_has_history_and_no_cycle():
    x = t(RNG.standard_normal(3), requires_grad=True)
    y = F["Exp"].apply(x)
    s, = y.grad_fn.saved_tensors
    assert s.grad_fn is y.grad_fn and s.requires_grad
    np.testing.assert_array_equal(n(s), n(y))


def test_in_place_modification_after_save_is_detected():
    x = t(RNG.standard_normal(3), requires_grad=True)
    y = F["Exp"].apply(x)
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*ExpBackward, is "
                       "at version 1; expected version 0"):
        y.sum().backward()
    xc = x.clone()
    z = Recorder.apply(xc, 1.0, t([1.0, 1.0, 1.0]))
    xc.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_saved_tensors_released_after_backward_unless_retained():
    x = t(RNG.standard_normal(3), requires_grad=True)
    y = F["Exp"].apply(x)
    y.sum().backward(retain_graph=True)
    y.sum().backward()
    np.testing.assert_allclose(n(x.grad), 2 * n(y), rtol=1e-6)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.grad_fn.saved_tensors
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()


class Double_(Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2.0)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return 2.0 * g


def test_mark_dirty_in_place_forward():
    a = t(RNG.standard_normal(3), requires_grad=True)
    b = a * 1.0
    v0 = b._version
    out = Double_.apply(b)
    assert out is b and b.grad_fn.name() == "Double_Backward"
    assert b._version == v0 + 2                       # the mul_ and mark_dirty, as torch
    np.testing.assert_allclose(n(b), 2 * n(a))
    (out * out).sum().backward()
    np.testing.assert_allclose(n(a.grad), 8 * n(a), rtol=1e-6)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used "
                       "in an in-place operation."):
        Double_.apply(t([1.0], requires_grad=True))


def test_mark_dirty_of_an_output_not_returned():
    class Bad(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1.0)
            ctx.mark_dirty(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g
    with pytest.raises(RuntimeError, match="Some elements marked as dirty during the forward "
                       "method were not returned as output"):
        Bad.apply(t([1.0], requires_grad=True) * 1.0)


class Argmax(Function):
    seen = []

    @staticmethod
    def forward(ctx, x):
        r = x * 3.0
        ctx.mark_non_differentiable(r)
        return x * 2.0, x.argmax(), r, "tag"

    @staticmethod
    def backward(ctx, ga, gi, gr, gs):
        Argmax.seen[:] = [ga, gi, gr, gs]
        return ga * 2.0


def test_mark_non_differentiable_and_non_tensor_outputs():
    x = t([[1.0, 5.0], [2.0, 0.0]], requires_grad=True)
    a, i, r, s = Argmax.apply(x)
    assert a.requires_grad and not i.requires_grad and not r.requires_grad and s == "tag"
    assert r.grad_fn is None and i.grad_fn is None
    a.sum().backward()
    ga, gi, gr, gs = Argmax.seen
    np.testing.assert_array_equal(n(gi), 0)          # materialised zeros, int64 as torch
    assert gi.dtype == cddp.int64
    np.testing.assert_array_equal(n(gr), np.zeros((2, 2)))
    assert gs is None
    np.testing.assert_allclose(n(x.grad), np.full((2, 2), 2.0))


class NoMaterialize(Function):
    seen = []

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2.0, x * 3.0

    @staticmethod
    def backward(ctx, ga, gb):
        NoMaterialize.seen[:] = [ga, gb]
        return None if ga is None else ga * 2.0


def test_set_materialize_grads_false_passes_none():
    x = t([1.0, 2.0], requires_grad=True)
    a, b = NoMaterialize.apply(x)
    b.sum().backward()
    assert NoMaterialize.seen[0] is None
    assert x.grad is None                              # backward returned None
    a, b = NoMaterialize.apply(x)
    a.sum().backward()
    assert NoMaterialize.seen[1] is None
    np.testing.assert_allclose(n(x.grad), [2.0, 2.0])


class Identity(Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return 3.0 * g


def test_input_returned_as_is_becomes_an_alias_with_history():
    x = t([1.0, 2.0], requires_grad=True)
    y = Identity.apply(x)
    assert y is not x and y.grad_fn.name() == "IdentityBackward" and x.grad_fn is None
    with cddp.no_grad():
        y[0] = 7.0                                     # shares x's storage
    assert n(x)[0] == 7.0
    z = Identity.apply(x)
    z.sum().backward()
    np.testing.assert_allclose(n(x.grad), [3.0, 3.0])


def test_no_history_without_grad():
    x = t([1.0, 2.0], requires_grad=True)
    with cddp.no_grad():
        y = F["Exp"].apply(x)
        z = Identity.apply(x)
    assert y.grad_fn is None and not y.requires_grad
    assert z is not x and not z.requires_grad
    w = F["Exp"].apply(t([1.0]))
    assert w.grad_fn is None and not w.requires_grad


def test_once_differentiable_and_function_ctx():
    class Sq(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            x, = ctx.saved_tensors
            assert not cddp.is_grad_enabled()
            return 2 * x * g
    gradcheck(Sq.apply, RNG.standard_normal(4))
    assert issubclass(type(Sq.apply(t([1.0], requires_grad=True)).grad_fn), FunctionCtx)
    assert isinstance(Sq.apply(t([1.0], requires_grad=True)).grad_fn, cddp.autograd.Node)
    import cddp.autograd.function as fmod
    assert fmod.once_differentiable is once_differentiable and cddp.autograd.Function is Function


# ---- errors ----------------------------------------------------------------------------

def _with_backward(result_fn, shape=(2, 3)):
    class X(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return result_fn(g)
    x = t(RNG.standard_normal(shape), requires_grad=True)
    return x, X.apply(x, 2)


def test_wrong_number_of_gradients():
    x, y = _with_backward(lambda g: g)
    with pytest.raises(RuntimeError, match=r"function XBackward returned an incorrect number "
                       r"of gradients \(expected 2, got 1\)"):
        y.sum().backward()
    x, y = _with_backward(lambda g: (g, None, None, None))   # extra Nones are dropped
    y.sum().backward()
    np.testing.assert_array_equal(n(x.grad), np.ones((2, 3)))


def test_gradient_of_wrong_shape_and_broadcast_sum():
    x, y = _with_backward(lambda g: (cddp.ones(3), None))
    with pytest.raises(RuntimeError, match=r"Function XBackward returned an invalid gradient at "
                       r"index 0 - got \[3\] but expected shape compatible with \[2, 3\]"):
        y.sum().backward()
    x, y = _with_backward(lambda g: (cddp.ones(4, 2, 3), None))   # summed down, as torch
    y.sum().backward()
    np.testing.assert_array_equal(n(x.grad), np.full((2, 3), 4.0))


def test_gradient_dtype_is_cast_to_the_input():
    x, y = _with_backward(lambda g: (cddp.ones(2, 3, dtype=cddp.float32), None))
    assert x.dtype == cddp.float64
    y.sum().backward()
    assert x.grad.dtype == cddp.float64
    np.testing.assert_array_equal(n(x.grad), np.ones((2, 3)))


def test_non_none_gradient_for_non_tensor_and_non_tensor_gradient():
    x, y = _with_backward(lambda g: (g, g))
    with pytest.raises(RuntimeError, match="function XBackward returned a gradient different "
                       "than None at position 2, but the corresponding forward input was not "
                       "a Variable"):
        y.sum().backward()
    x, y = _with_backward(lambda g: (3, None))
    with pytest.raises(RuntimeError, match=r"expected Variable or None \(got int\)"):
        y.sum().backward()


def test_exceptions_in_backward_keep_their_type():
    def boom(g):
        raise KeyError("boom")
    x, y = _with_backward(boom)
    with pytest.raises(KeyError, match="boom"):
        y.sum().backward()
    with pytest.raises(TypeError, match="save_for_backward can only save variables, but "
                       "argument 0 is of type int"):
        class S(Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(3)
                return x * 1.0
        S.apply(t([1.0], requires_grad=True))
    with pytest.raises(NotImplementedError):
        class NoBackward(Function):
            @staticmethod
            def forward(ctx, x):
                return x * 1.0
        NoBackward.apply(t([1.0], requires_grad=True)).sum().backward()


def test_errors_against_torch(torch):
    """The messages above are torch's: the same Functions raise them under torch."""
    class X(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g
    with pytest.raises(RuntimeError, match=r"function XBackward returned an incorrect number "
                       r"of gradients \(expected 2, got 1\)"):
        X.apply(torch.ones(2, 3, requires_grad=True), 2).sum().backward()

    class W(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return torch.ones(3)
    with pytest.raises(RuntimeError, match=r"Function WBackward returned an invalid gradient at "
                       r"index 0 - got \[3\] but expected shape compatible with \[2, 3\]"):
        W.apply(torch.ones(2, 3, requires_grad=True)).sum().backward()


# ---- composition -----------------------------------------------------------------------

class Softplus(Function):
    """A backward that itself runs cddp ops (sigmoid, mul) and a nested Function."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F["Exp"].apply(x).add(1.0).log()        # nested application: no history inside

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * cddp.sigmoid(x)


def test_nested_functions_and_backward_using_ops():
    a = RNG.standard_normal((3, 2))
    gradcheck(Softplus.apply, a)
    gradcheck(lambda v: F["Exp"].apply(Softplus.apply(F["MulConstant"].apply(v, 0.5))), a)
    x = t(a, requires_grad=True)
    y = Softplus.apply(x)
    assert [f for f, _ in y.grad_fn.next_functions][0].name() == "AccumulateGrad"
    np.testing.assert_allclose(n(y), np.log1p(np.exp(a)), rtol=1e-12)


def test_autograd_grad_and_hooks_through_a_function():
    a = RNG.standard_normal(4)
    x = t(a, requires_grad=True)
    y = F["Exp"].apply(x)
    seen = []
    y.register_hook(lambda g: seen.append(n(g)) or g * 2)
    gx, = cddp.autograd.grad(y.sum(), x)
    np.testing.assert_allclose(n(gx), 2 * np.exp(a), rtol=1e-12)
    np.testing.assert_array_equal(seen[0], np.ones(4))


def test_function_inside_a_module():
    class Layer(cddp.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = cddp.nn.Linear(3, 2).double()

        def forward(self, x):
            return F["LinearFunction"].apply(x, self.lin.weight, self.lin.bias)
    cddp.manual_seed(0)
    m = Layer()
    a = RNG.standard_normal((5, 3))
    m(t(a)).pow(2).sum().backward()
    w, b = n(m.lin.weight), n(m.lin.bias)
    g = 2 * (a @ w.T + b)
    np.testing.assert_allclose(n(m.lin.weight.grad), g.T @ a, rtol=1e-10)
    np.testing.assert_allclose(n(m.lin.bias.grad), g.sum(0), rtol=1e-10)


def test_reference_cycles_are_freed():
    gc.collect()
    gc.disable()
    try:
        x = t(RNG.standard_normal(3), requires_grad=True)
        y = F["Exp"].apply(x)                       # saves its own output
        ctx, out = weakref.ref(y.grad_fn), weakref.ref(y)
        y.sum().backward()
        del y
        assert ctx() is None and out() is None      # no cycle: freed by refcounting alone
        a, b, c, d, e = F["SplitThree"].apply(x, t([1.0], requires_grad=True))
        refs = [weakref.ref(v) for v in (a, b, c, d, e)] + [weakref.ref(a.grad_fn)]
        (a.sum() + c).backward()
        del a, b, c, d, e
        assert all(r() is None for r in refs)
    finally:
        gc.enable()

    class KeepsOutput(Function):                    # a user attribute holding the output
        @staticmethod
        def forward(ctx, v):
            out = v * 2.0
            ctx.out = out
            return out

        @staticmethod
        def backward(ctx, g):
            return g * 2.0
    y = KeepsOutput.apply(x)
    ctx = weakref.ref(y.grad_fn)
    y.sum().backward()
    del y
    gc.collect()                                    # a real cycle: the collector frees it
    assert ctx() is None


# ---- two real processes: a Function in a DDP model, and PartialFC -----------------------

PARTIAL_FC = """
import os
import numpy as np
import cddp as torch
import cddp.distributed as distributed
from cddp import nn
from cddp.nn.parallel import DistributedDataParallel as DDP

distributed.init_process_group("gloo")
rank, world = distributed.get_rank(), distributed.get_world_size()


def nonzero1(mask):                 # torch.where(mask)[0]
    return torch.from_numpy(np.nonzero(mask.numpy())[0].astype(np.int64))


class AllGather(torch.autograd.Function):          # seed000_arcface.py, partial_fc.py
    @staticmethod
    def forward(ctx, tensor):
        parts = [torch.zeros_like(tensor) for _ in range(distributed.get_world_size())]
        distributed.all_gather(parts, tensor.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        distributed.all_reduce(grad, distributed.ReduceOp.SUM)
        n = grad.size(0) // distributed.get_world_size()
        r = distributed.get_rank()
        return grad[r * n:(r + 1) * n] * distributed.get_world_size()


class DistCrossEntropyFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, label):
        batch_size = logits.size(0)
        max_logits, _ = torch.max(logits, dim=1, keepdim=True)
        distributed.all_reduce(max_logits, distributed.ReduceOp.MAX)
        logits = (logits - max_logits).exp()
        sum_logits_exp = torch.sum(logits, dim=1, keepdim=True)
        distributed.all_reduce(sum_logits_exp, distributed.ReduceOp.SUM)
        logits = logits / sum_logits_exp
        index = nonzero1(label != -1)
        loss = torch.zeros(batch_size, 1, device=logits.device)
        loss[index] = logits[index].gather(1, label[index].view(-1, 1))
        distributed.all_reduce(loss, distributed.ReduceOp.SUM)
        ctx.save_for_backward(index, logits, label)
        return loss.clamp(min=1e-30).log().mean() * (-1)

    @staticmethod
    def backward(ctx, loss_gradient):
        index, logits, label = ctx.saved_tensors
        batch_size = logits.size(0)
        one_hot = torch.zeros(index.size(0), logits.size(1), device=logits.device)
        one_hot.scatter_(1, label[index].view(-1, 1), 1)
        grad = logits.clone()
        grad[index] -= one_hot
        grad = grad / batch_size
        return grad * loss_gradient.item(), None


class Relu(torch.autograd.Function):              # a custom Function inside the DDP model
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0.0)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * (x > 0).to(g.dtype)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(Relu.apply(self.fc1(x)))


def normalize(v):
    return v / v.norm(dim=1, keepdim=True)


torch.manual_seed(0)
backbone = DDP(Backbone())
C, S = 6, 8.0
num_local = C // world
start = num_local * rank
W_full = torch.from_numpy(np.random.default_rng(1).standard_normal((C, 4)).astype(np.float32))
weight = nn.Parameter(W_full[start:start + num_local].clone())
opt = torch.optim.SGD(list(backbone.parameters()) + [weight], lr=0.1)
rng = np.random.default_rng(2)
for step in range(2):
    X = rng.standard_normal((2 * 5, 6)).astype(np.float32)
    Y = rng.integers(0, C, 2 * 5)
    x = torch.from_numpy(X[rank * 5:(rank + 1) * 5])
    local_labels = torch.from_numpy(Y[rank * 5:(rank + 1) * 5])
    labels = [torch.zeros_like(local_labels) for _ in range(world)]
    distributed.all_gather(labels, local_labels)
    labels = torch.cat(labels)
    embeddings = AllGather.apply(backbone(x))
    mine = (labels >= start) & (labels < start + num_local)
    labels = torch.where(mine, labels - start, torch.full_like(labels, -1))
    logits = nn.functional.linear(normalize(embeddings), normalize(weight)) * S
    loss = DistCrossEntropyFunc.apply(logits, labels)
    opt.zero_grad()
    loss.backward()
    np.save(os.path.join(OUT, f"loss{step}_r{rank}.npy"), np.array(loss.item()))
    for i, p in enumerate(backbone.module.parameters()):
        np.save(os.path.join(OUT, f"g{step}_b{i}_r{rank}.npy"), p.grad.numpy())
    np.save(os.path.join(OUT, f"g{step}_w_r{rank}.npy"), weight.grad.numpy())
    opt.step()
distributed.destroy_process_group()
"""


def _partial_fc_reference():
    """The same two steps in one process on the concatenated batch with the whole weight."""
    import cddp.nn as nn
    cddp.manual_seed(0)
    fc1, fc2 = nn.Linear(6, 8), nn.Linear(8, 4)
    W = nn.Parameter(cddp.from_numpy(
        np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)))
    params = [fc1.weight, fc1.bias, fc2.weight, fc2.bias]
    opt = cddp.optim.SGD(params + [W], lr=0.1)
    rng = np.random.default_rng(2)
    out = []
    for step in range(2):
        X = rng.standard_normal((10, 6)).astype(np.float32)
        Y = rng.integers(0, 6, 10)
        e = fc2(fc1(cddp.from_numpy(X)).relu())
        e = e / e.norm(dim=1, keepdim=True)
        w = W / W.norm(dim=1, keepdim=True)
        loss = nn.functional.cross_entropy(e.mm(w.t()) * 8.0, cddp.from_numpy(Y))
        opt.zero_grad()
        loss.backward()
        out.append((loss.item(), [n(p.grad) for p in params], n(W.grad)))
        opt.step()
    return out


def test_partial_fc_on_two_ranks_equals_one_process(tmp_path):
    r = run_ranks(tmp_path, PARTIAL_FC, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    for step, (loss, grads, gw) in enumerate(_partial_fc_reference()):
        for rank in (0, 1):
            np.testing.assert_allclose(load(tmp_path, f"loss{step}_r{rank}.npy"), loss,
                                       rtol=1e-5)
            for i, g in enumerate(grads):         # DDP-averaged backbone gradients
                np.testing.assert_allclose(load(tmp_path, f"g{step}_b{i}_r{rank}.npy"), g,
                                           rtol=1e-4, atol=1e-6,
                                           err_msg=f"step {step} rank {rank} param {i}")
            np.testing.assert_allclose(load(tmp_path, f"g{step}_w_r{rank}.npy"),
                                       gw[3 * rank:3 * rank + 3], rtol=1e-4, atol=1e-6)
