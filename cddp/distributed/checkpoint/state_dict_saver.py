"""cddp.distributed.checkpoint.save / async_save — torch.distributed.checkpoint's save, SPMD:
every rank of the group calls it with its state dict, and the ranks write one checkpoint.

Contract:
- Top-level Stateful values (state_dict + load_state_dict: modules, optimizers, the
  tutorial's AppState) are replaced by their state_dict() first; the rest is flattened
  (_layout.py: fqn = the keys' path joined by ".").
- A tensor is whole on every rank that holds it (FSDP's state dicts come out full,
  state_dict.py; DTensor leaves, FSDP2's, are gathered to their full values first, a
  collective: _dtensor.py), so ranks holding one fqn must agree on its dtype and
  shape (else ValueError on every rank, naming the ranks); it is written once, by the holder
  with the fewest bytes assigned so far (the ranks share the writing). An object (any other
  leaf) is written by the lowest rank holding it. Give rank-specific values rank-specific keys.
- Steps: plan (all_gather of each rank's fqns, dtypes, shapes), write (each rank one data
  file, atomically), commit (rank 0 writes .metadata atomically, then removes the data files
  it no longer names). Each step ends in an agreement: a failure anywhere raises
  CheckpointException on every rank, naming the rank and the error; files of a failed save
  are removed and the previous checkpoint in the directory stays whole.
- async_save copies the tensors (the staging step, on the caller's thread), then writes and
  commits on a background thread, agreeing over a private process group made once per
  group (so the training loop's collectives and the checkpoint's never interleave on one
  group); it returns a concurrent.futures.Future whose result() is the Metadata or raises.
  With a subgroup as process_group the save runs synchronously (a private group would need
  every rank to call new_group) and the returned future is already done.
"""
import concurrent.futures
import copy
import os
import secrets

from ... import _C
from ... import serialization as _ser
from .. import distributed_c10d as _c10d
from . import _layout
from ._dtensor import full_for_save
from ._coordinator import Coordinator
from .default_planner import DefaultSavePlanner, check_planner
from .filesystem import FileSystemWriter, resolve
from .metadata import Metadata
from .stateful import Stateful

__all__ = ["save", "async_save", "save_state_dict", "AsyncCheckpointerType"]

Tensor = _C.Tensor


class AsyncCheckpointerType:
    THREAD = "thread"
    PROCESS = "process"


def _stateful_to_state_dict(state_dict):
    return {k: (v.state_dict() if isinstance(v, Stateful) else v) for k, v in state_dict.items()}


def _local_plan(flat, paths, writer, coord):
    for name, v in flat.items():
        if isinstance(v, Tensor) and v.is_meta:
            raise RuntimeError(f"the tensor {name!r} is on the meta device and has no values "
                               "to save; materialize it first (module.to_empty(device='cpu'))")
    os.makedirs(writer.path, exist_ok=True)
    if coord.rank == 0 and not writer.overwrite and os.path.exists(
            os.path.join(writer.path, _layout.METADATA)):
        raise FileExistsError(f"{writer.path} already holds a checkpoint and the writer was "
                              "made with overwrite=False")
    return {name: _layout.describe(v, paths[name]) for name, v in flat.items()}


def _assign(plans):
    """{fqn: (writing rank, plan entry)}, the same on every rank (plans: one per rank)."""
    first, holders = {}, {}
    for r, plan in enumerate(plans):
        for name, d in plan.items():
            if name not in first:
                first[name], holders[name] = (r, d), [r]
                continue
            r0, d0 = first[name]
            if d[:3] != d0[:3]:
                def say(x):
                    return "an object" if x[0] == "object" else f"a {x[1]} tensor of shape {x[2]}"
                raise ValueError(
                    f"dcp.save: {name!r} is {say(d0)} on rank {r0} but {say(d)} on rank {r}. "
                    "A key saved by several ranks is one replicated value (cddp has no sharded "
                    "tensors); give rank-specific values rank-specific keys")
            holders[name].append(r)
    load = [0] * len(plans)
    out = {}
    for name, (r0, d) in first.items():
        if d[0] == "object":
            owner = r0
        else:
            owner = min(holders[name], key=lambda r: (load[r], r))
            load[owner] += d[3]
        out[name] = (owner, d)
    return out


def _write_and_commit(flat, writer, coord, plans, save_id):
    owners = _assign(plans)
    items = {}
    for name, (owner, d) in owners.items():
        items[name] = {"file": _layout.data_file(owner, save_id), "kind": d[0], "path": d[4]}
        if d[0] == "tensor":
            items[name].update(dtype=d[1], shape=d[2])
    mine = {name: (v.detach() if isinstance(v, Tensor) else v)
            for name, v in flat.items() if owners[name][0] == coord.rank}
    own_file = os.path.join(writer.path, _layout.data_file(coord.rank, save_id))
    err = None
    try:
        if mine:
            _ser.save(mine, own_file)
    except Exception as e:          # noqa: BLE001 (reported on every rank by agree)
        err = e
    try:
        coord.agree(err, "writing its data file")
        if coord.rank == 0:
            try:
                _layout.write_metadata(writer.path, save_id, coord.size, items)
            except Exception as e:  # noqa: BLE001
                err = e
        coord.agree(err, "committing .metadata")
    except BaseException:
        if mine:
            try:
                os.unlink(own_file)
            except OSError:
                pass
        raise
    if coord.rank == 0:
        try:
            _layout.remove_stale(writer.path, {it["file"] for it in items.values()})
        except OSError:
            pass                     # best effort: the next save removes them
    return Metadata.from_document({"version": _layout.VERSION, "items": items})


def _plan(state_dict, writer, coord):
    """(flat state dict, every rank's plan, the save's id); agreed by every rank."""
    err, flat, plan = None, None, None
    try:
        paths = {}
        flat = _layout.flatten(state_dict, "dcp.save", paths)
        plan = _local_plan(flat, paths, writer, coord)
    except Exception as e:          # noqa: BLE001
        err = e
    coord.agree(err, "planning")
    gathered = coord.gather([plan, secrets.token_hex(8)])
    return flat, [g[0] for g in gathered], gathered[0][1]


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None,
         process_group=None, no_dist=False, use_collectives=True):
    """Save state_dict as one checkpoint across the group's ranks (module docstring);
    returns its Metadata."""
    writer = resolve(checkpoint_id, storage_writer, FileSystemWriter, "dcp.save")
    check_planner(planner, DefaultSavePlanner, "dcp.save")
    coord = Coordinator(process_group, no_dist, "dcp.save")
    flat, plans, save_id = _plan(full_for_save(_stateful_to_state_dict(state_dict)), writer,
                                 coord)
    return _write_and_commit(flat, writer, coord, plans, save_id)


def save_state_dict(state_dict, storage_writer, process_group=None, coordinator_rank=0,
                    no_dist=False, planner=None):
    """Deprecated alias of save (torch's), kept for older scripts."""
    return save(state_dict, storage_writer=storage_writer, process_group=process_group,
                no_dist=no_dist, planner=planner)


_private_groups = {}


def _private_group(coord):
    """A process group over the same ranks as coord's, made once (every rank of the world
    calls new_group in the same order, as async_save is called); None when coord's group is
    a subgroup."""
    if coord.group is None:
        return None
    world = _c10d.group.WORLD
    if coord.group is not world:
        return None
    made = _private_groups.get("world")
    if made is None or made[0] is not world:     # first call, or a new world since
        made = _private_groups["world"] = (world, _c10d.new_group())
    return made[1]


def _stage(state_dict):
    """A copy of the state dict holding the values of this moment (walk updates containers
    in place, so they are copied first; tensors are cloned, other leaves deep-copied)."""
    def leaf(path, v):
        return v.detach().clone() if isinstance(v, Tensor) else copy.deepcopy(v)
    return _layout.walk(_layout.copy_containers(state_dict), leaf)


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None,
               process_group=None, async_checkpointer_type=None, async_stager=None,
               no_dist=False, use_collectives=True):
    """save() in the background (module docstring); returns a concurrent.futures.Future."""
    writer = resolve(checkpoint_id, storage_writer, FileSystemWriter, "dcp.async_save")
    check_planner(planner, DefaultSavePlanner, "dcp.async_save")
    coord = Coordinator(process_group, no_dist, "dcp.async_save")
    flat, plans, save_id = _plan(_stage(full_for_save(_stateful_to_state_dict(state_dict))),
                                 writer, coord)
    future = concurrent.futures.Future()
    background = coord
    if coord.group is not None:
        private = _private_group(coord)
        if private is None:          # a subgroup: finish here
            try:
                future.set_result(_write_and_commit(flat, writer, coord, plans, save_id))
            except BaseException as e:  # noqa: BLE001 (delivered through the future)
                future.set_exception(e)
            return future
        background = Coordinator(private, False, "dcp.async_save")

    def run():
        try:
            future.set_result(_write_and_commit(flat, writer, background, plans, save_id))
        except BaseException as e:   # noqa: BLE001
            future.set_exception(e)
    executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cddp-dcp-save")
    executor.submit(run)
    executor.shutdown(wait=False)
    return future
