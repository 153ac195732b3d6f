"""torch.fx's names, without graph capture: what model code touches at import time and in its
forward works; tracing a module raises.

Model libraries mark functions for FX at import (`@torch.fx.wrap`, timm's attention and
position-embedding layers), register leaf modules, and test `isinstance(x, torch.fx.Proxy)`
or `torch.fx._symbolic_trace.is_fx_tracing()` in forward to take a traceable branch. Here
`wrap` returns its argument, nothing is ever a Proxy, and nothing is ever being traced, which
are the answers those checks get in an eager torch program. `symbolic_trace` and building a
Tracer, Graph, GraphModule, Interpreter or Transformer raise NotImplementedError (cddp records
no graphs: its autograd is eager); the classes exist so that subclassing them at import works.
"""
from . import graph_module, node  # noqa: F401
from ._symbolic_trace import (Graph, GraphModule, Interpreter, Node, Proxy,  # noqa: F401
                              Tracer, Transformer, has_side_effect, is_fx_tracing,
                              replace_pattern, symbolic_trace, wrap)
from .node import map_arg  # noqa: F401

__all__ = ["Graph", "GraphModule", "Interpreter", "Node", "Proxy", "Tracer", "Transformer",
           "has_side_effect", "map_arg", "replace_pattern", "symbolic_trace", "wrap"]
