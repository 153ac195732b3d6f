"""cddp.distributed.fsdp._fully_shard — torch's FSDP2: fully_shard(module) and FSDPModule,
parameters sharded as DTensors (cddp.distributed.tensor) over a 1-D DeviceMesh.

    for layer in model.layers:
        fully_shard(layer)                 # one parameter group per call
    fully_shard(model)                     # the root: the parameters no layer took
    opt = cddp.optim.AdamW(model.parameters())          # DTensor parameters: the shards
    loss(model(x)).backward(); clip_grad_norm_(model.parameters(), 1.0); opt.step()

Contract:
- fully_shard(module, *, mesh=None, reshard_after_forward=None, shard_placement_fn=None,
  mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy(), ignored_params=None)
  has torch 2.13's signature and returns module, whose class becomes a subclass
  "FSDP<Class>" of (FSDPModule, Class), made once per class. The call's group: the
  module's parameters (walking its tree, not into submodules fully_shard already took)
  that are not in ignored_params, each shared one once with all its names.
- Each group parameter becomes a DTensor Parameter sharded Shard(0) over the mesh
  (default: 1-D over the default group): rank r keeps rows [r*c, min((r+1)*c, n)) of a
  parameter with n rows, c = ceil(n / W) (torch.chunk's layout; trailing ranks may hold
  fewer or no rows). Parameters must already be equal on every rank (as torch: no
  broadcast). HSDP: a 2-D mesh (replicate, shard) shards over its dimension 1 and
  replicates over dimension 0, placements (Replicate(), Shard(0)), as torch's; the
  reduce-scattered gradient is then all-reduced (mean) over the replicate group.
- Forward pre-hook: floating inputs cast to mp_policy.param_dtype (cast_forward_inputs);
  one all_gather_into_tensor per dtype of the group gathers every parameter's local rows,
  padded to c rows and concatenated (rank r's block of the flat buffer holds its padded
  parts in group order), cast to param_dtype first. Each parameter's full value is a
  differentiable view of that buffer and is set in its modules' _parameters for the call;
  the forward hook puts the DTensor parameters back and casts floating outputs to
  output_dtype. The gather is one autograd node (_Unshard): its backward takes the
  buffer's gradient, casts it to the reduce dtype (reduce_dtype, else param_dtype),
  reduce-scatters it over the mesh (ReduceOp.AVG for float32 / bfloat16; other dtypes
  divided before and after a SUM by torch's factors) and adds each parameter's rows,
  cast to its dtype, into its .grad, a DTensor with the parameter's spec (created when
  None: accumulation across backwards as torch).
- set_requires_gradient_sync(False): backwards add the group's unsharded gradient buffer
  (in the reduce dtype) into a local accumulator, .grad untouched; the next synchronized
  backward adds it in before reducing. Call the optimizer after that backward.
- State dicts: state_dict() gives the parameters as DTensors (values: local rows; keys as
  the plain model's); load_state_dict takes DTensors (redistributed when their placements
  differ) or full plain tensors (this rank's rows are taken), other keys unchanged; with
  assign=True the loaded rows become the shards (a model built on the meta device).
- FSDPModule: reshard(), unshard(async_op=False) (a collective that sets the full
  parameters on the modules until reshard(); async_op gives a handle whose wait() returns
  at once), set_requires_gradient_sync(flag, *, recurse=True), set_reshard_after_forward,
  set_reshard_after_backward, set_is_last_backward, set_modules_to_forward_prefetch,
  set_modules_to_backward_prefetch, set_gradient_divide_factor (recorded or applied as
  below).

Differences from torch:
- Memory: the gathered full parameters stay alive from a group's forward until autograd
  frees the graph after backward (as cddp's FSDP1, whose "Memory" note explains why: no
  storage resizing); reshard_after_forward is recorded and validated but does not free
  them, and backward does not gather again. Outside forward the modules hold the DTensor
  shards (torch: the same).
- Prefetching, set_is_last_backward and set_reshard_after_backward are accepted without
  effect: collectives are synchronous on the CPU, so there is nothing to overlap.
  offload_policy=CPUOffloadPolicy() is accepted without effect (host memory already).
- mesh must be 1-D or 2-D (HSDP); shard_placement_fn may only answer None or Shard(0);
  0-dim parameters raise NotImplementedError. set_requires_all_reduce(False) (HSDP) is
  accepted without effect: the replicate all-reduce runs every backward, which sums the
  same gradients (the reduction is linear), with more communication.
- fully_shard([m1, m2]) shards each module as its own group (torch: one group for all).
- Gradients are DTensors holding the local rows (their .shape is local, as every cddp
  DTensor's: see cddp/distributed/tensor/_api.py); under set_requires_gradient_sync(False)
  the pending gradient is not visible in .grad until the synchronized backward.
- unshard() then forward gathers again (the explicitly unsharded values are for reading).
- A parameter shared between two fully_shard groups raises ValueError (shard a common
  ancestor instead); torch shares it through the outer group silently.
"""
from ... import _C
from ...autograd.function import Function
from ...autograd.grad_mode import is_grad_enabled, no_grad
from .. import distributed_c10d as _c10d
from ..tensor._api import (DTensor, DTensorSpec, _DTensorParameter, _default_mesh, _full,
                           chunk_range)
from ..tensor._api import local_shape as _local_shape
from ..tensor.placement_types import Replicate, Shard
from ._fsdp_api import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
from . import _params
from ._flat_param import _predivide_factor
from .fully_sharded_data_parallel import _cast_inputs

__all__ = ["fully_shard", "FSDPModule", "UnshardHandle", "register_fsdp_forward_method",
           "MixedPrecisionPolicy", "OffloadPolicy", "CPUOffloadPolicy"]

_STATE = "_fsdp_state"
_AVG_DTYPES = ("float32", "bfloat16")     # torch reduces these with ReduceOp.AVG


class _Slot:
    """One group parameter: its DTensor, every (module, name, fqn) holding it, its global
    shape, c (rows per rank), and where its padded part sits in the rank's flat block."""
    __slots__ = ("param", "places", "shape", "chunk", "row", "offset", "padded", "local_numel")

    def __init__(self, param, places, shape, chunk, row, offset, local_numel):
        self.param, self.places, self.shape = param, places, shape
        self.chunk, self.row, self.offset = chunk, row, offset
        self.padded, self.local_numel = chunk * row, local_numel


class _Bucket:
    """The group's parameters of one dtype: one all-gather, one reduce-scatter."""
    __slots__ = ("slots", "dtype", "block", "pending")

    def __init__(self, dtype):
        self.slots, self.dtype, self.block, self.pending = [], dtype, 0, None


class _Unshard(Function):
    """full buffer = all-gather(padded local rows); d buffer -> reduce-scattered mean
    gradient added into each parameter's .grad (returned: None, the grads are set here)."""

    @staticmethod
    def forward(ctx, state, bucket, *params):
        ctx.state, ctx.bucket, ctx.n = state, bucket, len(params)
        return state.gather(bucket)

    @staticmethod
    def backward(ctx, grad):
        ctx.state.reduce_grad(ctx.bucket, grad)
        return (None, None) + (None,) * ctx.n


class UnshardHandle:
    """What unshard(async_op=True) returns: the collective already finished (synchronous
    CPU collectives), so wait() returns at once."""

    def wait(self):
        return None


class _FSDPState:
    """One fully_shard call: its module, mesh, parameter buckets and settings."""

    def __init__(self, module, mesh, mp_policy, reshard_after_forward):
        self.module = module
        self.mesh = mesh
        shard_dim = mesh.ndim - 1                   # HSDP: (replicate, shard)
        self.group = mesh.get_group(shard_dim)
        self.world = mesh.size(shard_dim)
        self.rank = mesh.get_local_rank(shard_dim)
        self.rep_group = mesh.get_group(0) if mesh.ndim == 2 else None
        self.rep_world = mesh.size(0) if mesh.ndim == 2 else 1
        self.placements = (Replicate(), Shard(0)) if mesh.ndim == 2 else (Shard(0),)
        self.mp = mp_policy
        self.reshard_after_forward = reshard_after_forward
        self.reshard_after_backward = True
        self.requires_grad_sync = True
        self.is_last_backward = True
        self.gradient_divide_factor = None
        self.buckets = []
        self.explicit = None         # [(slot, full)] while unshard() holds full parameters

    # ---- gather / reduce ---------------------------------------------------------------------

    def param_dtype(self, bucket):
        return self.mp.param_dtype or bucket.dtype

    def reduce_dtype(self, bucket):
        return self.mp.reduce_dtype or self.param_dtype(bucket)

    def gather(self, bucket):
        """The (world * block) buffer of every rank's padded parts, in param_dtype."""
        dtype = self.param_dtype(bucket)
        parts = []
        for s in bucket.slots:
            t = s.param.detach().reshape(-1)
            parts.append(t.to(dtype) if t.dtype != dtype else t)
            if s.padded > s.local_numel:
                parts.append(_C.zeros(s.padded - s.local_numel, dtype=dtype))
        flat = _C.cat(parts) if parts else _C.zeros(0, dtype=dtype)
        if self.world == 1:
            return flat
        out = flat.new_empty(self.world * bucket.block)
        _c10d.all_gather_into_tensor(out, flat.contiguous(), group=self.group)
        return out

    def views(self, bucket, full):
        """Each parameter's full value as a (differentiable) view or copy of the buffer."""
        out = []
        for s in bucket.slots:
            n0 = s.shape[0]
            if self.world == 1:
                out.append(full.narrow(0, s.offset, s.padded).view(s.shape))
                continue
            v = full.view(self.world, bucket.block).narrow(1, s.offset, s.padded)
            v = v.reshape((self.world * s.chunk,) + tuple(s.shape[1:]))
            out.append(v if self.world * s.chunk == n0 else v.narrow(0, 0, n0))
        return out

    def reduce_grad(self, bucket, grad):
        """The buffer's gradient -> mean over ranks -> each parameter's rows added into its
        .grad (or kept locally while gradient sync is off)."""
        rdt = self.reduce_dtype(bucket)
        g = grad if grad.dtype == rdt else grad.to(rdt)
        if not self.requires_grad_sync:
            if bucket.pending is None:
                bucket.pending = g.clone() if g is grad else g
            else:
                bucket.pending.add_(g)
            return
        if bucket.pending is not None:
            g, bucket.pending = bucket.pending.add_(g), None
        g = g.contiguous()
        w, rw = self.world, self.rep_world
        factor = self.gradient_divide_factor
        if w * rw == 1 and factor is None:
            out = g
        elif factor is None and str(rdt).split(".")[-1] in _AVG_DTYPES:
            out = self._scatter(g, bucket, _c10d.ReduceOp.AVG)    # the mean of the means
        else:
            total = float(factor) if factor is not None else float(w * rw)
            pre = _predivide_factor(w * rw) if factor is None else 1.0
            if pre != 1:
                g = g.div(pre)
            out = self._scatter(g, bucket, _c10d.ReduceOp.SUM)
            out.div_(total / pre)
        with no_grad():
            for s in bucket.slots:
                p = s.param
                if not p.requires_grad:
                    continue
                local = out.narrow(0, s.offset, s.local_numel).view(tuple(p.shape))
                if local.dtype != p.dtype:
                    local = local.to(p.dtype)
                if p.grad is None:
                    p.grad = DTensor._make(local, p._spec)
                else:
                    p.grad.add_(local)

    def _scatter(self, g, bucket, op):
        """g (world * block) reduced with op over the shard group (this rank's block), then
        over the replicate group (HSDP); a new tensor."""
        if self.world > 1:
            out = g.new_empty(bucket.block)
            _c10d.reduce_scatter_tensor(out, g, op=op, group=self.group)
        else:
            out = g.clone()
        if self.rep_world > 1:
            _c10d.all_reduce(out, op=op, group=self.rep_group)
        return out

    # ---- forward -----------------------------------------------------------------------------

    def set_params(self, pairs):
        for s, t in pairs:
            for module, name, _ in s.places:
                module._parameters[name] = t

    def unshard_for_forward(self):
        for b in self.buckets:
            if not b.slots:
                continue
            params = [s.param for s in b.slots]
            if is_grad_enabled() and any(p.requires_grad for p in params):
                full = _Unshard.apply(self, b, *params)
            else:
                with no_grad():
                    full = self.gather(b)
            self.set_params(zip(b.slots, self.views(b, full)))

    def reshard(self):
        for b in self.buckets:
            self.set_params((s, s.param) for s in b.slots)
        if self.explicit is not None:
            self.set_params(self.explicit)

    def slots(self):
        return [s for b in self.buckets for s in b.slots]


def _pre_forward(module, args, kwargs):
    st = module.__dict__[_STATE]
    mp = st.mp
    if mp.param_dtype is not None and mp.cast_forward_inputs:
        args, kwargs = _cast_inputs(args, mp.param_dtype), _cast_inputs(kwargs, mp.param_dtype)
    st.unshard_for_forward()
    return args, kwargs


def _post_forward(module, args, output):
    st = module.__dict__[_STATE]
    st.reshard()
    if st.mp.output_dtype is not None:
        return _cast_inputs(output, st.mp.output_dtype)
    return None


# ---- state dicts ----------------------------------------------------------------------------

def _state_dict_hook(module, state_dict, prefix, local_metadata):
    """The group's parameters as DTensors (sharing the shards' storage, detached)."""
    st = module.__dict__[_STATE]
    for s in st.slots():
        for _, _, fqn in s.places:
            key = prefix + fqn
            if key in state_dict:
                state_dict[key] = DTensor._make(s.param.detach(), s.param._spec)


def _load_pre_hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
                   unexpected_keys, error_msgs):
    """DTensor or full plain values of the group's parameters -> this rank's rows."""
    st = module.__dict__[_STATE]
    for s in st.slots():
        spec = s.param._spec
        for _, _, fqn in s.places:
            key = prefix + fqn
            v = state_dict.get(key)
            if v is None or not isinstance(v, _C.Tensor):
                continue
            if getattr(v, "_is_dtensor", False):
                if v._spec.shape != spec.shape:
                    continue      # Module's shape check reports it
                if v._spec.placements == spec.placements and v._spec.mesh == spec.mesh:
                    state_dict[key] = v.detach()
                else:
                    state_dict[key] = _take_rows(_full(v.detach(), v._spec), st)
            elif tuple(v.shape) == spec.shape:
                state_dict[key] = _take_rows(v.detach(), st)


def _load_post_hook(module, incompatible_keys):
    """load_state_dict(assign=True) put new parameter objects on the modules (the pre-hook's
    local rows, wrapped): they become the group's shards, the DTensor parameters forward
    gathers (torch's FSDPParam.reset_sharded_param) — a model built on the meta device is
    loaded this way."""
    st = module.__dict__[_STATE]
    for b in st.buckets:
        for s in b.slots:
            for m, name, fqn in s.places:
                p = m._parameters.get(name)
                if p is None or p is s.param:
                    continue
                if p.dtype != b.dtype or tuple(p.shape) != tuple(s.param.shape):
                    raise ValueError(f"load_state_dict(assign=True): {fqn!r} of a fully_shard "
                                     f"module got {p.dtype} {list(p.shape)} where its shard "
                                     f"is {b.dtype} {list(s.param.shape)}")
                s.param = DTensor._make(p.detach(), s.param._spec, p.requires_grad,
                                        _DTensorParameter)
                st.set_params([(s, s.param)])
                break


def _take_rows(full, st):
    start, length, _ = chunk_range(full.shape[0], st.world, st.rank)
    return full.narrow(0, start, length)


# ---- the module class -----------------------------------------------------------------------

class FSDPModule:
    """The class fully_shard mixes into a module's class ("FSDP" + its name)."""

    def __new__(cls, *args, **kwargs):
        # containers that build a new instance of their own class (Sequential[1:]) get
        # the original class, without FSDP state (torch's rule)
        orig = cls.__mro__[2]
        self = orig.__new__(orig, *args, **kwargs)
        self.__init__(*args, **kwargs)
        return self

    def _fsdp_states(self, recurse):
        mods = self.modules() if recurse else [self]
        return [m.__dict__[_STATE] for m in mods if isinstance(m, FSDPModule)]

    def reshard(self):
        """Put the sharded DTensor parameters back after unshard()."""
        st = self.__dict__[_STATE]
        st.explicit = None
        st.reshard()

    def unshard(self, async_op=False):
        """Gather this group's full parameters and set them on the modules until reshard()
        (collective). async_op: returns an UnshardHandle (already complete)."""
        st = self.__dict__[_STATE]
        pairs = []
        with no_grad():
            for b in st.buckets:
                if b.slots:
                    pairs.extend(zip(b.slots, st.views(b, st.gather(b))))
        st.explicit = pairs
        st.set_params(pairs)
        return UnshardHandle() if async_op else None

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """False: backwards accumulate unsharded gradients locally, without communication;
        the next backward with True reduces them with its own."""
        for st in self._fsdp_states(recurse):
            st.requires_grad_sync = bool(requires_gradient_sync)

    def set_requires_all_reduce(self, requires_all_reduce, *, recurse=True):
        """HSDP's all-reduce switch: accepted without effect (module docstring)."""

    def set_reshard_after_forward(self, reshard_after_forward, recurse=True):
        if not isinstance(reshard_after_forward, bool):
            raise ValueError(f"reshard_after_forward should be a bool, got "
                             f"{type(reshard_after_forward)}")
        for st in self._fsdp_states(recurse):
            st.reshard_after_forward = reshard_after_forward

    def set_reshard_after_backward(self, reshard_after_backward, *, recurse=True):
        for st in self._fsdp_states(recurse):
            st.reshard_after_backward = bool(reshard_after_backward)

    def set_is_last_backward(self, is_last_backward):
        for st in self._fsdp_states(True):
            st.is_last_backward = bool(is_last_backward)

    def set_modules_to_forward_prefetch(self, modules):
        _check_fsdp_modules(modules)

    def set_modules_to_backward_prefetch(self, modules):
        _check_fsdp_modules(modules)

    def set_gradient_divide_factor(self, factor):
        """Divide the summed gradient by `factor` instead of taking the mean."""
        self.__dict__[_STATE].gradient_divide_factor = float(factor)

    def reset_iter_state(self):
        pass


def _check_fsdp_modules(modules):
    for m in modules:
        if not isinstance(m, FSDPModule):
            raise ValueError(f"Expects FSDPModule but got {type(m).__name__}: {m}")


_CLASSES = {}


def _fsdp_class(cls):
    new = _CLASSES.get(cls)
    if new is None:
        new = _CLASSES[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    return new


def register_fsdp_forward_method(module, method_name):
    """torch registers hooks around another forward-like method; cddp runs them around it."""
    if not isinstance(module, FSDPModule):
        return
    orig = getattr(module, method_name)

    def wrapped(*args, **kwargs):
        args, kwargs = _pre_forward(module, args, kwargs)
        try:
            out = orig(*args, **kwargs)
        finally:
            module.__dict__[_STATE].reshard()
        mp = module.__dict__[_STATE].mp
        return _cast_inputs(out, mp.output_dtype) if mp.output_dtype is not None else out
    object.__setattr__(module, method_name, wrapped)


# ---- fully_shard ----------------------------------------------------------------------------

def _collect(module, ignored):
    """[(param, [(module, name, fqn)])] of the group: not inside nested FSDP modules, not
    ignored, each parameter once."""
    return _params.collect(
        module, skip=lambda name, p: id(p) in ignored,
        claimed=lambda p: getattr(p, "_is_dtensor", False) and (
            "is already sharded by another fully_shard call (a parameter shared between "
            "groups); shard a common ancestor instead"),
        descend=lambda c: not isinstance(c, FSDPModule))


def fully_shard(module, *, mesh=None, reshard_after_forward=None, shard_placement_fn=None,
                mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy(),
                ignored_params=None, dp_mesh_dims=None):
    """Shard `module`'s parameters over `mesh` (see the module docstring); returns module,
    now an FSDPModule."""
    from ...nn.modules.module import Module
    if isinstance(module, (list, tuple)):
        return [fully_shard(m, mesh=mesh, reshard_after_forward=reshard_after_forward,
                            shard_placement_fn=shard_placement_fn, mp_policy=mp_policy,
                            offload_policy=offload_policy, ignored_params=ignored_params)
                for m in module]
    if not isinstance(module, Module):
        raise ValueError(f"fully_shard does not support containers that do not implement "
                         f"forward: {type(module).__name__}")
    if isinstance(module, FSDPModule):
        raise AssertionError("Each distinct composable distributed API can only be applied "
                             "to a module once. fully_shard has already been applied to "
                             f"the following module:\n{module}")
    if dp_mesh_dims is not None:
        raise NotImplementedError("fully_shard(dp_mesh_dims=...) is not supported by cddp")
    if not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"mp_policy must be a MixedPrecisionPolicy, got {mp_policy!r}")
    if not isinstance(offload_policy, OffloadPolicy):
        raise TypeError(f"offload_policy must be an OffloadPolicy, got {offload_policy!r}")
    if reshard_after_forward is not None and not isinstance(reshard_after_forward, (bool, int)):
        raise ValueError(f"reshard_after_forward should be a bool or int, got "
                         f"{type(reshard_after_forward)}")
    mesh = mesh if mesh is not None else _default_mesh()
    if mesh.ndim not in (1, 2):
        raise ValueError(f"fully_shard expects a 1D or 2D DeviceMesh but got {mesh}")
    if mesh.ndim == 2 and mesh.mesh_dim_names is None:
        raise AssertionError("Please init the 2D mesh for HSDP with mesh_dim_names specified")
    ignored = {id(p) for p in (ignored_params or ())}
    params = _collect(module, ignored)
    st = _FSDPState(module, mesh, mp_policy,
                    True if reshard_after_forward is None else reshard_after_forward)
    buckets = {}
    for p, places in params:
        fqn = places[0][2]
        if p.dim() == 0:
            raise NotImplementedError(f"fully_shard: 0-dim parameter {fqn!r} cannot be "
                                      "sharded on dim 0 by cddp; keep it in ignored_params")
        if shard_placement_fn is not None:
            pl = shard_placement_fn(p)
            if pl is not None and pl != Shard(0):
                raise NotImplementedError(f"fully_shard: shard_placement_fn gave {pl!r} for "
                                          f"{fqn!r}; cddp shards on dim 0 only")
        shape = tuple(p.shape)
        spec = DTensorSpec(mesh, st.placements, shape)
        start, length, chunk = chunk_range(shape[0], st.world, st.rank)
        with no_grad():
            local = p.detach().narrow(0, start, length).clone()
        assert tuple(local.shape) == _local_shape(spec)
        new = DTensor._make(local, spec, p.requires_grad, _DTensorParameter)
        row = 1
        for d in shape[1:]:
            row *= d
        b = buckets.setdefault(str(p.dtype), _Bucket(p.dtype))
        b.slots.append(_Slot(new, places, shape, chunk, row, b.block, length * row))
        b.block += chunk * row
        for m, name, _ in places:
            m._parameters[name] = new
    st.buckets = list(buckets.values())
    module.__dict__[_STATE] = st
    module.__class__ = _fsdp_class(type(module))
    module.register_forward_pre_hook(_pre_forward, prepend=True, with_kwargs=True)
    module.register_forward_hook(_post_forward, always_call=True)
    module._register_state_dict_hook(_state_dict_hook)
    module._register_load_state_dict_pre_hook(_load_pre_hook, with_module=True)
    module.register_load_state_dict_post_hook(_load_post_hook)
    return module
