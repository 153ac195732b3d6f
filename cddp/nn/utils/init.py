"""cddp.nn.utils.init — torch.nn.utils.skip_init: build a module without spending time or
random numbers on its default initialization, as torch does it: on the meta device (where
initializers do nothing and draw nothing), then uninitialized memory on the requested device
(Module.to_empty).
"""
import inspect

from ..modules.module import Module

__all__ = ["skip_init"]


def skip_init(module_cls, *args, **kwargs):
    """module_cls(*args, **kwargs) with uninitialized parameters and buffers."""
    if not issubclass(module_cls, Module):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    target = kwargs.pop("device", "cpu")
    return module_cls(*args, device="meta", **kwargs).to_empty(device=target)
