"""cddp.utils.data — torch.utils.data: datasets, samplers, DataLoader, collation."""
from .dataset import (Dataset, IterableDataset, TensorDataset, StackDataset, Subset,
                      ConcatDataset, ChainDataset, random_split)
from .sampler import (Sampler, SequentialSampler, RandomSampler, SubsetRandomSampler,
                      WeightedRandomSampler, BatchSampler)
from .dataloader import DataLoader, default_collate, default_convert, get_worker_info
from .distributed import DistributedSampler

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "StackDataset", "Subset",
           "ConcatDataset", "ChainDataset", "random_split", "Sampler", "SequentialSampler",
           "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler",
           "DataLoader", "default_collate", "default_convert", "get_worker_info",
           "DistributedSampler"]
