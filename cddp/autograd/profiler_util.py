"""torch.autograd.profiler_util: the events a profiler hands back and how they are summarised.

    FunctionEvent        one recorded range: name, thread, start/end (us), self time, shapes
    FunctionEventAvg     the events of one key added up (key_averages' rows)
    EventList            a list of either: key_averages(), table(), export_chrome_trace(),
                         total_average(), self_cpu_time_total

The table is torch's _build_table with the columns cddp can fill (Name, Self CPU %, Self CPU,
CPU total %, CPU total, CPU time avg, # of Calls, and Input Shapes / Source Location when
recorded). Device time, memory and FLOPs are never measured, so their columns never appear
(torch drops the FLOPs column the same way when it found none).
"""
import collections
import gzip
import json
import os

_US_IN_SECOND = 1000.0 * 1000.0
_US_IN_MS = 1000.0


def _format_time(time_us):
    """torch's format: seconds, milliseconds or microseconds with three decimals."""
    if time_us >= _US_IN_SECOND:
        return f"{time_us / _US_IN_SECOND:.3f}s"
    if time_us >= _US_IN_MS:
        return f"{time_us / _US_IN_MS:.3f}ms"
    return f"{time_us:.3f}us"


def _format_time_share(time_us, total_time_us):
    if total_time_us == 0:
        return "NaN" if time_us != 0 else f"{0.0:.2f}%"
    return f"{time_us * 100.0 / total_time_us:.2f}%"


class Interval:
    def __init__(self, start, end):
        self.start, self.end = start, end

    def elapsed_us(self):
        return self.end - self.start


class _TimeStrings:
    """The *_str properties torch's events have (cpu_time_str, ...)."""

    @property
    def cpu_time(self):
        return 0.0 if self.count == 0 else self.cpu_time_total / self.count

    @property
    def self_cpu_time_total_str(self):
        return _format_time(self.self_cpu_time_total)

    @property
    def cpu_time_total_str(self):
        return _format_time(self.cpu_time_total)

    @property
    def cpu_time_str(self):
        return _format_time(self.cpu_time)

    @property
    def device_time(self):
        return 0.0

    @property
    def device_time_str(self):
        return _format_time(0.0)

    @property
    def self_device_time_total_str(self):
        return _format_time(0.0)

    # torch's cuda_* spellings of the device attributes
    cuda_time = device_time
    cuda_time_total = property(lambda self: self.device_time_total)
    self_cuda_time_total = property(lambda self: self.self_device_time_total)


class _NoDeviceFields(_TimeStrings):
    """The fields torch's events carry for devices, memory and flops: constant on cddp, which
    records CPU time only."""

    device_time_total = self_device_time_total = 0.0
    cpu_memory_usage = self_cpu_memory_usage = 0
    device_memory_usage = self_device_memory_usage = 0
    flops = 0
    node_id = -1
    overload_name = ""
    is_async = is_remote = is_legacy = False
    use_device = None
    device_type = "DeviceType.CPU"


class FunctionEvent(_NoDeviceFields):
    """One recorded range (times in microseconds). `cat` is the Chrome-trace category:
    user_annotation for record_function ranges, python_function for module calls."""

    sequence_nr = -1
    count = 1

    def __init__(self, id, name, thread, start_us, end_us, self_us, cat="user_annotation",  # noqa: A002
                 input_shapes=None, stack=None, cpu_parent=None):
        self.id = id
        self.name = name
        self.thread = thread
        self.time_range = Interval(start_us, end_us)
        self.self_cpu_time_total = self_us
        self.cat = cat
        self.input_shapes = input_shapes if input_shapes is not None else []
        self.stack = stack if stack is not None else []
        self.cpu_parent = cpu_parent
        self.cpu_children = []

    @property
    def key(self):
        return self.name

    @property
    def cpu_time_total(self):
        return self.time_range.elapsed_us()

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} overload_name={self.overload_name} "
                f"device_type={self.device_type} node_id={self.node_id} "
                f"cpu_time={self.cpu_time_str} start_us={self.time_range.start} "
                f"end_us={self.time_range.end} "
                f"cpu_children={[c.id for c in self.cpu_children]} "
                f"None_time={self.device_time_str} "
                f"name={self.name} thread={self.thread} input_shapes={self.input_shapes} "
                f"cpu_memory_usage=0 None_memory_usage=0 is_async=False is_remote=False "
                f"seq_nr={self.sequence_nr} is_legacy=False>")


class FunctionEventAvg(_NoDeviceFields):
    """The events of one key added together (torch's FunctionEventAvg)."""

    cpu_parent = None

    def __init__(self):
        self.key = None
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.input_shapes = None
        self.stack = None
        self.is_user_annotation = False

    def add(self, other):
        if self.key is None:
            self.key = other.key
            self.input_shapes = other.input_shapes
            self.stack = other.stack
            self.cpu_parent = other.cpu_parent
            self.is_user_annotation = getattr(other, "cat", None) == "user_annotation"
        if not isinstance(other, (FunctionEvent, FunctionEventAvg)):
            raise AssertionError("Expected other to be a FunctionEvent or FunctionEventAvg")
        if other.key != self.key:
            raise AssertionError(f"Expected keys to match, but got {other.key} vs {self.key}")
        self.cpu_time_total += other.cpu_time_total
        self.self_cpu_time_total += other.self_cpu_time_total
        self.count += other.count
        return self

    def __iadd__(self, other):
        return self.add(other)

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} self_cpu_time={self.self_cpu_time_total_str} "
                f"cpu_time={self.cpu_time_str}  self_cuda_time={self.self_device_time_total_str} "
                f"cuda_time={self.device_time_str} input_shapes={self.input_shapes} "
                f"cpu_memory_usage=0 cuda_memory_usage=0>")


class EventList(list):
    """A list of FunctionEvent (or FunctionEventAvg) with torch's summaries."""

    def __init__(self, *args, use_device=None, profile_memory=False, with_flops=False,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self._use_device = use_device
        self._profile_memory = profile_memory
        self._with_flops = with_flops

    @property
    def self_cpu_time_total(self):
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0,
                     group_by_overload_name=False):
        """One FunctionEventAvg per key (and input shapes / top stack frames when asked), in
        order of first appearance."""
        stats = collections.defaultdict(FunctionEventAvg)
        for evt in self:
            key = (evt.key,)
            if group_by_input_shape:
                key += (str(evt.input_shapes),)
            if group_by_stack_n > 0:
                key += tuple(evt.stack[:group_by_stack_n])
            stats[key].add(evt)
        return EventList(stats.values(), use_device=self._use_device,
                         profile_memory=self._profile_memory, with_flops=self._with_flops)

    def total_average(self):
        total = FunctionEventAvg()
        for evt in self:
            total.cpu_time_total += evt.cpu_time_total
            total.self_cpu_time_total += evt.self_cpu_time_total
            total.count += evt.count
        total.key = "Total"
        return total

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75,
              max_name_column_width=55, max_shapes_column_width=80, header=None,
              top_level_events_only=False, time_unit=None):
        """The text table torch prints: one row per event, sorted by the named attribute
        (descending), at most row_limit rows (-1: all)."""
        return _build_table(self, sort_by=sort_by, header=header, row_limit=row_limit,
                            max_src_column_width=max_src_column_width,
                            max_name_column_width=max_name_column_width,
                            max_shapes_column_width=max_shapes_column_width,
                            top_level_events_only=top_level_events_only, time_unit=time_unit)

    def __str__(self):
        return self.table()

    def export_chrome_trace(self, path):
        """Chrome's trace-event JSON (chrome://tracing, Perfetto): one complete ("X") event
        per recorded range, timestamps in microseconds; a path ending .gz is gzipped."""
        _write_chrome_trace(self, path)


def _write_chrome_trace(events, path, metadata=None):
    """The trace file: torch's top-level keys, `metadata` (key -> JSON text) beside them."""
    pid = os.getpid()
    trace_events = [{"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                     "args": {"name": "python"}}]
    for evt in events:
        if not isinstance(evt, FunctionEvent):
            raise AssertionError("export_chrome_trace needs the unaggregated events")
        e = {"ph": "X", "cat": evt.cat, "name": getattr(evt, "trace_name", evt.name),
             "pid": pid, "tid": evt.thread,
             "ts": evt.time_range.start, "dur": evt.cpu_time_total,
             "args": {"External id": evt.id}}
        if evt.input_shapes:
            e["args"]["Input Dims"] = evt.input_shapes
        if evt.stack:
            e["args"]["Call stack"] = ";".join(evt.stack)
        trace_events.append(e)
    trace = {"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms"}
    for key, value in (metadata or {}).items():
        trace[key] = json.loads(value)
    trace.update({"traceEvents": trace_events, "traceName": str(path)})
    text = json.dumps(trace)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)


def _build_table(events, sort_by=None, header=None, row_limit=100, max_src_column_width=75,
                 max_name_column_width=55, max_shapes_column_width=80,
                 top_level_events_only=False, time_unit=None):
    """torch's _build_table, restricted to the CPU columns (see the module docstring)."""
    if len(events) == 0:
        return ""
    if sort_by is not None:
        # torch's spelling: cuda_/xpu_/privateuse1_ name the device columns
        attr = sort_by.replace("cuda", "device").replace("xpu", "device") \
            .replace("privateuse1", "device")
        events = sorted(events, key=lambda evt: getattr(evt, attr), reverse=True)
    name_width = max(len(evt.key) for evt in events) + 4
    if max_name_column_width is not None:
        name_width = min(name_width, max_name_column_width)
    has_shapes = any(evt.input_shapes for evt in events)
    shapes_width = max(len(str(evt.input_shapes)) for evt in events) + 4
    if max_shapes_column_width is not None:
        shapes_width = min(shapes_width, max_shapes_column_width)
    stacks = [evt.stack for evt in events if evt.stack]
    src_width = None
    if stacks:
        src_width = max(len(entry) for stack in stacks for entry in stack) + 4
        if max_src_column_width is not None:
            src_width = min(src_width, max_src_column_width)

    spacing = 2
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
               "# of Calls"]
    widths = [name_width] + [12] * 6
    aligns = [">"] * 7
    if has_shapes:
        headers.append("Input Shapes")
        widths.append(shapes_width)
        aligns.append(">")
    if stacks:
        headers.append("Source Location")
        widths.append(src_width)
        aligns.append("<")
    row_format = "".join("{: " + a + str(w) + "}" + " " * spacing for a, w in zip(aligns, widths))
    header_sep = "".join("-" * w + " " * spacing for w in widths)
    line_length = sum(w + spacing for w in widths) - spacing

    def fmt(time_us, default):
        if time_unit == "s":
            return f"{time_us / _US_IN_SECOND:.3f}s"
        if time_unit == "ms":
            return f"{time_us / _US_IN_MS:.3f}ms"
        if time_unit == "us":
            return f"{time_us:.3f}us"
        return default

    def trim_path(path):
        if len(path) > src_width:
            path = path[len(path) - src_width:]
            if len(path) > 3:
                path = "..." + path[3:]
        return path

    total_self = sum(evt.self_cpu_time_total for evt in events)
    out = []
    if header is not None:
        out += ["=" * line_length, header]
    if top_level_events_only:
        out += ["=" * line_length, "This report only display top-level ops statistics"]
    out += [header_sep, row_format.format(*headers), header_sep]
    shown = 0
    for evt in events:
        if shown == row_limit:
            break
        if top_level_events_only and evt.cpu_parent is not None:
            continue
        shown += 1
        name = evt.key
        if max_name_column_width is not None and len(name) >= max_name_column_width - 3:
            name = name[:max_name_column_width - 3] + "..."
        row = [name, _format_time_share(evt.self_cpu_time_total, total_self),
               fmt(evt.self_cpu_time_total, evt.self_cpu_time_total_str),
               _format_time_share(evt.cpu_time_total, total_self),
               fmt(evt.cpu_time_total, evt.cpu_time_total_str),
               fmt(evt.cpu_time, evt.cpu_time_str), evt.count]
        if has_shapes:
            row.append(str(evt.input_shapes)[:shapes_width])
        if stacks:
            src = trim_path(evt.stack[0]) if evt.stack else ""
            row.append(src)
        out.append(row_format.format(*row))
        if stacks:
            for entry in (evt.stack or [])[1:5]:
                out.append(row_format.format(*([""] * (len(headers) - 1) + [trim_path(entry)])))
    out += [header_sep, f"Self CPU time total: {_format_time(total_self)}"]
    return "\n".join(out) + "\n"
