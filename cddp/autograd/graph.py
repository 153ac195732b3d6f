"""torch.autograd.graph: the graph's Node type and saved-tensor hooks.

`saved_tensors_hooks(pack_hook, unpack_hook)`: while active, every tensor a graph node saves
for backward (C ops and autograd.Function's save_for_backward alike) is replaced by
`pack_hook(tensor)`'s result; backward calls `unpack_hook(packed)` to get it back
(csrc/autograd/saved.c). Activation checkpointing (cddp/utils/checkpoint.py) is built on it.
Hooks are per thread and nest: the innermost context wins. Inside
`disable_saved_tensors_hooks(message)` setting hooks raises RuntimeError(message).
`get_gradient_edge(t)` is the (node, output_nr) pair where t's gradient enters the graph (an
inspection aid here: autograd.grad does not take edges in place of tensors).
"""
import threading
from collections import namedtuple

from .. import _C
from .grad_mode import _decorate

__all__ = ["Node", "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks",
           "GradientEdge", "get_gradient_edge"]

Node = _C.Node
_disabled = threading.local()       # .message: why saved-tensor hooks are refused right now

GradientEdge = namedtuple("GradientEdge", ("node", "output_nr"))
GradientEdge.__doc__ = "Where a tensor's gradient enters the graph: a Node and its input number."


def get_gradient_edge(tensor):
    """The GradientEdge of `tensor`: its grad_fn and output number, or for a leaf its
    gradient accumulator (torch's). A tensor that does not require grad has none."""
    if not tensor.requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does "
                           "not require gradients")
    if tensor.grad_fn is not None:
        return GradientEdge(tensor.grad_fn, tensor.output_nr)
    node = tensor.view_as(tensor).grad_fn.next_functions[0][0]     # the AccumulateGrad node
    return GradientEdge(node, 0)


class disable_saved_tensors_hooks:
    """Context manager (and decorator) under which saved_tensors_hooks raises
    RuntimeError(error_message), as torch's; per thread, nesting restores the outer one."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        self._prev = getattr(_disabled, "message", None)
        _disabled.message = self.error_message
        return self

    def __exit__(self, *exc):
        _disabled.message = self._prev
        return False

    def __call__(self, fn):
        message = self.error_message
        return _decorate(fn, lambda: disable_saved_tensors_hooks(message))


class saved_tensors_hooks:
    """Context manager: pack_hook(tensor) -> anything, unpack_hook(that) -> a tensor of the
    saved tensor's shape and dtype (checked: RuntimeError otherwise)."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        message = getattr(_disabled, "message", None)
        if message is not None:
            raise RuntimeError(message)
        self._prev = _C._set_saved_tensors_hooks(self.pack_hook, self.unpack_hook)
        return self

    def __exit__(self, *exc):
        _C._set_saved_tensors_hooks(*self._prev)
        return False


class save_on_cpu(saved_tensors_hooks):
    """torch.autograd.graph.save_on_cpu: saved tensors are kept as CPU copies. Every cddp
    tensor is on the CPU already, so this only copies (as torch does for CPU tensors)."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        super().__init__(lambda t: t.detach().clone(), lambda packed: packed)
