"""cddp.optim.RAdam — torch.optim.RAdam (state: step, exp_avg, exp_avg_sq;
decoupled_weight_decay); one fused C loop per parameter (csrc/optim/fused.c)."""
from .. import zeros_like
from ._fused import _FusedOptimizer, scalar_tensor
from .optimizer import _check_adam_hyperparameters


class RAdam(_FusedOptimizer):
    _kind = "radam"
    _states = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        _check_adam_hyperparameters(lr, betas, eps, weight_decay)
        self._check_differentiable(differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("decoupled_weight_decay", False)

    def _init_state(self, p, group, st):
        st["step"] = scalar_tensor(0.0)
        st["exp_avg"] = zeros_like(p)
        st["exp_avg_sq"] = zeros_like(p)

    def _hyper(self, g):
        beta1, beta2 = g["betas"]
        return (g["lr"], beta1, beta2, g["eps"], g["weight_decay"],
                g["decoupled_weight_decay"], g["maximize"])

    def _per_param(self, g, st):
        beta1, beta2 = g["betas"]
        step = st["step"].item()
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        rect = 0.0
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                    / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
        return (bias_correction1, bias_correction2 ** 0.5, rect)
