"""Post-local SGD for DDP (torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook): the
first start_localSGD_iter iterations average gradients over the whole group, as allreduce_hook;
after that only over `subgroup` (with post_local_gradient_allreduce, else not at all), so ranks
drift apart locally and a model averager (model_averaging.averagers) pulls them together every
few steps. subgroup None means torch's intra-node subgroups (dist.new_subgroups()): every rank
of this machine."""
from ....futures import Future
from .default_hooks import allreduce_hook

__all__ = ["PostLocalSGDState", "post_localSGD_hook"]


def _dist():
    from .... import distributed
    return distributed


class PostLocalSGDState:
    __slots__ = ["process_group", "subgroup", "start_localSGD_iter",
                 "post_local_gradient_allreduce", "iter"]

    def __init__(self, process_group, subgroup, start_localSGD_iter,
                 post_local_gradient_allreduce=True):
        self.process_group = process_group
        self.subgroup = subgroup
        self.start_localSGD_iter = start_localSGD_iter
        self.post_local_gradient_allreduce = post_local_gradient_allreduce
        self.iter = 0

    def maybe_increase_iter(self, bucket):
        if bucket.is_last():
            self.iter += 1


def post_localSGD_hook(state, bucket):
    if state.iter < state.start_localSGD_iter:
        state.maybe_increase_iter(bucket)
        return allreduce_hook(state.process_group, bucket)
    if not state.post_local_gradient_allreduce:
        fut = Future()
        fut.set_result(bucket.buffer())
        return fut
    if state.subgroup is None:
        state.subgroup, _ = _dist().new_subgroups()
    return allreduce_hook(state.subgroup, bucket)
