"""Which cddp the test suite imports, named in the pytest header.

`python -m pytest` puts the repository root first on sys.path, so `import cddp` finds the source
package ./cddp, and that package decides (cddp/__init__.py):

    ./cddp has a built _C   -> the checkout (developer loop: edit, build_ext --inplace, test;
                               `pip install -e '.[test]'`, what CI runs, builds in place too)
    otherwise               -> it hands over to the cddp installed elsewhere (`pip install '.[test]'`)
    neither                 -> ImportError saying what to run, before any test is collected

This file sits at the root (not in tests/) so that pytest loads it, and with it cddp, before
tests/conftest.py; the header then says which package is under test and where it was loaded from.
"""
import os

# Large single-threaded float32 products run cddp's own AVX-512 kernel when NumPy's OpenBLAS
# runs older kernels (ops/linalg/blas.c); which it runs depends on the machine and on
# OPENBLAS_CORETYPE. The suite pins the choice so the kernel is tested on every AVX-512 CPU;
# test_linalg checks the automatic choice and CDDP_GEMM=blas in child processes.
os.environ.setdefault("CDDP_GEMM", "own")

import cddp  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
HERE = os.path.dirname(os.path.abspath(cddp.__file__))
INPLACE = os.path.realpath(HERE) == os.path.realpath(os.path.join(ROOT, "cddp"))


def pytest_report_header(config):
    kind = "in-place build of this checkout" if INPLACE else "installed package"
    return f"cddp {getattr(cddp, '__version__', '?')}: {kind} at {HERE}"
