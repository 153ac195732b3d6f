"""cddp.distributed.optim.ZeroRedundancyOptimizer — torch.distributed.optim's
ZeroRedundancyOptimizer: ZeRO stage 1, the optimizer state sharded across the ranks of a
data-parallel group.

Contract (torch 2.x's):
- Every rank passes the same parameters in the same groups. Within each group, taken in group
  order, the parameters are sorted by numel (largest first, ties in their given order) and
  each goes to the rank with the smallest running total of numels so far, counted across all
  groups (ties: the lowest rank). Frozen parameters are partitioned too, as torch does.
- Each rank builds `optimizer_class` over its own shard only (`self.optim`: one group per
  global group, same hyperparameters), so a parameter's optimizer state lives on one rank.
- step(closure=None) copies the hyperparameters of `param_groups` (what LR schedulers write)
  into the local groups, steps the shard, copies the local groups back, then broadcasts every
  parameter from its owner so all replicas end identical; it returns the closure's loss.
  Every rank must call it (it is collective), as must add_param_group, which re-partitions
  (earlier groups keep their owners, so the local optimizer only gains a group).
- zero_grad(set_to_none=True) acts on all parameters.
- consolidate_state_dict(to=0) (collective) gathers the shards' state to rank `to`; there,
  state_dict() returns what a plain `optimizer_class` over all parameters would: state keyed
  by global parameter index, param_groups holding global indices. Elsewhere, or before
  consolidating, state_dict() raises RuntimeError. load_state_dict(full_state_dict), given
  the full dict on every rank, keeps this rank's shard of the state and the hyperparameters.

Differences from torch:
- overlap_with_ddp=True raises NotImplementedError: it needs a DDP communication hook that
  steps each shard as its gradient bucket finishes reducing.
- parameters_as_bucket_view=True sends one flat broadcast per (owner rank, dtype, device) of
  the trainable parameters and copies the values back out, instead of turning parameters into
  views of persistent buckets: parameters keep their storage, which DDP's reducer holds on to.
- `defaults` is the local optimizer's full defaults (torch keeps only the keyword arguments),
  so OneCycleLR's momentum cycling finds "betas"/"momentum" without repeating them.
- Parameters of different dtypes are accepted (torch requires one dense type): broadcasts are
  per parameter or per dtype anyway.
- consolidate_state_dict moves each shard as cddp.save bytes through gather_object (torch
  broadcasts torch.save bytes from every rank in turn); the result is the same.
- load_state_dict leaves its argument untouched (torch overwrites other ranks' entries with
  None) and keeps no second copy of the shard's state in `self.state`.
- No Join support (join_hook, join_device): cddp has no generic Join context manager.
"""
import io
import itertools

from ... import _C
from ...autograd.grad_mode import no_grad
from ...optim.optimizer import Optimizer
from .. import distributed_c10d as _c10d

__all__ = ["ZeroRedundancyOptimizer"]

_NOT_CONSOLIDATED = ("Optimizer state has not been consolidated on this rank. Please call "
                     "`consolidate_state_dict(to={rank})` on all ranks beforehand if you meant "
                     "to save the global state.")


def _partition(group_sizes, world_size):
    """Torch's greedy ZeRO partition over numels: `group_sizes[g][i]` is the numel of
    parameter i of group g; returns owned[rank][g], the positions in group g that rank owns,
    largest first. The running totals carry across groups, so appending a group never moves
    the parameters of earlier ones."""
    totals = [0] * world_size
    owned = [[] for _ in range(world_size)]
    for sizes in group_sizes:
        picks = [[] for _ in range(world_size)]
        for i in sorted(range(len(sizes)), key=sizes.__getitem__, reverse=True):  # stable
            rank = min(range(world_size), key=totals.__getitem__)      # first minimum
            picks[rank].append(i)
            totals[rank] += sizes[i]
        for rank in range(world_size):
            owned[rank].append(picks[rank])
    return owned


def _check_params(params):
    """torch's checks: an iterable (not a tensor) of tensors or of group dicts, not empty.
    Returns it as a list, so a generator is read once."""
    if isinstance(params, _C.Tensor):
        raise TypeError("`params` argument should be an iterable of Tensors, but got "
                        + type(params).__name__)
    try:
        params = list(params)
    except TypeError:
        raise TypeError("`params` argument should be an iterable of Tensors or dicts, but got "
                        + type(params).__name__) from None
    if not params:
        raise ValueError("ZeroRedundancyOptimizer got an empty parameter list")
    if all(isinstance(p, _C.Tensor) for p in params):
        return params
    if not all(isinstance(p, dict) for p in params):
        raise TypeError("`params` argument should be an iterable of Tensors or dicts")
    for group in params:
        if "params" not in group:
            raise ValueError("Each parameter group passed-in via `params` must have a 'params' "
                             "key mapping to the parameters in the group")
    return params


def _copy_hyperparameters(src_groups, dst_groups):
    """Every option but "params", group by group: the global groups are what users and LR
    schedulers edit, the local ones what the shard's optimizer reads."""
    if len(src_groups) != len(dst_groups):
        raise RuntimeError(f"ZeroRedundancyOptimizer: {len(src_groups)} parameter groups where "
                           f"{len(dst_groups)} were expected; add groups with add_param_group() "
                           "on every rank, not by editing param_groups")
    for src, dst in zip(src_groups, dst_groups):
        for key, value in src.items():
            if key != "params":
                dst[key] = value


class ZeroRedundancyOptimizer(Optimizer):
    """Wraps `optimizer_class` so each rank of `process_group` holds the state of its own
    shard of the parameters (see the module docstring)."""

    def __init__(self, params, optimizer_class, process_group=None,
                 parameters_as_bucket_view=False, overlap_with_ddp=False, **defaults):
        params = _check_params(params)
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, Optimizer)):
            raise TypeError("ZeroRedundancyOptimizer expects optimizer_class to be a subclass of "
                            f"cddp.optim.Optimizer (e.g. cddp.optim.Adam), got {optimizer_class!r}")
        if overlap_with_ddp:
            raise NotImplementedError(
                "ZeroRedundancyOptimizer(overlap_with_ddp=True) is not supported by cddp: it "
                "needs a DDP communication hook that runs each shard's step as its gradient "
                "bucket finishes; use overlap_with_ddp=False and call step() after backward()")
        self._initialized = False
        super().__init__(params, defaults)       # add_param_group for each group, unsharded
        world_size = _c10d.get_world_size(process_group)   # the not-initialized error, as torch
        rank = _c10d.get_rank(process_group)
        if rank < 0:
            raise ValueError("ZeroRedundancyOptimizer: this rank is not a member of "
                             "process_group; construct it only on the group's ranks")
        self.process_group = process_group if process_group is not None else _c10d.group.WORLD
        self.world_size = world_size
        self.rank = rank
        self._global_ranks = [_c10d.get_global_rank(self.process_group, r)
                              for r in range(world_size)]
        self.global_rank = self._global_ranks[rank]
        self.parameters_as_bucket_view = bool(parameters_as_bucket_view)
        self._join_config = _join()._JoinConfig.construct_disabled_join_config()
        self._shards = self._partition_params()
        self.optim = optimizer_class([self._local_group(g, ps) for g, ps in
                                      zip(self.param_groups, self._shards[rank])], **defaults)
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)
        self.defaults = dict(self.optim.defaults)
        self._all_state_dicts = []
        self._initialized = True

    @staticmethod
    def _local_group(group, params):
        local = {k: v for k, v in group.items() if k != "params"}
        local["params"] = list(params)
        return local

    def _partition_params(self):
        """shards[rank][g]: the parameters of group g that rank steps."""
        owned = _partition([[p.numel() for p in g["params"]] for g in self.param_groups],
                           self.world_size)
        return [[[g["params"][i] for i in picks] for g, picks in zip(self.param_groups, rank_picks)]
                for rank_picks in owned]

    def _partition_parameters(self):
        """torch's view of the partition: per rank, its param groups (options and owned params)."""
        return [[self._local_group(g, ps) for g, ps in zip(self.param_groups, shard)]
                for shard in self._shards]

    def add_param_group(self, param_group):
        """Add a group on every rank (collective in effect: all ranks must agree on it); its
        parameters are partitioned after the existing ones, which keep their owners."""
        super().add_param_group(param_group)
        if not self._initialized:
            return
        group = self.param_groups[-1]
        self._shards = self._partition_params()
        self.optim.add_param_group(self._local_group(group, self._shards[self.rank][-1]))
        _copy_hyperparameters(self.optim.param_groups[-1:], self.param_groups[-1:])

    # ---- stepping ------------------------------------------------------------------------

    def step(self, closure=None, **kwargs):
        """Step this rank's shard, then broadcast every parameter from its owner. Extra keyword
        arguments go to the local optimizer's step, as torch."""
        _join().Join.notify_join_context(self)
        for hook in list(self._step_pre_hooks.values()):
            if hook(self, (), {}) is not None:
                raise RuntimeError("optimizer step pre-hooks must return None")
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        loss = self.optim.step(closure, **kwargs)
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)
        self._sync_params()
        for hook in list(self._step_post_hooks.values()):
            hook(self, (), {})
        return loss

    # ---- Joinable (cddp.distributed.algorithms.join): a joined rank keeps stepping its shard
    # on the gradients DDP's join hook averaged, and keeps broadcasting it

    def join_hook(self, **kwargs):
        return _ZeROJoinHook(self)

    @property
    def join_device(self):
        from ..._device import device
        return device("cpu")

    @property
    def join_process_group(self):
        return self.process_group

    def _sync_params(self):
        """All broadcasts are issued before any is waited on, so they pipeline."""
        if self.world_size == 1:
            return
        works, received = [], []
        for rank, shard in enumerate(self._shards):
            src = self._global_ranks[rank]
            params = list(itertools.chain.from_iterable(shard))
            if not self.parameters_as_bucket_view:
                works.extend(_c10d.broadcast(p.detach(), src=src, group=self.process_group,
                                             async_op=True) for p in params)
                continue
            kinds = {}
            for p in params:
                if p.requires_grad:         # as torch's buckets: frozen parameters stay put
                    kinds.setdefault((str(p.dtype), str(p.device)), []).append(p)
            for same in kinds.values():
                if rank == self.rank:
                    flat = _C.cat([p.detach().reshape(-1) for p in same])
                else:
                    flat = _C.empty(sum(p.numel() for p in same), dtype=same[0].dtype,
                                    device=same[0].device)
                    received.append((flat, same))
                works.append(_c10d.broadcast(flat, src=src, group=self.process_group,
                                             async_op=True))
        for work in works:
            work.wait()
        with no_grad():
            for flat, same in received:
                offset = 0
                for p in same:
                    n = p.numel()
                    p.copy_(flat[offset:offset + n].view(tuple(p.shape)))
                    offset += n

    # ---- checkpoints ---------------------------------------------------------------------

    def consolidate_state_dict(self, to=0):
        """Gather every shard's state dict to group rank `to` (call it on all ranks); other
        ranks drop any state they consolidated before."""
        from ...serialization import load, save
        if not isinstance(to, int) or not 0 <= to < self.world_size:
            raise ValueError(f"consolidate_state_dict: to must be a rank of the process group "
                             f"(0 to {self.world_size - 1}), got {to!r}")
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        buf = io.BytesIO()
        save(self.optim.state_dict(), buf)       # bytes: a snapshot, and what gather_object sends
        blob = buf.getvalue()
        self._all_state_dicts = []
        if self.world_size == 1:
            self._all_state_dicts = [load(io.BytesIO(blob))]
            return
        gathered = [None] * self.world_size if self.rank == to else None
        _c10d.gather_object(blob, gathered, dst=self._global_ranks[to], group=self.process_group)
        if self.rank == to:
            self._all_state_dicts = [load(io.BytesIO(b)) for b in gathered]

    def state_dict(self):
        """The global state consolidated on this rank by the last consolidate_state_dict()
        (stale if steps followed it), in a plain optimizer's layout."""
        if not self._all_state_dicts:
            raise RuntimeError(_NOT_CONSOLIDATED.format(rank=self.rank))
        index = {id(p): i for i, p in enumerate(
            itertools.chain.from_iterable(g["params"] for g in self.param_groups))}
        state = {}
        for rank, local in enumerate(self._all_state_dicts):
            groups = local["param_groups"]
            if len(groups) != len(self._shards[rank]) or any(
                    len(g["params"]) != len(ps) for g, ps in zip(groups, self._shards[rank])):
                raise RuntimeError("ZeroRedundancyOptimizer: the consolidated state predates "
                                   "add_param_group(); call consolidate_state_dict() again")
            for g, params in zip(groups, self._shards[rank]):
                for local_index, p in zip(g["params"], params):
                    if local_index in local["state"]:
                        state[index[id(p)]] = local["state"][local_index]
        packed = super().state_dict()            # global groups with global indices
        packed["state"] = dict(sorted(state.items()))
        return packed

    def load_state_dict(self, state_dict):
        """Load a full (consolidated) state dict, given on every rank: this rank's local
        optimizer takes its shard's state; all groups take the saved hyperparameters."""
        saved_groups = state_dict["param_groups"]
        # checks the group structure (torch's ValueErrors) and installs the hyperparameters
        super().load_state_dict({"state": {}, "param_groups": saved_groups})
        saved_index = {id(p): s for s, p in zip(
            itertools.chain.from_iterable(g["params"] for g in saved_groups),
            itertools.chain.from_iterable(g["params"] for g in self.param_groups))}
        saved_state = {(int(k) if isinstance(k, str) else k): v
                       for k, v in state_dict["state"].items()}
        local_groups, local_state, n = [], {}, 0
        for group, params in zip(self.param_groups, self._shards[self.rank]):
            for p in params:
                s = saved_index[id(p)]
                if s in saved_state:
                    local_state[n] = saved_state[s]
                n += 1
            local = self._local_group(group, ())
            local["params"] = list(range(n - len(params), n))
            local_groups.append(local)
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})


def _join():
    from ..algorithms import join
    return join


class _ZeROJoinHook:
    """ZeRO's part in Join: each iteration the others still run, one step (this rank's shard
    on the averaged gradients, then the owners' broadcasts)."""

    def __init__(self, zero):
        self.zero = zero

    def main_hook(self):
        self.zero.step()

    def post_hook(self, is_last_joiner):
        pass
