"""torch.fx.node's names: Node (no graphs are ever built here: see cddp/fx/__init__.py) and the
structure walkers map_arg / map_aggregate, which code imports from here and uses on plain
values too."""
from ._symbolic_trace import Node

__all__ = ["Node", "map_arg", "map_aggregate", "Argument", "Target"]

Argument = object          # torch's type aliases, for annotations
Target = object


def map_aggregate(a, fn):
    """fn applied to every leaf of a, rebuilding tuples (namedtuples too), lists, dicts and
    slices around the results (torch.fx.node.map_aggregate)."""
    if isinstance(a, tuple):
        t = tuple(map_aggregate(e, fn) for e in a)
        return type(a)(*t) if hasattr(a, "_fields") else t
    if isinstance(a, list):
        return [map_aggregate(e, fn) for e in a]
    if isinstance(a, dict):
        return type(a)((k, map_aggregate(v, fn)) for k, v in a.items())
    if isinstance(a, slice):
        return slice(map_aggregate(a.start, fn), map_aggregate(a.stop, fn),
                     map_aggregate(a.step, fn))
    return fn(a)


def map_arg(a, fn):
    """fn applied to every Node in a (other leaves kept), as map_aggregate."""
    if not callable(fn):
        raise AssertionError("torch.fx.map_arg(a, fn): fn must be a callable")
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)
