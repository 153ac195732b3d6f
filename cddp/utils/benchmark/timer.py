"""torch.utils.benchmark.Timer: runs `stmt` after `setup` with timeit, under
set_num_threads(num_threads), and returns Measurements.

    timeit(number)                     one block of `number` runs (after a warm-up block)
    blocked_autorange(min_run_time)    a block size where timer overhead is < 0.01%, then
                                       blocks until min_run_time seconds have been spent
    adaptive_autorange(threshold, ...) blocks until IQR / median < threshold (after at least
                                       4 blocks and min_run_time), or max_run_time

The block-size search and both loops are torch's. Python statements only: language="c++"
and collect_callgrind need torch's C++ toolchain and raise here.
"""
import enum
import statistics
import textwrap
import timeit

from . import common

__all__ = ["Timer", "timer", "Language"]

timer = timeit.default_timer      # cddp has no device to synchronize before reading the clock


def _tidy_source(src):
    """Dedent, drop one leading newline and trailing whitespace, as torch tidies stmt/setup."""
    text = textwrap.dedent(src)
    if text.startswith("\n"):
        text = text[1:]
    return text.rstrip()


class Language(enum.Enum):
    PYTHON = 0
    CPP = 1


class Timer:
    """torch.utils.benchmark.Timer(stmt="pass", setup="pass", global_setup="", timer=timer,
    globals=None, label=None, sub_label=None, description=None, env=None, num_threads=1,
    language=Language.PYTHON). `torch` in globals is cddp unless given."""

    _timer_cls = timeit.Timer

    def __init__(self, stmt="pass", setup="pass", global_setup="", timer=timer, globals=None,  # noqa: A002
                 label=None, sub_label=None, description=None, env=None, num_threads=1,
                 language=Language.PYTHON):
        if not isinstance(stmt, str):
            raise ValueError("Currently only a `str` stmt is supported.")
        self._globals = dict(globals or {})
        if language in (Language.PYTHON, "py", "python"):
            import cddp
            self._globals.setdefault("torch", cddp)
            self._language = Language.PYTHON
            if global_setup:
                raise ValueError(f"global_setup is C++ only, got `{global_setup}`. Most likely "
                                 "this code can simply be moved to `setup`.")
        elif language in (Language.CPP, "cpp", "c++"):
            raise NotImplementedError("cddp.utils.benchmark: C++ statements are not supported "
                                      "(cddp has no C++ frontend)")
        else:
            raise ValueError(f"Invalid language `{language}`.")
        stmt, setup = _tidy_source(stmt), _tidy_source(setup)
        self._timer = self._timer_cls(stmt=stmt, setup=setup, timer=timer,
                                      globals=self._globals)
        self._task_spec = common.TaskSpec(stmt=stmt, setup=setup, global_setup=global_setup,
                                          label=label, sub_label=sub_label,
                                          description=description, env=env,
                                          num_threads=num_threads)

    def _timeit(self, number):
        # a zero reading (a coarse clock) would make the overhead ratio divide by zero
        return max(self._timer.timeit(number), 1e-9)

    def timeit(self, number=1000000):
        """Run stmt `number` times in one block (after a warm-up of number // 100)."""
        with common.set_torch_threads(self._task_spec.num_threads):
            self._timeit(number=max(int(number // 100), 2))
            return common.Measurement(number_per_run=number,
                                      raw_times=[self._timeit(number=number)],
                                      task_spec=self._task_spec)

    def repeat(self, repeat=-1, number=-1):
        raise NotImplementedError("See `Timer.blocked_autorange.`")

    def autorange(self, callback=None):
        raise NotImplementedError("See `Timer.blocked_autorange.`")

    def _threaded_measurement_loop(self, number, time_hook, stop_hook, min_run_time,
                                   max_run_time=None, callback=None):
        # at least one block; then stop once min_run_time is spent and stop_hook agrees, or
        # as soon as max_run_time is exceeded
        blocks, spent = [], 0.0
        with common.set_torch_threads(self._task_spec.num_threads):
            while True:
                block = time_hook()
                blocks.append(block)
                spent += block
                if callback:
                    callback(number, block)
                satisfied = stop_hook(blocks)
                over_budget = bool(max_run_time) and spent > max_run_time
                if over_budget or (satisfied and spent >= min_run_time):
                    return blocks

    def _estimate_block_size(self, min_run_time):
        with common.set_torch_threads(self._task_spec.num_threads):
            # the cost of an empty loop: the timer's own overhead
            overhead = statistics.median_low([self._timeit(0) for _ in range(5)])
            # grow the block tenfold until, after timing it, the timer's overhead is negligible
            # (<= 0.01%) over a block of at least min_run_time / 1000, one block alone exceeds
            # min_run_time, or the next size would overflow timeit's C int loop counter
            block = 1
            while True:
                elapsed = self._timeit(block)
                negligible = elapsed >= min_run_time / 1000 and overhead / elapsed <= 1e-4
                if negligible or elapsed > min_run_time or block * 10 > 2147483647:
                    return block
                block *= 10

    def blocked_autorange(self, callback=None, min_run_time=0.2):
        """Blocks of the estimated block size until min_run_time seconds are spent."""
        number = self._estimate_block_size(min_run_time)
        times = self._threaded_measurement_loop(number, lambda: self._timeit(number),
                                                lambda times: True,
                                                min_run_time=min_run_time, callback=callback)
        return common.Measurement(number_per_run=number, raw_times=times,
                                  task_spec=self._task_spec)

    def adaptive_autorange(self, threshold=0.1, *, min_run_time=0.01, max_run_time=10.0,
                           callback=None):
        """Blocks until IQR / median < threshold (with more than 3 blocks and min_run_time
        spent) or max_run_time is reached."""
        number = self._estimate_block_size(min_run_time=0.05)

        def stop_hook(times):
            if len(times) > 3:
                return common.Measurement(number_per_run=number, raw_times=times,
                                          task_spec=self._task_spec
                                          ).meets_confidence(threshold=threshold)
            return False

        times = self._threaded_measurement_loop(number, lambda: self._timeit(number),
                                                stop_hook, min_run_time, max_run_time,
                                                callback=callback)
        return common.Measurement(number_per_run=number, raw_times=times,
                                  task_spec=self._task_spec)

    def collect_callgrind(self, number=100, *, repeats=None, collect_baseline=True,
                          retain_out_file=False):
        raise NotImplementedError("cddp.utils.benchmark: collect_callgrind is not supported")
