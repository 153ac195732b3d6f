"""torch.autograd.function: custom differentiable operations (Function, FunctionCtx,
once_differentiable).

A Function's application is one node of the C engine (csrc/autograd/function.c): `apply`
makes the ctx — an instance of the class `<Name>Backward` this module's metaclass creates for
every Function, a subclass of `_C._FunctionBase` (itself a graph Node) — runs `forward` with
grad mode off, gives the outputs their history and keeps `ctx.save_for_backward`'s tensors.
In backward the engine calls `ctx.apply(*grads)`, which calls the user's `backward` with grad
mode off, and checks what it returns as torch does.
"""
import functools
import inspect
import itertools

from .. import _C
from . import forward_ad as _forward_ad
from .grad_mode import no_grad

__all__ = ["Function", "FunctionCtx", "BackwardCFunction", "FunctionMeta",
           "InplaceFunction", "once_differentiable"]

_FUNCTION_COUNTER = itertools.count()


class FunctionCtx:
    """What `forward` / `setup_context` may call on ctx."""

    def save_for_backward(self, *tensors):
        """Keep tensors (or None) for backward; read them back as ctx.saved_tensors, which
        fails if one was modified in place in between."""
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        """Keep tensors for the Function's jvp (forward-mode AD): read back there as
        ctx.saved_tensors."""
        self.saved_for_forward = tensors

    def mark_dirty(self, *args):
        """Declare inputs that forward modified in place (they must be returned)."""
        self.dirty_tensors = args

    def mark_shared_storage(self, *pairs):
        """Deprecated in torch and a no-op there too."""

    def mark_non_differentiable(self, *args):
        """Declare outputs that get no gradient (backward still receives a zero for them)."""
        self.non_differentiable = args

    def set_materialize_grads(self, value):
        """With False, backward receives None (not zeros) for outputs that got no gradient."""
        self.materialize_grads = value


class _HookMixin:
    @staticmethod
    def _register_hook(backward_hooks, hook):
        from ..utils.hooks import RemovableHandle
        if backward_hooks is None:
            backward_hooks = {}
        handle = RemovableHandle(backward_hooks)
        backward_hooks[handle.id] = hook
        return backward_hooks, handle


class BackwardCFunction(_C._FunctionBase, FunctionCtx, _HookMixin):
    """The ctx of one Function application, and its node in the graph."""

    def apply(self, *args):
        """Called by the engine with one gradient per forward output."""
        backward_fn = self._forward_cls.backward
        vjp_fn = self._forward_cls.vjp
        if backward_fn is not Function.backward and vjp_fn is not Function.vjp:
            raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom Function "
                               "is not allowed. You should only implement one of them.")
        user_fn = vjp_fn if vjp_fn is not Function.vjp else backward_fn
        return user_fn(self, *args)


class FunctionMeta(type):
    """Creates `<Name>Backward`, the ctx/node class of each Function subclass."""

    def __init__(cls, name, bases, attrs):
        backward_fn = type(name + "Backward", (BackwardCFunction,), {"_forward_cls": cls})
        backward_fn._autograd_function_id = next(_FUNCTION_COUNTER)
        cls._backward_cls = backward_fn
        super().__init__(name, bases, attrs)


class _SingleLevelFunction(FunctionCtx, _HookMixin, metaclass=FunctionMeta):
    @staticmethod
    def forward(*args, **kwargs):
        """forward(ctx, *args, **kwargs), or forward(*args, **kwargs) with setup_context."""
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        """setup_context(ctx, inputs, output): the newer style's place for ctx calls."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        """One gradient per forward input (None where there is none)."""
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward "
                                  "mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        """Forward-mode derivative: one tangent per output from one per input (used by
        cddp.autograd.forward_ad when a dual tensor goes in)."""
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")


def _is_setup_context_defined(fn):
    return fn != _SingleLevelFunction.setup_context


class Function(_SingleLevelFunction):
    """torch.autograd.Function: subclass with static forward/backward, call `.apply(...)`.

        class Exp(Function):
            @staticmethod
            def forward(ctx, i):
                result = i.exp()
                ctx.save_for_backward(result)
                return result

            @staticmethod
            def backward(ctx, grad_output):
                result, = ctx.saved_tensors
                return grad_output * result
    """

    def __init__(self, *args, **kwargs):
        import warnings
        warnings.warn(f"{self.__class__} should not be instantiated. Methods on autograd "
                      "functions are all static, so you should invoke them on the class "
                      "itself. Instantiating an autograd function will raise an error in a "
                      "future version of PyTorch.", DeprecationWarning, stacklevel=2)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    generate_vmap_rule = False

    @staticmethod
    def vmap(info, in_dims, *args):
        raise NotImplementedError("cddp: Function.vmap is not supported")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run forward and record the application in the graph (when an input needs grad and
        grad mode is on). Keyword arguments are bound to forward's parameters (they become
        inputs, in forward's order); keyword-only parameters are passed through. With
        setup_context, defaults are bound too (setup_context sees every input)."""
        new_style = _is_setup_context_defined(cls.setup_context)
        if kwargs or new_style:           # torch binds defaults for the setup_context style
            sig = inspect.signature(cls.forward)
            bound = (sig.bind(*args, **kwargs) if new_style
                     else sig.bind(None, *args, **kwargs))
            bound.apply_defaults()
            args = bound.args if new_style else bound.args[1:]
            kwargs = bound.kwargs
        if _forward_ad._levels and not kwargs:
            routed = _forward_ad._function_duals(cls, args)
            if routed is not None:
                return _forward_ad._apply_with_jvp(cls, args, *routed)
        return _C._function_apply(cls, cls._backward_cls, new_style, args, kwargs or None)


class InplaceFunction(Function):
    """A Function with an `inplace` flag (torch's helper base class)."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace


class _RaiseOnBackward(Function):
    """Identity whose backward raises RuntimeError(msg): what a result computed without its
    graph carries (a once_differentiable or NumPy backward, a gradient whose create_graph was
    refused), so differentiating it again fails loudly instead of silently seeing no
    dependence on the inputs (torch's DelayedError)."""

    @staticmethod
    def forward(ctx, msg, n, *tensors):
        # tensors: the n results, then the tensors whose history they depend on
        ctx.msg = msg
        out = tuple(t.clone() for t in tensors[:n])
        return out if n != 1 else out[0]

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.msg)


def _raise_on_backward(msg, out, deps):
    """out (a tensor or a tuple / list of results) with its floating tensors wrapped in
    _RaiseOnBackward(msg) depending on deps; out itself when nothing is to wrap."""
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    marked = [i for i, o in enumerate(outs) if isinstance(o, _C.Tensor) and o.is_floating_point()]
    if not marked or not deps:
        return out
    wrapped = _RaiseOnBackward.apply(msg, len(marked), *[outs[i] for i in marked], *deps)
    wrapped = wrapped if isinstance(wrapped, tuple) else (wrapped,)
    outs = list(outs)
    for i, w in zip(marked, wrapped):
        outs[i] = w
    return type(out)(outs) if isinstance(out, (tuple, list)) else outs[0]


def once_differentiable(fn):
    """Decorator for backward: runs it with grad mode off; when the gradients it gets have a
    history (create_graph=True), its results are marked so that differentiating them raises."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            out = fn(ctx, *args)
        if not _C.is_grad_enabled() or not any(isinstance(a, _C.Tensor) and
                                               (a.requires_grad or a.grad_fn is not None)
                                               for a in args):
            return out
        return _raise_on_backward(
            "trying to differentiate twice a function that was marked with "
            "@once_differentiable", out,
            [a for a in args if isinstance(a, _C.Tensor) and a.is_floating_point()])
    return wrapper
