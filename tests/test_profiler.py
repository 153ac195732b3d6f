"""torch.profiler / torch.autograd.profiler on cddp: the schedule's actions equal torch's step
by step, on_trace_ready fires at the same steps and the trace handler writes one valid
Chrome trace per active cycle; record_function ranges (context manager and decorator),
module calls and optimizer steps are recorded with consistent self/total times; the
hooks are gone once the profiler stops; key_averages().table() and export_chrome_trace."""
import glob
import json
import time
import warnings

import pytest

import cddp
import cddp.nn as nn
from cddp.autograd import profiler as aprof
from cddp.profiler import (ProfilerAction, ProfilerActivity, profile, record_function,
                           schedule, tensorboard_trace_handler)

SCHEDULES = [dict(wait=1, warmup=1, active=2, repeat=1), dict(wait=0, warmup=1, active=1),
             dict(wait=2, warmup=1, active=3, repeat=2, skip_first=3),
             dict(wait=1, warmup=2, active=1, repeat=0, skip_first=1, skip_first_wait=1)]


def _actions(fn, n=40):
    return [fn(i).name for i in range(n)]


@pytest.mark.parametrize("kw", SCHEDULES)
def test_schedule_matches_torch(kw):
    torch = pytest.importorskip("torch")
    assert _actions(schedule(**kw)) == _actions(torch.profiler.schedule(**kw))


def test_schedule_by_hand_and_checks():
    s = schedule(wait=1, warmup=1, active=2, repeat=1)
    assert _actions(s, 6) == ["NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE", "NONE", "NONE"]
    s = schedule(wait=0, warmup=1, active=1, skip_first=2)
    assert _actions(s, 6) == ["NONE", "NONE", "WARMUP", "RECORD_AND_SAVE", "WARMUP",
                              "RECORD_AND_SAVE"]
    with pytest.raises(AssertionError, match="Invalid profiler schedule arguments"):
        schedule(wait=0, warmup=1, active=0)
    with pytest.warns(UserWarning, match="won't be using warmup"):
        schedule(wait=0, warmup=0, active=1)
    with pytest.raises(AssertionError, match="Step must be non-negative"):
        s(-1)


def _run_schedule(mod, kw, steps):
    """(step_num, number of "work" ranges, of ProfilerStep* ranges) at each on_trace_ready."""
    seen = []

    def ready(p):
        names = [e.name for e in p.events()]
        seen.append((p.step_num, names.count("work"), names.count("ProfilerStep*")))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with mod.profile(schedule=mod.schedule(**kw), on_trace_ready=ready) as p:
            for _ in range(steps):
                with mod.record_function("work"):
                    pass
                p.step()
    return seen


@pytest.mark.parametrize("kw", SCHEDULES[:3])
def test_cycles_match_torch(kw):
    torch = pytest.importorskip("torch")
    assert _run_schedule(cddp.profiler, kw, 14) == _run_schedule(torch.profiler, kw, 14)


def test_cycles_by_hand():
    # wait 1, warmup 1, active 2, twice: steps 2-3 and 6-7 are recorded
    assert _run_schedule(cddp.profiler, dict(wait=1, warmup=1, active=2, repeat=2), 10) \
        == [(4, 2, 2), (8, 2, 2)]


def test_tensorboard_trace_handler_one_file_per_cycle(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU],
                     schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                     on_trace_ready=tensorboard_trace_handler(str(tmp_path / "log"))) as p:
            for _ in range(9):
                with record_function("step_body"):
                    pass
                p.step()
    files = sorted(glob.glob(str(tmp_path / "log" / "*.pt.trace.json")))
    assert len(files) == 2
    for f in files:
        trace = json.load(open(f))
        names = [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"]
        assert names.count("step_body") == 2 and len([n for n in names
                                                       if n.startswith("ProfilerStep#")]) == 2


def test_record_function_ranges_and_times():
    @record_function("decorated")
    def f():
        time.sleep(0.002)

    with profile(record_shapes=True) as p:
        with record_function("outer"):
            time.sleep(0.003)
            with record_function("inner"):
                time.sleep(0.002)
            f()
    ev = {e.name: e for e in p.events()}
    assert set(ev) == {"outer", "inner", "decorated"}
    outer, inner, dec = ev["outer"], ev["inner"], ev["decorated"]
    assert inner.cpu_time_total >= 2000 and dec.cpu_time_total >= 2000
    # self time = total minus the ranges opened inside it
    assert outer.self_cpu_time_total == pytest.approx(
        outer.cpu_time_total - inner.cpu_time_total - dec.cpu_time_total)
    assert outer.time_range.start <= inner.time_range.start < inner.time_range.end \
        <= dec.time_range.start < dec.time_range.end <= outer.time_range.end
    assert inner.cpu_parent is not None and outer.cpu_parent is None


def test_no_profiler_no_events_and_hooks_removed():
    with record_function("nothing"):       # no profiler: nothing to record into
        pass
    call, step = nn.Module.__call__, cddp.optim.SGD.step
    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    opt = cddp.optim.SGD(m.parameters(), lr=0.1)
    with profile() as p:
        assert nn.Module.__call__ is not call
        m(cddp.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    assert nn.Module.__call__ is call and cddp.optim.SGD.step is step
    keys = [e.key for e in p.key_averages()]
    assert keys == ["nn.Module: Sequential", "nn.Module: Linear", "nn.Module: ReLU",
                    "Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad"]
    # outside the profile: no hook runs
    with profile() as p2:
        pass
    m(cddp.randn(2, 4))
    assert len(p2.events()) == 0


def test_optimizer_step_names_match_torch():
    torch = pytest.importorskip("torch")
    tm = torch.nn.Linear(2, 2)
    topt = torch.optim.Adam(tm.parameters())
    with torch.profiler.profile() as tp:
        tm(torch.randn(1, 2)).sum().backward()
        topt.step()
        topt.zero_grad()
    m = nn.Linear(2, 2)
    opt = cddp.optim.Adam(m.parameters())
    with profile() as p:
        m(cddp.randn(1, 2)).sum().backward()
        opt.step()
        opt.zero_grad()
    theirs = [e.key for e in tp.key_averages() if e.key.startswith("Optimizer.")]
    ours = [e.key for e in p.key_averages() if e.key.startswith("Optimizer.")]
    assert ours == theirs


def test_key_averages_table_and_trace(tmp_path):
    with profile(record_shapes=True) as p:
        for _ in range(3):
            with record_function("loop_body"):
                nn.Linear(3, 2)(cddp.ones(5, 3))
    avg = p.key_averages()
    row = {e.key: e for e in avg}["loop_body"]
    assert row.count == 3
    assert row.cpu_time_total == pytest.approx(
        sum(e.cpu_time_total for e in p.events() if e.name == "loop_body"))
    assert row.cpu_time == pytest.approx(row.cpu_time_total / 3)
    by_shape = {e.key: e.input_shapes for e in p.key_averages(group_by_input_shape=True)}
    assert by_shape["nn.Module: Linear"] == [[5, 3]]
    text = avg.table(sort_by="cpu_time_total", row_limit=1)
    lines = text.splitlines()
    assert "Name" in lines[1] and "CPU total" in lines[1] and "# of Calls" in lines[1]
    assert lines[3].split()[0] == "loop_body" and lines[3].split()[-2] == "3"
    assert len([ln for ln in lines if ln.strip().startswith(("loop_body", "nn.Module"))]) == 1
    assert lines[-1].startswith("Self CPU time total:")
    path = tmp_path / "trace.json"
    p.export_chrome_trace(str(path))
    trace = json.load(open(path))
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(p.events()) == 6
    assert all(e["dur"] >= 0 and isinstance(e["ts"], float) for e in xs)


def test_table_columns_match_torch():
    torch = pytest.importorskip("torch")
    with torch.profiler.profile() as tp:
        with torch.profiler.record_function("a"):
            pass
    with profile() as p:
        with record_function("a"):
            pass
    header = lambda t: t.splitlines()[1].split("  ")  # noqa: E731
    theirs = [h.strip() for h in header(tp.key_averages().table(row_limit=1)) if h.strip()]
    ours = [h.strip() for h in header(p.key_averages().table(row_limit=1)) if h.strip()]
    assert ours == theirs


def test_legacy_profile_use_cuda_and_emit_nvtx():
    with pytest.warns(FutureWarning):
        with aprof.profile(use_cuda=True) as p:
            with aprof.record_function("x"):
                pass
    assert [e.name for e in p.function_events] == ["x"]
    assert "x" in p.table()
    with aprof.emit_nvtx():
        pass
    with pytest.raises(RuntimeError, match="didn't finish"):
        aprof.profile().key_averages()


def test_profiler_action_values():
    assert [a.name for a in ProfilerAction][:4] == ["NONE", "WARMUP", "RECORD",
                                                    "RECORD_AND_SAVE"]
    assert ProfilerActivity.CPU in cddp.profiler.supported_activities()
