"""PowerSGD gradient compression for DDP (torch.distributed.algorithms.ddp_comm_hooks.
powerSGD_hook; Vogels et al., 2019): each bucket's matrix-shaped gradients travel as two thin
factors instead of themselves.

    state = PowerSGDState(process_group=None, matrix_approximation_rank=1,
                          start_powerSGD_iter=10)
    ddp_model.register_comm_hook(state, powerSGD_hook)

Per bucket, once state.iter reaches start_powerSGD_iter (before that: plain averaging, as
allreduce_hook):
1. error feedback: the bucket += what compression lost last time (error_dict).
2. each gradient viewed as an (n, m) matrix (n = its first dimension) is compressed when
   (n + m) * r * min_compression_rate < n * m (r = min(n, m, matrix_approximation_rank));
   the others are averaged uncompressed in one all_reduce.
3. Q (m, r): the previous step's (warm start), else standard normal draws from a generator
   seeded by state.rng (a NumPy RandomState(random_seed), so every rank draws the same);
   orthogonalized (Gram-Schmidt for r <= 2 or half precision, QR otherwise).
4. P = M Q, all_reduced (summed) and orthogonalized; Q = M^T P, all_reduced and divided by the
   world size; M ~ P Q^T written back into the bucket.
5. error_dict = the bucket as it entered (after step 1) minus what it became.
The steps, their order, the generator and the rules are torch's, so a run with the same seed
makes the same updates as torch's hook. batched_powerSGD_hook compresses the whole bucket as
one square-ish matrix (torch's). The hook works synchronously (the returned future is done).
"""
import math

import numpy as np

from .... import _C
from ....futures import Future

__all__ = ["PowerSGDState", "powerSGD_hook", "batched_powerSGD_hook"]


def _dist():
    from .... import distributed
    return distributed


def _orthogonalize(matrices, epsilon=0):
    """Orthonormal columns for each (n, r) matrix of the (B, n, r) batch, in place."""
    rank = matrices.shape[2]
    if rank <= 2 or matrices.dtype in (_C.float16, _C.bfloat16):
        for i in range(rank):
            col = matrices[:, :, i:i + 1]
            norm = _C.norm(col, dim=1, keepdim=True)
            col.div_(norm + epsilon if epsilon else norm)
            if i + 1 < rank:
                rest = matrices[:, :, i + 1:]
                rest.sub_(_C.sum(col * rest, dim=1, keepdim=True) * col)
    else:
        from .... import linalg
        q, _ = linalg.qr(matrices)
        matrices.copy_(q)


def _should_compress(n, m, rank, min_compression_rate):
    uncompressed, compressed = n * m, (n + m) * rank
    return compressed * min_compression_rate < uncompressed, uncompressed, compressed


class PowerSGDState:
    """What the hook keeps between steps (torch's fields and defaults)."""

    def __init__(self, process_group, matrix_approximation_rank=1, start_powerSGD_iter=1_000,
                 min_compression_rate=2, use_error_feedback=True, warm_start=True,
                 orthogonalization_epsilon=0, random_seed=0,
                 compression_stats_logging_frequency=10_000,
                 batch_tensors_with_same_shape=False):
        if (use_error_feedback or warm_start) and start_powerSGD_iter <= 1:
            raise ValueError("Expect `start_powerSGD_iter` > 1 if `use_error_feedback` or "
                             "`warm_start` is enabled, because PowerSGD can only be applied "
                             "after the first two iterations in DDP.")
        self.process_group = process_group
        self.matrix_approximation_rank = matrix_approximation_rank
        self.start_powerSGD_iter = start_powerSGD_iter
        self.min_compression_rate = min_compression_rate
        self.use_error_feedback = use_error_feedback
        self.warm_start = warm_start
        self.orthogonalization_epsilon = orthogonalization_epsilon
        self.rng = np.random.RandomState(random_seed)
        self.error_dict, self.p_memory_dict, self.q_memory_dict = {}, {}, {}
        self.iter = 0
        self.total_numel_before_compression = 0
        self.total_numel_after_compression = 0
        self.compression_stats_logging_frequency = max(1, compression_stats_logging_frequency)
        self.next_stats_report = 0
        self.batch_tensors_with_same_shape = batch_tensors_with_same_shape

    def maybe_increase_iter(self, bucket):
        if bucket.is_last():
            self.iter += 1

    def compression_stats(self):
        after = self.total_numel_after_compression
        rate = self.total_numel_before_compression / after if after > 0 else 0
        return rate, self.total_numel_before_compression, after

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "process_group"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.process_group = None


def _done(value):
    fut = Future()
    fut.set_result(value)
    return fut


def _group(state):
    dist = _dist()
    return state.process_group if state.process_group is not None else dist.group.WORLD


def _random_like(state, shapes, dtype):
    """Standard normal draws for each shape, from a generator seeded by state.rng (torch's
    fork_rng + manual_seed: the global generator is left as it was)."""
    from .... import random as _random
    seed = state.rng.randint(1_000_000_000)
    saved = _random.get_rng_state()
    try:
        _random.manual_seed(seed)
        return [_C.randn(*s, dtype=dtype) for s in shapes]
    finally:
        _random.set_rng_state(saved)


def _warmup(state, bucket):
    """Before start_powerSGD_iter: the bucket averaged plainly (allreduce_hook's future);
    after: None."""
    if state.iter >= state.start_powerSGD_iter:
        return None
    dist = _dist()
    group, buf = _group(state), bucket.buffer()
    state.maybe_increase_iter(bucket)
    buf.div_(dist.get_world_size(group))
    dist.all_reduce(buf, group=group)
    return _done(buf)


def _error_in(state, index, tensor):
    """Error feedback: tensor += what compression lost last step (zeros the first time);
    returns a copy of the sum, the reference for this step's error (None without feedback)."""
    if not state.use_error_feedback:
        return None
    if index in state.error_dict:
        tensor.add_(state.error_dict[index])
    else:
        state.error_dict[index] = _C.zeros(tensor.shape[0], dtype=tensor.dtype)
    return tensor.detach().clone()


def _finish(state, bucket, entered, now, buf):
    """Keep this step's error (entered - what was sent back), drop the factors without warm
    start, count the step; the hook's future."""
    if entered is not None:
        state.error_dict[bucket.index()] = entered - now
    if not state.warm_start:
        state.p_memory_dict.clear()
        state.q_memory_dict.clear()
    state.maybe_increase_iter(bucket)
    return _done(buf)


def powerSGD_hook(state, bucket):
    early = _warmup(state, bucket)
    if early is not None:
        return early
    dist = _dist()
    group = _group(state)
    world = dist.get_world_size(group)
    buf = bucket.buffer()                                      # (total,)
    index = bucket.index()
    entered = _error_in(state, index, buf)

    compress, plain = [], []
    p_size = q_size = 0
    for g in bucket.gradients():
        matrix = g.view(g.shape[0], -1)                        # (n, m)
        n, m = matrix.shape
        r = min(n, m, state.matrix_approximation_rank)
        worth, before, after = _should_compress(n, m, r, state.min_compression_rate)
        state.total_numel_before_compression += before
        if worth:
            compress.append(matrix)
            p_size, q_size = p_size + n * r, q_size + m * r
            state.total_numel_after_compression += after
        else:
            plain.append(g)
            state.total_numel_after_compression += before

    fresh = not state.warm_start or index not in state.p_memory_dict
    if fresh:
        state.p_memory_dict[index] = _C.empty(p_size, dtype=buf.dtype)
        state.q_memory_dict[index] = _C.empty(q_size, dtype=buf.dtype)

    by_shape = {}
    for matrix in compress:
        by_shape.setdefault(tuple(matrix.shape), []).append(matrix)
    batches = []                                               # (B, n, m) each
    for same in by_shape.values():
        if state.batch_tensors_with_same_shape and len(same) > 1:
            batches.append((_C.stack(same), same))
        else:
            batches += [(mat.unsqueeze(0), None) for mat in same]
    ps, qs, p_at, q_at = [], [], 0, 0
    for batch, _ in batches:
        b, n, m = batch.shape
        r = min(n, m, state.matrix_approximation_rank)
        ps.append(state.p_memory_dict[index][p_at:p_at + b * n * r].view(b, n, r))
        qs.append(state.q_memory_dict[index][q_at:q_at + b * m * r].view(b, m, r))
        p_at, q_at = p_at + b * n * r, q_at + b * m * r

    if fresh:
        for q, draw in zip(qs, _random_like(state, [tuple(q.shape) for q in qs], buf.dtype)):
            q.copy_(draw)
    for q in qs:
        _orthogonalize(q, state.orthogonalization_epsilon)
    for (batch, _), q, p in zip(batches, qs, ps):
        p.copy_(_C.bmm(batch, q))                              # (B, n, r)

    if plain:
        flat = _C.cat([g.reshape(-1) for g in plain])
        dist.all_reduce(flat, group=group)
        flat.div_(world)
        at = 0
        for g in plain:
            g.copy_(flat[at:at + g.numel()].view(tuple(g.shape)))
            at += g.numel()
    dist.all_reduce(state.p_memory_dict[index], group=group)
    for p in ps:
        _orthogonalize(p, state.orthogonalization_epsilon)
    for (batch, _), p, q in zip(batches, ps, qs):
        q.copy_(_C.bmm(batch.transpose(1, 2), p))              # (B, m, r)
    dist.all_reduce(state.q_memory_dict[index], group=group)
    state.q_memory_dict[index].div_(world)
    for (batch, originals), p, q in zip(batches, ps, qs):
        approx = _C.bmm(p, q.transpose(1, 2))                  # (B, n, m)
        if originals is None:
            batch.copy_(approx)                                # batch views the bucket
        else:
            for i, original in enumerate(originals):
                original.copy_(approx[i])
    return _finish(state, bucket, entered, buf, buf)


def batched_powerSGD_hook(state, bucket):
    """The whole bucket as one (s, s) matrix, s = ceil(sqrt(numel)), zero-padded; Q is
    orthogonalized every step, the error kept over the padded length (torch's)."""
    early = _warmup(state, bucket)
    if early is not None:
        return early
    dist = _dist()
    group = _group(state)
    world = dist.get_world_size(group)
    buf = bucket.buffer()                                      # (total,)
    index = bucket.index()
    total = buf.shape[0]
    side = math.ceil(math.sqrt(total))
    state.total_numel_before_compression += total
    state.total_numel_after_compression += side * state.matrix_approximation_rank * 2
    padded = _C.zeros(side * side, dtype=buf.dtype)
    padded[:total] = buf
    entered = _error_in(state, index, padded)
    matrix = padded.view(side, side)                           # (s, s)
    r = state.matrix_approximation_rank
    if not state.warm_start or index not in state.p_memory_dict:
        state.p_memory_dict[index] = _C.empty(side, r, dtype=buf.dtype)
        state.q_memory_dict[index] = _random_like(state, [(side, r)], buf.dtype)[0]
    p, q = state.p_memory_dict[index], state.q_memory_dict[index]    # (s, r) each
    _orthogonalize(q.unsqueeze(0), state.orthogonalization_epsilon)
    p.copy_(_C.matmul(matrix, q))
    dist.all_reduce(p, group=group)
    _orthogonalize(p.unsqueeze(0), state.orthogonalization_epsilon)
    q.copy_(_C.matmul(matrix.t(), p))
    dist.all_reduce(q, group=group)
    q.div_(world)
    matrix.copy_(_C.matmul(p, q.t()))
    buf.copy_(padded[:total])
    return _finish(state, bucket, entered, padded, buf)
