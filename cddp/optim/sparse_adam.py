"""cddp.optim.SparseAdam — torch.optim.SparseAdam: Adam whose moments and parameter move only
where the gradient has entries (the lazy Adam of sparse embedding training: a row never looked
up keeps its moments, they do not decay).

cddp has no sparse tensors: Embedding(sparse=True) gives a dense gradient whose untouched rows
are zero. So the entries here are the rows (slices along dim 0; elements of a 1-D parameter)
where the gradient is nonzero — torch's coalesced indices of such a gradient, except that a
looked-up row whose gradient is exactly zero counts as absent (torch would decay its moments).
Dense gradients are accepted for that reason, where torch's SparseAdam refuses them.

State as torch: step (an int), exp_avg, exp_avg_sq. The update is torch's sparse_adam with
cddp tensor ops on the selected rows (index_select, then index_copy_ back)."""
import math

from .. import _C
from .optimizer import Optimizer

__all__ = ["SparseAdam"]


class SparseAdam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        if isinstance(lr, _C.Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 < lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "maximize": maximize})

    def _update_group(self, group):
        beta1, beta2 = group["betas"]
        lr, eps = float(group["lr"]), group["eps"]
        for p in group["params"]:
            if p.grad is None:
                continue
            grad = -p.grad if group["maximize"] else p.grad
            state = self.state[p]
            if len(state) == 0:
                state["step"] = 0
                state["exp_avg"] = _C.zeros_like(p)
                state["exp_avg_sq"] = _C.zeros_like(p)
            state["step"] += 1
            rows = grad.reshape(grad.shape[0], -1) if grad.dim() > 1 else grad.reshape(-1, 1)
            idx = (rows != 0).any(1).nonzero().reshape(-1)        # the gradient's entries
            if idx.numel() == 0:
                continue
            g = grad.index_select(0, idx)
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            m = exp_avg.index_select(0, idx)
            v = exp_avg_sq.index_select(0, idx)
            m = m + (g - m) * (1 - beta1)
            v = v + (g * g - v) * (1 - beta2)
            exp_avg.index_copy_(0, idx, m)
            exp_avg_sq.index_copy_(0, idx, v)
            step = state["step"]
            step_size = lr * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
            p.index_copy_(0, idx, p.index_select(0, idx) - step_size * m / (v.sqrt() + eps))
