"""Build of cddp's C extension(s).

cddp._C     the C core: csrc/**/*.c except the MPI backend's files (always built; includes
            are relative to csrc/).
cddp._mpi   the MPI backend (init_process_group("mpi")): csrc/distributed/mpi/*.c, its binding
            csrc/distributed/python/py_mpi.c and its own copy of csrc/distributed/pg/common.c,
            compiled with the MPI library's flags. Built when `mpicc` (or $MPICC) is found, or
            pkg-config knows ompi-c / mpich; absent otherwise (the backend then says how to get
            it: apt-get install libopenmpi-dev, then reinstall). cddp._C never links libmpi.
cddp._cuda  CUDA kernels + cuBLAS/NCCL glue from cuda/*.cu — reserved: built once cuda/ holds
            sources and a toolkit (nvcc) is found; absent otherwise, with the same Python API.

Environment knobs:
    CDDP_SANITIZE=1   build with -fsanitize=address,undefined (tools/sanitize.sh sets it)
    CDDP_DEBUG=1      -O0 -g
    CDDP_NO_MPI=1     do not build cddp._mpi even when MPI is found
    MPICC=/path       the MPI compiler wrapper whose flags cddp._mpi is built with
"""
import glob
import os
import shlex
import shutil
import subprocess

import numpy
from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
csrc = sorted(glob.glob(os.path.join("csrc", "**", "*.c"), recursive=True))
mpi_sources = sorted(glob.glob(os.path.join("csrc", "distributed", "mpi", "*.c"))) + [
    os.path.join("csrc", "distributed", "python", "py_mpi.c"),
    os.path.join("csrc", "distributed", "pg", "common.c")]
csrc = [f for f in csrc if f not in mpi_sources[:-1]]       # common.c stays in _C too


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def find_mpi():
    """(where found, compile flags, link flags) of the MPI library, or None. Open MPI's wrapper
    answers -showme:compile / -showme:link, MPICH's -compile_info / -link_info (whole command
    lines: the compiler word is dropped); else pkg-config."""
    if os.environ.get("CDDP_NO_MPI"):
        return None
    mpicc = os.environ.get("MPICC") or shutil.which("mpicc")
    if mpicc:
        cf, lf = _run([mpicc, "-showme:compile"]), _run([mpicc, "-showme:link"])
        if cf is None or lf is None:
            cf, lf = _run([mpicc, "-compile_info"]), _run([mpicc, "-link_info"])
            if cf is not None and lf is not None:
                cf, lf = " ".join(shlex.split(cf)[1:]), " ".join(shlex.split(lf)[1:])
        if cf is not None and lf is not None:
            return mpicc, shlex.split(cf), shlex.split(lf)
    for pkg in ("ompi-c", "mpich"):
        cf, lf = _run(["pkg-config", "--cflags", pkg]), _run(["pkg-config", "--libs", pkg])
        if cf is not None and lf is not None:
            return f"pkg-config {pkg}", shlex.split(cf), shlex.split(lf)
    return None

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

mpi = find_mpi()
if mpi:
    where, mpi_cflags, mpi_lflags = mpi
    keep = [f for f in mpi_cflags if not f.startswith(("-I", "-D"))]
    ext_modules.append(Extension(
        "cddp._mpi",
        sources=mpi_sources,
        include_dirs=["csrc"] + [f[2:] for f in mpi_cflags if f.startswith("-I")],
        define_macros=[("_GNU_SOURCE", "1")] + [tuple((f[2:].split("=", 1) + [None])[:2])
                                                for f in mpi_cflags if f.startswith("-D")],
        extra_compile_args=cflags + keep + ["-fvisibility=hidden"],
        extra_link_args=ldflags + [f for f in mpi_lflags if not f.startswith(("-l", "-L"))],
        library_dirs=[f[2:] for f in mpi_lflags if f.startswith("-L")],
        runtime_library_dirs=[f[2:] for f in mpi_lflags if f.startswith("-L")],
        libraries=[f[2:] for f in mpi_lflags if f.startswith("-l")] + ["pthread"],
    ))

# The CUDA extension: prepared, not yet populated (later issue). Say what the build found.
cuda_sources = sorted(glob.glob(os.path.join("cuda", "*.cu")))
nvcc = shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc")
print(f"cddp build: C core from {len(csrc)} files; MPI "
      f"{'found (' + mpi[0] + ') -> cddp._mpi' if mpi else 'not found (no cddp._mpi)'}; "
      f"nvcc {'found at ' + nvcc if nvcc else 'not found'}; "
      f"{len(cuda_sources)} CUDA sources -> {'(none built yet)' if not cuda_sources else 'cddp._cuda'}")

setup(ext_modules=ext_modules)
