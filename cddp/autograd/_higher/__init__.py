"""Higher-order gradients (create_graph=True) and backward(inputs=...).

    backward(tensor, gradient, retain_graph, create_graph, inputs)   Tensor.backward's path
    grad(outputs, inputs, grad_outputs, ...)                         autograd.grad's path

engine.py walks the graph; formula.py holds the registry and the node context; the formulas
live by kind of op in pointwise.py, reduce.py, shape.py, linalg.py and nn.py.
"""
import warnings

from ... import _C
from .engine import run
from .formula import FORMULAS, Unsupported, _sink  # noqa: F401


def _seeds(outputs, grad_outputs):
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"grad requires one gradient per output: got {len(grad_outputs)} "
                           f"gradients for {len(outputs)} outputs")
    seeds = []
    for t, g in zip(outputs, grad_outputs):
        if g is None:
            if t.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = _C.ones_like(t)
        elif tuple(g.shape) != tuple(t.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output has a shape of {list(g.shape)} "
                               f"and output has a shape of {list(t.shape)}.")
        seeds.append(g)
    return seeds


def grad(outputs, inputs, grad_outputs=None):
    """autograd.grad(..., create_graph=True)'s gradients, each with a history (None for an
    input the outputs do not reach; cddp/_extras.py's grad applies allow_unused)."""
    for i, x in enumerate(inputs):
        if not x.requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors (index {i}) does not "
                               "require grad")
    return run(outputs, _seeds(outputs, grad_outputs), [_sink(x) for x in inputs])


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Tensor.backward / autograd.backward with create_graph or inputs: gradients accumulate
    into the leaves' .grad (only into `inputs`' .grad when given, leaf or not), with a history
    when create_graph."""
    if isinstance(tensors, _C.Tensor):
        tensors = (tensors,)
    tensors = list(tensors)
    if isinstance(grad_tensors, _C.Tensor):
        grad_tensors = (grad_tensors,)
    if grad_tensors is not None:
        grad_tensors = list(grad_tensors)
    if inputs is None:
        if not create_graph:
            _C._backward(tuple(tensors), None if grad_tensors is None else tuple(grad_tensors),
                         bool(retain_graph))
            return None
        warnings.warn("Using backward() with create_graph=True will create a reference cycle "
                      "between the parameter and its gradient which can cause a memory leak. "
                      "We recommend using autograd.grad when creating the graph to avoid "
                      "this. If you have to use this function, make sure to reset the .grad "
                      "fields of your parameters to None after use to break the cycle and "
                      "avoid the leak.", UserWarning, stacklevel=3)
        run(tensors, _seeds(tensors, grad_tensors))
        return None
    inputs = [inputs] if isinstance(inputs, _C.Tensor) else list(inputs)
    if not inputs:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    if create_graph:
        got = grad(tensors, inputs, grad_tensors)
    else:
        from ..._extras import grad as first_order
        got = first_order(tensors, inputs, grad_tensors, retain_graph=retain_graph,
                          allow_unused=True)
    for x, g in zip(inputs, got):
        if g is not None:
            x.grad = g if x.grad is None else x.grad + g
    return None
