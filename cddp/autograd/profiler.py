"""torch.autograd.profiler: record_function, the legacy profile context manager, emit_nvtx /
emit_itt; and the range recorder that torch.profiler (cddp/profiler/) builds on.

What cddp records, and what it does not. cddp's ops run in C with no per-op instrumentation,
so there are no aten::* events and no per-op times: a profile holds only ranges that Python
code opens and closes, each timed with time.perf_counter_ns on the thread that ran it:

    record_function(name)        every range (context manager or decorator), "user_annotation"
    Optimizer.step / zero_grad   "Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad"
                                 (torch's names), the outermost call per optimizer only
    Module.__call__              "nn.Module: Linear" (class name; "python_function"), every
                                 module call, nested ones inside their parent's range
    ProfilerStep#N               torch.profiler.profile(schedule=...).step()

Self CPU time is a range's time minus that of the ranges opened inside it on the same thread;
"CPU total" is its whole time, C ops included. The module and optimizer hooks are installed
when the first profiler starts collecting and removed when the last stops (Module.__call__
and each Optimizer subclass's step/zero_grad are swapped on the class), so outside a profile
they cost nothing; a record_function with no profiler collecting costs one list check.
record_shapes records module inputs' shapes; with_stack the Python frames (outside cddp) that
opened each range; profile_memory and with_flops are accepted and measure nothing (no columns
for them appear, as in torch when it found none). use_cuda / use_device: cddp has no device
timeline, so no device columns either.
"""
import functools
import os
import sys
import threading
import time
import warnings

from .profiler_util import EventList, FunctionEvent

__all__ = ["profile", "record_function", "emit_nvtx", "emit_itt", "EventList",
           "FunctionEvent"]

# perf_counter_ns is monotonic and fine-grained; traces want wall-clock-like timestamps
_CLOCK_OFFSET_NS = time.time_ns() - time.perf_counter_ns()
_CDDP_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

_collecting = []            # the _Collectors taking events now (a list: profiles may nest)
_lock = threading.Lock()
_tls = threading.local()    # .stack: this thread's open ranges
_next_id = [0]


def _now_us():
    return (time.perf_counter_ns() + _CLOCK_OFFSET_NS) / 1000.0


def _python_stack():
    """The Python frames outside cddp that led here, innermost first (torch's with_stack
    format "file(line): function")."""
    out = []
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not os.path.abspath(fn).startswith(_CDDP_DIR):
            out.append(f"{fn}({f.f_lineno}): {f.f_code.co_name}")
        f = f.f_back
    return out


class _Collector:
    """The events of one profiling window (a legacy profile, or one torch.profiler cycle)."""

    def __init__(self, record_shapes=False, with_stack=False):
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.events = []
        self.enabled = False

    def start(self):
        with _lock:
            self.enabled = True
            _collecting.append(self)
            if len(_collecting) == 1:
                _hooks.install()

    def stop(self):
        with _lock:
            self.enabled = False
            if self in _collecting:
                _collecting.remove(self)
            if not _collecting:
                _hooks.remove()

    def function_events(self):
        evts = EventList(sorted(self.events, key=lambda e: e.time_range.start))
        return evts


class _Range:
    """An open range: opened with the collectors active at its start, closed into each of
    them still enabled at its end."""
    __slots__ = ("name", "cat", "shapes", "collectors", "start", "child_us", "parent", "stack",
                 "id")

    def __init__(self, name, cat, shapes=None):
        self.collectors = tuple(_collecting)
        self.name, self.cat, self.shapes = name, cat, shapes
        stack = getattr(_tls, "stack", None)
        if stack is None:
            stack = _tls.stack = []
        self.parent = stack[-1] if stack else None
        self.stack = (_python_stack() if any(c.with_stack for c in self.collectors) else None)
        stack.append(self)
        with _lock:
            _next_id[0] += 1
            self.id = _next_id[0]
        self.child_us = 0.0
        self.start = _now_us()

    def close(self):
        end = _now_us()
        stack = _tls.stack
        if stack and stack[-1] is self:
            stack.pop()
        elif self in stack:             # ranges closed out of order: drop this one only
            stack.remove(self)
        dur = end - self.start
        if self.parent is not None:
            self.parent.child_us += dur
        # torch lists every ProfilerStep#N as "ProfilerStep*" (one row in key_averages);
        # the trace keeps the numbered name
        name = "ProfilerStep*" if self.name.startswith("ProfilerStep#") else self.name
        for c in self.collectors:
            if c.enabled:
                evt = FunctionEvent(self.id, name, threading.get_ident(), self.start, end,
                                    dur - self.child_us, self.cat,
                                    input_shapes=self.shapes if c.record_shapes else None,
                                    stack=self.stack if c.with_stack else None,
                                    cpu_parent=self.parent)
                evt.trace_name = self.name
                c.events.append(evt)


def _shapes(args):
    from .. import _C
    return [list(a.shape) if isinstance(a, _C.Tensor) else [] for a in args]


class record_function:
    """torch.autograd.profiler.record_function(name, args=None): a named range in the
    profile, as a context manager or a decorator. With no profiler collecting it records
    nothing."""

    def __init__(self, name, args=None):
        self.name = name
        self.args = args
        self.run_callbacks_on_exit = True
        self._range = None

    def __enter__(self):
        if _collecting:
            self._range = _Range(self.name, "user_annotation")
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        if self._range is not None and self.run_callbacks_on_exit:
            self._range.close()
        self._range = None
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with record_function(self.name, self.args):
                return fn(*args, **kwargs)
        return wrapper


# ---- the module and optimizer hooks (installed only while collecting) ----------------------

class _Hooks:
    def __init__(self):
        self.saved = []             # (class, attribute, original)

    def install(self):
        from ..nn.modules.module import Module
        from ..optim.optimizer import Optimizer
        call = Module.__call__

        def profiled_call(module, *args, **kwargs):
            if not _collecting:
                return call(module, *args, **kwargs)
            shapes = _shapes(args) if any(c.record_shapes for c in _collecting) else None
            r = _Range("nn.Module: " + type(module).__name__, "python_function", shapes)
            try:
                return call(module, *args, **kwargs)
            finally:
                r.close()
        self.saved.append((Module, "__call__", call))
        Module.__call__ = profiled_call

        todo, seen = [Optimizer], set()
        while todo:
            cls = todo.pop()
            if cls in seen:
                continue
            seen.add(cls)
            todo.extend(cls.__subclasses__())
            for attr, label in (("step", "step"), ("zero_grad", "zero_grad")):
                fn = cls.__dict__.get(attr)
                if fn is not None:
                    self.saved.append((cls, attr, fn))
                    setattr(cls, attr, _optimizer_range(fn, label))

    def remove(self):
        while self.saved:
            cls, attr, fn = self.saved.pop()
            setattr(cls, attr, fn)


def _optimizer_range(fn, label):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        inside = getattr(_tls, "optimizer", None)
        if inside is None:
            inside = _tls.optimizer = set()
        key = (id(self), label)
        if not _collecting or key in inside:        # super().step(): the outer call's range
            return fn(self, *args, **kwargs)
        inside.add(key)
        r = _Range(f"Optimizer.{label}#{type(self).__name__}.{label}", "user_annotation")
        try:
            return fn(self, *args, **kwargs)
        finally:
            r.close()
            inside.discard(key)
    return wrapper


_hooks = _Hooks()


# ---- the legacy profiler -------------------------------------------------------------------

class profile:
    """torch.autograd.profiler.profile: records while the context is open; function_events,
    key_averages(), table(), export_chrome_trace() afterwards (see the module docstring for
    what is recorded)."""

    def __init__(self, enabled=True, *, use_cuda=False, use_device=None, record_shapes=False,
                 with_flops=False, profile_memory=False, with_stack=False, with_modules=False,
                 use_kineto=False, use_cpu=True, experimental_config=None, acc_events=False,
                 custom_trace_id_callback=None):
        self.enabled = enabled
        if not self.enabled:
            return
        self.use_cuda = use_cuda
        if use_cuda:
            warnings.warn("The attribute `use_cuda` will be deprecated soon, please use "
                          "``use_device = 'cuda'`` instead.", FutureWarning, stacklevel=2)
            self.use_device = "cuda"
        else:
            self.use_device = use_device
        if self.use_device == "cuda":
            # cddp has no device timeline (torch.cuda.is_available() is False)
            warnings.warn("CUDA is not available, disabling CUDA profiling", stacklevel=2)
            self.use_cuda = False
            self.use_device = None
        self.record_shapes = record_shapes
        self.with_flops = with_flops
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.with_modules = with_modules
        self.use_cpu = use_cpu
        self.acc_events = acc_events
        self.entered = False
        self.function_events = None
        self._collector = None

    def __enter__(self):
        if not self.enabled:
            return self
        if self.entered:
            raise RuntimeError("Profiler context manager is not reentrant")
        self.entered = True
        self._start_trace()
        return self

    def _start_trace(self):
        if self._collector is None or not self.acc_events:
            self._collector = _Collector(self.record_shapes, self.with_stack)
        self._collector.start()

    def __exit__(self, exc_type, exc_val, exc_tb):
        if not self.enabled:
            return
        self._collector.stop()
        self.function_events = EventList(self._collector.function_events(),
                                         use_device=self.use_device,
                                         profile_memory=self.profile_memory,
                                         with_flops=self.with_flops)
        return False

    def __repr__(self):
        if self.function_events is None:
            return "<unfinished torch.autograd.profile>"
        return repr(self.function_events)

    def __str__(self):
        if self.function_events is None:
            return "<unfinished torch.autograd.profile>"
        return str(self.function_events)

    def _check_finish(self):
        if self.function_events is None:
            raise RuntimeError("Profiler didn't finish running")

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75,
              max_name_column_width=55, max_shapes_column_width=80, header=None,
              top_level_events_only=False, time_unit=None):
        self._check_finish()
        return self.function_events.table(
            sort_by=sort_by, row_limit=row_limit, max_src_column_width=max_src_column_width,
            max_name_column_width=max_name_column_width,
            max_shapes_column_width=max_shapes_column_width, header=header,
            top_level_events_only=top_level_events_only, time_unit=time_unit)

    table.__doc__ = EventList.table.__doc__

    def export_chrome_trace(self, path):
        self._check_finish()
        return self.function_events.export_chrome_trace(path)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0,
                     group_by_overload_name=False):
        self._check_finish()
        return self.function_events.key_averages(group_by_input_shape, group_by_stack_n,
                                                 group_by_overload_name)

    def total_average(self):
        self._check_finish()
        return self.function_events.total_average()

    @property
    def self_cpu_time_total(self):
        self._check_finish()
        return self.function_events.self_cpu_time_total


class emit_nvtx:
    """torch.autograd.profiler.emit_nvtx: cddp emits no NVTX ranges; a context manager that
    does nothing."""

    def __init__(self, enabled=True, record_shapes=False):
        self.enabled = enabled
        self.entered = False
        self.record_shapes = record_shapes

    def __enter__(self):
        if self.enabled:
            if self.entered:
                raise RuntimeError("NVTX annotation context manager is not reentrant")
            self.entered = True
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.entered = False
        return False


class emit_itt(emit_nvtx):
    """torch.autograd.profiler.emit_itt: no ITT ranges either; does nothing."""
