"""torch.autograd.detect_anomaly / set_detect_anomaly: while on, the C engine checks every
node's gradients as it makes them and raises torch's "Function 'XBackward0' returned nan values
in its 0th output." at the first NaN, so the failing op is named instead of NaN reaching the
weights. cddp keeps no forward stack traces (torch's other half of anomaly mode): the node's
name is the pointer back to the forward op. check_nan=False turns the check off, as torch."""
import functools
import warnings

from .. import _C


def is_anomaly_enabled():
    return _C._is_anomaly_enabled()


def is_anomaly_check_nan_enabled():
    return _C._is_anomaly_enabled()


class detect_anomaly:  # noqa: N801 (torch's name)
    """Context manager / decorator turning anomaly mode on for its block."""

    def __init__(self, check_nan=True):
        self.prev = _C._is_anomaly_enabled()
        self.check_nan = check_nan
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime "
                      "and should only be enabled for debugging.", UserWarning, stacklevel=2)

    def __enter__(self):
        _C._set_detect_anomaly(self.check_nan)

    def __exit__(self, *exc):
        _C._set_detect_anomaly(self.prev)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(self.check_nan):
                return fn(*args, **kwargs)
        return wrapper


class set_detect_anomaly:  # noqa: N801
    """Sets anomaly mode on or off now; as a context manager, restores it at exit."""

    def __init__(self, mode, check_nan=True):
        self.prev = _C._is_anomaly_enabled()
        _C._set_detect_anomaly(bool(mode) and check_nan)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _C._set_detect_anomaly(self.prev)
