"""cddp.utils.benchmark — torch.utils.benchmark: Timer (timeit, blocked_autorange,
adaptive_autorange), Measurement, Compare (timer.py, common.py, compare.py)."""
from .common import Measurement, TaskSpec, select_unit
from .compare import Colorize, Compare
from .timer import Language, Timer, timer

__all__ = ["Timer", "timer", "Language", "Measurement", "TaskSpec", "Compare", "Colorize",
           "select_unit"]
