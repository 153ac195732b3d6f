"""torch.distributed.algorithms.model_averaging.hierarchical_model_averager: hierarchical SGD's
averaging (Lin et al., 2020). period_group_size_dict maps a period to a group size, both
increasing: every `period` steps the parameters are averaged within consecutive groups of that
many ranks of process_group; when several periods divide the step, only the largest (the
widest group) averages. The last group size must be the whole group. Steps before
warmup_steps average nothing."""
from collections import OrderedDict
import warnings

from . import utils
from .averagers import ModelAverager, _dist

__all__ = ["HierarchicalModelAverager"]


class HierarchicalModelAverager(ModelAverager):
    def __init__(self, period_group_size_dict=None, warmup_steps=0, process_group=None):
        super().__init__(process_group)
        if not period_group_size_dict:
            raise ValueError("Arg ``period_group_size_dict`` must not be empty.")
        self._periods = list(period_group_size_dict.keys())
        if self._periods[0] <= 0:
            raise ValueError("The minimum period in arg ``period_group_size_dict`` must be a "
                             "positive value.")
        if self._periods[-1] == 1:
            warnings.warn("When the maximum period in arg ``period_group_size_dict`` is 1, no "
                          "need to use model averaging because the communication cost of "
                          "all-reducing parameters will be no less than the cost of "
                          "all-reducing gradients by DistributedDataParallel in the backward "
                          "pass. Therefore, only DistributedDataParallel should be used for "
                          "this case.", stacklevel=2)
        dist = _dist()
        overall = dist.get_world_size(group=self.process_group)
        sizes = list(period_group_size_dict.values())
        if sizes[-1] != overall:
            raise ValueError(f"The last value in arg ``period_group_size_dict`` {sizes[-1]} must "
                             f"be equal to the size of arg ``process_group`` {overall}.")
        if warmup_steps < 0:
            raise ValueError("Arg ``warmup_steps`` must be a non-negative number.")
        # every rank creates every subgroup (new_subgroups is collective), in the dict's order
        self.period_process_group_dict = OrderedDict()
        for period, size in period_group_size_dict.items():
            self.period_process_group_dict[period] = (
                self.process_group if size == overall
                else dist.new_subgroups(group_size=size, group=self.process_group)[0])
        self.warmup_steps = warmup_steps

    def _find_process_group(self):
        """The group of the largest period dividing the current step, or None."""
        for period in reversed(self._periods):
            if self.step % period == 0:
                return self.period_process_group_dict[period]
        return None

    def average_parameters(self, params):
        if self.step >= self.warmup_steps:
            group = self._find_process_group()
            if group is not None:
                utils.average_parameters_or_parameter_groups(params, group)
        self.step += 1
