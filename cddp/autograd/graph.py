"""torch.autograd.graph: the graph's Node type and saved-tensor hooks.

`saved_tensors_hooks(pack_hook, unpack_hook)`: while active, every tensor a graph node saves
for backward (C ops and autograd.Function's save_for_backward alike) is replaced by
`pack_hook(tensor)`'s result; backward calls `unpack_hook(packed)` to get it back
(csrc/autograd/saved.c). Activation checkpointing (cddp/utils/checkpoint.py) is built on it.
Hooks are per thread and nest: the innermost context wins.
"""
from .. import _C

__all__ = ["Node", "saved_tensors_hooks", "save_on_cpu"]

Node = _C.Node


class saved_tensors_hooks:
    """Context manager: pack_hook(tensor) -> anything, unpack_hook(that) -> a tensor of the
    saved tensor's shape and dtype (checked: RuntimeError otherwise)."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
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
