"""cddp.torch_version — torch.torch_version.TorchVersion: the version string scripts compare.

    cddp.__version__                 '2.13.0+cddp0.1.0'  (torch's API level + cddp's release)
    cddp.__version__ >= "2.0"        True, compared as versions, not as strings
    cddp.__version__ >= (1, 12)      True

Contract:
- cddp mirrors torch 2.13's API (docs/api.md compares against torch 2.13.0), so the version
  scripts see is that API level: their `torch.__version__ >= "1.x"` checks and
  packaging.version.parse(torch.__version__) gates take the branches torch 2.13 takes. cddp's
  own release is the local label after "+" (torch's CPU wheels say "+cpu" there) and
  cddp.version.cddp; pip's metadata (importlib.metadata.version("cddp")) is cddp's release.
- TorchVersion is a str (printing, == with a str, hashing, slicing as the string). <, <=, >,
  >= (and == with a tuple) compare as packaging's Version does for these strings: release
  numbers (missing parts are 0), then a pre-release such as 2.13.0rc1 or 2.13.0.dev20260101
  before the release, then a local label after it (so "2.13.0+cddp0.1.0" > "2.13.0", as
  torch's "2.13.0+cpu" is); the other side a str, a tuple or list of ints, or packaging's
  Version. Other types (an int) raise TypeError, as torch's.

Differences from torch: no dependency on the packaging library (torch vendors it); epochs
and post-releases are not understood (neither appears in torch's versions).
"""
import re

__all__ = ["TorchVersion", "__version__"]

_PATTERN = (r"^\s*v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview|dev)[-_.]?(\d*))?"
            r"[^+]*(\+.+)?$")


def _key(v):
    """(release tuple, final, local) of a version: final 0 for a pre/dev release, 1 for a
    release; local 1 when a "+label" follows."""
    if isinstance(v, (tuple, list)):
        return tuple(int(p) for p in v), 1, 0
    if not isinstance(v, str) and type(v).__name__ != "Version":
        raise TypeError(f"cannot compare a TorchVersion with {type(v).__name__}")
    m = re.match(_PATTERN, str(v), re.IGNORECASE)      # re caches the compiled pattern
    if not m:
        raise ValueError(f"{v!r} is not a version that TorchVersion can compare with")
    return (tuple(int(p) for p in m.group(1).split(".")), 0 if m.group(2) else 1,
            1 if m.group(4) else 0)


def _cmp(a, b):
    """(a > b, a == b) as versions."""
    (ra, *ta), (rb, *tb) = _key(a), _key(b)
    n = max(len(ra), len(rb))
    ka, kb = (ra + (0,) * (n - len(ra)), *ta), (rb + (0,) * (n - len(rb)), *tb)
    return ka > kb, ka == kb


def _compare(op):
    def method(self, other):
        try:
            gt, eq = _cmp(self, other)
        except TypeError:
            return NotImplemented
        return op(gt, eq)
    return method


class TorchVersion(str):
    """A version string that compares as a version (see the module docstring)."""

    __gt__ = _compare(lambda gt, eq: gt)
    __ge__ = _compare(lambda gt, eq: gt or eq)
    __lt__ = _compare(lambda gt, eq: not (gt or eq))
    __le__ = _compare(lambda gt, eq: not gt)

    def __eq__(self, other):
        if isinstance(other, str):
            return str.__eq__(self, other)
        try:
            return _cmp(self, other)[1]
        except (ValueError, TypeError):
            return NotImplemented

    __hash__ = str.__hash__


CDDP_RELEASE = "0.1.0"
TORCH_API = "2.13.0"
__version__ = TorchVersion(f"{TORCH_API}+cddp{CDDP_RELEASE}")
