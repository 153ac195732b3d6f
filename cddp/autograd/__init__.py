"""cddp.autograd — torch.autograd: backward(), grad modes, graph nodes (all in C), custom
Functions (function.py), gradcheck (gradcheck.py: cddp.autograd.gradcheck is the function,
as in torch, and the module imports as cddp.autograd.gradcheck too)."""
from .. import _C
from .grad_mode import (no_grad, enable_grad, set_grad_enabled, is_grad_enabled,  # noqa: F401
                        inference_mode, is_inference_mode_enabled,
                        set_multithreading_enabled)
from . import forward_ad, function, functional, graph  # noqa: F401
from .function import Function, FunctionCtx, once_differentiable
from .anomaly_mode import detect_anomaly, set_detect_anomaly  # noqa: F401
from .gradcheck import gradcheck, gradgradcheck  # noqa: F401 (the functions shadow the module)

Node = _C.Node


def grad(*args, **kwargs):
    """torch.autograd.grad (see cddp._extras.grad)."""
    from .._extras import grad as _grad
    return _grad(*args, **kwargs)


def _is_checkpoint_valid():
    """False inside a run that writes no .grad (autograd.grad, either engine), where a
    reentrant checkpoint's inner backward cannot run (torch's _is_checkpoint_valid)."""
    from ._higher.engine import capturing
    return not (_C._accumulate_off() or capturing())


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """torch.autograd.backward: accumulate gradients of `tensors` into the leaves' .grad."""
    if create_graph or inputs is not None:
        from . import _higher
        return _higher.backward(tensors, grad_tensors, retain_graph, create_graph, inputs)
    if isinstance(tensors, _C.Tensor):
        tensors = (tensors,)
    if isinstance(grad_tensors, _C.Tensor):
        grad_tensors = (grad_tensors,)
    _C._backward(tuple(tensors), None if grad_tensors is None else tuple(grad_tensors),
                 bool(retain_graph))


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, _C.Tensor)


class Variable(metaclass=_VariableMeta):
    """torch.autograd.Variable, kept by torch for old scripts: Variable(t, requires_grad=False)
    is a tensor sharing t's data (detached, the flag set); any tensor is an instance."""

    def __new__(cls, data, requires_grad=False, volatile=False):
        return data.detach().requires_grad_(requires_grad)


class _ExecutionEngine:
    """torch's Variable._execution_engine, for what scripts call on it: queue_callback(cb)
    runs cb once the running backward's graph is done (NVIDIA's apply_gradient_allreduce
    all-reduces the gradients there; csrc/autograd/engine.c)."""

    @staticmethod
    def queue_callback(callback):
        _C._queue_callback(callback)


Variable._execution_engine = _ExecutionEngine()


def __getattr__(name):
    # torch.autograd.profiler without the import: loaded on first use
    if name in ("profiler", "profiler_util"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
