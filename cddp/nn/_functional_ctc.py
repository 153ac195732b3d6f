"""torch.nn.functional.ctc_loss (re-exported by cddp.nn.functional; nn.CTCLoss wraps it): the
argument checks and torch's reductions over the C recursion in csrc/nn/ctc.c (_C._ctc_loss,
per-sample negative log-likelihood, CtcLossBackward0 for d log_probs).

log_probs (T, N, C) or unbatched (T, C); targets padded (N, S) or concatenated
(sum(target_lengths),), any integer or float dtype (read as int64, as torch); input_lengths and
target_lengths both tensors of an integer dtype (flattened) or both tuples/lists of ints (torch
accepts nothing else). The C op checks every length and every label it reads.
"""
import operator

from .. import _C

Tensor = _C.Tensor


def _lengths(v, name):
    """(N,) int64 tensor of a lengths argument (an integer tensor, or a sequence of ints)."""
    if isinstance(v, Tensor):
        if v.is_floating_point() or v.dtype == _C.bool:
            raise RuntimeError(f"{name} must be integral")
        return v.reshape(-1).long().contiguous()
    return _C.tensor([operator.index(k) for k in v], dtype=_C.int64)


def _int_seq(v):
    """a tuple/list of ints (torch's "tuple of ints": no bools, no tensors)"""
    return isinstance(v, (tuple, list)) and \
        all(not isinstance(k, Tensor) and _index(k) is not None for k in v)


def _index(v):
    """v as an int (ints, NumPy ints, one-element integer tensors; not bool), else None"""
    if isinstance(v, bool):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """The CTC loss of each sample (-log of the summed probability of every alignment of its
    input that collapses to its target), reduced: 'none' (N,), 'sum', 'mean' (each loss divided
    by its target length clamped to >= 1, then the batch mean). zero_infinity: infinite losses
    (impossible alignments) and their gradients become 0."""
    from .functional import _reduction
    red = _reduction(reduction)
    both_tensors = isinstance(input_lengths, Tensor) and isinstance(target_lengths, Tensor)
    if not (isinstance(log_probs, Tensor) and isinstance(targets, Tensor) and
            (both_tensors or (_int_seq(input_lengths) and _int_seq(target_lengths))) and
            _index(blank) is not None):
        got = ", ".join(type(a).__name__ for a in (log_probs, targets, input_lengths,
                                                    target_lengths, blank))
        raise TypeError(f"ctc_loss() received an invalid combination of arguments - got "
                        f"({got}), but expected (Tensor log_probs, Tensor targets, tuple of "
                        f"ints input_lengths, tuple of ints target_lengths, int blank, ...) or "
                        f"(..., Tensor input_lengths, Tensor target_lengths, ...)")
    il = _lengths(input_lengths, "input_lengths")
    tl = _lengths(target_lengths, "target_lengths")
    batched = log_probs.dim() == 3
    lp = log_probs if batched else log_probs.unsqueeze(1)      # (T, C) -> (T, 1, C)
    if targets.dim() not in (1, 2):
        raise RuntimeError(f"Expected 1 to 2 dimensions, but got {targets.dim()}-dimensional "
                           f"tensor for argument #2 'targets' (while checking arguments for "
                           f"ctc_loss_allocate_outputs)")
    tg = targets.detach().long().contiguous()
    loss = _C._ctc_loss(lp, tg, il, tl, _index(blank), bool(zero_infinity))   # (N,)
    if red == 1:                                                           # mean
        return (loss / tl.clamp_min(1).to(loss.dtype)).mean()
    if red == 2:                                                           # sum
        return loss.sum()
    return loss if batched else loss.squeeze(0)
