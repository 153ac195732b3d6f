"""cddp.distributed.fsdp._optim_state_dict — FULL optimizer state dicts for FSDP models.

Contract (torch's FULL optim_state_dict, use_orig_params=False):
- optim_state_dict(model, optim): {"state": {fqn: {key: value}}, "param_groups": [{...,
  "params": [fqn, ...]}]}, fqn being the original parameter names (as in the FULL model
  state dict). A FlatParameter's per-element state (a tensor shaped like the shard: Adam's
  exp_avg, SGD's momentum_buffer) is all-gathered and split back into each original
  parameter's shape; its other state (step, scalars) is repeated for each original
  parameter. Parameters without state are left out; non-FSDP parameters (ignored modules)
  keep their state as is. Keys are visited in sorted order, so every rank issues the same
  gathers. FullOptimStateDictConfig(rank0_only=True) on the model's units: ranks other than
  0 get {} (after taking part).
- optim_state_dict_to_load(model, optim, osd): the dict optim.load_state_dict takes on this
  rank: parameter indices as optim.state_dict() numbers them, each FlatParameter's
  per-element state assembled from this rank's slice of its original parameters' state
  (zeros in the padding), other state taken from the first original parameter that has it,
  hyperparameters from osd's groups. Every rank passes the full osd. The groups must list the
  same names in the same order as the model's optimizer groups expand to (ValueError).
- full_optim_state_dict / shard_full_optim_state_dict: the same with the older integer keys
  (an original parameter's position in the groups' expanded name lists).

Differences from torch: group= is ignored (the units' own groups are used); the older API
needs optim= and every rank to hold the full dict (no scatter from rank 0).
"""
import copy

from ... import _C
from .. import distributed_c10d as _c10d
from ._state_dict import clean_key


def _units():
    from .fully_sharded_data_parallel import FullyShardedDataParallel
    return FullyShardedDataParallel


def _index(model):
    """{id(FlatParameter): (handle, name prefix)} and {id(param): clean name}."""
    fsdp = _units()
    flat = {}
    for raw, m in model.named_modules():
        if isinstance(m, fsdp) and m._handle is not None:
            prefix = clean_key(raw + ".") if raw else ""
            flat[id(m._handle.flat_param)] = (m._handle, prefix)
    names = {id(p): clean_key(n) for n, p in model.named_parameters()}
    return flat, names


def _fqns(p, flat, names):
    if id(p) in flat:
        h, prefix = flat[id(p)]
        return [prefix + i.fqn for i in h.infos]
    if id(p) not in names:
        raise ValueError("the optimizer holds a parameter that is not in the model")
    return [names[id(p)]]


def _copy(v):
    return v.detach().clone() if isinstance(v, _C.Tensor) else copy.deepcopy(v)


def _positions(optim):
    """[(param, index)] as Optimizer.state_dict numbers them (first position of each)."""
    index, out, start = {}, [], 0
    for g in optim.param_groups:
        for i, p in enumerate(g["params"], start):
            if id(p) not in index:
                index[id(p)] = i
                out.append((p, i))
        start += len(g["params"])
    return out


def _rank0_only(model):
    fsdp = _units()
    units = fsdp.fsdp_modules(model)
    return bool(units) and bool(getattr(units[0]._optim_state_dict_config, "rank0_only", False))


def optim_state_dict(model, optim, optim_state_dict=None):
    flat, names = _index(model)
    local = optim_state_dict if optim_state_dict is not None else optim.state_dict()
    groups = []
    for g_live, g_saved in zip(optim.param_groups, local["param_groups"]):
        pg = {k: copy.deepcopy(v) for k, v in g_saved.items() if k != "params"}
        pg["params"] = [f for p in g_live["params"] for f in _fqns(p, flat, names)]
        groups.append(pg)
    state = {}
    for p, i in _positions(optim):
        st = local["state"].get(i)
        if not st:
            continue
        if id(p) not in flat:
            state[_fqns(p, flat, names)[0]] = {k: _copy(v) for k, v in st.items()}
            continue
        h, prefix = flat[id(p)]
        per = {i_.fqn: {} for i_ in h.infos}
        for key in sorted(st):
            v = st[key]
            if isinstance(v, _C.Tensor) and v.dim() >= 1 and tuple(v.shape) == tuple(p.shape):
                full = h.gather_like(v.detach())
                for info, view in zip(h.infos, h.views(full)):
                    per[info.fqn][key] = view.clone()
            else:
                for info in h.infos:
                    per[info.fqn][key] = _copy(v)
        for info in h.infos:
            state[prefix + info.fqn] = per[info.fqn]
    if _rank0_only(model) and _c10d.get_rank() != 0:
        return {}
    return {"state": state, "param_groups": groups}


def optim_state_dict_to_load(model, optim, osd):
    if not osd or "state" not in osd or "param_groups" not in osd:
        raise ValueError("optim_state_dict_to_load expects the full optimizer state dict "
                         "(with 'state' and 'param_groups') on every rank, got "
                         f"{type(osd).__name__} with keys {sorted(osd) if osd else []}")
    flat, names = _index(model)
    if len(osd["param_groups"]) != len(optim.param_groups):
        raise ValueError(f"the optimizer state dict has {len(osd['param_groups'])} parameter "
                         f"groups, the optimizer {len(optim.param_groups)}")
    groups, start = [], 0
    for gi, (g_live, g_saved) in enumerate(zip(optim.param_groups, osd["param_groups"])):
        want = [f for p in g_live["params"] for f in _fqns(p, flat, names)]
        if list(g_saved["params"]) != want:
            raise ValueError(f"parameter group {gi}: the state dict lists {g_saved['params']}, "
                             f"the model's optimizer group holds {want}")
        pg = {k: copy.deepcopy(v) for k, v in g_saved.items() if k != "params"}
        pg["params"] = list(range(start, start + len(g_live["params"])))
        start += len(g_live["params"])
        groups.append(pg)
    saved = osd["state"]
    state = {}
    for p, i in _positions(optim):
        fq = _fqns(p, flat, names)
        if id(p) not in flat:
            if fq[0] in saved:
                state[i] = {k: _copy(v) for k, v in saved[fq[0]].items()}
            continue
        h, _ = flat[id(p)]
        entries = [saved.get(f) for f in fq]
        if not any(entries):
            continue
        keys = sorted({k for e in entries if e for k in e})
        st = {}
        for key in keys:
            sample = next(e[key] for e in entries if e and key in e)
            if isinstance(sample, _C.Tensor) and sample.dim() >= 1:
                shard = p.detach().new_zeros(p.numel(), dtype=sample.dtype)
                h.write_shard(shard, [e.get(key) if e else None for e in entries])
                st[key] = shard
            else:
                st[key] = _copy(sample)
        state[i] = st
    return {"state": state, "param_groups": groups}


def full_optim_state_dict(model, optim, rank0_only):
    osd = optim_state_dict(model, optim)
    if rank0_only and _c10d.get_rank() != 0:
        return {}
    if not osd:
        return osd
    order = [f for g in osd["param_groups"] for f in g["params"]]
    pos = {f: i for i, f in reversed(list(enumerate(order)))}
    groups, start = [], 0
    for g in osd["param_groups"]:
        ng = dict(g)
        ng["params"] = list(range(start, start + len(g["params"])))
        start += len(g["params"])
        groups.append(ng)
    return {"state": {pos[f]: st for f, st in osd["state"].items()}, "param_groups": groups}


def shard_full_optim_state_dict(full_osd, model, optim):
    flat, names = _index(model)
    order = [f for g in optim.param_groups for p in g["params"] for f in _fqns(p, flat, names)]
    groups = []
    for g in full_osd["param_groups"]:
        ng = dict(g)
        ng["params"] = [order[int(i)] for i in g["params"]]
        groups.append(ng)
    state = {order[int(i)]: st for i, st in full_osd["state"].items()}
    return optim_state_dict_to_load(model, optim, {"state": state, "param_groups": groups})
