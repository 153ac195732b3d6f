"""cddp.nn.parallel.DistributedDataParallel — torch's DDP over a C reducer (csrc/reducer.c).

Construction: every rank checks that the parameter shapes agree (a clear error names the
first parameter that differs), then parameters and buffers are broadcast from rank 0.
Buckets: parameters in reverse registration order, a first bucket of about 1 MiB, then
bucket_cap_mb each; each bucket one contiguous buffer; grads are divided by the world size as
they are copied in. Backward: each parameter's post-accumulate-grad hook hands its grad to the
reducer; a full bucket's all_reduce is queued at once on the group's worker thread (overlapping
the rest of backward); the hook that completes the last bucket waits for all of them and leaves
the averaged grads in .grad.

Differences from torch, on purpose: attribute lookups the wrapper does not answer fall through
to the wrapped module; loading a state dict without the "module." prefix works too.
Accepted for torch compatibility and without effect here: output_device and dim (one device
per process), check_reduction, static_graph / _set_static_graph() (the reducer keeps no
per-graph cache to freeze), mixed_precision (no half dtypes yet), device_mesh.
A bucket whose gradients are complete launches as soon as every bucket before it has: ranks
always issue the same all_reduce sequence, whatever order their gradients arrive in.
"""
from contextlib import contextmanager

from ... import _C
from ...autograd.grad_mode import no_grad
from ..modules.module import Module

_DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024
_DEFAULT_BUCKET_CAP_MB = 25


def _dist():
    from ... import distributed
    return distributed


def _bucket_assignment(params, first_bytes, cap_bytes):
    """Indices per bucket: reverse registration order (the order backward produces grads),
    split by dtype, the first bucket capped at first_bytes, the rest at cap_bytes."""
    buckets, current, size, cap, dtype = [], [], 0, first_bytes, None
    for i in reversed(range(len(params))):
        p = params[i]
        nbytes = p.numel() * p.element_size()
        if current and (p.dtype != dtype or size + nbytes > cap):
            buckets.append(current)
            current, size, cap = [], 0, cap_bytes
        current.append(i)
        dtype = p.dtype
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


class _GradBucket:
    """What a comm hook receives (torch.distributed.GradBucket's common surface)."""

    def __init__(self, index, buffer, params):
        self._index, self._buffer, self._params = index, buffer, params

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def parameters(self):
        return list(self._params)

    def gradients(self):
        out, off = [], 0
        for p in self._params:
            out.append(self._buffer[off:off + p.numel()].view(tuple(p.shape)))
            off += p.numel()
        return out

    def is_last(self):
        return self._index == 0


def _param_difference(a, b):
    """What differs between two [name, shape, dtype] records, and what agrees:
    "name 'a.weight' vs 'b.weight' (shape [10, 512] and dtype float32 agree)"."""
    fields = [("name", repr(a[0]), repr(b[0])), ("shape", str(a[1]), str(b[1])),
              ("dtype", a[2], b[2])]
    differ = [f"{k} {x} vs {y}" for k, x, y in fields if x != y]
    agree = [f"{k} {x}" for k, x, y in fields if x == y]
    return ", ".join(differ) + (f" ({' and '.join(agree)} agree{'s' if len(agree) == 1 else ''})"
                                if agree else "")


class DistributedDataParallel(Module):
    """Data parallelism across processes: same signature as torch's."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None):
        super().__init__()
        dist = _dist()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel expects a cddp.nn.Module, got "
                            f"{type(module).__name__}")
        if device_ids is not None:
            if not isinstance(device_ids, (list, tuple)) or len(device_ids) != 1:
                raise ValueError("device_ids can only be None or contain a single element.")
            _C.empty(0).to(device_ids[0])      # validates; no GPU: the one-warning fallback
        self.module = module
        self.device_ids = device_ids
        self.output_device = output_device
        self.dim = dim
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = bool(static_graph)
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        pg = dist.distributed_c10d._resolve(process_group, "DistributedDataParallel")
        if pg is None:
            raise RuntimeError("DistributedDataParallel: this rank is not in the process group")
        self._pg = pg
        self.world_size = dist.get_world_size(pg)
        self.rank = dist.get_rank(pg)
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have "
                               "any parameter that requires a gradient.")
        self._param_names = [n for n, _ in named]
        self._params = [p for _, p in named]
        self._check_shapes(named)
        self._sync_module_states()
        cap = _DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
        self.bucket_bytes_cap = int(cap * 1024 * 1024)
        buckets = _bucket_assignment(self._params, min(_DEFAULT_FIRST_BUCKET_BYTES,
                                                       self.bucket_bytes_cap),
                                     self.bucket_bytes_cap)
        self._bucket_indices = buckets
        self.reducer = _C.Reducer(self._params, buckets, pg._c, self.world_size,
                                  bool(gradient_as_bucket_view))
        self._hook_handles = [p.register_post_accumulate_grad_hook(
            _ReadyHook(self.reducer, i)) for i, p in enumerate(self._params)]
        self.require_backward_grad_sync = True
        self._join_active = False
        self._comm_hook = None

    # ---- construction helpers ------------------------------------------------------------

    def _check_shapes(self, named):
        dist = _dist()
        mine = [[n, list(p.shape), str(p.dtype)] for n, p in named]
        everyone = [None] * self.world_size
        dist.all_gather_object(everyone, mine, group=self._pg)
        ref = everyone[0]
        for r, theirs in enumerate(everyone):
            if len(theirs) != len(ref):
                raise RuntimeError(f"DistributedDataParallel: rank {r} has {len(theirs)} "
                                   f"parameters requiring grad, rank 0 has {len(ref)}")
            for i, (mine0, other) in enumerate(zip(ref, theirs)):
                if list(mine0) != list(other):
                    raise RuntimeError(f"DistributedDataParallel: parameter #{i} differs "
                                       f"between rank 0 and rank {r}: "
                                       f"{_param_difference(mine0, other)}; every rank must "
                                       "build the same model")

    def _broadcast_coalesced(self, tensors, src=0):
        """Broadcast tensors from group rank src, one collective per dtype."""
        dist = _dist()
        by_dtype = {}
        for t in tensors:
            by_dtype.setdefault(str(t.dtype), []).append(t)
        for group in by_dtype.values():
            flat = _C.cat([t.detach().reshape(-1) for t in group])
            dist.broadcast(flat, src=dist.get_global_rank(self._pg, src), group=self._pg)
            off = 0
            with no_grad():
                for t in group:
                    n = t.numel()
                    t.copy_(flat[off:off + n].view(tuple(t.shape)))
                    off += n

    def _sync_module_states(self):
        tensors = [p for p in self.module.parameters()] + \
            [b for b in self.module.buffers()]
        if self.world_size > 1 and tensors:
            self._broadcast_coalesced(tensors)

    # ---- forward -------------------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        if self._join_active:
            self._join_announce(1)
            self._join_iters += 1
        unready = self.reducer.unready()
        if unready:
            names = ", ".join(self._param_names[i] for i in unready)
            raise RuntimeError(
                "Expected to have finished reduction in the prior iteration before starting a "
                "new one. This error indicates that your module has parameters that were not "
                "used in producing loss. You can enable unused parameter detection by passing "
                "the keyword argument `find_unused_parameters=True` to "
                "`torch.nn.parallel.DistributedDataParallel`, and by making sure all `forward` "
                "function outputs participate in calculating loss. Parameters which did not "
                f"receive grad for rank {self.rank}: {names}")
        if self.broadcast_buffers and self.world_size > 1:
            bufs = list(self.module.buffers())
            if bufs:
                self._broadcast_coalesced(bufs)
        out = self.module(*inputs, **kwargs)
        if _C.is_grad_enabled() and self.require_backward_grad_sync:
            self.reducer.set_sync(True)
            unused = skip = None
            if self.find_unused_parameters:
                reached = _C._reachable_leaves(_flatten_tensors(out))
                unused = [i for i, p in enumerate(self._params) if id(p) not in reached]
                # torch leaves .grad alone for parameters that no rank used: count users
                used = _C.ones(len(self._params), dtype=_C.int32)
                for i in unused:
                    used[i] = 0
                _dist().all_reduce(used, group=self._pg)
                skip = [i for i, c in enumerate(used.tolist()) if c == 0]
            self.reducer.prepare_for_backward(unused, skip)
        else:
            self.reducer.set_sync(False)
        return out

    # ---- torch's DDP surface -------------------------------------------------------------

    @contextmanager
    def no_sync(self):
        """Accumulate gradients locally; the first backward after the block reduces them."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def _set_static_graph(self):
        self.static_graph = True

    def register_comm_hook(self, state, hook):
        """hook(state, bucket) -> future whose wait() returns the reduced bucket tensor."""
        if self._comm_hook is not None:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be "
                               "called once.")
        if not callable(hook):
            raise TypeError("Communication hook must be callable.")
        self._comm_hook = hook
        params = self._params

        def run(index, buffer):
            bucket = _GradBucket(index, buffer,
                                 [params[i] for i in self.reducer.bucket_params(index)])
            return hook(state, bucket)
        self.reducer.set_comm_hook(run)

    @contextmanager
    def join(self, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
        """Uneven inputs: a rank whose data ran out keeps shadowing the others' all_reduces
        (contributing zeros) until every rank has left its loop."""
        if not enable:
            yield
            return
        self._join_active = True
        self._join_iters = 0
        try:
            yield
        finally:
            self._join_active = False
            self._join_drain(throw_on_early_termination)

    def _join_announce(self, flag):
        dist = _dist()
        t = _C.tensor([flag], dtype=_C.int64)
        dist.all_reduce(t, group=self._pg)
        return int(t.item())

    def _join_drain(self, throw):
        dist = _dist()
        while True:
            active = self._join_announce(0)
            if active == 0:
                break
            if throw:
                raise RuntimeError(f"Rank {self.rank} exhausted all inputs.")
            # shadow one iteration: zero buckets, in the same order the active ranks use
            if self.broadcast_buffers and self.world_size > 1:
                bufs = list(self.module.buffers())
                if bufs:
                    self._broadcast_coalesced(bufs)
            for buf in self.reducer.buckets:
                zero = _C.zeros_like(buf)
                dist.all_reduce(zero, group=self._pg)
        # as torch's _sync_final_model: the rank that ran the most iterations (the highest
        # such rank on ties) holds the model everyone should end with
        key = _C.tensor([self._join_iters * self.world_size + self.rank], dtype=_C.int64)
        dist.all_reduce(key, op=dist.ReduceOp.MAX, group=self._pg)
        src = int(key.item()) % self.world_size
        if self.world_size > 1:
            self._broadcast_coalesced(list(self.module.parameters()) + list(self.module.buffers()),
                                      src=src)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            module = self.__dict__.get("_modules", {}).get("module")
            if module is not None and name not in ("module",):
                return getattr(module, name)
            raise

    def __getstate__(self):
        raise RuntimeError("DistributedDataParallel objects cannot be pickled; save "
                           "model.module.state_dict() instead")


class _ReadyHook:
    """Post-accumulate-grad hook: reducer.mark_ready(index), a C call."""
    __slots__ = ("mark", "index")

    def __init__(self, reducer, index):
        self.mark = reducer.mark_ready
        self.index = index

    def __call__(self, param):
        self.mark(self.index)


def _flatten_tensors(out):
    """Every tensor in a forward output (tensors, sequences, dicts)."""
    if isinstance(out, _C.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            res.extend(_flatten_tensors(o))
        return res
    return []

