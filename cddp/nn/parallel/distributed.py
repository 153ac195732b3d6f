"""cddp.nn.parallel.DistributedDataParallel — torch's DDP over a C reducer
(csrc/distributed/ddp/reducer.c).

Construction: every rank checks that the parameter shapes agree (a clear error names the
first parameter that differs), then parameters and buffers are broadcast from rank 0.
Buckets: parameters in reverse registration order, a first bucket of at most 1 MiB (torch's
rule: communication starts after the first few gradients), then bucket_cap_mb each.
Backward: each parameter's post-accumulate-grad hook (a C call) hands its grad to the
reducer. A gradient of at least 256 KiB is all-reduced where it is, in place on .grad, the
moment it is ready (and every unit before it has launched); the smaller ones of a bucket are
gathered in one flat buffer and reduced together. Each unit's all_reduce runs on the group's
worker thread, overlapping the rest of backward, when that thread has a core to itself, or
inline on the thread that completed the unit when local ranks occupy every core (see
_launch_inline); the hook that completes the last unit waits for all of them and leaves the
averaged grads in .grad (ReduceOp.AVG: the division is part of the reduction pass).
Ranks on one host: the backward's large tensors come from the process's shared arena
(csrc/core/arena.c), which the other ranks have mapped, so the shared-memory transport
all-reduces each gradient in place with no copy at all. Only what the autograd engine
allocates while running that backward comes from the arena (not tensors made between
forward and backward). One consequence a torch user would not expect:
a process forked while those gradients live (multiprocessing's fork start method) shares
their pages with its parent instead of copying them on write; CDDP_SHM_ZEROCOPY=0 turns the
arena off.

World size 1 (no comm hook): the reducer copies nothing and runs no collective; it only keeps
the bookkeeping behind torch's errors (a parameter marked ready twice, parameters that got no
gradient before the next forward).

gradient_as_bucket_view is on by default here (torch: off). It is safe in cddp because
AccumulateGrad adds into an existing .grad in place (never replaces it), so a gradient that
is a view of its bucket stays one through backward, zero_grad(set_to_none=False) zeroes it in
place, and set_to_none=True only drops the view (the next backward copies that gradient in
once and re-points .grad); nothing writes a bucket while its collective is in flight (the
reducer launches a bucket only when all its gradients have been accumulated). What a user
can observe: .grad of the small parameters are views into one shared buffer (their storage
is the bucket's), and a .grad kept across iterations without a clone sees the next
iteration's values with zero_grad(set_to_none=False) — as in torch; after
zero_grad(set_to_none=True) a kept .grad keeps its values (the reducer gives the bucket a
fresh buffer when an old view is still held). Pass False for separate tensors.
Large gradients (in-place units) are their own buckets either way.

find_unused_parameters=True: the forward's outputs pass through _DDPSink (torch's DDPSink:
clones), so the start of backward knows which outputs the loss used; the parameters they do
not reach are unused this iteration (zero gradient here, .grad left alone where no rank used
them), so an output left out of the loss costs no error. static_graph=True does that search
in the first iteration and reuses its result (torch's: the graph is the same every time).

Differences from torch, on purpose: attribute lookups the wrapper does not answer fall through
to the wrapped module; loading a state dict without the "module." prefix works too.
Accepted for torch compatibility and without effect here: output_device and dim (one device
per process), check_reduction, mixed_precision (no half dtypes yet),
skip_all_reduce_unused_params and batched_grad_copy (the reducer copies each gradient once
already). static_graph does not count a parameter's hook calls as torch's does: with
reentrant checkpointing that runs one module twice in a forward, that module's gradients are
reduced after their first part arrives and the ranks diverge (use_reentrant=False works). device_mesh (1-D, as
torch's) stands for its group: DDP reduces over device_mesh.get_group().
A unit whose gradients are complete launches as soon as every unit before it has: ranks
always issue the same all_reduce sequence, whatever order their gradients arrive in.
"""
import copy
import dataclasses
import os
import warnings
from contextlib import contextmanager
from functools import partial

from ... import _C
from ..._shape_ops import _real_views
from ...autograd.function import Function
from ...autograd.grad_mode import no_grad
from ..modules.module import Module

_DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024
_DEFAULT_BUCKET_CAP_MB = 25
# gradients of at least this many bytes are all-reduced in place, one collective each (below
# it, copying into a shared flat buffer costs less than a collective's latency)
_INPLACE_MIN_BYTES = 256 * 1024


def _launch_inline(world_size):
    """Whether every unit's all_reduce runs on the thread that completes it (inline) rather
    than on the group's worker thread. The worker only helps when it has a core of its own:
    with as many local ranks as cores (2 ranks on this project's 2-core machine) it can only
    time-slice with the rank's compute thread, and the hand-offs cost ~35 context switches a
    step; inline measured 0.92-0.94x of plain training there against 0.80-0.85x (bench/ddp.py,
    docs/benchmarks.md). CDDP_DDP_LAUNCH=inline | worker overrides the choice (auto)."""
    mode = os.environ.get("CDDP_DDP_LAUNCH", "auto")
    if mode in ("inline", "worker"):
        return mode == "inline"
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or world_size)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:                      # not Linux
        cpus = os.cpu_count() or 1
    return local >= cpus


def _dist():
    from ... import distributed
    return distributed


def _bucket_assignment(params, caps):
    """Indices per bucket: reverse registration order (the order backward produces grads),
    split by dtype, bucket k capped at caps[k] bytes (the last cap for the rest): torch's
    first-bucket rule is caps = [1 MiB, bucket_cap_mb], bucket_cap_mb_list gives its own."""
    buckets, current, size, cap, dtype = [], [], 0, caps[0], None
    for i in reversed(range(len(params))):
        p = params[i]
        nbytes = p.numel() * p.element_size()
        if current and (p.dtype != dtype or size + nbytes > cap):
            buckets.append(current)
            current, size = [], 0
            cap = caps[min(len(buckets), len(caps) - 1)]
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


def _buffer_flags(ddp, broadcast_buffers, forward_sync_buffers):
    """torch 2.13's buffer options: sets ddp.forward_sync_buffers (broadcast before forward)
    and returns whether construction broadcasts the buffers. broadcast_buffers is deprecated
    (a FutureWarning) and, unlike forward_sync_buffers, False also keeps them rank-local at
    construction."""
    if broadcast_buffers is not None:
        warnings.warn("Both `broadcast_buffers` and `forward_sync_buffers` were specified. "
                      "`broadcast_buffers` is deprecated and its value is ignored when "
                      "`forward_sync_buffers` is provided." if forward_sync_buffers is not None
                      else "`broadcast_buffers` is deprecated. Use `forward_sync_buffers` "
                      "instead. IMPORTANT: unlike `broadcast_buffers=False`, "
                      "`forward_sync_buffers=False` still syncs buffers at init.",
                      FutureWarning, stacklevel=3)
    if forward_sync_buffers is not None:
        ddp.forward_sync_buffers = bool(forward_sync_buffers)
        return True
    ddp.forward_sync_buffers = broadcast_buffers is None or bool(broadcast_buffers)
    return ddp.forward_sync_buffers


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
                 broadcast_buffers=None, init_sync=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=True, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None,
                 skip_all_reduce_unused_params=False, bucket_cap_mb_list=None,
                 batched_grad_copy=False, forward_sync_buffers=None):
        super().__init__()
        dist = _dist()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel expects a cddp.nn.Module, got "
                            f"{type(module).__name__}")
        if (delay_all_reduce_named_params is None) != (param_to_hook_all_reduce is None):
            raise ValueError("delay_all_reduce_named_params and param_to_hook_all_reduce need "
                             "to be set at the same time.")
        init_sync_buffers = _buffer_flags(self, broadcast_buffers, forward_sync_buffers)
        if device_ids is not None:
            if not isinstance(device_ids, (list, tuple)) or len(device_ids) != 1:
                raise ValueError("device_ids can only be None or contain a single element.")
            _C.empty(0).to(device_ids[0])      # validates; no GPU: the one-warning fallback
        self.module = module
        self.device_ids = device_ids
        self.output_device = output_device
        self.dim = dim
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = bool(static_graph)
        self._static_plan = None            # static_graph: (unused, skip) of the first iteration
        self.skip_all_reduce_unused_params = skip_all_reduce_unused_params
        self.batched_grad_copy = batched_grad_copy
        if device_mesh is not None:
            if process_group is not None:
                raise RuntimeError("Cannot specify both process_group and device_mesh arguments.")
            if device_mesh.ndim != 1:
                raise RuntimeError(f"Only 1D device mesh is supported, but got {device_mesh}.")
            process_group = device_mesh.get_group(mesh_dim=0)
        self.device_mesh = device_mesh
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        pg = dist.distributed_c10d._resolve(process_group, "DistributedDataParallel")
        if pg is None:
            raise RuntimeError("DistributedDataParallel: this rank is not in the process group")
        self._pg = pg
        self.world_size = dist.get_world_size(pg)
        self.rank = dist.get_rank(pg)
        # torch's opt-out (_set_params_and_buffers_to_ignore_for_model): neither broadcast
        # nor reduced
        self.parameters_to_ignore = set(getattr(module, "_ddp_params_and_buffers_to_ignore",
                                                ()))
        named = [(n, p) for n, p in module.named_parameters()
                 if p.requires_grad and n not in self.parameters_to_ignore]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have "
                               "any parameter that requires a gradient.")
        meta = [n for n, p in module.named_parameters() if p.is_meta]
        meta += [n for n, b in module.named_buffers() if b.is_meta]
        if meta:
            raise RuntimeError(
                f"DistributedDataParallel: {meta[0]} (and {len(meta) - 1} more) is on the meta "
                "device and has no values to broadcast; materialize the module first "
                "(module.to_empty(device='cpu'), then initialize or load its weights)")
        self._param_names = [n for n, _ in named]
        self._params = _real_views([p for _, p in named])    # complex: reduced as real views
        if init_sync:
            self._check_shapes(named)
            self._sync_module_states(init_sync_buffers)
        caps = [int(c * 1024 * 1024) for c in bucket_cap_mb_list or ()]
        cap = _DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
        self.bucket_bytes_cap = max(caps) if caps else int(cap * 1024 * 1024)
        first = (_DEFAULT_FIRST_BUCKET_BYTES if bucket_cap_mb is None and not caps
                 else self.bucket_bytes_cap)
        buckets = _bucket_assignment(self._params, caps or [first, self.bucket_bytes_cap])
        self._bucket_indices = buckets
        self.reducer = _C.Reducer(self._params, buckets, pg._c, self.world_size,
                                  bool(gradient_as_bucket_view), _INPLACE_MIN_BYTES,
                                  _launch_inline(self.world_size))
        mark = self.reducer.mark_ready          # hook(param) -> mark_ready(i, param), in C
        self._hook_handles = [p.register_post_accumulate_grad_hook(partial(mark, i))
                              for i, p in enumerate(self._params)]
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self._join_config = _join()._JoinConfig.construct_disabled_join_config()
        self._join_iters = 0
        self._divide_by_initial_world_size = True
        self._comm_hook = None
        self._comm_hook_run = None

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

    def _sync_module_states(self, buffers=True):
        tensors = _real_views([p for n, p in self.module.named_parameters()
                               if n not in self.parameters_to_ignore])
        tensors += self._module_buffers() if buffers else []
        if self.world_size > 1 and tensors:
            self._broadcast_coalesced(tensors)

    @property
    def broadcast_buffers(self):
        """torch 2.13's alias of forward_sync_buffers."""
        return self.forward_sync_buffers

    @broadcast_buffers.setter
    def broadcast_buffers(self, value):
        self.forward_sync_buffers = value

    def _module_buffers(self):
        """The buffers DDP broadcasts (every forward that syncs them); a complex one as its
        real view."""
        if not self.parameters_to_ignore:          # the usual case: no names to look at
            return _real_views(list(self.module.buffers()))
        return _real_views([b for n, b in self.module.named_buffers()
                            if n not in self.parameters_to_ignore])

    def _buffers_to_sync(self):
        """The buffers the next forward broadcasts from rank 0 (torch's rule: before the
        first forward and after a synced training forward, not after a forward under
        no_grad or no_sync, which may run on some ranks only)."""
        if self.require_forward_param_sync and self.broadcast_buffers and self.world_size > 1:
            return self._module_buffers()
        return []

    @staticmethod
    def _set_params_and_buffers_to_ignore_for_model(module, params_and_buffers_to_ignore):
        """Names (as in module.named_parameters/named_buffers) DDP leaves alone: not
        broadcast, not reduced (torch's)."""
        module._ddp_params_and_buffers_to_ignore = params_and_buffers_to_ignore

    def will_sync_module_buffers(self):
        return bool(self._buffers_to_sync())

    # ---- forward -------------------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        if self._join_config.enable:
            work = _join().Join.notify_join_context(self)
            self._join_iters += 1
            if work is not None and not self._divide_by_initial_world_size:
                self.reducer.set_divide_factor(int(work.result()[0].item()))
        if self.reducer.unready():
            self._raise_unready()
        bufs = self._buffers_to_sync()
        if bufs:
            self._broadcast_coalesced(bufs, src=self._buffer_source(True))
        out = self._modules["module"](*inputs, **kwargs)
        sync = self.require_backward_grad_sync
        self.require_forward_param_sync = sync and _C.is_grad_enabled()
        if not (sync and (self.find_unused_parameters or self.static_graph) and
                _C.is_grad_enabled()):
            self.reducer.after_forward(sync)   # C: sync only under grad mode; prepare
            return out
        if self._static_plan is not None:      # static_graph: the first iteration's unused set
            self.reducer.set_sync(True)
            self.reducer.prepare_for_backward(*self._static_plan)
            return out
        live = list({id(t): t for t in _flatten_tensors(out) if t.requires_grad}.values())
        if not live:
            self._start_iteration([])
            return out
        # the iteration starts when backward reaches the outputs, once it is known which of
        # them the loss used (torch's DDPSink)
        sunk = dict(zip(map(id, live), _DDPSink.apply(self, *live)))
        return _map_tensors(out, lambda t: sunk.get(id(t), t))

    def _start_iteration(self, used_outputs):
        """find_unused_parameters / static_graph: the parameters the used outputs do not reach
        count as unused (zero gradient here; .grad left alone if unused on every rank)."""
        reached = _C._reachable_leaves(used_outputs)
        unused = [i for i, p in enumerate(self._params) if id(p) not in reached]
        skip = self._prepare_unused(unused)
        if self.static_graph:
            self._static_plan = (unused, skip)

    def _prepare_unused(self, unused):
        """find_unused_parameters: count each parameter's users over the group (torch leaves
        .grad alone for a parameter no rank used), then start the reducer's iteration."""
        self.reducer.set_sync(True)
        used = _C.ones(len(self._params), dtype=_C.int32)
        for i in unused:
            used[i] = 0
        _dist().all_reduce(used, group=self._pg)
        skip = [i for i, c in enumerate(used.tolist()) if c == 0]
        self.reducer.prepare_for_backward(unused, skip)
        return skip

    def _raise_unready(self):
        names = ", ".join(self._param_names[i] for i in self.reducer.unready())
        raise RuntimeError(
            "Expected to have finished reduction in the prior iteration before starting a "
            "new one. This error indicates that your module has parameters that were not "
            "used in producing loss. You can enable unused parameter detection by passing "
            "the keyword argument `find_unused_parameters=True` to "
            "`torch.nn.parallel.DistributedDataParallel`, and by making sure all `forward` "
            "function outputs participate in calculating loss. Parameters which did not "
            f"receive grad for rank {self.rank}: {names}")

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
        self._comm_hook_run = run
        self.reducer.set_comm_hook(run)

    def join(self, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
        """Uneven inputs (torch's Join over this model): a rank whose data ran out keeps
        shadowing the others' all_reduces (contributing zeros, so gradients stay divided by the
        initial world size) until every rank has left its loop; then every rank takes the model
        of the rank that ran the most iterations."""
        return _join().Join([self], enable, throw_on_early_termination,
                            divide_by_initial_world_size=divide_by_initial_world_size)

    # ---- Joinable (cddp.distributed.algorithms.join) ---------------------------------------

    def join_hook(self, **kwargs):
        self._divide_by_initial_world_size = kwargs.get("divide_by_initial_world_size", True)
        return _DDPJoinHook(self)

    @property
    def join_device(self):
        from ..._device import device
        return device("cpu")

    @property
    def join_process_group(self):
        return self._pg

    def _shadow_iteration(self, active_ranks):
        """The collectives one training iteration makes, in the order the active ranks make
        them, with zero gradients: the buffer broadcast, the count of each parameter's users
        (find_unused_parameters; this rank used none), then the reducer's own units, so the
        averaged gradients land in .grad as theirs do (a ZeRO joinable steps on them)."""
        bufs = self._buffers_to_sync()          # forward's rule and ignore list
        if bufs:
            self._broadcast_coalesced(bufs, src=self._buffer_source(False))
        for p in self._params:
            if p.grad is None:
                p.grad = _C.zeros_like(p)
            else:
                p.grad.detach().zero_()
        if not self._divide_by_initial_world_size:
            self.reducer.set_divide_factor(active_ranks)
        if self._static_plan is not None:    # the active ranks' forward: no count of users
            self.reducer.set_sync(True)
            self.reducer.prepare_for_backward(range(len(self._params)), self._static_plan[1])
            return
        if self.find_unused_parameters or self.static_graph:
            self._prepare_unused(range(len(self._params)))   # every unit reduces at once
            return
        from ...autograd.grad_mode import enable_grad
        with enable_grad():                  # the reducer syncs only under grad mode
            self.reducer.after_forward(True)
            for i, p in enumerate(self._params):
                self.reducer.mark_ready(i, p)

    def _buffer_source(self, active):
        """The group rank buffers are broadcast from: 0, or under Join the highest rank still
        training (rank 0 may have joined with stale buffers; torch's _find_common_rank)."""
        if not self._join_config.enable:
            return 0
        dist = _dist()
        r = _C.tensor([self.rank if active else -1], dtype=_C.int64)
        dist.all_reduce(r, op=dist.ReduceOp.MAX, group=self._pg)
        return int(r.item())

    def _sync_final_model(self):
        """As torch's: the rank that ran the most iterations (the highest such rank on ties)
        holds the model everyone should end with."""
        dist = _dist()
        key = _C.tensor([self._join_iters * self.world_size + self.rank], dtype=_C.int64)
        dist.all_reduce(key, op=dist.ReduceOp.MAX, group=self._pg)
        src = int(key.item()) % self.world_size
        if self.world_size > 1:
            self._broadcast_coalesced(list(self.module.parameters()) + self._module_buffers(),
                                      src=src)
        self._join_iters = 0

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


def _map_tensors(out, fn):
    """`out` with every tensor t in it replaced by fn(t): through lists, tuples (namedtuples
    too), dicts (copied, so subclasses such as HF's ModelOutput keep their type) and
    dataclass instances (copied); anything else is left as it is. A container none of whose
    tensors fn replaced is returned itself, not copied."""
    if isinstance(out, _C.Tensor):
        return fn(out)
    if isinstance(out, (list, tuple)):
        items = [_map_tensors(o, fn) for o in out]
        if all(a is b for a, b in zip(items, out)):
            return out
        if isinstance(out, list):
            return items
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    if isinstance(out, dict):
        items = {k: _map_tensors(v, fn) for k, v in out.items()}
        changed = {k: v for k, v in items.items() if v is not out[k]}
        if not changed:
            return out
        new = copy.copy(out)
        for k, v in changed.items():        # item by item: HF's ModelOutput refuses update()
            new[k] = v
        return new
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        fields = {f.name: getattr(out, f.name) for f in dataclasses.fields(out)}
        changed = {k: _map_tensors(v, fn) for k, v in fields.items()}
        changed = {k: v for k, v in changed.items() if v is not fields[k]}
        if not changed:
            return out
        new = copy.copy(out)
        for k, v in changed.items():
            object.__setattr__(new, k, v)
        return new
    return out


def _flatten_tensors(out):
    """Every tensor in a forward output, in _map_tensors's order (nothing is copied)."""
    found = []
    _map_tensors(out, lambda t: found.append(t) or t)
    return found


class _DDPSink(Function):
    """find_unused_parameters / static_graph: a forward's outputs pass through this node (as
    clones, torch's DDPSink), so backward meets it before any parameter's gradient and tells
    which outputs the loss used (the others bring no gradient); the reducer's iteration starts
    there with the parameters only the unused outputs reach counted as unused."""

    @staticmethod
    def forward(ctx, ddp, *outs):
        ctx.set_materialize_grads(False)
        ctx.ddp, ctx.outs = ddp, outs
        return tuple(o.clone() for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.ddp._start_iteration([o for o, g in zip(ctx.outs, grads) if g is not None])
        return (None,) + grads


def _join():
    from ...distributed.algorithms import join
    return join


class _DDPJoinHook:
    """DDP's part in Join: shadow each iteration the others still run; sync the final model."""

    def __init__(self, ddp):
        self.ddp = ddp

    def main_hook(self):
        self.ddp._shadow_iteration(self.active_ranks)

    def post_hook(self, is_last_joiner):
        self.ddp._sync_final_model()
