"""cddp.distributed.checkpoint.state_dict — torch's get_/set_ state dict helpers: one state-dict
form for a model whatever wraps it (plain, DDP, DataParallel, FSDP), with optimizer state keyed
by parameter names (fqns) instead of positions, so a checkpoint survives re-wrapping,
re-grouping and another world size.

Contract:
- Model state dicts carry the unwrapped model's keys: DDP's / DataParallel's "module." and
  FSDP's "_fsdp_wrapped_module." never appear. FullyShardedDataParallel units give their
  FULL state dict (every rank takes part in the gathers and gets the whole dict: FSDP1's
  state dicts are never sharded here, so full_state_dict=False gives the same full dict as
  True; memory: one model copy per rank).
- Optimizer state dicts: {"state": {fqn: {name: value}}, "param_groups": [{..., "params":
  [fqn, ...]}]}, several optimizers merged (their groups concatenated). An optimizer without
  state is stepped once with zero gradients and lr 0 first (torch's rule), so its state
  exists to be saved and loaded into; its parameters do not move. flatten_optimizer_state_dict
  gives torch's flat form ("state.<fqn>.<name>", "param_groups.<fqn>.<key>"); set_ takes either.
- Options (StateDictOptions): ignore_frozen_params drops parameters with requires_grad False
  from the model dict; cpu_offload copies tensors to the CPU; submodules /
  keep_submodule_prefixes keep only those submodules' entries; strict goes to
  load_state_dict; broadcast_from_rank0 (set_*, with full_state_dict): only rank 0 passes the
  dicts, the others pass {} and receive rank 0's values through broadcasts.
- DTensor parameters (FSDP2, cddp.distributed.fsdp.fully_shard): without full_state_dict the
  model dict holds DTensors and the optimizer state of such a parameter is DTensors with the
  parameter's layout (this rank's part, as torch); with full_state_dict both are gathered
  into full plain tensors (collective). set_* take either form (DTensors, or full tensors of
  which each rank keeps its part).
- full_state_dict with cpu_offload: ranks other than 0 get {} (torch's rule, to spare host
  memory); every rank still takes part in the gathers.
"""
from dataclasses import dataclass

from ... import _C
from .. import distributed_c10d as _c10d

__all__ = ["StateDictOptions", "get_state_dict", "get_model_state_dict",
           "get_optimizer_state_dict", "set_state_dict", "set_model_state_dict",
           "set_optimizer_state_dict"]

Tensor = _C.Tensor
_FSDP_PREFIX = "_fsdp_wrapped_module."


@dataclass
class StateDictOptions:
    full_state_dict: bool = False
    cpu_offload: bool = False
    ignore_frozen_params: bool = False
    keep_submodule_prefixes: bool = True
    strict: bool = True
    broadcast_from_rank0: bool = False
    flatten_optimizer_state_dict: bool = False
    dsd_fqn_modifiers: str = "_fqn_modifiers"


def _fsdp_class():
    from ..fsdp import FullyShardedDataParallel
    return FullyShardedDataParallel


def _unwrap(model):
    """The module under DDP / DataParallel wrappers (their state dicts add "module.")."""
    from ...nn.parallel import DataParallel, DistributedDataParallel
    while isinstance(model, (DistributedDataParallel, DataParallel)):
        model = model.module
    return model


def _has_fsdp(model):
    fsdp = _fsdp_class()
    return any(isinstance(m, fsdp) for m in model.modules())


def _optimizers(optimizers):
    from ...optim.optimizer import Optimizer
    if isinstance(optimizers, Optimizer):
        return [optimizers]
    return list(optimizers)


def _fqns(model):
    """{id(parameter): its name in the unwrapped model's state dict} (a shared parameter: its
    first name)."""
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        out.setdefault(id(p), name.replace(_FSDP_PREFIX, ""))
    return out


def _submodule_filter(model, sd, submodules, keep_prefixes):
    prefixes = [name + "." for name, m in model.named_modules() if m in submodules]
    out = type(sd)()
    for k, v in sd.items():
        for pre in prefixes:
            if k.startswith(pre):
                out[k if keep_prefixes else k[len(pre):]] = v
                break
    return out


def _offload(obj):
    if isinstance(obj, Tensor):
        return obj.cpu() if obj.is_cuda else obj
    if isinstance(obj, dict):
        return type(obj)((k, _offload(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_offload(v) for v in obj]
    return obj


def _is_dtensor(t):
    return getattr(type(t), "_is_dtensor", False)


def _rank0_only(opts):
    """torch's rule: a full state dict offloaded to the CPU is kept on rank 0 only."""
    return opts.full_state_dict and opts.cpu_offload and _c10d.is_initialized() and \
        _c10d.get_world_size() > 1 and _c10d.get_rank() != 0


def _gather_dtensors(sd):
    """Every DTensor value replaced by its full value (collective, in the dict's order)."""
    return type(sd)((k, v.full_tensor() if _is_dtensor(v) else v) for k, v in sd.items())


def get_model_state_dict(model, *, submodules=None, options=None):
    opts = options or StateDictOptions()
    inner = _unwrap(model)
    sd = inner.state_dict()
    if opts.full_state_dict:
        sd = _gather_dtensors(sd)
        if _rank0_only(opts):
            return {}
    if opts.ignore_frozen_params:
        frozen = {name for name, p in inner.named_parameters(remove_duplicate=False)
                  if not p.requires_grad}
        frozen = {n.replace(_FSDP_PREFIX, "") for n in frozen}
        for k in [k for k in sd if k in frozen]:
            del sd[k]
    if submodules:
        sd = _submodule_filter(inner, sd, set(submodules), opts.keep_submodule_prefixes)
    return _offload(sd) if opts.cpu_offload else sd


def _init_optim_state(optim):
    """Create the optimizer's state by one step with zero gradients at lr 0 (torch's rule),
    unless it has state or gradients already."""
    if optim.state:
        return
    params = [p for g in optim.param_groups for p in g["params"]]
    if any(p.grad is not None for p in params):
        return
    import cddp
    for p in params:
        if p.requires_grad:
            p.grad = cddp.zeros_like(p)
    lrs = []
    for g in optim.param_groups:
        if "lr" in g:
            lrs.append(g["lr"])
            g["lr"] = cddp.tensor(0.0) if isinstance(g["lr"], Tensor) else 0.0
    try:
        optim.step()
    finally:
        for g in optim.param_groups:
            if "lr" in g:
                g["lr"] = lrs.pop(0)
        optim.zero_grad(set_to_none=True)


def _named_osd(model, optim, fqns):
    """One optimizer's state dict with fqns for parameter positions."""
    if _has_fsdp(model):
        return _fsdp_class().optim_state_dict(model, optim)
    osd = optim.state_dict()
    names = []
    for g in optim.param_groups:
        for p in g["params"]:
            if id(p) not in fqns:
                raise KeyError("get_optimizer_state_dict: the optimizer holds a parameter of "
                               f"shape {tuple(p.shape)} that is not in the model")
            names.append(fqns[id(p)])
    state = {names[i]: v for i, v in osd["state"].items()}
    groups = [dict(g, params=[names[i] for i in g["params"]]) for g in osd["param_groups"]]
    return {"state": state, "param_groups": groups}


def _flatten_osd(osd):
    flat = {}
    for name, st in osd["state"].items():
        for k, v in st.items():
            flat[f"state.{name}.{k}"] = v
    for g in osd["param_groups"]:
        for name in g["params"]:
            for k, v in g.items():
                if k != "params":
                    flat[f"param_groups.{name}.{k}"] = v
    return flat


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    opts = options or StateDictOptions()
    inner = _unwrap(model)
    fqns = _fqns(inner)
    state, groups = {}, []
    for optim in _optimizers(optimizers):
        _init_optim_state(optim)
        osd = _named_osd(inner, optim, fqns)
        state.update(osd["state"])
        groups.extend(osd["param_groups"])
    osd = {"state": _dtensor_state(inner, state, opts.full_state_dict),
           "param_groups": groups}
    if _rank0_only(opts):
        return {}
    if opts.cpu_offload:
        osd = _offload(osd)
    return _flatten_osd(osd) if opts.flatten_optimizer_state_dict else osd


def _sharded_params(model):
    """{fqn: DTensor parameter} of the model (FSDP2's)."""
    return {name: p for name, p in model.named_parameters() if _is_dtensor(p)}


def _dtensor_state(model, state, full):
    """Optimizer state of DTensor parameters: each tensor shaped like the parameter's
    local part becomes a DTensor with its layout, or (full) its full value (collective,
    in the model's parameter order on every rank)."""
    params = _sharded_params(model)
    if not params:
        return state
    from ..tensor._api import DTensor
    out = dict(state)
    for name, p in params.items():
        if name not in state:
            continue
        st = {}
        for k, v in state[name].items():
            if isinstance(v, Tensor) and not _is_dtensor(v) and v.dim() > 0 and \
                    tuple(v.shape) == tuple(p.shape):
                v = DTensor._make(v, p._spec)
                if full:
                    v = v.full_tensor()
            st[k] = v
        out[name] = st
    return out


def _to_local_state(model, osd):
    """The inverse for loading: DTensor values, or full values of a DTensor parameter's
    shape, become this rank's part."""
    params = _sharded_params(model)
    if not params or "state" not in osd:
        return osd
    from ..tensor._api import _full, chunk_range
    state = dict(osd["state"])
    for name, p in params.items():
        if name not in state:
            continue
        spec, st = p._spec, {}
        mesh = spec.mesh
        for k, v in state[name].items():
            if _is_dtensor(v):
                v = v.detach() if v._spec == spec else _full(v.detach(), v._spec)
            if isinstance(v, Tensor) and v.dim() > 0 and tuple(v.shape) == spec.shape and \
                    tuple(v.shape) != tuple(p.shape):
                start, length, _ = chunk_range(v.shape[0], mesh.size(0), mesh.get_local_rank(0))
                v = v.narrow(0, start, length).clone()
            st[k] = v
        state[name] = st
    return dict(osd, state=state)


def get_state_dict(model, optimizers, *, submodules=None, options=None):
    return (get_model_state_dict(model, submodules=submodules, options=options),
            get_optimizer_state_dict(model, optimizers, submodules=submodules, options=options))


# ---- loading ---------------------------------------------------------------------------------

def _broadcast_tree(obj):
    """Rank 0's obj on every rank: its structure by broadcast_object_list (tensors replaced
    by placeholders), then each tensor by broadcast."""
    import cddp
    tensors = []

    def strip(o):
        if isinstance(o, Tensor):
            tensors.append(o)
            return {"__dcp_tensor__": [len(tensors) - 1, list(o.shape), str(o.dtype).split(".")[-1]]}
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return type(o)(strip(v) for v in o)
        return o
    box = [strip(obj) if _c10d.get_rank() == 0 else None]
    _c10d.broadcast_object_list(box, src=0)

    def fill(o):
        if isinstance(o, dict):
            if set(o) == {"__dcp_tensor__"}:
                i, shape, dtype = o["__dcp_tensor__"]
                t = (tensors[i].detach().contiguous().clone() if _c10d.get_rank() == 0
                     else cddp.empty(shape, dtype=getattr(cddp, dtype)))
                _c10d.broadcast(t, src=0)
                return t
            return {k: fill(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return type(o)(fill(v) for v in o)
        return o
    return fill(box[0])


def _from_rank0(sd, opts):
    if opts.broadcast_from_rank0 and _c10d.is_initialized() and _c10d.get_world_size() > 1:
        return _broadcast_tree(sd)
    return sd


def set_model_state_dict(model, model_state_dict, *, options=None):
    opts = options or StateDictOptions()
    sd = _from_rank0(model_state_dict, opts)
    return _unwrap(model).load_state_dict(sd, strict=opts.strict)


def _unflatten_osd(flat, optims, fqns):
    """torch's flat optimizer form back into the nested one, groups taken from the
    optimizers' own structure."""
    state, groups = {}, []
    for key, v in flat.items():
        if key.startswith("state."):
            name, _, k = key[len("state."):].rpartition(".")
            state.setdefault(name, {})[k] = v
    for optim in optims:
        for g in optim.param_groups:
            names = [fqns[id(p)] for p in g["params"]]
            group = {}
            for k in g:
                if k != "params" and names and f"param_groups.{names[0]}.{k}" in flat:
                    group[k] = flat[f"param_groups.{names[0]}.{k}"]
            group["params"] = names
            groups.append(group)
    return {"state": state, "param_groups": groups}


def _load_named(model, optim, osd, fqns):
    """optim.load_state_dict from the fqn-keyed osd: optim's groups are matched to the saved
    groups by their parameter names."""
    if _has_fsdp(model):
        optim.load_state_dict(_fsdp_class().optim_state_dict_to_load(model, optim, osd))
        return
    saved = {}
    for g in osd["param_groups"]:
        for name in g["params"]:
            saved[name] = g
    state, groups, index = {}, [], 0
    for g in optim.param_groups:
        names = [fqns[id(p)] for p in g["params"]]
        match = saved.get(names[0]) if names else None
        if match is None or list(match["params"]) != names:
            raise ValueError("set_optimizer_state_dict: no saved parameter group holds "
                             f"exactly {names}; the optimizer's groups must name the same "
                             "parameters as when it was saved")
        groups.append(dict(match, params=list(range(index, index + len(names)))))
        for i, name in enumerate(names, index):
            if name in osd["state"]:
                state[i] = osd["state"][name]
        index += len(names)
    optim.load_state_dict({"state": state, "param_groups": groups})


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None):
    opts = options or StateDictOptions()
    inner = _unwrap(model)
    fqns = _fqns(inner)
    optims = _optimizers(optimizers)
    osd = _from_rank0(optim_state_dict, opts)
    if "state" not in osd and "param_groups" not in osd:
        osd = _unflatten_osd(osd, optims, fqns)
    osd = _to_local_state(inner, osd)
    for optim in optims:
        _load_named(inner, optim, osd, fqns)


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    keys = set_model_state_dict(model, model_state_dict, options=options)
    set_optimizer_state_dict(model, optimizers, optim_state_dict, options=options)
    return keys
