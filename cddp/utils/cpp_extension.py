"""cddp.utils.cpp_extension — torch.utils.cpp_extension's names, so that model code which
imports them at the top of a file (an optional fused CUDA/C++ kernel beside a pure-PyTorch
fallback: StyleGAN2's op/, BigVGAN's activation kernels, detectron2's environment report)
imports on cddp and takes its fallback. Building or loading a torch C++/CUDA extension cannot
work here: those extensions compile against libtorch's headers and ATen's C++ API, which cddp
does not have. load() / load_inline() / CppExtension() / CUDAExtension() / BuildExtension
raise RuntimeError saying so (code that guards them with try/except falls back, as on a
machine without a compiler); CUDA_HOME and the ninja check answer as torch's do."""
import os
import shutil

__all__ = ["load", "load_inline", "CppExtension", "CUDAExtension", "BuildExtension",
           "include_paths", "library_paths", "is_ninja_available", "verify_ninja_availability",
           "CUDA_HOME", "ROCM_HOME", "SYCL_HOME", "IS_HIP_EXTENSION"]

_WHY = ("cddp cannot build or load torch C++/CUDA extensions ({what}): they compile against "
        "libtorch's headers and ATen's C++ API, which cddp does not have. Use the module's "
        "pure-PyTorch path (many such kernels have one), or write the kernel as a cddp custom "
        "op (cddp.library).")


def _find_cuda_home():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return home
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return "/usr/local/cuda" if os.path.exists("/usr/local/cuda") else None


CUDA_HOME = _find_cuda_home()
ROCM_HOME = None
SYCL_HOME = None
IS_HIP_EXTENSION = False


def _refuse(what):
    raise RuntimeError(_WHY.format(what=what))


def load(name, sources, *args, **kwargs):
    _refuse(f"load({name!r})")


def load_inline(name, cpp_sources, *args, **kwargs):
    _refuse(f"load_inline({name!r})")


def CppExtension(name, sources, *args, **kwargs):  # noqa: N802  (torch's name)
    _refuse(f"CppExtension({name!r})")


def CUDAExtension(name, sources, *args, **kwargs):  # noqa: N802
    _refuse(f"CUDAExtension({name!r})")


def include_paths(device_type="cpu", *args, **kwargs):
    _refuse("include_paths()")


def library_paths(device_type="cpu", *args, **kwargs):
    _refuse("library_paths()")


class BuildExtension:
    """setup.py's cmdclass={'build_ext': BuildExtension}: refuses when setuptools makes it."""

    def __init__(self, *args, **kwargs):
        _refuse("BuildExtension")

    @classmethod
    def with_options(cls, **options):
        return cls


def is_ninja_available():
    return shutil.which("ninja") is not None


def verify_ninja_availability():
    if not is_ninja_available():
        raise RuntimeError("Ninja is required to load C++ extensions")
