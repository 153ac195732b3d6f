"""cddp.random — torch.random: the default CPU generator's seed and state, and fork_rng
(a block whose draws do not disturb the surrounding stream)."""
import contextlib

from . import _C

__all__ = ["manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state", "fork_rng"]

manual_seed = _C.manual_seed
seed = _C.seed
initial_seed = _C.initial_seed
get_rng_state = _C.get_rng_state
set_rng_state = _C.set_rng_state
default_generator = _C.default_generator        # torch.random.default_generator


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
             device_type="cuda"):
    """Saves the CPU generator's state on entry and restores it on exit (there is no GPU
    generator to fork here), so draws inside the block leave the outer stream unchanged."""
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
