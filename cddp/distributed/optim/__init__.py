"""cddp.distributed.optim — torch.distributed.optim's ZeroRedundancyOptimizer (ZeRO stage 1:
each data-parallel rank keeps the optimizer state of its own shard of the parameters) and
PostLocalSGDOptimizer (local SGD with periodic model averaging).

    from cddp.distributed.optim import ZeroRedundancyOptimizer
    opt = ZeroRedundancyOptimizer(ddp_model.parameters(), optimizer_class=cddp.optim.Adam,
                                  lr=1e-3)
"""
from .zero_redundancy_optimizer import ZeroRedundancyOptimizer
from .post_localSGD_optimizer import PostLocalSGDOptimizer

__all__ = ["ZeroRedundancyOptimizer", "PostLocalSGDOptimizer"]
