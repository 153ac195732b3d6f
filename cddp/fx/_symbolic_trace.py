"""torch.fx._symbolic_trace's names (cddp/fx/__init__.py says what they do here)."""

_NO_FX = ("cddp has no torch.fx graph capture (its autograd is eager); run the module "
          "directly, or trace it with torch")


def wrap(fn_or_name):
    """torch.fx.wrap: marks a function as a leaf for symbolic tracing; returns it unchanged."""
    return fn_or_name


def has_side_effect(fn):
    """torch.fx.has_side_effect: returns fn unchanged."""
    return fn


def is_fx_tracing():
    """False: cddp never traces."""
    return False


def symbolic_trace(root, concrete_args=None):
    raise NotImplementedError(f"torch.fx.symbolic_trace: {_NO_FX}")


def replace_pattern(gm, pattern, replacement):
    raise NotImplementedError(f"torch.fx.replace_pattern: {_NO_FX}")


class _Unbuildable:
    """Subclassable at import; building one raises."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"torch.fx.{type(self).__name__}: {_NO_FX}")


class Tracer(_Unbuildable):
    pass


class Graph(_Unbuildable):
    pass


class GraphModule(_Unbuildable):
    pass


class Interpreter(_Unbuildable):
    pass


class Transformer(Interpreter):
    pass


class Proxy(_Unbuildable):
    """Never instantiated by cddp: `isinstance(x, torch.fx.Proxy)` is False, as in eager
    torch code."""


class Node(_Unbuildable):
    pass
