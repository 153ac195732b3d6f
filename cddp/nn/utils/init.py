"""cddp.nn.utils.init — torch.nn.utils.skip_init: build a module without spending time or
random numbers on its default initialization.

torch builds it on the meta device and allocates uninitialized storage (to_empty). cddp has
no meta device, so the module is built normally and the global generator's state is put
back: the caller sees what torch promises — parameters whose values it must set itself, and
a random stream untouched by the construction (the next randn equals torch's). Only the
construction time is not saved.
"""
import inspect

from ... import get_rng_state, set_rng_state
from ..modules.module import Module

__all__ = ["skip_init"]


def skip_init(module_cls, *args, **kwargs):
    """module_cls(*args, **kwargs) with its initialization not counted against the RNG."""
    if not issubclass(module_cls, Module):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    state = get_rng_state()
    try:
        return module_cls(*args, **kwargs)
    finally:
        set_rng_state(state)
