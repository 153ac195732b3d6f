"""cddp.optim.Adafactor — torch.optim.Adafactor (Shazeer & Stern 2018, with torch's use of lr
and eps1).

Per step t of a parameter θ with gradient G (negated when maximize):

    1 - β2_t = t ** beta2_decay              (the weight of the new squared gradient)
    ρ_t      = min(lr, 1 / sqrt(t))          (relative step size, capped by lr)
    α_t      = max(eps2, RMS(θ_{t-1})) * ρ_t (RMS before weight decay)
    θ        ← θ * (1 - lr * weight_decay)   (decoupled weight decay, when weight_decay != 0)
    θ with 2 or more dims (factored over its last two dims, m rows by n columns):
        R ← lerp(R, mean(G², dim=-1), 1 - β2_t)        "row_var", shape (..., m, 1)
        C ← lerp(C, mean(G², dim=-2), 1 - β2_t)        "col_var", shape (..., 1, n)
        V̂ = (R @ C) / max(mean(R, dim=-2), eps1)
    θ with 0 or 1 dims:
        V ← lerp(V, G², 1 - β2_t)                      "variance", θ's shape
        V̂ = V
    U  = G / sqrt(max(V̂, eps1²))
    θ ← θ - α_t / max(1, RMS(U) / d) * U

eps1=None means finfo(dtype).eps of the group's first parameter with a gradient (torch's
single-tensor rule). State as torch: "step" (0-dim, float64 under a float64 default dtype,
else float32, counted in place), then "row_var" and "col_var" or "variance" (the gradient's
dtype), so state_dicts move between cddp and torch.

Every per-element operation is a cddp tensor op over the whole tensor, one parameter at a
time. Differences from torch: foreach only selects an implementation in torch and is accepted
and ignored here (the two torch paths agree to rounding); a tensor lr is read as a Python
float, so the scalar arithmetic on it is done in double rather than in the lr tensor's dtype.
"""
from .. import _C, finfo
from .optimizer import Optimizer, Tensor, _dense_real_params_with_grad, _first_violation

__all__ = ["Adafactor"]


def _scalar_dtype():
    """torch's dtype for the 0-dim "step": float64 under a float64 default, else float32."""
    return _C.float64 if _C.get_default_dtype() == _C.float64 else _C.float32


def _validate(lr, beta2_decay, eps, d, weight_decay):
    """torch's hyperparameter checks, its messages and order (a NaN fails every check)."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    eps1, eps2 = eps
    bad = _first_violation((
        (lr >= 0, f"Learning rate should be >= 0 but is: {lr}"),
        (beta2_decay <= 0, f"beta2_decay should be <= 0 but is: {beta2_decay}"),
        (eps1 is None or eps1 >= 0, f"epsilon1 should be >= 0 but is: {eps1}"),
        (eps2 >= 0, f"epsilon2 should be >= 0 but is: {eps2}"),
        (d >= 1, f"Clipping threshold d should be >= 1 but is: {d}"),
        (weight_decay >= 0, f"weight_decay should be >= 0 but is: {weight_decay}")))
    if bad is not None:
        raise ValueError(bad)


def _rms(x):
    """Root mean square of all of x's elements, as a Python float."""
    return x.norm(2).item() / (x.numel() ** 0.5)


class Adafactor(Optimizer):
    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
                 weight_decay=0.0, *, foreach=None, maximize=False):
        _validate(lr, beta2_decay, eps, d, weight_decay)
        defaults = {"lr": lr, "beta2_decay": beta2_decay, "eps": eps, "d": d,
                    "weight_decay": weight_decay, "foreach": foreach, "maximize": maximize}
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("foreach", None)
            for p in group["params"]:
                st = self.state.get(p, {})
                if len(st) != 0 and not isinstance(st["step"], Tensor):
                    st["step"] = _C.tensor(float(st["step"]), dtype=_scalar_dtype())

    def _init_state(self, p, st):
        grad = p.grad
        st["step"] = _C.tensor(0.0, dtype=_scalar_dtype())
        if grad.dim() > 1:
            rows, cols = list(grad.shape), list(grad.shape)
            rows[-1] = 1          # reduced over the last dim
            cols[-2] = 1          # reduced over the second-to-last dim
            st["row_var"] = _C.zeros(rows, dtype=grad.dtype, device=grad.device)
            st["col_var"] = _C.zeros(cols, dtype=grad.dtype, device=grad.device)
        else:
            st["variance"] = _C.zeros_like(grad)

    def _update_group(self, group):
        params = _dense_real_params_with_grad(group, "Adafactor")
        for p in params:
            if len(self.state[p]) == 0:
                self._init_state(p, self.state[p])
        if not params:
            return

        lr = group["lr"]
        lr = lr.item() if isinstance(lr, Tensor) else lr
        eps1, eps2 = group["eps"]
        if eps1 is None:
            eps1 = finfo(params[0].dtype).eps
        beta2_decay, d = group["beta2_decay"], group["d"]
        weight_decay, maximize = group["weight_decay"], group["maximize"]

        for p in params:
            st = self.state[p]
            grad = -p.grad if maximize else p.grad
            st["step"] += 1
            t = st["step"].item()
            new_weight = t ** beta2_decay                   # 1 - beta2_t
            alpha = max(eps2, _rms(p)) * min(lr, t ** -0.5)

            if weight_decay != 0:
                p.mul_(1 - lr * weight_decay)

            if grad.dim() > 1:
                row_var, col_var = st["row_var"], st["col_var"]
                # mean of G² along a dim, as the squared norm over that dim's length
                row_var.lerp_(grad.norm(dim=-1, keepdim=True).square_().div_(grad.size(-1)),
                              new_weight)
                col_var.lerp_(grad.norm(dim=-2, keepdim=True).square_().div_(grad.size(-2)),
                              new_weight)
                v_hat = _C.matmul(row_var, col_var)        # outer product per trailing matrix
                v_hat.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
            else:
                variance = st["variance"]
                variance.lerp_(grad * grad, new_weight)
                v_hat = variance.clone()

            update = v_hat.clamp_(min=eps1 * eps1).rsqrt_().mul_(grad)
            clip = max(1.0, _rms(update) / d)
            p.add_(update, alpha=-alpha / clip)
