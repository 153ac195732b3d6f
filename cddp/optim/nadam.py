"""cddp.optim.NAdam — torch.optim.NAdam (state: step, mu_product, exp_avg, exp_avg_sq;
momentum_decay, decoupled_weight_decay); one fused C loop per parameter
(csrc/optim/fused.c)."""
from .. import zeros_like
from ._fused import _FusedOptimizer, rounded, scalar_tensor
from .optimizer import _check_adam_hyperparameters


class NAdam(_FusedOptimizer):
    _kind = "nadam"
    _states = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        _check_adam_hyperparameters(lr, betas, eps, weight_decay)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        self._check_differentiable(differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("decoupled_weight_decay", False)

    def _init_state(self, p, group, st):
        st["step"] = scalar_tensor(0.0)
        st["mu_product"] = scalar_tensor(1.0)
        st["exp_avg"] = zeros_like(p)
        st["exp_avg_sq"] = zeros_like(p)

    def _hyper(self, g):
        beta1, beta2 = g["betas"]
        return (g["lr"], beta1, beta2, g["eps"], g["weight_decay"],
                g["decoupled_weight_decay"], g["maximize"])

    def _per_param(self, g, st):
        beta1, beta2 = g["betas"]
        lr, step = g["lr"], st["step"].item()
        bias_correction2 = 1 - beta2 ** step
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * g["momentum_decay"])))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * g["momentum_decay"])))
        mp = st["mu_product"]
        # torch: mu_product *= mu, in the tensor's dtype (mu rounded to it first)
        product = rounded(rounded(mp.item(), mp) * rounded(mu, mp), mp)
        st["mu_product"] = scalar_tensor(product, mp)
        mu_product_next = product * mu_next
        return (bias_correction2, -lr * (1.0 - mu) / (1.0 - product),
                (-lr * mu_next) / (1.0 - mu_product_next))
