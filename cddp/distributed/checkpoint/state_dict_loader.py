"""cddp.distributed.checkpoint.load — torch.distributed.checkpoint's load, SPMD: every rank of
the group calls it with the state dict to fill, and each reads what it needs.

Contract:
- The caller's state dict says what to load: each of its leaves (fqn as in save) is looked
  up in the checkpoint; keys only the checkpoint has are ignored; a key the checkpoint lacks
  raises (torch's "Missing key in checkpoint state_dict: <fqn>.") unless the planner is
  DefaultLoadPlanner(allow_partial_load=True), which leaves it as it is.
- A tensor leaf is filled in place (copy_: the caller's tensors, parameters and optimizer
  buffers keep their identity; dtypes convert as copy_ converts) and must have the saved
  shape (torch's "Size mismatch between saved ... and current: ... for <fqn>"); any other
  leaf is replaced by the saved value. A DTensor leaf (FSDP2) takes its part of the saved
  full value, in place (_dtensor.py). Top-level Stateful values get state_dict() first and
  load_state_dict(<what was loaded>) after, as torch's.
- Reading and checking come first, on every rank (the data files are read through cddp.load:
  mapped, weights_only, checked against .metadata's dtypes and shapes); the ranks then agree,
  and only if every rank read everything does any rank write into its state dict. So a
  missing key, a torn or forged file, or a dead rank raises CheckpointException on every rank
  and leaves every state dict untouched.
- The checkpoint may come from any number of ranks (the files hold whole tensors): a job can
  resume on another world size, or in one process (no_dist=True, or no group initialized).
- A directory written by torch's DCP is read too (_torch_format.py: its pickled .metadata
  through an unpickler that knows only DCP's metadata classes; chunks assembled), so a run
  checkpointed under torch resumes under cddp.
"""
from ... import _C
from . import _layout
from ._dtensor import full_targets, scatter_loaded
from ._coordinator import Coordinator
from .default_planner import DefaultLoadPlanner, check_planner
from .filesystem import FileSystemReader, resolve
from .stateful import Stateful

__all__ = ["load", "load_state_dict"]

Tensor = _C.Tensor


def _read(targets, path, partial):
    """{fqn: saved value} for the fqns of targets ({fqn: current value}), checked."""
    import cddp
    ckpt = _layout.open_checkpoint(path)
    missing = [n for n in targets if n not in ckpt.items]
    if missing and not partial:
        more = f" ({len(missing)} keys missing in all)" if len(missing) > 1 else ""
        raise RuntimeError(f"Missing key in checkpoint state_dict: {missing[0]}.{more}")
    for n, cur in targets.items():
        it = ckpt.items.get(n)
        if it is None or not isinstance(cur, Tensor):
            continue
        if it["kind"] != "tensor":
            raise RuntimeError(f"{n!r} was saved as an object, but the state dict to load "
                               "holds a tensor there")
        if cur.is_meta:
            raise RuntimeError(f"{n!r} is a meta tensor: load into materialized tensors "
                               "(module.to_empty(device='cpu') first)")
        if list(cur.shape) != it["shape"]:
            raise RuntimeError(f"Size mismatch between saved {cddp.Size(it['shape'])} and "
                               f"current: {cur.size()} for {n}")
    return ckpt.read([n for n in targets if n in ckpt.items])


def _apply(target, values):
    import cddp

    def leaf(path, cur):
        name = _layout.fqn(path)
        if name not in values:
            return cur
        v = values[name]
        if isinstance(cur, Tensor):
            with cddp.no_grad():
                cur.copy_(v)
            return cur
        return v
    return _layout.walk(target, leaf)


def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None,
         process_group=None, no_dist=False):
    """Fill state_dict from the checkpoint in place (module docstring)."""
    reader = resolve(checkpoint_id, storage_reader, FileSystemReader, "dcp.load")
    check_planner(planner, DefaultLoadPlanner, "dcp.load")
    partial = planner is not None and planner.allow_partial_load
    coord = Coordinator(process_group, no_dist, "dcp.load")
    err, values, target, stateful, swaps = None, None, None, {}, []
    try:
        stateful = {k: v for k, v in state_dict.items() if isinstance(v, Stateful)}
        target = {k: (v.state_dict() if k in stateful else v) for k, v in state_dict.items()}
        target, swaps = full_targets(target)
        values = _read(_layout.flatten(target, "dcp.load"), reader.path, partial)
    except Exception as e:          # noqa: BLE001 (reported on every rank by agree)
        err = e
    coord.agree(err, "reading the checkpoint")
    _apply(target, values)
    scatter_loaded(target, swaps)
    for k, v in target.items():
        if k in stateful:
            stateful[k].load_state_dict(v)
        else:
            state_dict[k] = v


def load_state_dict(state_dict, storage_reader, process_group=None, coordinator_rank=0,
                    no_dist=False, planner=None):
    """Deprecated alias of load (torch's), kept for older scripts."""
    return load(state_dict, storage_reader=storage_reader, process_group=process_group,
                no_dist=no_dist, planner=planner)
