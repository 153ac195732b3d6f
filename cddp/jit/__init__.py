"""cddp.jit — torch.jit's names as model code uses them. cddp has no TorchScript: script() and
trace() hand back what they are given (the module or function runs as Python, on cddp's C
kernels), the decorators leave functions as they are, is_scripting() / is_tracing() are False,
and save() / load() raise, saying what to do instead."""
import typing

__all__ = ["script", "trace", "ignore", "unused", "export", "is_scripting", "is_tracing",
           "annotate", "Final", "ScriptModule", "ScriptFunction", "save", "load", "fork",
           "wait", "Attribute", "interface", "isinstance", "Error", "freeze",
           "optimize_for_inference", "trace_module", "script_if_tracing", "TracerWarning"]

Final = typing.Final
_isinstance = isinstance


class TracerWarning(Warning):
    """torch.jit.TracerWarning (scripts filter it: cddp's trace() never emits it)."""


class Error(Exception):
    """torch.jit.Error: what a TorchScript `raise` becomes; never raised by cddp itself."""


class Attribute(typing.NamedTuple):
    """torch.jit.Attribute(value, type): TorchScript's attribute annotation. Model code stores
    it in __init__; as in torch's eager mode it is this pair, not the bare value."""
    value: typing.Any
    type: typing.Any


def fork(func, *args, **kwargs):
    """torch.jit.fork outside TorchScript: runs func now; wait() on the returned completed
    Future gives its result (an exception surfaces there, as torch's)."""
    from ..futures import Future
    fut = Future()
    try:
        fut.set_result(func(*args, **kwargs))
    except Exception as e:  # noqa: BLE001  (delivered by wait(), as torch's)
        fut.set_exception(e)
    return fut


def wait(future):
    return future.wait()


def interface(obj):
    return obj


def isinstance(obj, target_type):  # noqa: A001  (torch's name)
    """torch.jit.isinstance: isinstance that also checks typing containers element by element
    (List[int], Dict[str, Tensor], Tuple[int, str], Optional[...])."""
    origin, args = typing.get_origin(target_type), typing.get_args(target_type)
    if origin is None:
        return target_type is typing.Any or _isinstance(obj, target_type)
    if origin is typing.Union:
        return any(isinstance(obj, a) for a in args)
    if origin is list:
        return _isinstance(obj, list) and all(isinstance(o, args[0]) for o in obj)
    if origin is dict:
        return _isinstance(obj, dict) and all(isinstance(k, args[0]) and isinstance(v, args[1])
                                              for k, v in obj.items())
    if origin is tuple:
        return (_isinstance(obj, tuple) and len(obj) == len(args)
                and all(isinstance(o, a) for o, a in zip(obj, args)))
    return _isinstance(obj, origin)


def freeze(mod, preserved_attrs=None, optimize_numerics=True):
    return mod


def optimize_for_inference(mod, other_methods=None):
    return mod


def trace_module(mod, inputs, *args, **kwargs):
    return mod


def script_if_tracing(fn):
    return fn


_script_if_tracing = script_if_tracing      # torch's private spelling (torchvision's ops use it)


class ScriptModule:
    """Never made by cddp (script() returns the module itself): isinstance checks are False."""


class ScriptFunction:
    """Never made by cddp: isinstance checks are False."""


def script(obj=None, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    return obj


def trace(func, example_inputs=None, *args, **kwargs):
    return func


def ignore(drop=False, **kwargs):
    """@ignore and @ignore(drop=True): the function as it is."""
    if callable(drop):
        return drop
    return lambda fn: fn


def unused(fn):
    return fn


def export(fn):
    return fn


def is_scripting():
    return False


def is_tracing():
    return False


def annotate(the_type, the_value):
    return the_value


def _overload(fn):
    """torch.jit._overload / _overload_method: TorchScript overload declarations (torchvision's
    densenet uses them); Python dispatch never reads them, so the function comes back."""
    return fn


_overload_method = _overload


def _no_torchscript(*args, **kwargs):
    raise RuntimeError("cddp has no TorchScript: save the weights with "
                       "cddp.save(model.state_dict(), path) and rebuild the model in Python")


save = load = _no_torchscript
