"""torch.distributed.algorithms.model_averaging: averagers (PeriodicModelAverager),
hierarchical_model_averager (HierarchicalModelAverager) and utils (average_parameters) for
local SGD."""
from . import averagers, hierarchical_model_averager, utils  # noqa: F401
