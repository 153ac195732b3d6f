"""cddp.nn.parallel — DistributedDataParallel and DataParallel, and DataParallel's building
blocks (scatter / gather / replicate / parallel_apply, data_parallel) over this process's CPU."""
from .distributed import DistributedDataParallel
from .data_parallel import DataParallel
from .parallel_apply import parallel_apply
from .replicate import replicate
from .scatter_gather import gather, scatter


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0,
                  module_kwargs=None):
    """torch.nn.parallel.data_parallel: DataParallel's forward as a function."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    return DataParallel(module, device_ids, output_device, dim)(*inputs, **(module_kwargs or {}))


__all__ = ["DistributedDataParallel", "DataParallel", "data_parallel", "parallel_apply",
           "replicate", "scatter", "gather"]
