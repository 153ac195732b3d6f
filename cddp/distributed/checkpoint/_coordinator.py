"""cddp.distributed.checkpoint._coordinator — the ranks' agreement steps of save and load.

A Coordinator runs over a process group (or alone: no_dist, or no group initialized). Each
step is one all_gather_object of JSON-able values, so it is bounded by the group's timeout
like every collective, and a rank that died makes the others raise rather than wait.
`agree` turns local failures into one CheckpointException raised on every rank, naming each
rank that failed and why."""
from .. import distributed_c10d as _c10d
from .api import CheckpointException


class Coordinator:
    def __init__(self, process_group, no_dist, what):
        self.what = what
        self.group = None
        if not no_dist and _c10d.is_initialized():
            self.group = process_group if process_group is not None else _c10d.group.WORLD
        if self.group is not None:
            self.rank = _c10d.get_rank(self.group)
            self.size = _c10d.get_world_size(self.group)
        else:
            self.rank, self.size = 0, 1

    def gather(self, value):
        """[value of rank 0, value of rank 1, ...] on every rank."""
        if self.group is None:
            return [value]
        out = [None] * self.size
        _c10d.all_gather_object(out, value, group=self.group)
        return out

    def agree(self, error, step):
        """Raise CheckpointException on every rank if any rank's step failed (error: the
        exception this rank hit, or None)."""
        errors = self.gather(None if error is None else [type(error).__name__, str(error)])
        failed = {r: e for r, e in enumerate(errors) if e is not None}
        if not failed:
            return
        failures = {r: (error if r == self.rank else _remote(*e)) for r, e in failed.items()}
        first = min(failed)
        raise CheckpointException(
            f"{self.what} failed while {step} on rank{'s' if len(failed) > 1 else ''} "
            f"{', '.join(map(str, sorted(failed)))}: {failed[first][0]}: {failed[first][1]}",
            failures) from error


def _remote(name, message):
    """Another rank's exception from its type name and message: the built-in type itself when
    it is one (so the report reads "rank 1: KeyError: ..."), else a RuntimeError naming it."""
    import builtins
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001  (a built-in that wants other arguments)
            pass
    return RuntimeError(f"{name}: {message}")
