"""cddp.optim.RMSprop — torch.optim.RMSprop (state: step, square_avg, momentum_buffer when
momentum > 0, grad_avg when centered); one fused C loop per parameter (csrc/optim/fused.c)."""
from .. import zeros_like
from ._fused import _FusedOptimizer, scalar_tensor
from .optimizer import _check_lr


class RMSprop(_FusedOptimizer):
    _kind = "rmsprop"
    _states = ("square_avg", "grad_avg", "momentum_buffer")

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        _check_lr(lr)
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        self._check_differentiable(differentiable)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                        maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("momentum", 0)
            group.setdefault("centered", False)

    def _init_state(self, p, group, st):
        st["step"] = scalar_tensor(0.0)
        st["square_avg"] = zeros_like(p)
        if group["momentum"] > 0:
            st["momentum_buffer"] = zeros_like(p)
        if group["centered"]:
            st["grad_avg"] = zeros_like(p)

    def _update_group(self, group):
        for p in group["params"]:             # options changed after the first step
            st = self.state[p]
            if p.grad is not None and st:
                if group["momentum"] > 0 and "momentum_buffer" not in st:
                    st["momentum_buffer"] = zeros_like(p)
                if group["centered"] and "grad_avg" not in st:
                    st["grad_avg"] = zeros_like(p)
        super()._update_group(group)

    def _hyper(self, g):
        return (g["lr"], g["alpha"], g["eps"], g["weight_decay"], g["momentum"], g["centered"],
                g["maximize"])
