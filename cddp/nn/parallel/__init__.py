"""cddp.nn.parallel — DistributedDataParallel and DataParallel."""
from .distributed import DistributedDataParallel
from .data_parallel import DataParallel

__all__ = ["DistributedDataParallel", "DataParallel"]
