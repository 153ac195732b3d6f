"""cddp.utils.benchmark: Timer driven by a fake clock (each statement advances it by a known
amount), so block sizes, block counts, median / mean / IQR are exact; the same runs under
torch.utils.benchmark give the same numbers, Measurement reprs and Compare tables."""
import io
import contextlib
import itertools

import numpy as np
import pytest

import cddp
from cddp.utils import benchmark


class Clock:
    """A clock the statement advances: `clock.tick()` adds the next duration."""

    def __init__(self, durations):
        self.t = 0.0
        self._d = itertools.cycle(durations)

    def tick(self):
        self.t += next(self._d)

    def __call__(self):
        return self.t


def _timer(mod, durations, **kw):
    clock = Clock(durations)
    return mod.Timer("clock.tick()", globals={"clock": clock}, timer=clock, **kw)


def test_timeit_exact():
    m = _timer(benchmark, [2e-6]).timeit(500)
    assert m.number_per_run == 500 and len(m.times) == 1
    assert m.mean == pytest.approx(2e-6) and m.median == pytest.approx(2e-6) and m.iqr == 0
    assert m.raw_times == [pytest.approx(1e-3)]
    r = repr(m).splitlines()
    assert r[1] == "clock.tick()" and r[2].strip() == "2.00 us"
    assert r[3].strip() == "1 measurement, 500 runs , 1 thread"


def test_blocked_autorange_block_size_and_count():
    # overhead 1e-9 (an empty block reads 0), 1 us per run: the block grows to 1000 runs
    # (1 ms >= min_run_time / 1000), then 1 ms blocks until 0.2 s are spent
    m = _timer(benchmark, [1e-6]).blocked_autorange(min_run_time=0.2)
    assert m.number_per_run == 1000
    assert len(m.times) == 200
    assert m.median == pytest.approx(1e-6) and m.iqr == pytest.approx(0, abs=1e-15)


def test_stats_against_numpy():
    durations = [1e-6, 3e-6, 2e-6, 7e-6, 5e-6]
    m = _timer(benchmark, durations).blocked_autorange(min_run_time=0.05)
    t = np.array(m.times)
    assert m.median == pytest.approx(np.median(t))
    assert m.mean == pytest.approx(t.mean())
    assert m.iqr == pytest.approx(np.quantile(t, 0.75) - np.quantile(t, 0.25))


def test_adaptive_autorange_stops_on_threshold():
    m = _timer(benchmark, [1e-6]).adaptive_autorange(threshold=0.1, min_run_time=0.01,
                                                     max_run_time=1.0)
    # steady times: stops after the first check that has > 3 blocks and 0.01 s spent
    assert len(m.times) >= 4 and sum(m.raw_times) >= 0.01
    assert sum(m.raw_times[:-1]) < 0.01 or len(m.times) == 4
    noisy = _timer(benchmark, [1e-6, 1e-3]).adaptive_autorange(threshold=0.01,
                                                               max_run_time=0.3)
    assert sum(noisy.raw_times) <= 0.3 + max(noisy.raw_times)


def test_real_statement_and_globals():
    x = cddp.ones(8)
    m = benchmark.Timer("y = x + 1", globals={"x": x}).timeit(10)
    assert m.number_per_run == 10 and m.mean > 0
    m = benchmark.Timer("torch.ones(3)", setup="import math").timeit(5)   # torch is cddp
    assert m.mean > 0


@pytest.mark.parametrize("method,kw", [("timeit", dict(number=1000)),
                                       ("blocked_autorange", dict(min_run_time=0.05)),
                                       ("adaptive_autorange", dict(max_run_time=0.2))])
def test_matches_torch(method, kw):
    pytest.importorskip("torch")
    import torch.utils.benchmark as tb
    durations = [1e-6, 1.5e-6, 1.2e-6, 4e-6]
    spec = dict(label="lbl", sub_label="sub", description="desc", setup="a = 1")
    ours = getattr(_timer(benchmark, durations, **spec), method)(**kw)
    theirs = getattr(_timer(tb, durations, **spec), method)(**kw)
    assert ours.number_per_run == theirs.number_per_run
    assert ours.times == pytest.approx(theirs.times)
    assert (ours.median, ours.mean, ours.iqr) == pytest.approx(
        (theirs.median, theirs.mean, theirs.iqr))
    assert repr(ours).splitlines()[1:] == repr(theirs).splitlines()[1:]


def _compare_text(mod):
    ms = []
    for desc, d in (("a", [1e-6, 2e-6]), ("b", [4e-6])):
        for threads in (1, 2):
            ms.append(_timer(mod, d, label="add", sub_label="small", description=desc,
                             num_threads=threads).blocked_autorange(min_run_time=0.01))
    ms.append(_timer(mod, [3e-3], label="mul", sub_label="big",
                     description="a").timeit(10))
    c = mod.Compare(ms)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        c.print()
    c.trim_significant_figures()
    return out.getvalue(), str(c)


def test_compare_table():
    text, _ = _compare_text(benchmark)
    assert "[" in text and " add " in text and " mul " in text
    assert "1 threads: " in text and "2 threads: " in text
    assert "Times are in microseconds (us)." in text and "Times are in milliseconds (ms)." in text
    assert "small  |  1.5  |  4.0" in text


def test_compare_matches_torch():
    pytest.importorskip("torch")
    import torch.utils.benchmark as tb
    assert _compare_text(benchmark) == _compare_text(tb)


def test_errors():
    with pytest.raises(ValueError, match="only a `str` stmt"):
        benchmark.Timer(lambda: None)
    with pytest.raises(ValueError, match="global_setup is C\\+\\+ only"):
        benchmark.Timer("pass", global_setup="x")
    with pytest.raises(ValueError, match="Expected an instance of `Measurement`"):
        benchmark.Compare([1])
