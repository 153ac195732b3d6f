"""cddp.cpu — torch.cpu's module: the amp aliases and the device queries scripts call."""
from . import amp  # noqa: F401


def is_available():
    return True


def device_count():
    return 1


def current_device():
    return "cpu"


def synchronize(device=None):
    return None
