"""cddp.optim.ASGD — torch.optim.ASGD (state: step, eta, mu, ax); one fused C loop per
parameter (csrc/optim/fused.c). eta and mu are 0-dim tensors as in torch, and the loop reads
them back as torch does (rounded to their dtype)."""
from .. import zeros_like
from ._fused import _FusedOptimizer, scalar_tensor
from .optimizer import _check_lr


class ASGD(_FusedOptimizer):
    _kind = "asgd"
    _states = ("ax",)

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        _check_lr(lr)
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        self._check_differentiable(differentiable)
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _init_state(self, p, group, st):
        st["step"] = scalar_tensor(0.0)
        st["eta"] = scalar_tensor(group["lr"])
        st["mu"] = scalar_tensor(1.0)
        st["ax"] = zeros_like(p)

    def _hyper(self, g):
        return (g["lambd"], g["weight_decay"], g["maximize"])

    def _per_param(self, g, st):
        return (st["eta"].item(), st["mu"].item())

    def _after_step(self, group, params):
        lr, lambd, alpha, t0 = group["lr"], group["lambd"], group["alpha"], group["t0"]
        for p in params:
            st = self.state[p]
            step = st["step"].item()
            # torch: eta.copy_(torch.as_tensor(...)): rounded to the default dtype first
            eta = scalar_tensor(lr / ((1 + lambd * lr * step) ** alpha)).item()
            mu = scalar_tensor(1 / max(1, step - t0)).item()
            st["eta"] = scalar_tensor(eta, st["eta"])
            st["mu"] = scalar_tensor(mu, st["mu"])
