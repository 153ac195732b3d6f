"""Model averagers for local SGD (torch.distributed.algorithms.model_averaging.averagers).
PeriodicModelAverager averages the parameters over the group at step warmup_steps and every
`period` steps after; each average_parameters() call is one step."""
import warnings

from . import utils

__all__ = ["ModelAverager", "PeriodicModelAverager"]


def _dist():
    from .... import distributed
    return distributed


class ModelAverager:
    def __init__(self, process_group=None):
        self.process_group = process_group if process_group is not None else _dist().group.WORLD
        self.step = 0

    def average_parameters(self, params):
        raise NotImplementedError


class PeriodicModelAverager(ModelAverager):
    def __init__(self, period, warmup_steps=0, process_group=None):
        super().__init__(process_group)
        if warmup_steps < 0:
            raise ValueError("Arg ``warmup_steps`` must be a non-negative number.")
        if period < 1:
            raise ValueError("Arg ``period`` must be a positive value.")
        if period == 1:
            warnings.warn("When period is 1, no need to use model averaging because the "
                          "communication cost of all-reducing parameters will be no less than "
                          "the cost of all-reducing gradients by DistributedDataParallel in "
                          "the backward pass. Therefore, only DistributedDataParallel should "
                          "be used for this case.", stacklevel=2)
        self.warmup_steps, self.period = warmup_steps, period

    def average_parameters(self, params):
        if self.step >= self.warmup_steps and (self.step - self.warmup_steps) % self.period == 0:
            utils.average_parameters_or_parameter_groups(params, self.process_group)
        self.step += 1
