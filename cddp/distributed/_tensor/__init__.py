"""cddp.distributed._tensor — torch's older import path of torch.distributed.tensor (an
alias: the same objects; `._tensor.placement_types` included)."""
import sys

from ..tensor import *  # noqa: F401,F403
from ..tensor import DTensor, DeviceMesh, Partial, Placement, Replicate, Shard  # noqa: F401
from ..tensor import distribute_tensor, init_device_mesh, placement_types  # noqa: F401
from ..tensor import __all__  # noqa: F401

sys.modules[__name__ + ".placement_types"] = placement_types
