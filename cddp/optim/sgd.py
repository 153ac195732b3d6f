"""cddp.optim.SGD — torch.optim.SGD's options and state; the update is one fused C loop per
parameter (csrc/optim.c, _sgd_step)."""
from .. import _C
from .optimizer import Optimizer, _check_lr, required


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 *, maximize=False, foreach=None, differentiable=False, fused=None):
        if lr is not required:
            _check_lr(lr)
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise NotImplementedError("cddp: differentiable=True is not supported")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=False, fused=fused)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)

    def _update_group(self, group):
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        grads = [p.grad for p in params]
        momentum = group["momentum"]
        bufs = [self.state[p].get("momentum_buffer") for p in params] if momentum != 0 \
            else [None] * len(params)
        _C._sgd_step(params, grads, bufs, float(group["lr"]), float(momentum),
                     float(group["dampening"]), float(group["weight_decay"]),
                     bool(group["nesterov"]), bool(group["maximize"]))
        if momentum != 0:
            for p, b in zip(params, bufs):
                self.state[p]["momentum_buffer"] = b
