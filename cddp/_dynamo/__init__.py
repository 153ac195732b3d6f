"""torch._dynamo as scripts touch it: its config knobs (_dynamo/config.py), reset(), and the
decorators and markers model code carries for the compiler. cddp runs models eagerly
(cddp.compile hands them back), so these leave functions and tensors as they are."""
from . import config, eval_frame  # noqa: F401
from ..compiler import (allow_in_graph, assume_constant_result, disable,  # noqa: F401
                        is_compiling, reset)

__all__ = ["config", "reset", "disable", "is_compiling", "allow_in_graph",
           "assume_constant_result", "mark_dynamic", "mark_static", "maybe_mark_dynamic",
           "graph_break", "optimize", "mark_static_address"]


def mark_dynamic(t, index, *, min=None, max=None, specialize_on=None):  # noqa: A002
    """A hint to the compiler that dims `index` of t vary; nothing to record here."""


def maybe_mark_dynamic(t, index):
    """As mark_dynamic."""


def mark_static(t, index=None):
    """A hint to the compiler that t's dims are fixed; nothing to record here."""


def mark_static_address(t, guard=True):
    """A hint that t's memory stays put across compiled calls (static KV caches)."""


def graph_break():
    """Where the compiler would split the graph; eager code runs on."""


def optimize(backend="inductor", *, nopython=False, guard_export_fn=None,
             guard_fail_fn=None, disable=False, dynamic=None):
    """The old torch._dynamo.optimize(backend)(fn): fn itself."""
    return lambda fn: fn
