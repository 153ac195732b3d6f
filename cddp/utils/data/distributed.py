"""cddp.utils.data.distributed.DistributedSampler — torch's signature and index lists, bit for
bit: the permutation is torch's randperm on a generator seeded with seed + epoch, computed in
C together with torch's padding / drop_last / striding rules (csrc/sampler.c)."""
import math

from ... import _C
from .sampler import Sampler


class DistributedSampler(Sampler):
    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            from ... import distributed as dist
            if not dist.is_available():
                raise RuntimeError("Requires distributed package to be available")
            if num_replicas is None:
                num_replicas = dist.get_world_size()
            if rank is None:
                rank = dist.get_rank()
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, "
                             f"{num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(self.dataset)
        if self.drop_last and n % self.num_replicas != 0:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        return iter(_C._distributed_sampler_indices(len(self.dataset), self.num_replicas,
                                                     self.rank, bool(self.shuffle),
                                                     self.seed + self.epoch, self.drop_last))

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Reshuffle for each epoch: the permutation is seeded with seed + epoch."""
        self.epoch = epoch
