"""cddp.distributed.checkpoint.default_planner — DefaultSavePlanner / DefaultLoadPlanner, torch's
planners as option holders: save and load plan themselves (every tensor is whole, written once
by one of the ranks holding it). DefaultLoadPlanner(allow_partial_load=True) lets a load skip
the keys the checkpoint lacks (they keep their values) instead of raising."""

from . import planner as _planner

__all__ = ["DefaultSavePlanner", "DefaultLoadPlanner"]


class DefaultSavePlanner:
    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True,
                 dedup_replicated_tensors=None, dedup_save_to_lowest_rank=False,
                 enable_plan_caching=False):
        self.flatten_state_dict = flatten_state_dict


class DefaultLoadPlanner:
    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True,
                 allow_partial_load=False):
        self.flatten_state_dict = flatten_state_dict
        self.allow_partial_load = bool(allow_partial_load)


# cddp's planners stand for torch's interfaces (planner.py): isinstance holds
_planner.SavePlanner.register(DefaultSavePlanner)
_planner.LoadPlanner.register(DefaultLoadPlanner)


def check_planner(planner, cls, what):
    if planner is not None and not isinstance(planner, cls):
        raise NotImplementedError(f"{what}: cddp plans checkpoints itself and takes no custom "
                                  f"planner ({type(planner).__name__}); pass {cls.__name__}() "
                                  "or none")
