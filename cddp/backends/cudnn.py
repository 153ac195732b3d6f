"""cddp.backends.cudnn — settable flags; cddp has no cuDNN path, they change nothing. flags()
sets them for a block and restores them, as torch's."""
import contextlib
import sys

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available():
    return False


@contextlib.contextmanager
def flags(enabled=False, benchmark=False, deterministic=False, allow_tf32=True):
    mod = sys.modules[__name__]
    names = ("enabled", "benchmark", "deterministic", "allow_tf32")
    old = [getattr(mod, n) for n in names]
    for n, v in zip(names, (enabled, benchmark, deterministic, allow_tf32)):
        setattr(mod, n, v)
    try:
        yield
    finally:
        for n, v in zip(names, old):
            setattr(mod, n, v)
