"""cddp.distributed.fsdp.api — the option types of torch.distributed.fsdp: ShardingStrategy,
BackwardPrefetch, MixedPrecision, CPUOffload, StateDictType and the state-dict configs.

Contract: the same names, members, fields and defaults as torch 2.x, so scripts build and
compare them unchanged. What each option does in cddp is stated by the
FullyShardedDataParallel module docstring; the types here only carry values.

Differences from torch: none in the types themselves. MixedPrecision's default
_module_classes_to_ignore is cddp's BatchNorm base class (torch's _BatchNorm).
"""
import enum
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ...nn.modules.batchnorm import _BatchNorm

__all__ = [
    "ShardingStrategy", "BackwardPrefetch", "MixedPrecision", "CPUOffload", "StateDictType",
    "StateDictConfig", "FullStateDictConfig", "LocalStateDictConfig", "ShardedStateDictConfig",
    "OptimStateDictConfig", "FullOptimStateDictConfig", "LocalOptimStateDictConfig",
    "ShardedOptimStateDictConfig", "StateDictSettings",
]


class ShardingStrategy(enum.Enum):
    """What each rank keeps: FULL_SHARD / SHARD_GRAD_OP shard parameters, gradients and
    optimizer state over the group; NO_SHARD replicates (DDP-like); the hybrid ones shard
    within a node and replicate across nodes."""
    FULL_SHARD = enum.auto()
    SHARD_GRAD_OP = enum.auto()
    NO_SHARD = enum.auto()
    HYBRID_SHARD = enum.auto()
    _HYBRID_SHARD_ZERO2 = enum.auto()


class BackwardPrefetch(enum.Enum):
    BACKWARD_PRE = enum.auto()
    BACKWARD_POST = enum.auto()


@dataclass
class MixedPrecision:
    """param_dtype: dtype of the gathered parameters forward and backward compute with;
    reduce_dtype: dtype gradients are reduced in (default: param_dtype); buffer_dtype: dtype
    buffers are kept in (saved in their original dtype)."""
    param_dtype: Optional[Any] = None
    reduce_dtype: Optional[Any] = None
    buffer_dtype: Optional[Any] = None
    keep_low_precision_grads: bool = False
    cast_forward_inputs: bool = False
    cast_root_forward_inputs: bool = True
    _module_classes_to_ignore: Sequence[type] = (_BatchNorm,)


@dataclass
class CPUOffload:
    offload_params: bool = False


class StateDictType(enum.Enum):
    FULL_STATE_DICT = enum.auto()
    LOCAL_STATE_DICT = enum.auto()
    SHARDED_STATE_DICT = enum.auto()


@dataclass
class StateDictConfig:
    offload_to_cpu: bool = False


@dataclass
class FullStateDictConfig(StateDictConfig):
    """rank0_only: only global rank 0 receives the entries (the others get an empty dict,
    after taking part in the gathers)."""
    rank0_only: bool = False


@dataclass
class LocalStateDictConfig(StateDictConfig):
    pass


@dataclass
class ShardedStateDictConfig(StateDictConfig):
    _use_dtensor: bool = False


@dataclass
class OptimStateDictConfig:
    offload_to_cpu: bool = True


@dataclass
class FullOptimStateDictConfig(OptimStateDictConfig):
    rank0_only: bool = False


@dataclass
class LocalOptimStateDictConfig(OptimStateDictConfig):
    offload_to_cpu: bool = False


@dataclass
class ShardedOptimStateDictConfig(OptimStateDictConfig):
    _use_dtensor: bool = False


@dataclass
class StateDictSettings:
    state_dict_type: StateDictType
    state_dict_config: StateDictConfig
    optim_state_dict_config: OptimStateDictConfig
