"""cddp.multiprocessing — torch.multiprocessing's surface: the standard library's
multiprocessing re-exported (Process, Queue, Pipe, get_context, set_start_method, cpu_count,
...) plus spawn / start_processes / ProcessContext and the process exceptions.

Tensors in shared memory (Tensor.share_memory_, Module.share_memory) cross Queues, Pipes and
spawn Process arguments by file descriptor, so the receiver maps the same memory
(reductions.py, torch's file_descriptor strategy); other tensors are copied by value (torch
would move them to shared memory first). The sharing-strategy functions exist so scripts that
call them keep running.
"""
import multiprocessing
import sys

from multiprocessing import *  # noqa: F401,F403  (the stdlib API, as torch re-exports it)

from .reductions import init_reductions
from .spawn import (ProcessContext, ProcessException, ProcessExitedException,  # noqa: F401
                    ProcessRaisedException, SpawnContext, spawn, start_processes)

__all__ = ["set_sharing_strategy", "get_sharing_strategy", "get_all_sharing_strategies",
           "spawn", "start_processes", "ProcessContext", "ProcessException",
           "ProcessExitedException", "ProcessRaisedException", "SpawnContext"]
__all__ += multiprocessing.__all__

init_reductions()

if sys.platform in ("darwin", "win32"):
    _sharing_strategy = "file_system"
    _all_sharing_strategies = {"file_system"}
else:
    _sharing_strategy = "file_descriptor"
    _all_sharing_strategies = {"file_descriptor", "file_system"}


def set_sharing_strategy(new_strategy):
    """Record the tensor-sharing strategy (accepted for compatibility; see module doc)."""
    global _sharing_strategy
    if new_strategy not in _all_sharing_strategies:
        raise ValueError(f"invalid sharing strategy {new_strategy!r}, expected one of "
                         f"{sorted(_all_sharing_strategies)}")
    _sharing_strategy = new_strategy


def get_sharing_strategy():
    return _sharing_strategy


def get_all_sharing_strategies():
    return set(_all_sharing_strategies)
