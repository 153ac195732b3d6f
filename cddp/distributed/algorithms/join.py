"""cddp.distributed.algorithms.join — torch's generic join context for uneven inputs.

    with Join([ddp_model, zero_optimizer]):
        for batch in this_ranks_batches:        # ranks may have different counts
            ...

Protocol (torch's): every iteration, the first joinable calls Join.notify_join_context(self),
which all-reduces a 1 over the joinables' process group: the number of ranks still in their
loop. A rank whose loop ended enters __exit__ and, until that count reaches 0, all-reduces a 0
in its place and runs every joinable's JoinHook.main_hook(), which shadows the collectives one
iteration of the active ranks makes (DDP: the buffer broadcast and its reducer run on zero
gradients, which leaves the averaged gradients in .grad; ZeroRedundancyOptimizer: a step of
its shard on them and the owners' broadcasts — torch's joined rank discards the averages and
steps its shard on stale gradients, so cddp's ZeRO-under-Join result differs from torch's and
equals plain training under Join). When all ranks have left their loops, each runs post_hook(is_last_joiner) (DDP: every
rank takes the model of the rank that ran the most iterations). throw_on_early_termination:
the first rank to run out tells the others through a second all-reduce per iteration, and
every rank raises RuntimeError instead of shadowing. An exception inside the block skips the
join (torch's rule): the other ranks then fail on their next collective, naming this rank.

A joinable has join_hook(**kwargs) -> JoinHook, join_device, join_process_group, and a
_join_config the context sets (Joinable's constructor sets a disabled one).
"""
from dataclasses import dataclass

from ... import _C
from .. import distributed_c10d as dist

__all__ = ["JoinHook", "Joinable", "Join"]


class JoinHook:
    """What a joined rank runs for one joinable: main_hook once per iteration the others still
    run, post_hook(is_last_joiner) once all ranks have joined."""

    def main_hook(self):
        pass

    active_ranks = None     # set by Join before each main_hook: ranks still in their loop

    def post_hook(self, is_last_joiner):
        pass


@dataclass
class _JoinConfig:
    enable: bool
    throw_on_early_termination: bool
    is_first_joinable: bool

    @staticmethod
    def construct_disabled_join_config():
        return _JoinConfig(False, False, False)


class Joinable:
    """Base of objects that take part in Join (torch's abstract class; subclasses define
    join_hook, join_device and join_process_group)."""

    def __init__(self):
        super().__init__()
        self._join_config = _JoinConfig.construct_disabled_join_config()

    def join_hook(self, **kwargs):
        raise NotImplementedError

    @property
    def join_device(self):
        raise NotImplementedError

    @property
    def join_process_group(self):
        raise NotImplementedError


def _count(value, group):
    t = _C.tensor([value], dtype=_C.int64)
    dist.all_reduce(t, group=group)
    return int(t.item())


class Join:
    def __init__(self, joinables, enable=True, throw_on_early_termination=False, **kwargs):
        if len(joinables) == 0:
            raise ValueError("The join context manager requires at least one joinable")
        self._joinables = list(joinables)
        self._join_hooks = [j.join_hook(**kwargs) for j in self._joinables]
        self._enable = enable
        self._throw_on_early_termination = throw_on_early_termination
        for i, j in enumerate(self._joinables):
            j._join_config = _JoinConfig(enable, throw_on_early_termination, i == 0)
        groups = {id(j.join_process_group) for j in self._joinables}
        if len(groups) > 1:
            raise ValueError("Using join context manager with multiple process groups")
        self._process_group = self._joinables[0].join_process_group
        self._rank = dist.get_rank(self._process_group)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if not self._enable or exc_type is not None:
                return
            is_last_joiner = True
            while (active := _count(0, self._process_group)) > 0:
                if self._throw_on_early_termination:
                    _count(1, self._process_group)      # the others' should-throw check
                    raise RuntimeError(f"Rank {self._rank} exhausted all inputs.")
                is_last_joiner = False
                for hook in self._join_hooks:
                    hook.active_ranks = active
                    hook.main_hook()
            for hook in self._join_hooks:
                hook.post_hook(is_last_joiner)
        finally:
            for j in self._joinables:
                j._join_config = _JoinConfig.construct_disabled_join_config()

    @staticmethod
    def notify_join_context(joinable):
        """Called by a joinable once per iteration: the first joinable counts this rank as
        still running (and, with throw_on_early_termination, raises on every rank once one
        has run out). Returns the completed Work of that all-reduce (its result(): the number of
        ranks still in their loop), or None for the other joinables, as torch does."""
        config = getattr(joinable, "_join_config", None)
        if config is None or not (config.enable and config.is_first_joinable):
            return None
        group = joinable.join_process_group
        work = dist.all_reduce(_C.ones(1, dtype=_C.int64), group=group, async_op=True)
        work.wait()
        if config.throw_on_early_termination and _count(0, group) > 0:
            raise RuntimeError("Detected at least one rank that exhausted inputs. Throwing "
                               "across all ranks.")
        return work
