"""cddp.distributed.fsdp — torch.distributed.fsdp's FullyShardedDataParallel (the
FlatParameter form, use_orig_params=False) over cddp's collectives.

    import cddp.distributed as dist
    from cddp.distributed.fsdp import FullyShardedDataParallel as FSDP
    from cddp.distributed.fsdp.wrap import size_based_auto_wrap_policy
    dist.init_process_group("gloo")
    model = FSDP(model, auto_wrap_policy=functools.partial(size_based_auto_wrap_policy,
                                                           min_num_params=10_000))
    opt = cddp.optim.Adam(model.parameters())      # the shards
    loss(model(x)).backward(); model.clip_grad_norm_(1.0); opt.step()
    full = model.state_dict()                      # the unwrapped model's keys, full tensors

FSDP2 (fully_shard, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, CPUOffloadPolicy):
parameters become DTensors (cddp.distributed.tensor) sharded on dim 0; _fully_shard.py,
_fsdp_api.py.

    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)                             # model.parameters(): DTensor shards

What each piece does and how it differs from torch: fully_sharded_data_parallel.py (the
wrapper), _flat_param.py (flattening, sharding, the gather/reduce-scatter autograd node),
_state_dict.py, _optim_state_dict.py, wrap.py (policies), api.py (option types).
"""
from .api import (  # noqa: F401
    BackwardPrefetch, CPUOffload, FullOptimStateDictConfig, FullStateDictConfig,
    LocalOptimStateDictConfig, LocalStateDictConfig, MixedPrecision, OptimStateDictConfig,
    ShardedOptimStateDictConfig, ShardedStateDictConfig, ShardingStrategy, StateDictConfig,
    StateDictSettings, StateDictType,
)
from ._flat_param import FlatParameter  # noqa: F401
from .fully_sharded_data_parallel import FullyShardedDataParallel  # noqa: F401
from . import wrap  # noqa: F401
from ._fsdp_api import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy  # noqa: F401
from ._fully_shard import (FSDPModule, UnshardHandle, fully_shard,  # noqa: F401
                           register_fsdp_forward_method)

__all__ = [
    "FullyShardedDataParallel", "BackwardPrefetch", "CPUOffload", "MixedPrecision",
    "ShardingStrategy", "StateDictType", "StateDictConfig", "FullStateDictConfig",
    "LocalStateDictConfig", "ShardedStateDictConfig", "OptimStateDictConfig",
    "FullOptimStateDictConfig", "LocalOptimStateDictConfig", "ShardedOptimStateDictConfig",
    "StateDictSettings", "FlatParameter",
    # FSDP2
    "CPUOffloadPolicy", "FSDPModule", "fully_shard", "MixedPrecisionPolicy", "OffloadPolicy",
    "register_fsdp_forward_method", "UnshardHandle",
]
