"""cddp.optim.Adam / AdamW — torch's options and state ("step", "exp_avg", "exp_avg_sq",
"max_exp_avg_sq"); the update is one fused C loop per parameter (csrc/optim.c, _adam_step)."""
from .. import _C
from .optimizer import Optimizer, _check_adam_hyperparameters


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        _check_adam_hyperparameters(lr, betas, eps, weight_decay)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay or self._decoupled)
        super().__init__(params, defaults)

    def _update_group(self, group):
        from .. import zeros_like, tensor
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        amsgrad = group["amsgrad"]
        eas, easq, maxs, steps = [], [], [], []
        for p in params:
            st = self.state[p]
            if len(st) == 0:
                st["step"] = tensor(0.0)
                st["exp_avg"] = zeros_like(p)
                st["exp_avg_sq"] = zeros_like(p)
                if amsgrad:
                    st["max_exp_avg_sq"] = zeros_like(p)
            st["step"] = tensor(st["step"].item() + 1.0)
            steps.append(st["step"].item())
            eas.append(st["exp_avg"])
            easq.append(st["exp_avg_sq"])
            if amsgrad:
                maxs.append(st["max_exp_avg_sq"])
        beta1, beta2 = group["betas"]
        _C._adam_step(params, [p.grad for p in params], eas, easq, maxs if amsgrad else None,
                      steps, float(group["lr"]), float(beta1), float(beta2), float(group["eps"]),
                      float(group["weight_decay"]), bool(amsgrad), bool(group["maximize"]),
                      bool(group.get("decoupled_weight_decay", self._decoupled)))


class AdamW(Adam):
    """Adam with decoupled weight decay (default weight_decay=1e-2, as torch)."""
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
