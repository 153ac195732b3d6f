"""cddp.distributed.checkpoint.optimizer — load_sharded_optimizer_state_dict: the optimizer
state a checkpoint holds under optimizer_key, read without a target state dict (a fresh
optimizer has no state to load into), for FSDP.optim_state_dict_to_load. Returns
{optimizer_key: the optimizer state dict}. Every rank of the default group calls it; a rank
that cannot read raises CheckpointException on all of them."""
from ._coordinator import Coordinator
from ._layout import open_checkpoint
from .filesystem import FileSystemReader, resolve
from .format_utils import _nest

__all__ = ["load_sharded_optimizer_state_dict"]


def load_sharded_optimizer_state_dict(model_state_dict, optimizer_key, storage_reader,
                                      planner=None):
    reader = resolve(None, storage_reader, FileSystemReader,
                     "load_sharded_optimizer_state_dict")
    coord = Coordinator(None, False, "load_sharded_optimizer_state_dict")
    err, out = None, None
    try:
        ckpt = open_checkpoint(reader.path)
        names = [n for n in ckpt.items if ckpt.path(n)[0] == optimizer_key]
        if not names:
            raise RuntimeError(f"the checkpoint holds nothing under {optimizer_key!r}")
        out = _nest(ckpt.read(names), ckpt)
    except Exception as e:          # noqa: BLE001 (reported on every rank by agree)
        err = e
    coord.agree(err, f"reading {optimizer_key!r}")
    return out
