"""torch APIs that a CPU training script calls for their side effects on accelerator or
compiler settings: on cddp they keep torch's signatures and checks, and change nothing about
how cddp computes.

    compile(model, ...)                    the model itself (decorator forms too): cddp has no
                                           graph compiler; its kernels are already C
    set_float32_matmul_precision(p)        "highest" | "high" | "medium", remembered for
    get_float32_matmul_precision()         get_...; float32 GEMMs stay float32 ("highest")
    is_autocast_cpu_enabled()              is_autocast_enabled("cpu")
    Tensor.pin_memory(device=None)         the tensor itself: there is no device to copy to
    Tensor.is_pinned(device=None)          False
"""
from . import _C

Tensor = _C.Tensor

_PRECISIONS = ("highest", "high", "medium")
_matmul_precision = "highest"


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor",  # noqa: A001
            mode=None, options=None, disable=False):
    """torch.compile: returns `model` unchanged (or, called without one, a decorator that
    does). The keyword arguments are accepted and checked as torch does, and ignored."""
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be "
                           "specified at the same time.")
    if model is None:
        return lambda fn: fn
    if not callable(model):
        raise RuntimeError(f"torch.compile: expected a callable, got {type(model).__name__}")
    return model


def set_float32_matmul_precision(precision):
    global _matmul_precision
    if precision not in _PRECISIONS:
        raise RuntimeError(f"Invalid precision: {precision!r}; expected one of "
                           f"{', '.join(map(repr, _PRECISIONS))}")
    _matmul_precision = precision


def get_float32_matmul_precision():
    return _matmul_precision


def is_autocast_cpu_enabled():
    return _C.is_autocast_enabled("cpu")


def _pin_memory(self, device=None):
    return self


def _is_pinned(self, device=None):
    return False


Tensor.pin_memory = _pin_memory
Tensor.is_pinned = _is_pinned
