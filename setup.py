"""Build of cddp's C extension(s).

cddp._C     the C core: csrc/**/*.c except the MPI backend's files (always built; includes
            are relative to csrc/).
cddp._mpi   the MPI backend (init_process_group("mpi")): csrc/distributed/mpi/*.c, its binding
            csrc/distributed/python/py_mpi.c and its own copy of csrc/distributed/pg/common.c,
            compiled with the MPI library's flags. Built when `mpicc` (or $MPICC) is found, or
            pkg-config knows ompi-c / mpich; absent otherwise (the backend then says how to get
            it: apt-get install libopenmpi-dev, then reinstall). cddp._C never links libmpi.
cddp._cuda  the CUDA extension, built when nvcc is found: cuda/**/*.cu compiled by nvcc for
            sm_80 and sm_90 (+ compute_90 PTX, so newer GPUs JIT it), cuda/**/*.c by the host
            compiler, cudart linked statically (the .so needs no CUDA runtime installed, and
            imports on a machine without a GPU). cuBLAS/cuBLASLt/NCCL are NOT linked: they are
            dlopen'ed at first use (cuda/runtime/loader.c), so the build needs none of them.

Environment knobs:
    CDDP_CUDA=0       do not build cddp._cuda;  CDDP_CUDA=1  build it or fail (nvcc required);
                      unset: build it when nvcc is found ($CUDACXX, else $CUDA_HOME/bin, PATH,
                      /usr/local/cuda/bin)
    CDDP_CUDA_ARCHS   nvcc -gencode list instead of the default (e.g. "arch=compute_90,code=sm_90")
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
import time

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

here = os.path.dirname(os.path.abspath(__file__))
csrc = sorted(glob.glob(os.path.join("csrc", "**", "*.c"), recursive=True))
mpi_sources = sorted(glob.glob(os.path.join("csrc", "distributed", "mpi", "*.c"))) + [
    os.path.join("csrc", "distributed", "python", "py_mpi.c"),
    os.path.join("csrc", "distributed", "pg", "common.c")]
csrc = [f for f in csrc if f not in mpi_sources[:-1]]       # common.c stays in _C too
# setuptools rebuilds an extension when a source or one of its `depends` is newer than it; the
# headers are listed so that editing only a header does not leave stale objects behind
csrc_headers = sorted(glob.glob(os.path.join("csrc", "**", "*.h"), recursive=True))


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
        depends=csrc_headers,
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
        depends=csrc_headers,
        include_dirs=["csrc"] + [f[2:] for f in mpi_cflags if f.startswith("-I")],
        define_macros=[("_GNU_SOURCE", "1")] + [tuple((f[2:].split("=", 1) + [None])[:2])
                                                for f in mpi_cflags if f.startswith("-D")],
        extra_compile_args=cflags + keep + ["-fvisibility=hidden"],
        extra_link_args=ldflags + [f for f in mpi_lflags if not f.startswith(("-l", "-L"))],
        library_dirs=[f[2:] for f in mpi_lflags if f.startswith("-L")],
        runtime_library_dirs=[f[2:] for f in mpi_lflags if f.startswith("-L")],
        libraries=[f[2:] for f in mpi_lflags if f.startswith("-l")] + ["pthread"],
    ))


# ---- the CUDA extension ------------------------------------------------------------------------

def find_nvcc():
    """nvcc: $CUDACXX when set (CMake's variable; then nothing else is tried), else
    $CUDA_HOME/bin, PATH, /usr/local/cuda/bin (CI's machine has it there, not always on PATH).
    None when absent."""
    if os.environ.get("CUDACXX"):
        cand = os.environ["CUDACXX"]
        return cand if os.path.isfile(cand) and os.access(cand, os.X_OK) else None
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    for cand in ([os.path.join(home, "bin", "nvcc")] if home else []) + [shutil.which("nvcc"),
                                                                          "/usr/local/cuda/bin/nvcc"]:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def find_cuda_home(nvcc):
    """The toolkit root holding include/cuda_runtime_api.h and lib64/libcudart_static.a."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    for cand in [home, os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda"]:
        if cand and os.path.isfile(os.path.join(cand, "include", "cuda_runtime_api.h")):
            return cand
    raise RuntimeError(f"cddp build: nvcc at {nvcc}, but no CUDA include/ beside it; set CUDA_HOME")


CUDA_ARCHS = os.environ.get("CDDP_CUDA_ARCHS", "arch=compute_80,code=sm_80 arch=compute_90,code=sm_90 "
                            "arch=compute_90,code=compute_90").split()
cuda_mode = os.environ.get("CDDP_CUDA", "").strip()
if cuda_mode not in ("", "0", "1"):
    raise SystemExit(f"cddp build: CDDP_CUDA must be 0 or 1, got {cuda_mode!r}")
nvcc = None if cuda_mode == "0" else find_nvcc()
if cuda_mode == "1" and not nvcc:
    raise SystemExit("cddp build: CDDP_CUDA=1 but nvcc was not found ($CUDACXX, $CUDA_HOME/bin, "
                     "PATH, /usr/local/cuda/bin); install the CUDA toolkit or set CUDA_HOME")
cu_sources = sorted(glob.glob(os.path.join("cuda", "**", "*.cu"), recursive=True))
cuda_c = sorted(glob.glob(os.path.join("cuda", "**", "*.c"), recursive=True))
print(f"cddp build: C core from {len(csrc)} files; MPI "
      f"{'found (' + mpi[0] + ') -> cddp._mpi' if mpi else 'not found (no cddp._mpi)'}; "
      f"nvcc {'found at ' + nvcc if nvcc else 'not used'}"
      f"{'' if not nvcc else f'; cddp._cuda from {len(cu_sources)} .cu + {len(cuda_c)} .c files'}")

if nvcc:
    cuda_home = find_cuda_home(nvcc)
    cuda_lib = next((d for d in (os.path.join(cuda_home, "lib64"), os.path.join(cuda_home, "lib"))
                     if os.path.isfile(os.path.join(d, "libcudart_static.a"))), None)
    if not cuda_lib:
        raise SystemExit(f"cddp build: no libcudart_static.a under {cuda_home}/lib64")
    cuda_inc = ["cuda/include", os.path.join(cuda_home, "include")]
    ext_modules.append(Extension(
        "cddp._cuda",
        sources=cuda_c,
        depends=sorted(glob.glob(os.path.join("cuda", "**", "*.h"), recursive=True)),
        include_dirs=cuda_inc,
        define_macros=[("_GNU_SOURCE", "1"), ("CDDP_CUDA_ARCHS", '"' + " ".join(CUDA_ARCHS) + '"')],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
        library_dirs=[cuda_lib],
        # cudart_static needs rt/dl/pthread; nvcc's host objects are C++ (libstdc++)
        libraries=["cudart_static", "rt", "dl", "pthread", "stdc++"],
    ))


class BuildExt(build_ext):
    """Compiles cddp._cuda's .cu files with nvcc into objects the host linker adds. An object
    is rebuilt when its .cu, or any header under cuda/, is newer (nvcc has no -MD here)."""

    def build_extension(self, ext):
        if ext.name == "cddp._cuda":
            ext.extra_objects = self.nvcc_objects()
        super().build_extension(ext)

    def nvcc_objects(self):
        headers = glob.glob(os.path.join("cuda", "**", "*.h"), recursive=True) + \
            glob.glob(os.path.join("cuda", "**", "*.cuh"), recursive=True)
        newest_header = max((os.path.getmtime(h) for h in headers), default=0)
        flags = ["-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-cudart", "static",
                 "--expt-relaxed-constexpr"] + [f"-I{d}" for d in cuda_inc]
        for arch in CUDA_ARCHS:
            flags += ["-gencode", arch]
        objs, start = [], time.time()
        for src in cu_sources:
            obj = os.path.join(self.build_temp, "nvcc", src[:-3] + ".o")
            objs.append(obj)
            if os.path.exists(obj) and os.path.getmtime(obj) >= max(os.path.getmtime(src), newest_header):
                continue
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            cmd = [nvcc, "-c", src, "-o", obj] + flags
            print(" ".join(cmd))
            subprocess.check_call(cmd)
        print(f"cddp build: nvcc compiled {len(cu_sources)} .cu files in {time.time() - start:.1f} s")
        return objs


setup(ext_modules=ext_modules, cmdclass={"build_ext": BuildExt})
