"""cddp.distributed.checkpoint.format_utils — between a DCP checkpoint directory and one
cddp.save file: dcp_to_torch_save (the whole state dict, in one process) and
torch_save_to_dcp (a cddp.save / torch.save file into a DCP directory)."""
from ... import serialization as _ser
from .state_dict_saver import save
from . import _layout

__all__ = ["dcp_to_torch_save", "torch_save_to_dcp"]


def _nest(values, ckpt):
    """The nested state dict the checkpoint was saved from: each value put back at its path,
    an int key making a list (torch's unflatten rule)."""
    root = {}
    for name, v in values.items():
        path = ckpt.path(name)
        node = root
        for key, nxt in zip(path, path[1:]):
            fresh = [] if type(nxt) is int else {}
            if isinstance(node, list):
                node.extend([None] * (key + 1 - len(node)))
                if node[key] is None:
                    node[key] = fresh
                node = node[key]
            else:
                node = node.setdefault(key, fresh)
        if isinstance(node, list):
            node.extend([None] * (path[-1] + 1 - len(node)))
        node[path[-1]] = v
    return root


def _load_all(dcp_checkpoint_dir):
    """The checkpoint's whole state dict (lists that held tensors come back as dicts keyed
    by index, as torch's converter gives them)."""
    ckpt = _layout.open_checkpoint(dcp_checkpoint_dir)
    return _nest(ckpt.read(list(ckpt.items)), ckpt)


def dcp_to_torch_save(dcp_checkpoint_dir, torch_save_path):
    """Write the checkpoint's whole state dict to one file (cddp.save; readable by cddp.load
    and, for tensors, by safetensors)."""
    _ser.save(_load_all(dcp_checkpoint_dir), torch_save_path)


def torch_save_to_dcp(torch_save_path, dcp_checkpoint_dir):
    """Write the state dict of a cddp.save or torch.save file as a DCP checkpoint."""
    state_dict = _ser.load(torch_save_path, weights_only=True)
    save(state_dict, checkpoint_id=dcp_checkpoint_dir, no_dist=True)
