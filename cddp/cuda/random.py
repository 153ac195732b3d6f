"""cddp.cuda.random — torch.cuda.random: the CUDA generators' seeding and state, the same
functions as cddp.cuda's (no CUDA device: seeding reaches the CPU generator that "CUDA" work
draws from; the per-device state calls raise, saying why)."""
from . import (get_rng_state, get_rng_state_all, initial_seed, manual_seed,  # noqa: F401
               manual_seed_all, seed, seed_all, set_rng_state, set_rng_state_all)

__all__ = ["get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all",
           "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed"]
