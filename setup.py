"""Build of cddp's C extension(s).

cddp._C     the C core: csrc/**/*.c (always built; includes are relative to csrc/).
cddp._cuda  CUDA kernels + cuBLAS/NCCL glue from cuda/*.cu — reserved: built once cuda/ holds
            sources and a toolkit (nvcc) is found; absent otherwise, with the same Python API.

Environment knobs:
    CDDP_SANITIZE=1   build with -fsanitize=address,undefined (tools/sanitize.sh sets it)
    CDDP_DEBUG=1      -O0 -g
"""
import glob
import os
import shutil

import numpy
from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
csrc = sorted(glob.glob(os.path.join("csrc", "**", "*.c"), recursive=True))

# -fno-math-errno: nothing reads errno after sqrt & co, and without it GCC keeps a branch to
# libm per element (for errno), which stops it vectorising loops such as the optimizers'
cflags = ["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers", "-Wno-cast-function-type", "-fno-strict-aliasing",
          "-fno-math-errno"]
ldflags = []
if os.environ.get("CDDP_DEBUG"):
    cflags = [f for f in cflags if f != "-O3"] + ["-O0", "-g"]
if os.environ.get("CDDP_SANITIZE"):
    san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    cflags = [f for f in cflags if f != "-O3"] + ["-O1", "-g"] + san
    ldflags += san

ext_modules = [
    Extension(
        "cddp._C",
        sources=csrc,
        include_dirs=["csrc", numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("_GNU_SOURCE", "1")],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
        libraries=["dl", "m", "pthread"],
    )
]

# The CUDA extension: prepared, not yet populated (later issue). Say what the build found.
cuda_sources = sorted(glob.glob(os.path.join("cuda", "*.cu")))
nvcc = shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
print(f"cddp build: C core from {len(csrc)} files; nvcc {'found at ' + nvcc if nvcc else 'not found'}; "
      f"{len(cuda_sources)} CUDA sources -> {'(none built yet)' if not cuda_sources else 'cddp._cuda'}")

setup(ext_modules=ext_modules)
