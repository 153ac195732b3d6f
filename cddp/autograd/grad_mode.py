"""Grad-mode switches as torch has them: context managers that are also decorators.

The flag itself is a thread-local int in C (csrc/autograd/node.c), as torch's is thread-local.
"""
import functools

from .. import _C

is_grad_enabled = _C.is_grad_enabled


class _GradMode:
    _mode = True

    def __enter__(self):
        self._prev = _C._set_grad_enabled(self._mode)
        return None

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Disable gradient recording inside the block or decorated function."""
    _mode = False


class enable_grad(_GradMode):
    """Enable gradient recording inside the block or decorated function."""
    _mode = True


class set_grad_enabled(_GradMode):
    """set_grad_enabled(mode): takes effect at once (as torch's) and restores on exit."""

    def __init__(self, mode):
        self._prev = _C._set_grad_enabled(bool(mode))
        self._mode = bool(mode)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        _C._set_grad_enabled(self._prev)
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper
