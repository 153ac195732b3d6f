"""cddp.optim.Adadelta — torch.optim.Adadelta (state: step, square_avg, acc_delta); the
update is one fused C loop per parameter (csrc/optim/fused.c)."""
from .. import zeros_like
from ._fused import _FusedOptimizer, scalar_tensor
from .optimizer import _check_lr


class Adadelta(_FusedOptimizer):
    _kind = "adadelta"
    _states = ("square_avg", "acc_delta")

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        _check_lr(lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        self._check_differentiable(differentiable)
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = scalar_tensor(0.0)
        st["square_avg"] = zeros_like(p)
        st["acc_delta"] = zeros_like(p)

    def _hyper(self, g):
        return (g["lr"], g["rho"], g["eps"], g["weight_decay"], g["maximize"])
