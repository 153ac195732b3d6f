"""torch.cuda's Stream / Event / current_stream / stream(...) for cddp's CUDA fallback: with
no device tensors, "CUDA" work runs synchronously on the CPU (cddp/cuda/__init__.py), so a
stream orders nothing and an event marks a point in host time. Scripts that time their steps
with events (`start.record(); ...; end.record(); end.synchronize();
start.elapsed_time(end)`) therefore get the host time between the two records, in ms."""
import time

__all__ = ["Stream", "Event", "current_stream", "default_stream", "stream", "set_stream"]


class Stream:
    """A stream: every operation on it has already completed (synchronous fallback)."""

    def __init__(self, device=None, priority=0, **kwargs):
        self.device = device
        self.priority = priority

    def synchronize(self):
        pass

    def query(self):
        return True

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_default = Stream()


def current_stream(device=None):
    return _default


def default_stream(device=None):
    return _default


def set_stream(stream):
    pass


class stream:  # noqa: N801  (torch.cuda.stream, a context manager)
    """`with torch.cuda.stream(s):` — nothing to redirect."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


class Event:
    """torch.cuda.Event: record() notes the host time (the work before it is done already);
    elapsed_time(end) is the time between two recorded timing events, in milliseconds."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self._t = None

    def record(self, stream=None):
        self._t = time.perf_counter()

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end_event):
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._t is None or end_event._t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._t - self._t) * 1e3
