"""cddp.distributed.fsdp._flat_param — FlatParameter and FlatParamHandle: one FSDP unit's
parameters as one flat vector, of which each rank keeps a contiguous shard.

Contract:
- The unit's parameters, in their module.named_parameters order (each shared parameter
  once), are concatenated (reshape(-1)), zero-padded to S * W elements (W: the shard group's
  size, S = ceil(N / W)) and rank r keeps elements [r*S, (r+1)*S) as the FlatParameter
  (torch's layout: its chunk() of the padded vector). NO_SHARD keeps all N, unpadded.
  The originals are removed from their modules' _parameters.
- unshard() is differentiable: its forward all-gathers the shards (cast to param_dtype
  first) into the padded full vector; its backward takes the full vector's gradient, casts
  it to reduce_dtype, divides by the pre-factor, reduce-scatters it over the shard group,
  all-reduces it over the replica group (NO_SHARD, hybrid), divides by the post-factor
  (pre * post = the data-parallel world size: the gradient is the mean over ranks, split as
  torch splits it) and returns it, cast back to the FlatParameter's dtype, as the shard's
  gradient, which autograd accumulates into FlatParameter.grad. With sync_gradients off
  (no_sync) it instead adds the unsharded gradient, in the FlatParameter's dtype, into a
  local accumulator that the next synchronized backward adds before reducing.
- use_unsharded_views(full) sets each original name on its module as a plain tensor view
  of `full` (narrow + view), so the module's forward reads them as before and autograd
  routes their gradients into unshard()'s backward; drop_views() puts back, under the same
  names, zero-memory placeholders (a zero expanded to the parameter's shape, in its dtype)
  that stand there outside forward, so reprs and shape checks keep working; their values
  are not the parameters' (read those with summon_full_params or state_dict).
- unflatten_as_params() / reflatten(writeback) swap the FlatParameter for nn.Parameter
  views of a gathered full-precision vector (summon_full_params, state dicts), in each
  module's original _parameters order; writeback copies this rank's slice back.

Differences from torch: no alignment padding between parameters (torch adds it only for
use_orig_params); the full vector lives until autograd frees the graph that saved its views
(torch frees it after forward under FULL_SHARD and gathers again in backward, which needs
storage resizing cddp does not offer), so FULL_SHARD holds the memory SHARD_GRAD_OP does;
no_sync accumulates in the parameter dtype rather than in param_dtype.
"""
from collections import OrderedDict

from ...autograd.function import Function
from ...autograd.grad_mode import no_grad
from ...nn.parameter import Parameter
from .. import distributed_c10d as _c10d

FLAT_PARAM = "_flat_param"


class FlatParameter(Parameter):
    """This rank's shard of one unit's flattened parameters (what the optimizer steps).
    Metadata, as torch names it: _fqns, _shapes, _numels, _unpadded_unsharded_size,
    _padded_unsharded_size, _sharded_size."""


def _predivide_factor(world):
    """Torch's split of the mean's division (against overflow in low precision): double f
    while f divides world and f is below world / f; divide by f before the reduction and
    by world / f after."""
    f = 1
    while world % f == 0 and world / f > f:
        f *= 2
    return float(f)


class _ParamInfo:
    """One original parameter: its first name (fqn, relative to the wrapped module), shape,
    size, offset in the flat vector, and every (module, attribute) that refers to it."""
    __slots__ = ("fqn", "shape", "numel", "offset", "places")

    def __init__(self, fqn, shape, numel, offset, places):
        self.fqn, self.shape, self.numel, self.offset, self.places = \
            fqn, shape, numel, offset, places


class _Unshard(Function):
    """full = all-gather(shard); d full -> reduce-scattered mean gradient of the shard."""

    @staticmethod
    def forward(ctx, flat_param, handle):
        ctx.handle = handle
        return handle.gather(flat_param, handle.param_dtype)

    @staticmethod
    def backward(ctx, grad):
        return ctx.handle.reduce_grad(grad), None


class FlatParamHandle:
    """Flattening, sharding and (un)sharding of one unit (see the module docstring)."""

    def __init__(self, wrapped, params, plan, mixed_precision, sync_module_states):
        """params: [(Parameter, [(module, name, fqn), ...])] in flattening order."""
        first = params[0][0]
        for p, places in params:
            if p.dtype != first.dtype:
                raise ValueError(f"Must flatten tensors with uniform dtype but got "
                                 f"{first.dtype} and {p.dtype} ({places[0][2]})")
            if p.requires_grad != first.requires_grad:
                raise ValueError("Must flatten tensors with uniform ``requires_grad`` when "
                                 f"``use_orig_params=False`` ({params[0][1][0][2]} has "
                                 f"requires_grad={first.requires_grad}, {places[0][2]} has "
                                 f"{p.requires_grad}); wrap them in separate units or freeze "
                                 "all of them")
        self.wrapped = wrapped
        self.plan = plan
        self.infos, offset = [], 0
        for p, places in params:
            n = p.numel()
            self.infos.append(_ParamInfo(places[0][2], tuple(p.shape), n, offset, places))
            offset += n
        self.numel = offset
        w = plan.shard_size
        self.shard_numel = -(-offset // w)
        self.padded_numel = self.shard_numel * w
        with no_grad():
            flat = first.detach().new_empty(self.padded_numel)
            for (p, _), info in zip(params, self.infos):
                flat.narrow(0, info.offset, info.numel).copy_(p.detach().reshape(-1))
            if self.padded_numel > self.numel:
                flat.narrow(0, self.numel, self.padded_numel - self.numel).zero_()
            if sync_module_states:
                for g in plan.broadcast_groups():
                    _c10d.broadcast(flat, src=_c10d.get_global_rank(g, 0), group=g)
            shard = flat if w == 1 else \
                flat.narrow(0, plan.shard_rank * self.shard_numel, self.shard_numel).clone()
        fp = FlatParameter(shard, requires_grad=first.requires_grad)
        fp._fqns = tuple(i.fqn for i in self.infos)
        fp._shapes = tuple(i.shape for i in self.infos)
        fp._numels = tuple(i.numel for i in self.infos)
        fp._unpadded_unsharded_size = (self.numel,)
        fp._padded_unsharded_size = (self.padded_numel,)
        fp._sharded_size = (self.shard_numel,)
        self.flat_param = fp
        mp = mixed_precision
        self.param_dtype = (mp.param_dtype if mp is not None else None) or first.dtype
        self.reduce_dtype = (mp.reduce_dtype if mp is not None else None) or self.param_dtype
        self.predivide = _predivide_factor(plan.dp_world)
        self.postdivide = plan.dp_world / self.predivide
        self.sync_gradients = True
        self._pending = None            # unsharded gradient accumulated under no_sync
        # each module's original _parameters order, to restore it when unflattening
        self._orig_order = {}
        for _, places in params:
            for module, name, _ in places:
                self._orig_order.setdefault(id(module), list(module._parameters))
        for p, places in params:
            for module, name, _ in places:
                module._parameters.pop(name, None)
            p._fsdp_flattened = True
        # outside forward each name holds a zero-memory stand-in of the right shape and
        # dtype (zeros expanded), so shape checks and reprs that read it keep working
        zero = first.detach().new_zeros(())
        self._placeholders = [zero.expand(i.shape) for i in self.infos]
        wrapped._parameters[FLAT_PARAM] = fp
        self.drop_views()
        self.unflattened = False

    # ---- gather / reduce ------------------------------------------------------------------

    def gather(self, shard, dtype):
        """The padded full vector (a new tensor) from every rank's `shard`, in `dtype`."""
        t = shard.detach()
        if self.plan.shard_size == 1:
            return t.to(dtype) if t.dtype != dtype else t.clone()
        if t.dtype != dtype:
            t = t.to(dtype)
        out = t.new_empty(self.padded_numel)
        _c10d.all_gather_into_tensor(out, t.contiguous(), group=self.plan.shard)
        return out

    def gather_like(self, t):
        """Full padded vector of a shard-shaped tensor (optimizer state), its own dtype."""
        return self.gather(t, t.dtype)

    def reduce_grad(self, grad):
        """The shard's mean gradient from the full vector's local gradient (or None,
        accumulating locally, under no_sync)."""
        dtype = self.flat_param.dtype
        if not self.sync_gradients:
            g = grad.to(dtype) if grad.dtype != dtype else grad.clone()
            if self._pending is None:
                self._pending = g
            else:
                self._pending.add_(g)
            return None
        g, owned = grad, False
        if self._pending is not None:
            g = self._pending.add_(grad.to(dtype) if grad.dtype != dtype else grad)
            self._pending, owned = None, True
        if g.dtype != self.reduce_dtype:
            g, owned = g.to(self.reduce_dtype), True
        if self.predivide != 1:
            g, owned = g.div(self.predivide), True
        plan = self.plan
        if plan.shard_size > 1:
            out = g.new_empty(self.shard_numel)
            _c10d.reduce_scatter_tensor(out, g.contiguous(), group=plan.shard)
        else:
            out = g if owned else g.clone()
        if plan.replicate_size > 1:
            _c10d.all_reduce(out, group=plan.replicate)
        if self.postdivide != 1:
            out.div_(self.postdivide)
        return out.to(dtype) if out.dtype != dtype else out

    # ---- forward views --------------------------------------------------------------------

    def unshard(self):
        """The full vector in param_dtype, differentiable w.r.t. the FlatParameter."""
        return _Unshard.apply(self.flat_param, self)

    def views(self, full):
        return [full.narrow(0, i.offset, i.numel).view(i.shape) for i in self.infos]

    def use_unsharded_views(self, full):
        for info, v in zip(self.infos, self.views(full)):
            for module, name, _ in info.places:
                setattr(module, name, v)

    def drop_views(self):
        """Replace the views by the placeholders (the full vector is no longer referenced
        by the modules)."""
        for info, ph in zip(self.infos, self._placeholders):
            for module, name, _ in info.places:
                setattr(module, name, ph)

    # ---- full parameters as nn.Parameters -------------------------------------------------

    def unflatten_as_params(self, with_grads=False):
        """Register the originals as Parameter views of the gathered full-precision vector
        (collective); the FlatParameter leaves the wrapped module's _parameters."""
        fp = self.flat_param
        full = self.gather(fp, fp.dtype)
        params = [Parameter(v, requires_grad=fp.requires_grad) for v in self.views(full)]
        if with_grads and fp.grad is not None:
            for p, g in zip(params, self.views(self.gather(fp.grad, fp.grad.dtype))):
                p.grad = g
        self.wrapped._parameters.pop(FLAT_PARAM, None)
        new = {}
        for info, p in zip(self.infos, params):
            for module, name, _ in info.places:
                module.__dict__.pop(name, None)
                new.setdefault(id(module), (module, {}))[1][name] = p
        for module, named in new.values():
            current = module._parameters
            merged = OrderedDict()
            for k in self._orig_order[id(module)]:
                if k in named:
                    merged[k] = named[k]
                elif k in current:
                    merged[k] = current[k]
            for k, v in current.items():
                merged.setdefault(k, v)
            current.clear()
            current.update(merged)
        self.unflattened = True

    def reflatten(self, writeback):
        """Undo unflatten_as_params; writeback copies this rank's slice of the originals'
        current values (whatever objects now sit under their names) into the shard."""
        if writeback:
            current = [info.places[0][0]._parameters.get(info.places[0][1])
                       for info in self.infos]
            self.write_shard(self.flat_param.detach(), current)
        for info in self.infos:
            for module, name, _ in info.places:
                module._parameters.pop(name, None)
        self.wrapped._parameters[FLAT_PARAM] = self.flat_param
        self.drop_views()
        self.unflattened = False

    def write_shard(self, shard, tensors):
        """Copy into `shard` (this rank's slice of the padded flat layout) the part of each
        full-shaped tensor (one per original parameter; None: leave) that falls in it."""
        lo = self.plan.shard_rank * self.shard_numel if self.plan.shard_size > 1 else 0
        hi = lo + shard.numel()
        with no_grad():
            for info, t in zip(self.infos, tensors):
                if t is None:
                    continue
                if t.numel() != info.numel:
                    raise ValueError(f"{info.fqn}: expected {info.numel} elements (shape "
                                     f"{list(info.shape)}), got shape {list(t.shape)}")
                a, b = max(lo, info.offset), min(hi, info.offset + info.numel)
                if a < b:
                    shard.narrow(0, a - lo, b - a).copy_(
                        t.detach().reshape(-1).narrow(0, a - info.offset, b - a))
