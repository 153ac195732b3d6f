"""cddp.version — torch.version: what this build of cddp is. `__version__` is the torch API
level cddp mirrors with cddp's release as its local label ("2.13.0+cddp0.1.0", torch_version.py),
`cddp` that release alone. `cuda` is the CUDA toolkit version
cddp._cuda was compiled with ("13.0"), or None when the CUDA extension was not built (no nvcc at
build time, or CDDP_CUDA=0); `cuda_archs` the nvcc -gencode targets it carries."""
from .torch_version import CDDP_RELEASE as cddp, __version__  # noqa: F401
debug = False
hip = None
git_version = None

try:
    from . import _cuda as _ext
except ImportError:   # built without nvcc: the CPU-only package
    _ext = None

_info = _ext._build_info() if _ext is not None else {}
cuda = _info.get("cuda")
cuda_archs = _info.get("archs")
del _info
