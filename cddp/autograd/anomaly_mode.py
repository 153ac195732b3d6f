"""torch.autograd.detect_anomaly / set_detect_anomaly: while on, the C engine checks every
node's gradients as it makes them and raises torch's "Function 'XBackward0' returned nan values
in its 0th output." at the first NaN, so the failing op is named instead of NaN reaching the
weights. cddp keeps no forward stack traces (torch's other half of anomaly mode): the node's
name is the pointer back to the forward op. check_nan=False leaves anomaly mode on
(is_anomaly_enabled() is True) without the NaN check, as torch."""
import functools
import warnings

from .. import _C


# torch's two global flags; the C engine checks for NaN only when both are on
_mode = {"enabled": False, "check_nan": True}


def _set(enabled, check_nan):
    _mode["enabled"], _mode["check_nan"] = bool(enabled), bool(check_nan)
    _C._set_detect_anomaly(_mode["enabled"] and _mode["check_nan"])


def is_anomaly_enabled():
    return _mode["enabled"]


def is_anomaly_check_nan_enabled():
    return _mode["check_nan"]


class detect_anomaly:  # noqa: N801 (torch's name)
    """Context manager / decorator turning anomaly mode on for its block."""

    def __init__(self, check_nan=True):
        self.prev = (_mode["enabled"], _mode["check_nan"])
        self.check_nan = check_nan
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime "
                      "and should only be enabled for debugging.", UserWarning, stacklevel=2)

    def __enter__(self):
        _set(True, self.check_nan)

    def __exit__(self, *exc):
        _set(*self.prev)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(self.check_nan):
                return fn(*args, **kwargs)
        return wrapper


class set_detect_anomaly:  # noqa: N801
    """Sets anomaly mode on or off now; as a context manager, restores it at exit."""

    def __init__(self, mode, check_nan=True):
        self.prev = (_mode["enabled"], _mode["check_nan"])
        _set(mode, check_nan)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _set(*self.prev)
