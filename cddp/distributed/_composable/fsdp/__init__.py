"""cddp.distributed._composable.fsdp — torch.distributed._composable.fsdp: FSDP2's older
import path, the same objects as cddp.distributed.fsdp's."""
from ...fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy  # noqa: F401
from .fully_shard import FSDPModule, fully_shard, register_fsdp_forward_method  # noqa: F401
