"""cddp.testing — torch.testing.assert_close (and the deprecated assert_allclose): tensors,
scalars and nested sequences / mappings of them compared with torch's per-dtype default
tolerances and torch's failure messages; the comparison itself runs in NumPy."""
import collections.abc
import math
import numbers

import numpy as np

from .. import _C

__all__ = ["assert_close", "assert_allclose"]

# (rtol, atol) by dtype, torch's defaults; integers and bools compare exactly
_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
               "float64": (1e-7, 1e-7)}


def _name(dtype):
    return "torch." + str(dtype)[5:]


def _fail(msg, path):
    if path:
        msg += "\n\nThe failure occurred for item " + "".join(f"[{p!r}]" for p in path)
    raise AssertionError(msg)


def _tolerances(dtype, rtol, atol):
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got "
                         f"no {'rtol' if rtol is None else 'atol'}.")
    if rtol is not None:
        return rtol, atol
    return _TOLERANCES.get(str(dtype)[5:], (0.0, 0.0))


def _compare_tensors(actual, expected, rtol, atol, equal_nan, check_dtype, path):
    if actual.shape != expected.shape:
        _fail(f"The values for attribute 'shape' do not match: "
              f"torch.Size({list(actual.shape)}) != torch.Size({list(expected.shape)}).", path)
    if check_dtype and actual.dtype is not expected.dtype:
        _fail(f"The values for attribute 'dtype' do not match: {_name(actual.dtype)} != "
              f"{_name(expected.dtype)}.", path)
    rtol, atol = _tolerances(expected.dtype if check_dtype else actual.dtype, rtol, atol)
    # differences in the tensors' own precision (integers and bools in the default float
    # dtype), as torch reports them
    work = actual.dtype if actual.dtype in (_C.float32, _C.float64) else _C.float32
    a = actual.detach().to(work).numpy()
    e = expected.detach().to(work).numpy()
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if close.all():
        return
    scalar = actual.dim() == 0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = np.abs(a - e)
        rel = diff / np.abs(e)
    diff = np.where(close, 0, diff)
    rel = np.where(close, 0, rel)
    exact = rtol == 0 and atol == 0
    kind = "not equal" if exact else "not close"
    if scalar:
        msg = (f"Scalars are {kind}!\n\nExpected {expected.item()} but got {actual.item()}.\n"
               f"Absolute difference: {_num(diff.item(), actual)}"
               + ("" if exact else f" (up to {atol} allowed)") + "\n"
               f"Relative difference: {rel.item()}"
               + ("" if exact else f" (up to {rtol} allowed)"))
        _fail(msg, path)
    total, bad = a.size, int((~close).sum())
    ia = np.unravel_index(int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff))), a.shape)
    ir = np.unravel_index(int(np.nanargmax(np.where(np.isnan(rel), np.inf, rel))), a.shape)
    msg = (f"Tensor-likes are {kind}!\n\nMismatched elements: {bad} / {total} "
           f"({100 * bad / total:.1f}%)\n"
           f"Greatest absolute difference: {_num(diff[ia], actual)} at index {tuple(map(int, ia))}"
           + ("" if exact else f" (up to {atol} allowed)") + "\n"
           f"Greatest relative difference: {rel[ir]} at index {tuple(map(int, ir))}"
           + ("" if exact else f" (up to {rtol} allowed)"))
    _fail(msg, path)


def _num(v, like):
    """v as torch prints it: an int for integer tensors."""
    return int(v) if not like.is_floating_point() and math.isfinite(v) else float(v)


def _compare(actual, expected, rtol, atol, equal_nan, check_dtype, path):
    if isinstance(actual, _C.Tensor) or isinstance(expected, _C.Tensor):
        if not (isinstance(actual, _C.Tensor) and isinstance(expected, _C.Tensor)):
            _fail(f"Both inputs have to be tensors, but got {type(actual).__name__} and "
                  f"{type(expected).__name__} instead.", path)
        return _compare_tensors(actual, expected, rtol, atol, equal_nan, check_dtype, path)
    if isinstance(actual, numbers.Number) and isinstance(expected, numbers.Number):
        if check_dtype and type(actual) is not type(expected) and not (
                isinstance(actual, bool) or isinstance(expected, bool)):
            _fail(f"The values for attribute 'dtype' do not match: "
                  f"{_scalar_dtype(actual)} != {_scalar_dtype(expected)}.", path)
        dtype = _C.float64 if isinstance(expected, float) else _C.int64
        return _compare_tensors(_C.tensor(actual, dtype=dtype), _C.tensor(expected, dtype=dtype),
                                rtol, atol, equal_nan, False, path)
    if isinstance(actual, collections.abc.Mapping) and isinstance(expected,
                                                                  collections.abc.Mapping):
        if set(actual) != set(expected):
            _fail(f"The keys of the mappings do not match:\nMissing keys in the actual "
                  f"mapping: {sorted(set(expected) - set(actual), key=str)}\nAdditional keys "
                  f"in the actual mapping: {sorted(set(actual) - set(expected), key=str)}",
                  path)
        for k in expected:
            _compare(actual[k], expected[k], rtol, atol, equal_nan, check_dtype, path + [k])
        return
    if isinstance(actual, collections.abc.Sequence) and isinstance(
            expected, collections.abc.Sequence) and not isinstance(actual, str):
        if len(actual) != len(expected):
            _fail(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}",
                  path)
        for i, (x, y) in enumerate(zip(actual, expected)):
            _compare(x, y, rtol, atol, equal_nan, check_dtype, path + [i])
        return
    if isinstance(actual, np.ndarray) and isinstance(expected, np.ndarray):
        return _compare(_C.from_numpy(np.asarray(actual, order="C")),
                        _C.from_numpy(np.asarray(expected, order="C")), rtol, atol, equal_nan,
                        check_dtype, path)
    if actual != expected:
        _fail(f"Inputs {actual!r} and {expected!r} are not equal", path)


def _scalar_dtype(x):
    return {bool: "torch.bool", int: "torch.int64", float: "torch.float64"}.get(
        type(x), type(x).__name__)


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None,
                 equal_nan=False, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False, msg=None):
    """Raises AssertionError unless |actual - expected| <= atol + rtol * |expected| everywhere
    (with the same shapes and, by default, dtypes); msg replaces the message (a callable
    gets the generated one)."""
    try:
        _compare(actual, expected, rtol, atol, equal_nan, check_dtype, [])
    except AssertionError as e:
        if msg is None:
            raise
        raise AssertionError(msg(str(e)) if callable(msg) else msg) from None


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """Deprecated in torch in favour of assert_close; compares without checking dtypes."""
    import warnings
    warnings.warn("`torch.testing.assert_allclose()` is deprecated since 1.12 and will be "
                  "removed in a future release. Please use `torch.testing.assert_close()` "
                  "instead.", FutureWarning, stacklevel=2)
    if not isinstance(expected, _C.Tensor) and isinstance(actual, _C.Tensor):
        expected = _C.tensor(expected, dtype=actual.dtype)
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                 check_dtype=False, msg=msg or None)
