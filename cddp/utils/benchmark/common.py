"""torch.utils.benchmark.utils.common: TaskSpec (what a Timer runs) and Measurement (its
times, their median / mean / IQR and torch's repr). Quantiles are NumPy's linear
interpolation, which is what torch.quantile computes. Where torch does its display
arithmetic on default (float32) tensors — significant figures, units, trimming — it is
done in float32 here too, so tables round as torch's do."""
import collections
import dataclasses
import math
import textwrap

import numpy as np

__all__ = ["TaskSpec", "Measurement", "select_unit", "unit_to_english", "trim_sigfig",
           "ordered_unique", "set_torch_threads"]

# display limits: at most this many significant figures, and a confidence interval of no
# less than 25 ns however steady the times
_MAX_SIGNIFICANT_FIGURES, _MIN_CONFIDENCE_INTERVAL = 4, 25e-9
# an IQR / median above these adds a warning to the repr (and a mark in Compare)
_IQR_WARN_THRESHOLD, _IQR_GROSS_WARN_THRESHOLD = 0.1, 0.25


@dataclasses.dataclass(frozen=True, repr=False)      # eq (and so hash) from the fields
class TaskSpec:
    """torch.utils.benchmark.utils.common.TaskSpec: what a Timer measures (everything but
    its globals). Hashable: Measurement.merge groups by it."""
    stmt: str
    setup: str
    global_setup: str = ""     # C++ only; always "" for Python statements
    label: str = None
    sub_label: str = None
    description: str = None
    env: str = None
    num_threads: int = 1

    @property
    def title(self):
        if self.label is not None:
            return self.label + (f": {self.sub_label}" if self.sub_label else "")
        if "\n" not in self.stmt:
            return self.stmt + (f": {self.sub_label}" if self.sub_label else "")
        return (f"stmt:{f' ({self.sub_label})' if self.sub_label else ''}\n"
                f"{textwrap.indent(self.stmt, '  ')}")

    def setup_str(self):
        return ("" if (self.setup == "pass" or not self.setup)
                else f"setup:\n{textwrap.indent(self.setup, '  ')}" if "\n" in self.setup
                else f"setup: {self.setup}")

    def summarize(self):
        sections = [self.title, self.description or "", self.setup_str()]
        return "\n".join([f"{i}\n" if "\n" in i else i for i in sections if i])


_TASKSPEC_FIELDS = tuple(f.name for f in dataclasses.fields(TaskSpec))


@dataclasses.dataclass(init=True, repr=False)
class Measurement:
    """The times of one Timer run: raw_times are per block of number_per_run executions;
    times, median, mean and iqr are per execution, in seconds."""
    number_per_run: int
    raw_times: list
    task_spec: TaskSpec
    metadata: dict = None

    def __post_init__(self):
        self._sorted_times = ()
        self._warnings = ()
        self._median = self._mean = self._p25 = self._p75 = -1.0

    def __getattr__(self, name):
        if name in _TASKSPEC_FIELDS:
            return getattr(self.task_spec, name)
        return super().__getattribute__(name)

    @property
    def times(self):
        return [t / self.number_per_run for t in self.raw_times]

    @property
    def median(self):
        self._lazy_init()
        return self._median

    @property
    def mean(self):
        self._lazy_init()
        return self._mean

    @property
    def iqr(self):
        self._lazy_init()
        return self._p75 - self._p25

    @property
    def significant_figures(self):
        """torch's estimate from the interquartile points (z = 1.645), between 1 and 4."""
        self._lazy_init()
        n = len(self._sorted_times)
        points = self._sorted_times[n // 4:int(math.ceil(3 * n / 4))]
        std = float(np.std(np.array(points, dtype=np.float32)))
        sqrt_n = float(np.sqrt(np.float32(len(points))))
        ci = max(1.645 * std / sqrt_n, _MIN_CONFIDENCE_INTERVAL)
        relative_ci = float(np.log10(np.float32(self._median / ci)))
        figures = int(np.floor(np.float32(relative_ci)))
        return min(max(figures, 1), _MAX_SIGNIFICANT_FIGURES)

    @property
    def has_warnings(self):
        self._lazy_init()
        return bool(self._warnings)

    def _lazy_init(self):
        if self.raw_times and not self._sorted_times:
            self._sorted_times = tuple(sorted(self.times))
            t = np.array(self._sorted_times, dtype=np.float64)
            self._median = float(np.quantile(t, 0.5))
            self._mean = float(t.mean())
            self._p25 = float(np.quantile(t, 0.25))
            self._p75 = float(np.quantile(t, 0.75))

            def add_warning(msg):
                rel_iqr = self.iqr / self.median * 100
                self._warnings += (f"  WARNING: Interquartile range is {rel_iqr:.1f}% "
                                   f"of the median measurement.\n           {msg}",)

            if not self.meets_confidence(_IQR_GROSS_WARN_THRESHOLD):
                add_warning("This suggests significant environmental influence.")
            elif not self.meets_confidence(_IQR_WARN_THRESHOLD):
                add_warning("This could indicate system fluctuation.")

    def meets_confidence(self, threshold=_IQR_WARN_THRESHOLD):
        return self.iqr / self.median < threshold

    @property
    def title(self):
        return self.task_spec.title

    @property
    def env(self):
        return self.task_spec.env

    @property
    def as_row_name(self):
        return self.sub_label or self.stmt or "[Unknown]"

    def __repr__(self):
        self._lazy_init()
        skip_line, newline = "MEASUREMENT_REPR_SKIP_LINE", "\n"
        n = len(self._sorted_times)
        time_unit, time_scale = select_unit(self._median)
        iqr_filter = "" if n >= 4 else skip_line
        head = f"<{type(self).__module__}.{type(self).__qualname__} object at {hex(id(self))}>"
        repr_str = f"""
{head}
{self.task_spec.summarize()}
  {'Median: ' if n > 1 else ''}{self._median / time_scale:.2f} {time_unit}
  {iqr_filter}IQR:    {self.iqr / time_scale:.2f} {time_unit} ({self._p25 / time_scale:.2f} to {self._p75 / time_scale:.2f})
  {n} measurement{'s' if n > 1 else ''}, {self.number_per_run} runs {'per measurement,' if n > 1 else ','} {self.num_threads} thread{'s' if self.num_threads > 1 else ''}
{newline.join(self._warnings)}""".strip()  # noqa: E501
        return "\n".join(line for line in repr_str.splitlines() if skip_line not in line)

    @staticmethod
    def merge(measurements):
        """Replicates of one TaskSpec merged into one Measurement (number_per_run=1)."""
        grouped = collections.defaultdict(list)
        for m in measurements:
            grouped[m.task_spec].append(m)
        return [Measurement(number_per_run=1,
                            raw_times=[t for m in group for t in m.times],
                            task_spec=spec, metadata=None)
                for spec, group in grouped.items()]


def select_unit(t):
    """The unit (ns, us, ms, s) that puts t (seconds) in [1, 1000)."""
    time_unit = {-3: "ns", -2: "us", -1: "ms"}.get(int(float(np.log10(np.float32(t))) // 3),
                                                   "s")
    return time_unit, {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}[time_unit]


def unit_to_english(u):
    return {"ns": "nanosecond", "us": "microsecond", "ms": "millisecond", "s": "second"}[u]


def trim_sigfig(x, n):
    """x rounded to n significant figures (3.14159, 2 -> 3.1)."""
    if n != int(n):
        raise AssertionError("Number of significant figures must be an integer")
    magnitude = int(np.ceil(np.log10(np.abs(np.float32(x)))))
    scale = 10 ** (magnitude - n)
    return float(np.round(np.float32(x / scale)) * scale)


def ordered_unique(elements):
    return list(dict.fromkeys(elements))


class set_torch_threads:
    """Run a block with cddp.set_num_threads(n), the previous count restored after."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        from ... import _C
        self.prior = _C.get_num_threads()
        _C.set_num_threads(self.n)

    def __exit__(self, *exc):
        from ... import _C
        _C.set_num_threads(self.prior)
        return False
