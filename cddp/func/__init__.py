"""cddp.func — torch.func: functional_call, stack_module_state, and the function transforms
grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian, vmap (functionalize returns its
function unchanged).

The transforms take and return what torch's do (same signatures, pytree structures and error
messages) but are built on reverse-mode autograd (_transforms.py): jvp and jacfwd run reverse
passes underneath, and they nest (grad(grad(f)), vmap(grad(f)), loss.backward() through a
grad) by building gradients with create_graph when an outer differentiation can see them.

vmap is a Python loop over the batch (_vmap.py): func is called once per sample and the
results are stacked — correct, not fast; it gives no speed-up over writing the loop.
"""
from collections.abc import Sequence

from .. import _C
from ..nn.utils.stateless import _functional_call
from ._transforms import (grad, grad_and_value, vjp, jvp, linearize, jacrev, jacfwd, hessian,
                          functionalize)
from ._vmap import vmap

__all__ = ["functional_call", "stack_module_state", "grad", "grad_and_value", "vjp", "jvp",
           "linearize", "jacrev", "jacfwd", "hessian", "vmap", "functionalize"]


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """module(*args, **kwargs) with parameters and buffers taken from a dict (or a sequence
    of dicts with disjoint keys) for this call only."""
    if isinstance(parameter_and_buffer_dicts, dict):
        parameters_and_buffers = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be "
                             "dictionaries")
        counts = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                counts[k] = counts.get(k, 0) + 1
        repeated_keys = [k for k, n in counts.items() if n > 1]
        if repeated_keys:
            raise ValueError(f"{repeated_keys} appeared in multiple dictionaries; behavior of "
                             "functional call is ambiguous")
        parameters_and_buffers = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError("Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of "
                         f"dicts, but got {type(parameter_and_buffer_dicts)}")
    return _functional_call(module, parameters_and_buffers, args, kwargs,
                            tie_weights=tie_weights, strict=strict)


def _stacked_leaf(tensors, name):
    """The models' tensors stacked on a new first dimension: a fresh leaf requiring grad when
    theirs do (none of their history), as torch's."""
    needs = [t.requires_grad for t in tensors]
    if any(needs) and not all(needs):
        raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
    out = _C.stack(tensors)
    return out.detach().requires_grad_() if all(needs) else out


def stack_module_state(models):
    """(params, buffers): each name's tensors of the models (same class, same train/eval
    mode) stacked, for vmap over functional_call to run the ensemble."""
    if len(models) == 0:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if len({m.training for m in models}) != 1:
        raise RuntimeError("stack_module_state: Expected all models to have the same "
                           "training/eval mode.")
    if any(type(m) is not type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    stacked = []
    for named in ("named_parameters", "named_buffers"):
        each = [dict(getattr(m, named)()) for m in models]
        stacked.append({k: _stacked_leaf([d[k] for d in each], k) for k in each[0]})
    return tuple(stacked)
