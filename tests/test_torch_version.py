"""cddp.__version__ (cddp/torch_version.py): the torch API level cddp mirrors, compared as a
version the way torch's TorchVersion compares, so scripts' version gates take torch 2.13's
branches; cddp's own release stays readable."""
import importlib.metadata

import pytest

import cddp
import cddp.version
from cddp.torch_version import TorchVersion

CASES = ["2.0", "1.12", "2.13", "2.13.0", "2.13.1", "2.14", "3", "2.13.0rc1",
         "2.13.0.dev20260101", "1.8.0a0", (2, 0), (2, 13, 0), (2, 13, 1), [1, 9]]


def test_is_torch_api_level_with_cddp_release():
    v = cddp.__version__
    assert isinstance(v, str) and isinstance(v, TorchVersion)
    assert v == "2.13.0+cddp" + cddp.version.cddp
    assert v.split("+")[0] == "2.13.0" and cddp.version.__version__ == v
    # pip's metadata is cddp's own release (skipped when running from a source tree)
    try:
        assert importlib.metadata.version("cddp") == cddp.version.cddp
    except importlib.metadata.PackageNotFoundError:
        pass


@pytest.mark.parametrize("other, gt, ge, lt, le", [
    ("2.0", True, True, False, False),
    ("1.12", True, True, False, False),       # as a string "2.13" < "1.12" is False too, but
    ("2.9", True, True, False, False),        # "2.13..." < "2.9" as strings: versions differ
    ("2.13.0", True, True, False, False),     # the local label sorts after the release
    ("2.13.1", False, False, True, True),
    ("2.13.0rc1", True, True, False, False),
    ((2, 13, 0), True, True, False, False),
    ((2, 14), False, False, True, True),
])
def test_comparisons(other, gt, ge, lt, le):
    v = cddp.__version__
    assert (v > other, v >= other, v < other, v <= other) == (gt, ge, lt, le)


def test_pre_release_order_and_errors():
    assert TorchVersion("2.13.0rc1") < "2.13.0" < TorchVersion("2.13.0+cpu")
    assert TorchVersion("2.13.0.dev20260101") < "2.13.0"
    assert TorchVersion("2.13") == (2, 13, 0) and TorchVersion("2.13") != "2.13.0"
    with pytest.raises(ValueError, match="not a version"):
        cddp.__version__ < "latest"
    with pytest.raises(TypeError):       # as torch's TorchVersion
        cddp.__version__ < 3


def test_same_answers_as_torch_version():
    torch_version = pytest.importorskip("torch.torch_version")
    ours = TorchVersion("2.13.0+cddp0.1.0")
    theirs = torch_version.TorchVersion("2.13.0+cddp0.1.0")
    for other in CASES:
        for op in ("__gt__", "__ge__", "__lt__", "__le__"):
            assert getattr(ours, op)(other) == getattr(theirs, op)(other), (op, other)
        assert (ours == other) == (theirs == other), other
