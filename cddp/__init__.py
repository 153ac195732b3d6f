"""cddp — PyTorch's data-parallel training stack as a C extension.

`import cddp as torch` gives a torch-like Tensor (C type), autograd (C engine), and nn / optim /
utils.data / distributed / multiprocessing mirroring torch's module paths; cddp.launch and
cddp.run are the launchers.
"""
from . import _C
from ._C import Tensor, dtype, float32, float64, int64, int32, float, double, long, int  # noqa: A004
from ._C import bool  # noqa: A004  (torch.bool, as torch names it)
from ._size import Size
from ._device import device
from . import autograd
from .autograd.grad_mode import no_grad, enable_grad, set_grad_enabled, is_grad_enabled

_C._set_size_type(Size)
_C._set_device_objects(device("cpu"), device)

# Module-level functions written in C (cddp.tensor, cddp.sum, cddp.softmax, ...) are exported
# as they are: no Python wrapper on the hot path.
_INTERNAL = {"Reducer", "Node"}     # C types the Python layer uses; not torch API
for _name in dir(_C):
    if not _name.startswith("_") and _name not in globals() and _name not in _INTERNAL:
        globals()[_name] = getattr(_C, _name)
del _name

from . import _tensor_py  # noqa: E402,F401  (a few Python-level Tensor properties)
from ._extras import allclose, isclose, equal, sort, argsort, topk  # noqa: E402,F401
from . import nn, optim, utils, cuda, backends  # noqa: E402,F401
from .serialization import save, load  # noqa: E402,F401

__version__ = "0.1.0"


def __getattr__(name):
    # cddp.distributed / cddp.multiprocessing (as `torch.distributed` after `import cddp as
    # torch`) load on first use: they bring subprocess, json and multiprocessing with them
    if name in ("distributed", "multiprocessing"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
