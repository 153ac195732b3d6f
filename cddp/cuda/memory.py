"""torch.cuda.memory: the memory statistics (from cddp/cuda/__init__.py) under torch's module
path, and the memory-history recorder scripts switch on around a step. Device tensors do not
exist yet (cddp runs CUDA requests on the CPU), so there is no allocation history to record: a
dumped snapshot holds no segments and no traces.""" 
import pickle

from . import (empty_cache, max_memory_allocated, max_memory_reserved,  # noqa: F401
               memory_allocated, memory_reserved, memory_stats, reset_peak_memory_stats)
from ..serialization import _atomic_write

_recording = False


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=None,
                           **kwargs):
    """Accepted: there is no device memory whose history could be recorded."""
    global _recording
    _recording = enabled not in (None, False)


def _snapshot(device=None):
    return {"segments": [], "device_traces": []}


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Write the (empty) snapshot as torch does: a pickle, written atomically."""
    _atomic_write(filename, [pickle.dumps(_snapshot())])


def memory_summary(device=None, abbreviated=False):
    s = memory_stats(device)
    return ("cddp CUDA memory (caching allocator of cddp._cuda)\n"
            f"  allocated: {s['allocated_bytes.all.current']} bytes "
            f"(peak {s['allocated_bytes.all.peak']})\n"
            f"  reserved:  {s['reserved_bytes.all.current']} bytes "
            f"(peak {s['reserved_bytes.all.peak']})\n")
