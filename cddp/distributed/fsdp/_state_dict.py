"""cddp.distributed.fsdp._state_dict — FULL_STATE_DICT save and load for FSDP units.

Contract (torch's FULL_STATE_DICT):
- save: every rank gathers each unit's full parameters (collective); the result has the
  unwrapped model's keys, in its order ("_fsdp_wrapped_module." never appears, no
  "_flat_param"), parameters as fresh full-precision tensors, persistent buffers (in their
  original dtype when MixedPrecision.buffer_dtype cast them) and _extra_state, plus the
  _metadata versions under the same clean names. FullStateDictConfig(rank0_only=True):
  ranks other than 0 still take part and get an empty dict. Works when the root is a plain
  module holding FSDP children too (Module.state_dict calls each child's state_dict).
- load: by pre/post load hooks on every unit, so Module.load_state_dict works on an FSDP
  root and on a plain root holding FSDP children. The pre-hook gathers the unit's full
  parameters as nn.Parameters (so strict=False keeps what a partial dict lacks) and adds
  "_fsdp_wrapped_module." to the keys (and _metadata entries) under its prefix; Module's
  loader then copies values in as for any module; the post-hook copies this rank's slice
  into the shard and takes "_fsdp_wrapped_module." out of the missing/unexpected key lists,
  so strict errors name keys as the caller wrote them. Every rank passes the full dict.

Differences from torch: SHARDED_STATE_DICT gives and takes the same full state dict (no
ShardedTensor/DTensor in cddp: every rank holds the whole model's tensors for the moment, and
torch.distributed.checkpoint writes each once); LOCAL_STATE_DICT raises NotImplementedError;
offload_to_cpu has no effect (tensors are on the CPU).
"""
from collections import OrderedDict

from ...nn.modules.module import Module
from .. import distributed_c10d as _c10d
from ._unshard import full_precision_buffers, unshard_units
from .api import StateDictType

WRAPPED = "_fsdp_wrapped_module"
_W = WRAPPED + "."


def clean_key(key):
    return key.replace(_W, "")


def clean_module_path(path):
    """A _metadata key (a module path without the trailing dot), cleaned."""
    return clean_key(path + ".")[:-1]


def _check_full(unit, what):
    """FULL_STATE_DICT, and SHARDED_STATE_DICT served as full (cddp has no ShardedTensor /
    DTensor: the sharded type's consumer, torch.distributed.checkpoint, takes full tensors
    held by every rank and writes each once); LOCAL_STATE_DICT is refused."""
    t = unit._state_dict_type
    if t is StateDictType.LOCAL_STATE_DICT:
        raise NotImplementedError(f"FSDP {what} with {t}: cddp supports FULL_STATE_DICT and "
                                  "SHARDED_STATE_DICT (given as full tensors); the local type "
                                  "needs ShardedTensor/DTensor, which cddp does not have")


def _rank0_skip(unit):
    cfg = unit._state_dict_config
    return bool(getattr(cfg, "rank0_only", False)) and _c10d.get_rank() != 0


def full_state_dict(unit, destination, prefix, keep_vars):
    """FSDP.state_dict's body (see the module docstring)."""
    _check_full(unit, "state_dict")
    local = OrderedDict()
    local._metadata = OrderedDict()
    with unshard_units([unit], writeback=False), full_precision_buffers(unit):
        views = set()
        if unit._handle is not None:
            for info in unit._handle.infos:
                module, name, _ = info.places[0]
                views.add(id(module._parameters[name]))
        # keep_vars=True: values arrive as the objects, so this unit's views are recognised
        Module.state_dict(unit, destination=local, prefix=prefix, keep_vars=True)
        out = OrderedDict()
        for k, v in local.items():
            if id(v) in views:
                v = v.detach().clone()
            elif not keep_vars and hasattr(v, "detach"):
                v = v.detach()
            out[clean_key(k)] = v
    top = destination is None
    if top:
        destination = OrderedDict()
        destination._metadata = OrderedDict()
    if _rank0_skip(unit):
        return destination
    destination.update(out)
    meta = getattr(destination, "_metadata", None)
    if meta is not None:
        for k, v in local._metadata.items():
            meta[clean_module_path(k)] = v
    return destination


def load_pre_hook(unit, state_dict, prefix, local_metadata, strict, missing_keys,
                  unexpected_keys, error_msgs):
    _check_full(unit, "load_state_dict")
    h = unit._handle
    if h is not None and not h.unflattened:
        h.unflatten_as_params()
        unit._loading = True
    inner = prefix + _W
    for k in [k for k in state_dict if k.startswith(prefix) and not k.startswith(inner)]:
        state_dict[inner + k[len(prefix):]] = state_dict.pop(k)
    meta = getattr(state_dict, "_metadata", None)
    if meta is not None:
        own = prefix[:-1]
        for k in list(meta):
            if k == inner[:-1] or k.startswith(inner):
                continue
            if k == own:
                meta.setdefault(inner[:-1], meta[k])
            elif k.startswith(prefix):
                meta[inner + k[len(prefix):]] = meta.pop(k)


def load_post_hook(unit, incompatible_keys):
    if unit._loading:
        unit._loading = False
        unit._handle.reflatten(writeback=True)
    incompatible_keys.missing_keys[:] = [clean_key(k) for k in incompatible_keys.missing_keys]
    incompatible_keys.unexpected_keys[:] = [clean_key(k)
                                            for k in incompatible_keys.unexpected_keys]
