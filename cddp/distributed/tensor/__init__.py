"""cddp.distributed.tensor — torch.distributed.tensor's DTensor, the minimum FSDP2
(cddp.distributed.fsdp.fully_shard) needs: DTensor, distribute_tensor, the placements Shard /
Replicate / Partial, and DeviceMesh / init_device_mesh re-exported as torch does.

    from cddp.distributed.tensor import DTensor, Shard, Replicate, distribute_tensor
    t = distribute_tensor(full, mesh, [Shard(0)])
    t.to_local(); t.full_tensor(); t.redistribute(mesh, [Replicate()])

Contract and differences from torch (chiefly: .shape and every op are the LOCAL part's;
the global shape is t._spec.shape): _api.py and placement_types.py.
"""
from ..device_mesh import DeviceMesh, init_device_mesh  # noqa: F401
from . import placement_types  # noqa: F401
from ._api import DTensor, DTensorSpec, distribute_tensor  # noqa: F401
from .placement_types import Partial, Placement, Replicate, Shard  # noqa: F401

__all__ = ["DTensor", "DeviceMesh", "distribute_tensor", "init_device_mesh", "Shard",
           "Replicate", "Partial", "Placement"]
