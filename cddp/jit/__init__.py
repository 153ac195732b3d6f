"""cddp.jit — torch.jit's names as model code uses them. cddp has no TorchScript: script() and
trace() hand back what they are given (the module or function runs as Python, on cddp's C
kernels), the decorators leave functions as they are, is_scripting() / is_tracing() are False,
and save() / load() raise, saying what to do instead."""
import typing

__all__ = ["script", "trace", "ignore", "unused", "export", "is_scripting", "is_tracing",
           "annotate", "Final", "ScriptModule", "ScriptFunction", "save", "load"]

Final = typing.Final


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
