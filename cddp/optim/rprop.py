"""cddp.optim.Rprop — torch.optim.Rprop (resilient backpropagation): per element, the step
size grows by etaplus while the gradient keeps its sign and shrinks by etaminus when it flips
(and that element is then not moved, its remembered gradient zeroed), within step_sizes.

State as torch: step (0-dim, the default dtype), prev (the last gradient used), step_size
(starting at lr). The update is torch's single-tensor algorithm written with cddp tensor ops,
one parameter at a time; foreach only selects an implementation in torch and is ignored.
"""
from .. import _C
from .optimizer import Optimizer, _check_lr

__all__ = ["Rprop"]

_FLAG_DEFAULTS = (("foreach", None), ("maximize", False), ("differentiable", False),
                  ("capturable", False))


def _validate(lr, etas):
    _check_lr(lr)
    eta_minus, eta_plus = etas[0], etas[1]
    if not (0.0 < eta_minus < 1.0 and 1.0 < eta_plus):
        raise ValueError(f"Invalid eta values: {eta_minus}, {eta_plus}")


class Rprop(Optimizer):
    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _validate(lr, etas)
        if differentiable:
            raise NotImplementedError("cddp: differentiable=True is not supported")
        defaults = {"lr": lr, "etas": etas, "step_sizes": step_sizes, "foreach": foreach,
                    "maximize": maximize, "differentiable": differentiable,
                    "capturable": capturable}
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        # groups pickled by older versions may lack the newer flags
        for group in self.param_groups:
            for key, fallback in _FLAG_DEFAULTS:
                group.setdefault(key, fallback)

    def _update_group(self, group):
        etaminus, etaplus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        lr = float(group["lr"])
        for p in group["params"]:
            if p.grad is None:
                continue
            grad = p.grad
            state = self.state[p]
            if len(state) == 0:
                state["step"] = _C.zeros((), dtype=_C.get_default_dtype())
                state["prev"] = _C.zeros_like(p)
                state["step_size"] = _C.full_like(grad, lr)
            if group["maximize"]:
                grad = -grad
            prev, step_size = state["prev"], state["step_size"]
            state["step"] += 1

            agreement = (grad * prev).sign()
            grew, flipped = agreement > 0, agreement < 0
            factor = _C.where(grew, _C.full_like(grad, etaplus),
                              _C.where(flipped, _C.full_like(grad, etaminus),
                                       _C.ones_like(grad)))
            step_size.mul_(factor).clamp_(step_size_min, step_size_max)
            # after a sign flip the element stays put and the flip is forgotten
            grad = _C.where(flipped, _C.zeros_like(grad), grad)
            p.sub_(grad.sign() * step_size)
            prev.copy_(grad)
