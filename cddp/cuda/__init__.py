"""cddp.cuda — torch.cuda's module-level API.

The CUDA extension cddp._cuda (cuda/; built when nvcc is found, cddp.version.cuda) holds the
device-count query, the caching allocator, the first kernels and the loader of cuBLAS/NCCL.
Device tensors do not exist yet, so is_available() is False and device_count() 0 even on a
machine with a GPU (both describe where cddp can put tensors; scripts then take their CPU
path); _gpu_count() is what the hardware says. The calls scripts make unconditionally
(set_device, manual_seed, manual_seed_all, synchronize, empty_cache) are accepted.
Tensors and modules asked onto CUDA run on the CPU after one warning per process
(CDDP_STRICT_DEVICE=1 makes that an error) — see Tensor.to / Module.to.
"""
import sys

from .. import _C

try:
    from .. import _cuda
except ImportError:   # built without nvcc (CDDP_CUDA=0 or no toolkit): CPU only
    _cuda = None

# Flips to True when CUDA storage and the device ops land (issue 11, phase 2).
_DEVICE_TENSORS = False

if _cuda is not None:
    OutOfMemoryError = _cuda.OutOfMemoryError
else:
    class OutOfMemoryError(RuntimeError):
        """torch.cuda.OutOfMemoryError: the caching allocator could not allocate."""


def _gpu_count():
    """CUDA devices the driver reports (0 without a GPU, a driver, or cddp._cuda)."""
    return _cuda.device_count() if _cuda is not None else 0


def _load_library(name):
    """Load cuBLAS ("cublas", which brings "cublasLt") or NCCL ("nccl") once per process and
    return (path, version). Search: $CDDP_<NAME>_LIB, NVIDIA's wheels under sys.path
    (nvidia/cu13/lib, nvidia/nccl/lib), then the system loader; RuntimeError naming what was
    searched when none is found."""
    if _cuda is None:
        raise RuntimeError(f"cddp was built without CUDA (cddp.version.cuda is None): cannot load {name}")
    return _cuda._load_library(name, [p for p in sys.path if isinstance(p, str)])


def is_available():
    return _DEVICE_TENSORS and _gpu_count() > 0


def device_count():
    return _gpu_count() if _DEVICE_TENSORS else 0


def current_device():
    return 0


def set_device(device):
    """Accepted (no GPU: nothing to select). Validates the argument like torch."""
    if not isinstance(device, (int, str)) and not hasattr(device, "type"):
        raise TypeError(f"set_device: expected an int, str or cddp.device, got {type(device).__name__}")


def manual_seed(seed):
    """Seeds the CPU generator too: with no GPU, that is where "CUDA" work runs."""
    _C.manual_seed(int(seed))


def manual_seed_all(seed):
    _C.manual_seed(int(seed))


# The CUDA generators' own state: there are no CUDA devices (device_count() is 0), so the
# per-device calls answer as torch's CPU-only build does — the "all devices" forms over an
# empty list, the single-device forms with an error naming why.

def seed():
    """Accepted: no CUDA generator to re-seed (torch's CPU build queues it and never runs it)."""


def seed_all():
    """Accepted, as seed()."""


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    states = list(new_states)
    if len(states) > device_count():
        raise RuntimeError(f"set_rng_state_all: {len(states)} CUDA generator states given, but "
                           f"cddp has {device_count()} CUDA devices (cuda.is_available() is "
                           f"{is_available()})")


def _no_generator(what):
    raise RuntimeError(f"torch.cuda.{what}: cddp has no CUDA devices (cuda.is_available() is "
                       "False), so there is no CUDA generator; CUDA work runs on the CPU and "
                       "draws from the CPU generator (cddp.get_rng_state())")


def get_rng_state(device="cuda"):
    _no_generator("get_rng_state")


def set_rng_state(new_state, device="cuda"):
    _no_generator("set_rng_state")


def initial_seed():
    _no_generator("initial_seed")


def synchronize(device=None):
    return None


def _index(device):
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = __import__("cddp").device(device)
    return device.index if getattr(device, "index", None) is not None else current_device()


def _stats(device):
    if _cuda is None:
        return {"allocated": 0, "peak_allocated": 0, "reserved": 0, "peak_reserved": 0}
    return _cuda._memory("stats", _index(device))


def empty_cache():
    """Give the caching allocator's unused blocks back to the device (every device used)."""
    if _cuda is not None:
        for i in range(64):
            _cuda._memory("empty_cache", i)


def memory_allocated(device=None):
    return _stats(device)["allocated"]


def max_memory_allocated(device=None):
    return _stats(device)["peak_allocated"]


def memory_reserved(device=None):
    return _stats(device)["reserved"]


def max_memory_reserved(device=None):
    return _stats(device)["peak_reserved"]


def reset_peak_memory_stats(device=None):
    if _cuda is not None:
        _cuda._memory("reset_peak", _index(device))


def memory_stats(device=None):
    """A subset of torch.cuda.memory_stats' keys, from cddp's caching allocator."""
    s = _stats(device)
    return {"allocated_bytes.all.current": s["allocated"], "allocated_bytes.all.peak": s["peak_allocated"],
            "reserved_bytes.all.current": s["reserved"], "reserved_bytes.all.peak": s["peak_reserved"],
            "num_alloc_retries": s.get("n_oom_retries", 0), "num_ooms": s.get("n_ooms", 0)}


def is_initialized():
    return False


def get_device_name(device=None):
    raise RuntimeError("cddp.cuda: no CUDA device is available")


def get_device_properties(device=None):
    raise RuntimeError("cddp.cuda: no CUDA device is available (get_device_properties)")


def get_device_capability(device=None):
    raise RuntimeError("cddp.cuda: no CUDA device is available (get_device_capability)")


def mem_get_info(device=None):
    raise RuntimeError("cddp.cuda: no CUDA device is available (mem_get_info)")


def get_arch_list():
    """The CUDA architectures cddp's kernels target: none while device tensors do not exist
    (torch's CPU build answers [] too)."""
    return []


def is_current_stream_capturing():
    return False


def ipc_collect():
    """Accepted: no CUDA IPC memory to release."""


class device:
    """Context manager torch.cuda.device(i): a no-op without a GPU."""

    def __init__(self, device):
        self.idx = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def is_bf16_supported(including_emulation=True):
    """False, as torch's answer without a CUDA device."""
    return False


from . import amp  # noqa: E402,F401  (torch.cuda.amp: CPU fallback, see cddp/amp)
from .._compat import CUDA_LEGACY_TYPES as _LEGACY  # noqa: E402
globals().update(_LEGACY)          # torch.cuda.FloatTensor ...: made through the device policy
from . import memory, nvtx, random  # noqa: E402,F401
from .memory import memory_summary  # noqa: E402,F401
from .streams import (Event, Stream, current_stream, default_stream,  # noqa: E402,F401
                      set_stream, stream)
