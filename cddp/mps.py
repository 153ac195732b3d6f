"""cddp.mps — torch.mps, Apple's Metal backend, which cddp does not have: is_available() is
False and device_count() 0; the seeding call scripts make unconditionally is accepted; the
calls that need the device raise as torch's do without it."""

__all__ = ["is_available", "device_count", "manual_seed", "seed", "synchronize", "empty_cache",
           "current_allocated_memory", "driver_allocated_memory", "recommended_max_memory",
           "get_rng_state", "set_rng_state", "set_per_process_memory_fraction"]


def is_available():
    return False


def device_count():
    return 0


def manual_seed(seed):
    """Accepted (no MPS generator to seed), as torch's answer without the backend."""


def _no_mps(what):
    def fn(*args, **kwargs):
        raise RuntimeError(f"Cannot execute {what}() without MPS backend (cddp has no Metal "
                           "backend; torch.backends.mps.is_available() is False)")
    fn.__name__ = what
    return fn


seed = get_rng_state = set_rng_state = _no_mps("getDefaultGenerator")
synchronize = _no_mps("deviceSynchronize")
empty_cache = _no_mps("emptyCache")
current_allocated_memory = _no_mps("getCurrentAllocatedMemory")
driver_allocated_memory = _no_mps("getDriverAllocatedMemory")
recommended_max_memory = _no_mps("getRecommendedMaxMemory")
set_per_process_memory_fraction = _no_mps("setMemoryFraction")
