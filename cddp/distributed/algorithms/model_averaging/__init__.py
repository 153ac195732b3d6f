"""torch.distributed.algorithms.model_averaging: averagers (PeriodicModelAverager) and utils
(average_parameters) for local SGD."""
from . import averagers, utils  # noqa: F401
