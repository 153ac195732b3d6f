"""Grad-mode switches as torch has them: context managers that are also decorators.

The flag itself is a thread-local int in C (csrc/autograd/node.c), as torch's is thread-local.
"""
import functools
import inspect
import threading

from .. import _C
from .._compat import _NoOpContextDecorator

is_grad_enabled = _C.is_grad_enabled


def _drive(gen, make_ctx):
    """A generator running gen with each of its resumptions (next, send, throw, close) inside
    a fresh make_ctx(), so a decorated generator function runs its body in the decorator's
    mode whatever mode its consumer is in (torch does the same)."""
    def resume(method, *arg):
        with make_ctx():
            return method(*arg)

    try:
        out = resume(gen.send, None)
        while True:
            try:
                sent = yield out
            except GeneratorExit:
                resume(gen.close)
                raise
            except BaseException as exc:        # the consumer's throw()
                out = resume(gen.throw, exc)
            else:
                out = resume(gen.send, sent)
    except StopIteration as stop:
        return stop.value


def _decorate(fn, make_ctx):
    """fn run inside a fresh make_ctx() per call; a generator function per resumption."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen_wrapper(*args, **kwargs):
            return (yield from _drive(fn(*args, **kwargs), make_ctx))
        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with make_ctx():
            return fn(*args, **kwargs)
    return wrapper


class _GradMode:
    _mode = True

    def __new__(cls, *args):
        if len(args) == 1 and callable(args[0]) and cls in (no_grad, enable_grad):
            return cls()(args[0])                   # @no_grad without parentheses
        return super().__new__(cls)

    def __init__(self, *args):
        pass

    def __enter__(self):
        self._prev = _C._set_grad_enabled(self._mode)
        return None

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False

    def _fresh(self):
        """A new manager with this one's settings: each call of a decorated function
        enters its own (they may nest or run on several threads)."""
        return self.__class__()

    def __call__(self, fn):
        return _decorate(fn, self._fresh)


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
        return _decorate(fn, lambda: set_grad_enabled(mode))

    def clone(self):
        return self.__class__(self._mode)


class set_multithreading_enabled(_NoOpContextDecorator):
    """torch.autograd.set_multithreading_enabled(mode): context manager / decorator, for
    torch's per-device backward threads; cddp runs backward on the calling thread, so it only
    records the mode (and gives it back as `.mode`)."""

    def __init__(self, mode):
        self.mode = bool(mode)

    def clone(self):
        return self.__class__(self.mode)


_inference = threading.local()      # depth of inference_mode(True) blocks on this thread


def is_inference_mode_enabled():
    return getattr(_inference, "depth", 0) > 0


class inference_mode(_GradMode):
    """inference_mode(mode=True): no_grad, and is_inference_mode_enabled() is True inside
    (thread-local, as torch's). Tensors made inside are ordinary tensors: torch marks them as
    inference tensors and refuses them in a later backward, cddp lets them be used.
    inference_mode(False) turns grad mode on (torch's guard sets grad mode to `not mode`), also
    inside no_grad or inference_mode. Usable as @inference_mode, @inference_mode() and
    @inference_mode(False) too."""

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):      # @inference_mode, no call
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode=True):
        self.mode = bool(mode)

    def __enter__(self):
        self._prev_depth = getattr(_inference, "depth", 0)
        self._prev = _C._set_grad_enabled(not self.mode)
        _inference.depth = self._prev_depth + 1 if self.mode else 0
        return None

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        _inference.depth = self._prev_depth
        return False

    def _fresh(self):
        return inference_mode(self.mode)
