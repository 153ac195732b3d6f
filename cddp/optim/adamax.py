"""cddp.optim.Adamax — torch.optim.Adamax (state: step, exp_avg, exp_inf); one fused C loop
per parameter (csrc/optim/fused.c)."""
from .. import zeros_like
from ._fused import _FusedOptimizer, scalar_tensor


class Adamax(_FusedOptimizer):
    _kind = "adamax"
    _states = ("exp_avg", "exp_inf")

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        self._check_differentiable(differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = scalar_tensor(0.0)
        st["exp_avg"] = zeros_like(p)
        st["exp_inf"] = zeros_like(p)

    def _hyper(self, g):
        beta1, beta2 = g["betas"]
        return (beta1, beta2, g["eps"], g["weight_decay"], g["maximize"])

    def _per_param(self, g, st):
        return (g["lr"] / (1 - g["betas"][0] ** st["step"].item()),)
