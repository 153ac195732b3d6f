"""cddp.distributed.fsdp._process_groups — which groups an FSDP unit shards over and which
it replicates over, per sharding strategy.

Contract:
- FULL_SHARD / SHARD_GRAD_OP: shard over `process_group` (default: the world), no replica
  group.
- NO_SHARD: no sharding (a group of one), replicate over `process_group`: gradients are
  all-reduced there.
- HYBRID_SHARD / _HYBRID_SHARD_ZERO2: `process_group` is None or a tuple (intra_node,
  inter_node), as torch; None builds them from LOCAL_WORLD_SIZE (consecutive ranks form a
  node, as the launchers number them), once per process and shared by every unit, because
  new_group is collective and units are created in the same order on every rank.

- device_mesh instead of process_group (mesh_groups): a 1-D mesh's group; for the hybrid
  strategies a 2-D mesh whose dimension 1 shards (intra_node) and dimension 0 replicates.

Differences from torch: the default hybrid groups come from LOCAL_WORLD_SIZE rather than from
the accelerator count.
"""
import os

from .. import distributed_c10d as _c10d
from .api import ShardingStrategy

HYBRID = (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)

_hybrid_cache = {}


class GroupPlan:
    """shard: the group the flat parameter is split over (None: not split);
    replicate: the group the (sharded) gradient is all-reduced over afterwards (None: none);
    dp_world: ranks that hold a replica of the model's data, the divisor of the mean."""

    def __init__(self, shard, replicate):
        self.shard = shard
        self.replicate = replicate
        self.shard_size = _c10d.get_world_size(shard) if shard is not None else 1
        self.shard_rank = _c10d.get_rank(shard) if shard is not None else 0
        self.replicate_size = _c10d.get_world_size(replicate) if replicate is not None else 1
        self.dp_world = self.shard_size * self.replicate_size

    def broadcast_groups(self):
        """Groups to broadcast over, in order, so that global rank 0's values reach every
        rank: across the replicas first (rank 0 reaches its peers on other nodes), then
        within each shard group (each node's first rank passes them on)."""
        return [g for g in (self.replicate, self.shard) if g is not None]


def _resolve(group):
    pg = _c10d._resolve(group, "FullyShardedDataParallel")
    if pg is None:
        raise RuntimeError("FullyShardedDataParallel: this rank is not a member of the "
                           "process group it was given")
    return pg


def _default_hybrid_groups():
    world = _c10d.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
    if local <= 0 or world % local:
        raise ValueError(f"HYBRID_SHARD needs the world size ({world}) to be a multiple of "
                         f"LOCAL_WORLD_SIZE ({local}); pass process_group=(intra_node, "
                         "inter_node) instead")
    key = (id(_c10d._default()), world, local)
    if key not in _hybrid_cache:
        rank = _c10d.get_rank()
        intra = inter = None
        for node in range(world // local):            # every rank creates every group
            g = _c10d.new_group(list(range(node * local, (node + 1) * local)))
            if rank // local == node:
                intra = g
        for i in range(local):
            g = _c10d.new_group(list(range(i, world, local)))
            if rank % local == i:
                inter = g
        _hybrid_cache[key] = (intra, inter)
    return _hybrid_cache[key]


def mesh_groups(device_mesh, process_group, strategy):
    """The process_group argument a DeviceMesh stands for, as torch's FSDP reads it."""
    if process_group is not None:
        raise ValueError("Cannot pass both process_group and device_mesh at the same time. "
                         "Please just pass only one of them.")
    if strategy in HYBRID:
        if device_mesh.ndim != 2:
            raise ValueError(f"Expected device_mesh to have ndim=2 but got {device_mesh.ndim}")
        return device_mesh.get_group(mesh_dim=1), device_mesh.get_group(mesh_dim=0)
    return device_mesh.get_group()


def plan_groups(process_group, strategy):
    """GroupPlan for `strategy` and the constructor's `process_group` argument."""
    _c10d._default()                    # torch's error when init_process_group was not called
    if strategy in HYBRID:
        if process_group is None:
            intra, inter = _default_hybrid_groups()
        elif isinstance(process_group, (tuple, list)) and len(process_group) == 2:
            intra, inter = process_group
        else:
            raise ValueError(f"{strategy} expects process_group=None or a tuple "
                             f"(intra_node_group, inter_node_group), got {process_group!r}")
        return GroupPlan(_resolve(intra), _resolve(inter))
    if isinstance(process_group, (tuple, list)):
        raise ValueError(f"a (intra_node, inter_node) process_group tuple needs a hybrid "
                         f"sharding strategy, not {strategy}")
    pg = _resolve(process_group)
    if strategy is ShardingStrategy.NO_SHARD:
        return GroupPlan(None, pg)
    return GroupPlan(pg, None)
