"""torch.profiler.profiler: profile (with schedule, on_trace_ready and step()), schedule,
ProfilerAction, ProfilerActivity, tensorboard_trace_handler.

The schedule and the per-step state machine are torch's: the same schedule function, the same
(previous action, next action) -> [prepare, start, stop, trace ready] table, so a cycle starts,
records and is handed to on_trace_ready at the steps where torch's would be. What a cycle
records is what cddp can measure (cddp/autograd/profiler.py): record_function ranges, module
calls, optimizer steps and the ProfilerStep#N ranges; no per-op events. CUDA activity is
accepted and records nothing (cddp has no device timeline).
"""
import enum
import os
import socket
import time
from functools import partial
from warnings import warn

from ..autograd import profiler as prof
from ..autograd.profiler_util import _write_chrome_trace

__all__ = ["ProfilerAction", "ProfilerActivity", "profile", "schedule", "supported_activities",
           "tensorboard_trace_handler"]

PROFILER_STEP_NAME = "ProfilerStep"


class ProfilerActivity(enum.Enum):
    """torch._C._profiler.ProfilerActivity's members and values."""
    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5


def supported_activities():
    """The activities this build can trace: the CPU (cddp has no device timeline)."""
    return {ProfilerActivity.CPU}


class ProfilerAction(enum.Enum):
    """torch.profiler.ProfilerAction's members and values (DEVICE_STOPPED is the profiler's own,
    never a schedule's)."""
    NONE, WARMUP, RECORD, RECORD_AND_SAVE, DEVICE_STOPPED = range(5)


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """torch.profiler.schedule: skip `skip_first` steps, then cycles of `wait` idle steps,
    `warmup` steps and `active` recorded steps (the last RECORD_AND_SAVE), `repeat` times
    (0: until the profile ends)."""

    cycle_len = wait + warmup + active
    record_from = wait + warmup     # first recorded position within a cycle

    def schedule_fn(step):
        if step < 0:
            raise AssertionError(f"Step must be non-negative. Got {step}.")
        if step < skip_first:
            return ProfilerAction.NONE
        # skip_first_wait: the first cycle starts as if its `wait` steps had already passed
        offset = wait if skip_first_wait else 0
        cycle, pos = divmod(step - skip_first + offset, cycle_len)
        if repeat and cycle >= repeat:
            return ProfilerAction.NONE      # every requested cycle is done
        if pos >= record_from:
            last = pos == cycle_len - 1
            return ProfilerAction.RECORD_AND_SAVE if last else ProfilerAction.RECORD
        return ProfilerAction.WARMUP if pos >= wait else ProfilerAction.NONE

    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(
            f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), "
            f"warmup={warmup} (need >= 0), active={active} (need > 0), repeat={repeat} "
            f"(need >= 0), skip_first={skip_first} (need >= 0).")
    if warmup == 0:
        warn("Profiler won't be using warmup, this can skew profiler results", stacklevel=2)
    return schedule_fn


def _default_schedule_fn(_):
    """Records every step, from start to stop."""
    return ProfilerAction.RECORD


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False,
                              use_python_export=False):
    """An on_trace_ready callback writing each cycle's Chrome trace to
    dir_name/<worker_name>.<time_ns>.pt.trace.json[.gz] (worker_name: "<host>_<pid>")."""

    suffix = ".pt.trace.json.gz" if use_gzip else ".pt.trace.json"

    def handler_fn(prof_):
        nonlocal worker_name
        try:
            # a no-op when it exists; fails (as torch's) when dir_name is a file
            os.makedirs(dir_name, exist_ok=True)
        except Exception as err:
            raise RuntimeError(f"Can't create directory: {dir_name}") from err
        # the default name is fixed at the first trace and reused by later cycles
        worker_name = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        stamp = time.time_ns()
        prof_.export_chrome_trace(os.path.join(dir_name, f"{worker_name}.{stamp}{suffix}"))

    return handler_fn


_warned_clears = False
_TRACE_OPTIONS = ("profile_memory", "with_stack", "record_shapes", "with_modules", "with_flops")


class _KinetoProfile:
    """Low-level profiler: start()/stop() one recording, then its events."""

    def __init__(self, *, activities=None, record_shapes=False, profile_memory=False,
                 with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, execution_trace_observer=None, acc_events=False,
                 custom_trace_id_callback=None, post_processing_timeout_s=None):
        self.activities = set(activities) if activities else supported_activities()
        # what each recording collects (handed to autograd.profiler.profile)
        self.profile_memory, self.with_stack = profile_memory, with_stack
        self.record_shapes, self.with_modules = record_shapes, with_modules
        self.with_flops, self.acc_events = with_flops, acc_events
        # accepted for torch's signature; cddp has nothing to drive with them
        self.experimental_config = experimental_config
        self.execution_trace_observer = execution_trace_observer
        self.custom_trace_id_callback = custom_trace_id_callback
        self.use_device = None
        self._trace_metadata = {}
        self.profiler = None            # the autograd profiler of the current cycle

    def start(self):
        self.prepare_trace()
        self.start_trace()

    def stop(self):
        self.stop_trace()

    def prepare_trace(self):
        global _warned_clears
        if self.profiler is not None and not self.acc_events and not _warned_clears:
            _warned_clears = True
            warn("Warning: Profiler clears events at the end of each cycle. Only events from "
                 "the current cycle will be reported. To keep events across cycles, set "
                 "acc_events=True.")
        if self.profiler is None or not self.acc_events:
            self.profiler = prof.profile(record_shapes=self.record_shapes,
                                         with_flops=self.with_flops,
                                         profile_memory=self.profile_memory,
                                         with_stack=self.with_stack,
                                         with_modules=self.with_modules,
                                         acc_events=self.acc_events)

    def start_trace(self):
        if self.profiler is None:
            raise AssertionError("Profiler must be initialized before starting trace")
        self.profiler._start_trace()
        # each enabled option is noted in the trace's metadata, in torch's order
        for option in _TRACE_OPTIONS:
            if getattr(self, option):
                self.add_metadata_json(option, "1")

    def stop_trace(self):
        if self.profiler is None:
            raise AssertionError("Profiler must be initialized before stopping trace")
        self.profiler.__exit__(None, None, None)

    def export_chrome_trace(self, path, use_python_export=False):
        """The collected trace in Chrome's JSON format (the last cycle under a schedule)."""
        if self.profiler is None:
            raise AssertionError("Profiler must be initialized before exporting chrome trace")
        _write_chrome_trace(self.events(), path, self._trace_metadata)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0,
                     group_by_overload_name=False):
        """The events averaged by key (and input shapes / stack when asked)."""
        if self.profiler is None:
            raise AssertionError("Profiler must be initialized before getting key averages")
        return self.profiler.key_averages(group_by_input_shape, group_by_stack_n,
                                          group_by_overload_name)

    def events(self):
        """The unaggregated FunctionEvents of the last finished recording."""
        if self.profiler is None:
            raise AssertionError("Profiler must be initialized before accessing events")
        return self.profiler.function_events

    def add_metadata(self, key, value):
        """A user string key/value in the trace file."""
        self._trace_metadata[key] = '"' + value.replace('"', '\\"') + '"'

    def add_metadata_json(self, key, value):
        """A user key with a valid JSON value in the trace file."""
        self._trace_metadata[key] = value


class profile(_KinetoProfile):
    """torch.profiler.profile: a context manager; with `schedule` the profiler steps through
    NONE/WARMUP/RECORD/RECORD_AND_SAVE at each step() and calls on_trace_ready(self) at the
    end of every active cycle."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None,
                 record_shapes=False, profile_memory=False, with_stack=False,
                 with_flops=False, with_modules=False, experimental_config=None,
                 execution_trace_observer=None, acc_events=False, use_cuda=None,
                 custom_trace_id_callback=None, post_processing_timeout_s=None):
        chosen = supported_activities() if activities is None else set()
        for entry in activities or ():
            # torch also takes {activity: options} dicts; their keys are the activities
            if isinstance(entry, dict):
                chosen.update(entry)
            elif isinstance(entry, ProfilerActivity):
                chosen.add(entry)
        if use_cuda is not None:
            warn("`use_cuda` is deprecated, use `activities` argument instead", FutureWarning,
                 stacklevel=2)
            toggle = chosen.add if use_cuda else chosen.discard
            toggle(ProfilerActivity.CUDA)
        if not chosen:
            raise AssertionError("No valid profiler activities found")
        super().__init__(activities=chosen, record_shapes=record_shapes,
                         profile_memory=profile_memory, with_stack=with_stack,
                         with_flops=with_flops, with_modules=with_modules,
                         experimental_config=experimental_config,
                         execution_trace_observer=execution_trace_observer,
                         acc_events=acc_events,
                         custom_trace_id_callback=custom_trace_id_callback)
        # only a user schedule brings the ProfilerStep#N ranges (in the trace and table)
        self.record_steps = bool(schedule)
        self.schedule = schedule if schedule else _default_schedule_fn
        self.on_trace_ready = on_trace_ready
        self.step_rec_fn = None
        self.step_num = 0
        action = self._scheduled_action(0)
        self.current_action = action
        self._prev_schedule_action = action
        A = ProfilerAction
        self.action_map = {
            (A.NONE, A.NONE): [],
            (A.NONE, A.WARMUP): [self.prepare_trace],
            (A.NONE, A.RECORD): [self.prepare_trace, self.start_trace],
            (A.NONE, A.RECORD_AND_SAVE): [self.prepare_trace, self.start_trace],
            (A.WARMUP, A.NONE): [partial(warn, "Incorrect schedule: WARMUP followed by NONE"),
                                 self.start_trace, self.stop_trace],
            (A.WARMUP, A.WARMUP): [],
            (A.WARMUP, A.RECORD): [self.start_trace],
            (A.WARMUP, A.RECORD_AND_SAVE): [self.start_trace],
            (A.RECORD, A.NONE): [partial(warn, "Incorrect schedule: RECORD followed by NONE"),
                                 self.stop_trace],
            (A.RECORD, A.WARMUP): [partial(warn, "Incorrect schedule: RECORD followed by "
                                           "WARMUP"), self.stop_trace],
            (A.RECORD, A.RECORD): [],
            (A.RECORD, A.RECORD_AND_SAVE): [],
            (A.RECORD_AND_SAVE, A.NONE): [self.stop_trace, self._trace_ready],
            (A.RECORD_AND_SAVE, A.WARMUP): [self.stop_trace, self._trace_ready,
                                            self.prepare_trace],
            (A.RECORD_AND_SAVE, A.RECORD): [self.stop_trace, self._trace_ready,
                                            self.prepare_trace, self.start_trace],
            (A.RECORD_AND_SAVE, A.RECORD_AND_SAVE): [self.stop_trace, self._trace_ready,
                                                     self.prepare_trace, self.start_trace],
            (A.WARMUP, None): [self.start_trace, self.stop_trace],
            (A.RECORD, None): [self.stop_trace, self._trace_ready],
            (A.RECORD_AND_SAVE, None): [self.stop_trace, self._trace_ready],
        }

    def _scheduled_action(self, step_num):
        """The schedule's action for step_num, refusing the profiler-internal one."""
        action = self.schedule(step_num)
        if action == ProfilerAction.DEVICE_STOPPED:
            raise ValueError("ProfilerAction.DEVICE_STOPPED is set internally by the profiler "
                             "and must not be returned by a user-provided schedule")
        return action

    def _open_step_range(self):
        if self.record_steps:
            self.step_rec_fn = prof.record_function(f"{PROFILER_STEP_NAME}#{self.step_num}")
            self.step_rec_fn.__enter__()

    def _close_step_range(self):
        rec, self.step_rec_fn = self.step_rec_fn, None
        if self.record_steps and rec:
            rec.__exit__(None, None, None)

    def start(self):
        self._transit_action(ProfilerAction.NONE, self.current_action)
        self._open_step_range()

    def __enter__(self):
        self.start()
        return self

    def stop(self):
        self._close_step_range()
        self._transit_action(self.current_action, None)
        self.current_action = self._prev_schedule_action

    def __exit__(self, *exc_info):
        self.stop()

    def step(self):
        """torch.profiler.profile.step: the next profiling step has started."""
        self._close_step_range()
        action = self._scheduled_action(self.step_num + 1)
        # the transition runs only once the new step number and action are in place
        prev_action, self.current_action = self.current_action, action
        self.step_num += 1
        self._prev_schedule_action = action
        self._transit_action(prev_action, action)
        self._open_step_range()

    def set_custom_trace_id_callback(self, callback):
        self.custom_trace_id_callback = callback

    def _trace_ready(self):
        if self.on_trace_ready:
            self.on_trace_ready(self)

    def _transit_action(self, prev_action, current_action):
        for action in self.action_map.get((prev_action, current_action)) or ():
            action()
