"""torch.overrides's predicates and helpers. cddp's functions do not dispatch to
`__torch_function__` (a Tensor subclass's override is not consulted by cddp's C functions),
so the checks libraries make before dispatching answer as for plain tensors:
has_torch_function* is False for cddp tensors and plain values, and True only for objects
that define their own __torch_function__ (handle_torch_function then calls it, torch's
protocol: types, then func(...) with args / kwargs). Torch function modes are not provided.
"""
import functools

from . import _C

__all__ = ["handle_torch_function", "has_torch_function", "has_torch_function_unary",
           "has_torch_function_variadic", "is_tensor_like", "wrap_torch_function",
           "get_ignored_functions", "get_overridable_functions"]

_TENSOR_TF = getattr(_C.Tensor, "__torch_function__", None)


def _overrides(a):
    tf = getattr(type(a), "__torch_function__", None)
    return tf is not None and tf is not _TENSOR_TF


def has_torch_function(relevant_args):
    return any(_overrides(a) for a in relevant_args)


def has_torch_function_unary(a):
    return _overrides(a)


def has_torch_function_variadic(*args):
    return has_torch_function(args)


def is_tensor_like(inp):
    return isinstance(inp, _C.Tensor) or hasattr(type(inp), "__torch_function__")


def handle_torch_function(public_api, relevant_args, *args, **kwargs):
    """Call the first __torch_function__ among relevant_args (subclasses before their bases)
    that does not return NotImplemented, torch's order and protocol."""
    overloaded = []
    for a in relevant_args:
        if _overrides(a) and type(a) not in [type(o) for o in overloaded]:
            at = next((i for i, o in enumerate(overloaded) if issubclass(type(a), type(o))),
                      len(overloaded))
            overloaded.insert(at, a)
    types = tuple(type(a) for a in overloaded)
    for a in overloaded:
        result = type(a).__torch_function__(public_api, types, args, kwargs)
        if result is not NotImplemented:
            return result
    raise TypeError(f"no implementation found for '{getattr(public_api, '__name__', public_api)}' "
                    f"on types that implement __torch_function__: {list(types)}")


def wrap_torch_function(dispatcher):
    """Decorator: the function dispatches to __torch_function__ of the arguments
    dispatcher(*args, **kwargs) names."""
    def inner(func):
        @functools.wraps(func)
        def wrapped(*args, **kwargs):
            relevant = dispatcher(*args, **kwargs)
            if has_torch_function(relevant):
                return handle_torch_function(wrapped, relevant, *args, **kwargs)
            return func(*args, **kwargs)
        return wrapped
    return inner


def get_ignored_functions():
    return set()


def get_overridable_functions():
    return {}
