"""Which cddp the test suite imports: an in-place build of this checkout, or the installed package.

`python -m pytest` puts the current directory first on sys.path, so from the repository root
`import cddp` finds the source package ./cddp. That is right after an in-place build
(`python setup.py build_ext --inplace` leaves cddp/_C*.so beside the sources) and wrong after
`pip install .`, which builds the extension elsewhere: ./cddp then has no _C and every import
fails. Rule, applied before tests/conftest.py imports cddp:

    ./cddp has a built _C   -> test the checkout (developer loop: edit, build_ext --inplace, test)
    otherwise               -> drop the checkout from sys.path and test the installed package
                               (`pip install '.[test]'`; CI runs `pip install -e '.[test]' && python -m pytest`)
    neither importable      -> stop with the two commands that fix it

The run's header names the package under test and where it was loaded from. This file sits at
the root (not in tests/) so that pytest loads it before tests/conftest.py, whose first act is
`import cddp`. With the default import mode pytest inserts this directory into sys.path just
before importing this file; the filter below removes it again.
"""
import glob
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.abspath(__file__))
INPLACE = bool(glob.glob(os.path.join(ROOT, "cddp", "_C*.so")) + glob.glob(os.path.join(ROOT, "cddp", "_C*.pyd")))

if not INPLACE:
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != os.path.realpath(ROOT)]
    _spec = importlib.util.find_spec("cddp")
    if _spec is None or _spec.origin is None:
        raise pytest.UsageError(
            "cddp is neither installed nor built in place. Run `pip install '.[test]'` "
            "(tests the installed package) or `python setup.py build_ext --inplace` "
            "(tests this checkout).")


def pytest_report_header(config):
    import cddp

    where = os.path.dirname(os.path.abspath(cddp.__file__))
    kind = "in-place build of this checkout" if INPLACE else "installed package"
    return f"cddp {getattr(cddp, '__version__', '?')}: {kind} at {where}"
