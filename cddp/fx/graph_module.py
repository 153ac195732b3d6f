"""torch.fx.graph_module's names that model code imports (torchvision's feature_extraction):
GraphModule (which cddp cannot build: cddp/fx/_symbolic_trace.py), and the helpers around it.
"""
from ..nn.modules.module import Module
from ._symbolic_trace import GraphModule  # noqa: F401

__all__ = ["GraphModule"]

_USER_PRESERVED_ATTRIBUTES_KEY = "_user_preserved_attributes"


class _CodeOnlyModule(Module):
    """A module holding only the submodules and buffers a generated forward uses."""

    def __init__(self, body):
        super().__init__()
        self.__dict__ = body.__dict__


def _copy_attr(from_module, to_module, target):
    """Copy the submodule / parameter / buffer at dotted path `target` of from_module to the
    same path of to_module, creating empty intermediate modules (torch's helper)."""
    *prefix, field = target.split(".")
    for item in prefix:
        f = getattr(from_module, item)
        t = getattr(to_module, item, None)
        if f is t:
            return
        if t is None:
            t = Module()
            setattr(to_module, item, t)
        from_module, to_module = f, t
    orig = getattr(from_module, field)
    if field in getattr(from_module, "_buffers", {}):
        to_module.register_buffer(field, orig)
    else:
        setattr(to_module, field, orig)
