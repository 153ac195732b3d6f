"""cddp.optim.Adagrad — torch.optim.Adagrad (state: step, sum, created at construction as
torch does); the update is one fused C loop per parameter (csrc/optim/fused.c)."""
from .. import full_like
from ._fused import _FusedOptimizer, scalar_tensor
from .optimizer import _check_lr


class Adagrad(_FusedOptimizer):
    _kind = "adagrad"
    _states = ("sum",)

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, foreach=None, *, maximize=False, differentiable=False, fused=None):
        _check_lr(lr)
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: "
                             f"{initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        self._check_differentiable(differentiable)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, group, self.state[p])

    def _init_state(self, p, group, st):
        st["step"] = scalar_tensor(0.0)
        st["sum"] = full_like(p, group["initial_accumulator_value"])

    def _hyper(self, g):
        return (g["weight_decay"], g["eps"], g["maximize"])

    def _per_param(self, g, st):
        return (g["lr"] / (1 + (st["step"].item() - 1) * g["lr_decay"]),)

    def share_memory(self):
        """Move the accumulators into shared memory (torch's Adagrad.share_memory)."""
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["sum"].share_memory_()
