"""cddp.distributed.fsdp.sharded_grad_scaler — torch's ShardedGradScaler: GradScaler for
models whose gradients are sharded across ranks (FSDP, ZeRO). Each rank sees only its shard,
so an inf/NaN on one rank must stop the step on every rank: unscale_ sums the found-inf flag
over process_group (one all_reduce), and every rank then skips or steps alike and updates the
scale alike. float16 gradients may be unscaled (FSDP's mixed-precision shards)."""
from ...amp.grad_scaler import GradScaler
from .. import distributed_c10d as dist

__all__ = ["ShardedGradScaler"]


class ShardedGradScaler(GradScaler):
    _ALLOW_FP16_GRADS = True

    def __init__(self, device="cuda", init_scale=2.0**16, backoff_factor=0.5,
                 growth_factor=2.0, growth_interval=2000, enabled=True, process_group=None):
        super().__init__(device, init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
        self.process_group = process_group

    def unscale_(self, optimizer):
        if not self._enabled:
            return
        super().unscale_(optimizer)
        if dist.is_initialized():
            for found_inf in self._per_optimizer_states[id(optimizer)][
                    "found_inf_per_device"].values():
                dist.all_reduce(found_inf, group=self.process_group)
