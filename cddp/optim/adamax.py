"""cddp.optim.Adamax — torch.optim.Adamax (state: step, exp_avg, exp_inf); one fused C loop
per parameter (csrc/optim/fused.c)."""
from .. import zeros_like
from ._fused import _FusedOptimizer, scalar_tensor
from .optimizer import _check_adam_hyperparameters


class Adamax(_FusedOptimizer):
    _kind = "adamax"
    _states = ("exp_avg", "exp_inf")

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        _check_adam_hyperparameters(lr, betas, eps, weight_decay)
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
