"""The shared driver of the optimizers whose update is csrc/optim/fused.c's `_fused_step`
(Adadelta, Adagrad, RMSprop, Adamax, NAdam, RAdam, ASGD).

Per step and parameter group, Python does only O(parameters) bookkeeping — create the state
on first use (torch's keys, order and dtypes), advance each parameter's "step" and compute
the scalars that depend on it — and C does every per-element operation in one pass per
parameter. Scalar state that torch keeps in a 0-dim tensor (step, NAdam's mu_product,
ASGD's eta and mu) is kept so too, rounded to that tensor's dtype exactly as torch rounds it.
"""
import numpy as np

from .. import _C
from .optimizer import Optimizer

KINDS = {"adadelta": 0, "adagrad": 1, "rmsprop": 2, "adamax": 3, "nadam": 4, "radam": 5,
         "asgd": 6}
_NP = {"float32": np.float32, "float64": np.float64}


def scalar_tensor(value, like=None):
    """A 0-dim tensor of torch's scalar-state dtype (the default dtype), or of like's."""
    from .. import get_default_dtype, tensor
    return tensor(value, dtype=like.dtype if like is not None else get_default_dtype())


def rounded(value, like):
    """value rounded to like's dtype (a 0-dim tensor), as a Python float: what torch reads
    back from a scalar tensor it has just written."""
    return float(_NP[str(like.dtype).split(".")[-1]](value))


class _FusedOptimizer(Optimizer):
    """Subclasses give _kind, _states (state tensor names in the C kernel's order),
    _init_state, _hyper (group -> floats) and, when needed, _per_param."""
    _kind = None
    _states = ()

    def _check_differentiable(self, differentiable):
        if differentiable:
            raise NotImplementedError("cddp: differentiable=True is not supported")

    def _init_state(self, p, group, st):
        raise NotImplementedError

    def _hyper(self, group):
        raise NotImplementedError

    def _per_param(self, group, st):
        """Scalars for this parameter's update, after its step was advanced (None: none)."""
        return None

    def _advance(self, st):
        st["step"] = scalar_tensor(st["step"].item() + 1.0, st["step"])
        return st["step"].item()

    def _update_group(self, group):
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        ps = []
        for p in params:
            st = self.state[p]
            if len(st) == 0:
                self._init_state(p, group, st)
            self._advance(st)
            ps.append(self._per_param(group, st))
        states = tuple([self.state[p].get(name) for p in params] for name in self._states)
        _C._fused_step(KINDS[self._kind], params, [p.grad for p in params], states,
                       tuple(float(v) for v in self._hyper(group)),
                       None if ps[0] is None else ps)
        self._after_step(group, params)

    def _after_step(self, group, params):
        """Scalar state torch updates after the loop (ASGD's eta and mu)."""
