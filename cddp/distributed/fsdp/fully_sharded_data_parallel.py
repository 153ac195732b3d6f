"""cddp.distributed.fsdp.FullyShardedDataParallel — torch's FSDP (use_orig_params=False)
on cddp's collectives.

Contract:
- FullyShardedDataParallel(module, ...) has torch's signature. Each unit (this wrapper and
  every FSDP unit auto_wrap_policy or the user nests inside it) owns the parameters of its
  module that no nested unit and no ignored module owns, flattened into one FlatParameter
  holding this rank's shard (_flat_param.py); the wrapped module is `_fsdp_wrapped_module`
  and the shard is registered on it as `_flat_param`, so names match torch's:
  "_fsdp_wrapped_module._flat_param", "_fsdp_wrapped_module.0._fsdp_wrapped_module._flat_param".
  model.parameters() yields only the FlatParameters (and ignored modules' parameters).
- forward(*args, **kwargs): gathers the unit's full parameters (in MixedPrecision.param_dtype),
  sets them on their modules as plain tensor views for the call, runs the wrapped module and
  puts placeholders back in their place. Backward reduce-scatters each unit's gradient (the mean over ranks) into
  FlatParameter.grad; no hooks beyond autograd are involved.
- sharding_strategy: FULL_SHARD (default), SHARD_GRAD_OP, NO_SHARD (replicated flat vector,
  gradient all-reduced), HYBRID_SHARD / _HYBRID_SHARD_ZERO2 (sharded within the intra-node
  group, gradient then all-reduced across the inter-node group); _process_groups.py.
- mixed_precision: param_dtype for the gathered parameters (and the forward's view of them);
  reduce_dtype for the gradient reduction; buffer_dtype casts the unit's floating buffers at
  construction; the root casts floating forward inputs to param_dtype
  (cast_root_forward_inputs), other units when cast_forward_inputs is set.
- sync_module_states=True broadcasts global rank 0's parameters and buffers before sharding.
- ignored_modules / ignored_states (modules or parameters, not both arguments): their
  parameters stay ordinary, unsharded, unsynchronised parameters, as in torch.
- Methods: module, clip_grad_norm_, no_sync, summon_full_params, apply, state_dict /
  load_state_dict (FULL_STATE_DICT, _state_dict.py), state_dict_type / set_state_dict_type /
  get_state_dict_type, optim_state_dict / optim_state_dict_to_load / full_optim_state_dict /
  shard_full_optim_state_dict (_optim_state_dict.py), fsdp_modules, named_parameters /
  named_buffers (names cleaned inside summon_full_params, as torch). Attribute lookups the
  wrapper does not answer fall through to the wrapped module, as torch.

Differences from torch:
- use_orig_params=True raises NotImplementedError: it needs per-original-parameter views of
  the shard registered as the module's parameters, with their own gradients.
- device_mesh (cddp.distributed.device_mesh) gives the groups as torch reads them: a 1-D
  mesh's group, or for HYBRID_SHARD a 2-D mesh (replicate, shard): dimension 1 shards,
  dimension 0 replicates.
- MixedPrecision.keep_low_precision_grads=True raises NotImplementedError.
- Accepted without effect (CPU tensors, synchronous collectives): cpu_offload (parameters
  already live in host memory), backward_prefetch, forward_prefetch, limit_all_gathers,
  device_id (torch's FSDP needs device_id=cpu to run on the CPU at all; cddp needs nothing).
- A unit whose own modules hold meta-device parameters or buffers is materialized first, as
  torch's: param_init_fn(module) when given, else each own module (breadth first, nested
  units and ignored modules excluded) gets to_empty(device="cpu", recurse=False) and then its
  reset_parameters().
- Memory: a unit's full parameters stay alive from its forward until autograd frees the
  graph (after backward), for every sharding strategy (see _flat_param.py). Outside forward
  the original parameter names hold zero-memory placeholders of the right shape and dtype
  (torch leaves views of freed storage); read values with summon_full_params/state_dict.
- no_sync keeps the accumulated unsharded gradient inside the unit (in the parameters'
  dtype) rather than in FlatParameter.grad, which stays as it was until the synchronized
  backward adds the reduced shard.
- summon_full_params(rank0_only=True) shows the full parameters on every rank (torch: only
  on rank 0); offload_to_cpu is accepted without effect.
- Gradient reduction and clip_grad_norm_ of a model whose units use different process
  groups use each unit's groups for the reduction but the root's for the norm.
- FSDP objects cannot be pickled (or deep-copied); save state_dict() instead.
- register_comm_hook, SHARDED/LOCAL state dicts, sharded optimizer state dicts and
  scatter_full_optim_state_dict raise NotImplementedError.
"""
import math
from collections import deque
from contextlib import contextmanager
from itertools import chain

from ... import _C
from ... import linalg as _linalg
from ...autograd.grad_mode import no_grad
from ...nn.modules.module import Module
from ...nn.parameter import Parameter
from .. import distributed_c10d as _c10d
from . import _optim_state_dict as _osd
from . import _state_dict as _sd
from . import _params
from ._flat_param import FLAT_PARAM, FlatParamHandle
from ._process_groups import HYBRID, mesh_groups, plan_groups
from ._unshard import unshard_units
from .api import (BackwardPrefetch, CPUOffload, FullOptimStateDictConfig,  # noqa: F401
                  FullStateDictConfig, LocalOptimStateDictConfig, LocalStateDictConfig,
                  MixedPrecision, ShardedOptimStateDictConfig, ShardedStateDictConfig,
                  ShardingStrategy, StateDictSettings, StateDictType)
# (CPUOffload and MixedPrecision: scripts import them from this module, as torch's has them)
from .wrap import _auto_wrap

__all__ = ["FullyShardedDataParallel"]

_CONFIG_TYPES = {
    StateDictType.FULL_STATE_DICT: (FullStateDictConfig, FullOptimStateDictConfig),
    StateDictType.LOCAL_STATE_DICT: (LocalStateDictConfig, LocalOptimStateDictConfig),
    StateDictType.SHARDED_STATE_DICT: (ShardedStateDictConfig, ShardedOptimStateDictConfig),
}


def _resolve_ignored(ignored_modules, ignored_states):
    """(set of ignored modules, including their submodules; list of ignored parameters)."""
    if ignored_modules is not None and ignored_states is not None:
        raise ValueError("Cannot pass both `ignored_modules` and `ignored_states` at the "
                         "same time. Please just pass ignored_states.")
    states = list(ignored_modules if ignored_modules is not None else ignored_states or [])
    mods = [s for s in states if isinstance(s, Module)]
    params = [s for s in states if isinstance(s, Parameter)]
    if len(mods) + len(params) != len(states) or (mods and params):
        raise ValueError("ignored_states expects all nn.Parameter or all nn.Module list "
                         f"elements, got {[type(s).__name__ for s in states]}")
    ignored = {}
    for m in mods:
        if isinstance(m, FullyShardedDataParallel):
            raise ValueError("`ignored_modules` should not include FSDP modules")
        for sub in m.modules():
            if not isinstance(sub, FullyShardedDataParallel):
                ignored[id(sub)] = sub
    seen = {id(p) for p in params}
    for m in ignored.values():
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return set(ignored.values()), params


def _collect(root, ignored_module_ids, ignored_param_ids):
    """This unit's parameters [(param, [(module, name, fqn)])] in named_parameters order
    (shared ones once, every place kept) and buffers [(module, name)], not descending into
    nested FSDP units or ignored modules."""
    buffers = []
    if isinstance(root, FullyShardedDataParallel):       # FSDP(FSDP(m)): nothing left to own
        return [], buffers
    params = _params.collect(
        root, skip=lambda name, p: id(p) in ignored_param_ids or name == FLAT_PARAM,
        claimed=lambda p: getattr(p, "_fsdp_flattened", False) and (
            "is already managed by another FSDP unit: a parameter shared between modules "
            "must be wrapped in one unit (wrap a common ancestor)"),
        descend=lambda c: not isinstance(c, FullyShardedDataParallel)
        and id(c) not in ignored_module_ids,
        buffers=buffers)
    return params, buffers


def _cast_inputs(obj, dtype):
    if isinstance(obj, _C.Tensor):
        return obj.to(dtype) if obj.is_floating_point() and obj.dtype != dtype else obj
    if isinstance(obj, tuple):
        items = [_cast_inputs(o, dtype) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [_cast_inputs(o, dtype) for o in obj]
    if isinstance(obj, dict):
        return {k: _cast_inputs(v, dtype) for k, v in obj.items()}
    return obj


def _broadcast_tensors(tensors, groups):
    """Overwrite `tensors` with global rank 0's values: one flat broadcast per dtype and
    group."""
    by_dtype = {}
    for t in tensors:
        by_dtype.setdefault(str(t.dtype), []).append(t)
    for ts in by_dtype.values():
        flat = _C.cat([t.detach().reshape(-1) for t in ts])
        for g in groups:
            _c10d.broadcast(flat, src=_c10d.get_global_rank(g, 0), group=g)
        off = 0
        with no_grad():
            for t in ts:
                n = t.numel()
                t.copy_(flat.narrow(0, off, n).view(tuple(t.shape)))
                off += n


def _materialize_meta(module, param_init_fn, ignored):
    """Give a unit built on the meta device its memory and initial values (torch's
    _materialize_meta_module): only the modules this unit owns."""
    own, queue = [], deque([module])
    while queue:
        m = queue.popleft()
        if isinstance(m, FullyShardedDataParallel) or id(m) in ignored:
            continue
        own.append(m)
        queue.extend(m.children())
    if not any(t.is_meta for m in own
               for t in chain(m.parameters(recurse=False), m.buffers(recurse=False))):
        return
    if param_init_fn is not None:
        if not callable(param_init_fn):
            raise ValueError(f"Expected {param_init_fn} to be callable but got "
                             f"{type(param_init_fn)}")
        param_init_fn(module)
        return
    with no_grad():
        for m in own:
            m.to_empty(device="cpu", recurse=False)
        for m in own:
            if callable(getattr(m, "reset_parameters", None)):
                m.reset_parameters()


class FullyShardedDataParallel(Module):
    """Fully sharded data parallelism (see the module docstring): torch's signature."""

    def __init__(self, module, process_group=None, sharding_strategy=None, cpu_offload=None,
                 auto_wrap_policy=None, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
                 mixed_precision=None, ignored_modules=None, param_init_fn=None,
                 device_id=None, sync_module_states=False, forward_prefetch=False,
                 limit_all_gathers=True, use_orig_params=False, ignored_states=None,
                 device_mesh=None):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"FullyShardedDataParallel expects a cddp.nn.Module, got "
                            f"{type(module).__name__}")
        if use_orig_params:
            raise NotImplementedError(
                "FullyShardedDataParallel(use_orig_params=True) is not supported by cddp: "
                "parameters are flattened into one FlatParameter per unit "
                "(use_orig_params=False); build optimizer parameter groups per FSDP unit "
                "instead")
        strategy = ShardingStrategy.FULL_SHARD if sharding_strategy is None else sharding_strategy
        if not isinstance(strategy, ShardingStrategy):
            raise TypeError(f"sharding_strategy must be a ShardingStrategy, got {strategy!r}")
        if device_mesh is not None:
            process_group = mesh_groups(device_mesh, process_group, strategy)
        if mixed_precision is not None and mixed_precision.keep_low_precision_grads:
            raise NotImplementedError("MixedPrecision(keep_low_precision_grads=True) is not "
                                      "supported by cddp: gradients are kept in the "
                                      "parameters' dtype")
        plan = plan_groups(process_group, strategy)
        ignored_mods, ignored_params = _resolve_ignored(ignored_modules, ignored_states)
        self._plan = plan
        self.process_group = plan.shard if plan.shard is not None else plan.replicate
        self._inter_node_pg = plan.replicate if strategy in HYBRID else None
        self.rank = _c10d.get_rank(self.process_group)
        self.world_size = _c10d.get_world_size(self.process_group)
        self.sharding_strategy = strategy
        self.mixed_precision = mixed_precision
        self.cpu_offload = cpu_offload
        self.backward_prefetch = backward_prefetch
        self.forward_prefetch = forward_prefetch
        self.limit_all_gathers = limit_all_gathers
        self._use_orig_params = False
        self._ignored_modules = ignored_mods
        self._ignored_params = ignored_params
        self._is_root = True
        self._summon_depth = 0
        self._loading = False
        self._state_dict_type = StateDictType.FULL_STATE_DICT
        self._state_dict_config = FullStateDictConfig()
        self._optim_state_dict_config = FullOptimStateDictConfig()
        if auto_wrap_policy is not None:
            root_kwargs = {
                "process_group": process_group, "sharding_strategy": strategy,
                "cpu_offload": cpu_offload, "backward_prefetch": backward_prefetch,
                "mixed_precision": mixed_precision, "param_init_fn": param_init_fn,
                "device_id": device_id, "sync_module_states": sync_module_states,
                "forward_prefetch": forward_prefetch, "limit_all_gathers": limit_all_gathers,
                "use_orig_params": use_orig_params,
                "ignored_states": list(ignored_mods) if ignored_mods else (ignored_params or None),
                "device_mesh": None,      # process_group already holds the mesh's groups
            }
            if strategy in HYBRID:        # children share the root's groups (torch's rule)
                root_kwargs["process_group"] = (plan.shard, plan.replicate)
            _auto_wrap(module, auto_wrap_policy, ignored_mods, ignored_params, root_kwargs,
                       FullyShardedDataParallel)
        ignored_ids = {id(m) for m in ignored_mods}
        _materialize_meta(module, param_init_fn, ignored_ids)
        self._fsdp_wrapped_module = module
        params, buffers = _collect(module, ignored_ids, {id(p) for p in ignored_params})
        if sync_module_states and plan.dp_world > 1:
            bufs = [getattr(m, "_buffers")[n] for m, n in buffers]
            if bufs:
                _broadcast_tensors(bufs, plan.broadcast_groups())
        self._handle = (FlatParamHandle(module, params, plan, mixed_precision,
                                        sync_module_states and plan.dp_world > 1)
                        if params else None)
        self._cast_buffers = []
        bdt = mixed_precision.buffer_dtype if mixed_precision is not None else None
        if bdt is not None:
            for m, n in buffers:
                b = m._buffers[n]
                if b.is_floating_point() and b.dtype != bdt:
                    self._cast_buffers.append((m, n, b.dtype))
                    m._buffers[n] = b.to(bdt)
        for m in module.modules():
            if isinstance(m, FullyShardedDataParallel):
                m._is_root = False
        self._register_load_state_dict_pre_hook(_sd.load_pre_hook, with_module=True)
        self.register_load_state_dict_post_hook(_sd.load_post_hook)

    # ---- wrapper basics ---------------------------------------------------------------------

    @property
    def module(self):
        """The wrapped module."""
        return self._modules["_fsdp_wrapped_module"]

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            wrapped = self.__dict__.get("_modules", {}).get("_fsdp_wrapped_module")
            if wrapped is None:
                raise
            return getattr(wrapped, name)

    def __getitem__(self, key):
        return self._modules["_fsdp_wrapped_module"].__getitem__(key)

    def check_is_root(self):
        return self._is_root

    @staticmethod
    def fsdp_modules(module, root_only=False):
        """The FSDP units in module's tree (only the outermost ones if root_only)."""
        units = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel)]
        if not root_only:
            return units
        inner = {id(m) for u in units for m in u.module.modules()
                 if isinstance(m, FullyShardedDataParallel)}
        return [u for u in units if id(u) not in inner]

    def _units(self):
        return FullyShardedDataParallel.fsdp_modules(self)

    # ---- forward ----------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        if self._summon_depth:
            raise RuntimeError("FullyShardedDataParallel forward inside summon_full_params "
                               "(or a state-dict call) is not supported; leave the context "
                               "first")
        mp = self.mixed_precision
        if mp is not None and mp.param_dtype is not None and \
                (mp.cast_forward_inputs or (self._is_root and mp.cast_root_forward_inputs)):
            args, kwargs = _cast_inputs(args, mp.param_dtype), _cast_inputs(kwargs, mp.param_dtype)
        handle = self._handle
        if handle is None:
            return self.module(*args, **kwargs)
        handle.use_unsharded_views(handle.unshard())
        try:
            return self.module(*args, **kwargs)
        finally:
            handle.drop_views()

    # ---- gradients --------------------------------------------------------------------------

    @contextmanager
    def no_sync(self):
        """Backward passes inside accumulate each unit's unsharded gradient locally, with
        no communication; the first backward after the block adds them in and reduces.
        Call the optimizer only after that synchronized backward."""
        if not self._is_root:
            raise RuntimeError("`no_sync()` on inner FSDP instances is not supported. "
                               "Please call `no_sync()` on root FSDP module.")
        handles = [u._handle for u in self._units() if u._handle is not None]
        old = [h.sync_gradients for h in handles]
        for h in handles:
            h.sync_gradients = False
        try:
            yield
        finally:
            for h, o in zip(handles, old):
                h.sync_gradients = o

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Scale every gradient by min(1, max_norm / (total + 1e-6)), total being the norm of
        all gradients of the model taken together across ranks (sharded ones: local p-th
        power sums all-reduced, or MAX for inf); returns total. Collective: call on every
        rank, on the root."""
        if not self._is_root:
            raise RuntimeError("`clip_grad_norm_()` should only be called on the root FSDP "
                               "instance")
        if isinstance(norm_type, str):
            if norm_type != "inf":
                raise ValueError(f"norm_type must be a number or 'inf', got {norm_type!r}")
            norm_type = math.inf
        max_norm, norm_type = float(max_norm), float(norm_type)
        units = self._units()
        if all(u._handle is None or u._plan.shard_size == 1 for u in units):
            from ...nn.utils import clip_grad_norm_
            return clip_grad_norm_(self.parameters(), max_norm, norm_type)
        sharded, nonsharded, seen = [], [], set()
        for u in units:
            h = u._handle
            if h is not None and id(h.flat_param) not in seen:
                seen.add(id(h.flat_param))
                (sharded if u._plan.shard_size > 1 else nonsharded).append(h.flat_param)
        for p in self.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                nonsharded.append(p)
        g_sh = [p.grad.detach() for p in sharded if p.grad is not None]
        g_ns = [p.grad.detach() for p in nonsharded if p.grad is not None]
        grads = g_sh + g_ns
        dtype = grads[0].dtype if grads else _C.float32
        for g in grads[1:]:
            dtype = _C.promote_types(dtype, g.dtype)

        def local_norm(gs):
            if not gs:
                return _C.zeros(1, dtype=dtype)
            norms = _C.stack([_linalg.vector_norm(g, norm_type).to(dtype) for g in gs])
            return _linalg.vector_norm(norms, norm_type).reshape(1)

        group = self._plan.shard
        if norm_type == math.inf:
            total = local_norm(g_sh)
            _c10d.all_reduce(total, op=_c10d.ReduceOp.MAX, group=group)
            total = _C.maximum(total, local_norm(g_ns))
        else:
            total = local_norm(g_sh).pow(norm_type)
            _c10d.all_reduce(total, group=group)
            total = (total + local_norm(g_ns).pow(norm_type)).pow(1.0 / norm_type)
        total = total.reshape(())
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        with no_grad():
            for g in grads:
                g.mul_(coef.to(g.dtype))
        return total

    # ---- full parameters --------------------------------------------------------------------

    @staticmethod
    @contextmanager
    def summon_full_params(module, recurse=True, writeback=True, rank0_only=False,
                           offload_to_cpu=False, with_grads=False):
        """Inside: the original parameters, full and in full precision, as nn.Parameters
        of their modules (with with_grads, their full gradients as .grad); on exit, with
        writeback, what was written into them goes back into the shards. Collective.
        rank0_only is validated as torch does, but every rank sees the full parameters."""
        if rank0_only and writeback:
            raise ValueError("writeback=True and rank0_only=True is not supported, as model "
                             "parameter shapes will be different across ranks, and writing "
                             "to them can lead to inconsistencies across ranks when the "
                             "context is exited.")
        if recurse:
            units = FullyShardedDataParallel.fsdp_modules(module)
        else:
            units = [module] if isinstance(module, FullyShardedDataParallel) else []
        with unshard_units(units, writeback=writeback, with_grads=with_grads):
            yield

    def apply(self, fn):
        """Module.apply with this unit's full parameters visible (fn may initialise them)."""
        with unshard_units([self], writeback=True):
            return super().apply(fn)

    def _clean(self):
        return self._summon_depth > 0

    def named_parameters(self, *args, **kwargs):
        clean = self._clean()
        for n, p in super().named_parameters(*args, **kwargs):
            yield (_sd.clean_key(n) if clean else n), p

    def named_buffers(self, *args, **kwargs):
        clean = self._clean()
        for n, b in super().named_buffers(*args, **kwargs):
            yield (_sd.clean_key(n) if clean else n), b

    # ---- state dicts ------------------------------------------------------------------------

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """FULL_STATE_DICT (_state_dict.py): the unwrapped model's keys, full tensors."""
        if args:
            destination = args[0]
            if len(args) > 1:
                prefix = args[1]
            if len(args) > 2:
                keep_vars = args[2]
        return _sd.full_state_dict(self, destination, prefix, keep_vars)

    @staticmethod
    def set_state_dict_type(module, state_dict_type, state_dict_config=None,
                            optim_state_dict_config=None):
        """Set the state-dict type and configs of every FSDP unit in module's tree; returns
        the previous settings (of the first unit)."""
        if not isinstance(state_dict_type, StateDictType):
            raise ValueError(f"state_dict_type must be a StateDictType, got {state_dict_type!r}")
        cfg_t, ocfg_t = _CONFIG_TYPES[state_dict_type]
        if state_dict_config is None:
            state_dict_config = cfg_t()
        if optim_state_dict_config is None:
            optim_state_dict_config = ocfg_t()
        if type(state_dict_config) is not cfg_t:
            raise ValueError(f"Expected state_dict_config of type {cfg_t} but got "
                             f"{type(state_dict_config)}")
        if type(optim_state_dict_config) is not ocfg_t:
            raise ValueError(f"Expected optim_state_dict_config of type {ocfg_t} but got "
                             f"{type(optim_state_dict_config)}")
        units = FullyShardedDataParallel.fsdp_modules(module)
        if not units:
            raise ValueError("set_state_dict_type: no FSDP unit in the module")
        prev = StateDictSettings(units[0]._state_dict_type, units[0]._state_dict_config,
                                 units[0]._optim_state_dict_config)
        for u in units:
            u._state_dict_type = state_dict_type
            u._state_dict_config = state_dict_config
            u._optim_state_dict_config = optim_state_dict_config
        return prev

    @staticmethod
    def get_state_dict_type(module):
        """The StateDictSettings every FSDP unit of module shares (ValueError if they
        differ)."""
        units = FullyShardedDataParallel.fsdp_modules(module)
        if not units:
            raise ValueError("get_state_dict_type: no FSDP unit in the module")
        s = StateDictSettings(units[0]._state_dict_type, units[0]._state_dict_config,
                              units[0]._optim_state_dict_config)
        for u in units[1:]:
            if (u._state_dict_type, u._state_dict_config, u._optim_state_dict_config) != \
                    (s.state_dict_type, s.state_dict_config, s.optim_state_dict_config):
                raise ValueError("All FSDP modules must have the same state dict settings.")
        return s

    @staticmethod
    @contextmanager
    def state_dict_type(module, state_dict_type, state_dict_config=None,
                        optim_state_dict_config=None):
        """Within the block, every FSDP unit of module uses the given state-dict type."""
        prev = FullyShardedDataParallel.set_state_dict_type(
            module, state_dict_type, state_dict_config, optim_state_dict_config)
        try:
            yield
        finally:
            FullyShardedDataParallel.set_state_dict_type(
                module, prev.state_dict_type, prev.state_dict_config,
                prev.optim_state_dict_config)

    # ---- optimizer state dicts --------------------------------------------------------------

    @staticmethod
    def optim_state_dict(model, optim, optim_state_dict=None, group=None):
        """FULL optimizer state: keyed by original parameter names (_optim_state_dict.py)."""
        return _osd.optim_state_dict(model, optim, optim_state_dict)

    @staticmethod
    def optim_state_dict_to_load(model, optim, optim_state_dict, is_named_optimizer=False,
                                 load_directly=False, group=None):
        """A full optimizer state dict turned into what optim.load_state_dict takes."""
        if is_named_optimizer:
            raise NotImplementedError("optim_state_dict_to_load(is_named_optimizer=True) is "
                                      "not supported by cddp")
        out = _osd.optim_state_dict_to_load(model, optim, optim_state_dict)
        if load_directly:
            optim.load_state_dict(out)
        return out

    @staticmethod
    def full_optim_state_dict(model, optim, optim_input=None, rank0_only=True, group=None):
        """torch's older form: keyed by parameter index in the unwrapped model's optimizer
        order; {} on ranks other than 0 when rank0_only."""
        return _osd.full_optim_state_dict(model, optim, rank0_only)

    @staticmethod
    def shard_full_optim_state_dict(full_optim_state_dict, model, optim_input=None,
                                    optim=None):
        """full_optim_state_dict's output turned into what optim.load_state_dict takes
        (every rank passes the full dict; optim is required here)."""
        if optim is None:
            raise ValueError("cddp's shard_full_optim_state_dict needs optim= (the optimizer "
                             "over model.parameters())")
        return _osd.shard_full_optim_state_dict(full_optim_state_dict, model, optim)

    @staticmethod
    def scatter_full_optim_state_dict(*args, **kwargs):
        raise NotImplementedError("scatter_full_optim_state_dict is not supported by cddp: "
                                  "pass the full dict on every rank to "
                                  "shard_full_optim_state_dict or optim_state_dict_to_load")

    @staticmethod
    def sharded_optim_state_dict(*args, **kwargs):
        raise NotImplementedError("sharded_optim_state_dict is not supported by cddp "
                                  "(needs ShardedTensor); use optim_state_dict")

    def register_comm_hook(self, state, hook):
        raise NotImplementedError("FSDP register_comm_hook is not supported by cddp")

    def __getstate__(self):
        raise RuntimeError("FullyShardedDataParallel objects cannot be pickled; save "
                           "model.state_dict() instead")
