"""torch.cuda.nvtx: profiler range markers; without a GPU profiler to see them they mark
nothing (range_push returns the nesting depth as NVTX does)."""
from contextlib import contextmanager

__all__ = ["range_push", "range_pop", "range_start", "range_end", "mark", "range"]

_depth = 0


def range_push(msg):
    global _depth
    _depth += 1
    return _depth - 1


def range_pop():
    global _depth
    if _depth == 0:
        return -1
    _depth -= 1
    return _depth


def range_start(msg):
    return 0


def range_end(range_id):
    pass


def mark(msg):
    pass


@contextmanager
def range(msg, *args, **kwargs):  # noqa: A001  (torch's name)
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
