"""cddp.profiler — torch.profiler: profile with schedule/step, ProfilerActivity,
ProfilerAction, schedule, tensorboard_trace_handler, record_function (profiler.py; what is
recorded: cddp/autograd/profiler.py)."""
from ..autograd.profiler import record_function
from .profiler import (ProfilerActivity, ProfilerAction, profile, schedule,  # noqa: F401
                       supported_activities, tensorboard_trace_handler, _KinetoProfile)

__all__ = ["profile", "schedule", "supported_activities", "tensorboard_trace_handler",
           "ProfilerAction", "ProfilerActivity", "record_function"]
