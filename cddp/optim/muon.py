"""cddp.optim.Muon — torch.optim.Muon (momentum, orthogonalised by Newton–Schulz), for 2-D
parameters only (ValueError at construction otherwise, as torch).

Per step of a parameter W (A rows by B columns) with gradient G:

    buf ← lerp(buf, G, 1 - momentum)                       "momentum_buffer" (G's shape, dtype)
    M   = lerp(G, buf, momentum) if nesterov else buf
    O   = NS(M): in bfloat16, X = M / max(||M||_F, eps) (transposed first when A > B), then
          ns_steps times: S = X Xᵀ; X ← a X + (b S + c S S) X        (a, b, c = ns_coefficients)
    W   ← W * (1 - lr * weight_decay)
    W   ← W - lr * ratio * O,   ratio = sqrt(max(1, A / B))   adjust_lr_fn None or "original"
                                        0.2 * sqrt(max(A, B))  "match_rms_adamw"

The bfloat16 iteration is torch's, op for op (the same casts, norms and addmm calls), so the
orthogonalised update agrees with torch's to the bit on CPU. As in torch, ns_steps >= 100 and
ns_coefficients of other than three values are ValueErrors raised by step(), and a bfloat16
parameter with nesterov=False has its momentum buffer normalised in place by the iteration
(torch's `bfloat16()` of a bfloat16 tensor is that tensor); both kept for identical runs.

Differences from torch: a tensor lr is read as a Python float (its value unchanged, the scalar
arithmetic on it in double).
"""
import math

from .. import _C
from .optimizer import Optimizer, Tensor, _dense_real_params_with_grad, _first_violation

__all__ = ["Muon"]

# Keller Jordan's coefficients, iteration count and eps (torch's defaults)
# the quintic Newton-Schulz iteration's coefficients, step count and norm floor (torch's)
_NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
_NS_STEPS = 5
_EPS = 1e-7


def _newton_schulz(m, ns_coefficients, ns_steps, eps):
    """Approximately orthogonalise the 2-D m (its singular values pushed towards 1), in
    bfloat16; returns a bfloat16 tensor of m's shape."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if len(m.shape) != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = ns_coefficients
    tall = m.size(0) > m.size(1)
    x = m.bfloat16()
    if tall:                                  # iterate on the wide orientation: X Xᵀ is small
        x = x.T
    x.div_(x.norm().clamp(min=eps))           # Frobenius norm ≥ spectral norm: σ ≤ 1
    for _ in range(ns_steps):
        s = x @ x.T
        poly = _C.addmm(s, s, s, beta=b, alpha=c)        # b S + c S²
        x = _C.addmm(x, poly, x, beta=a)                 # a X + (b S + c S²) X
    return x.T if tall else x


def _lr_ratio(adjust_lr_fn, shape):
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return 1.0


def _validate(lr, weight_decay, momentum, adjust_lr_fn):
    """torch's hyperparameter checks, its messages and order."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    bad = _first_violation((
        (lr >= 0, f"Learning rate should be >= 0 but is: {lr}"),
        (momentum >= 0, f"momentum should be >= 0 but is: {momentum}"),
        (weight_decay >= 0, f"weight decay should be >= 0 but is: {weight_decay}"),
        (adjust_lr_fn in (None, "original", "match_rms_adamw"),
         f"Adjust learning rate function {adjust_lr_fn} is not supported")))
    if bad is not None:
        raise ValueError(bad)


class Muon(Optimizer):
    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=_NS_COEFFICIENTS, eps=_EPS, ns_steps=_NS_STEPS,
                 adjust_lr_fn=None):
        _validate(lr, weight_decay, momentum, adjust_lr_fn)
        defaults = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum,
                    "nesterov": nesterov, "ns_coefficients": ns_coefficients, "eps": eps,
                    "ns_steps": ns_steps, "adjust_lr_fn": adjust_lr_fn}
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError("Muon only supports 2D parameters whereas we found a "
                                     f"parameter with size: {p.size()}")

    def _update_group(self, group):
        params = _dense_real_params_with_grad(group, "Muon")
        for p in params:
            st = self.state[p]
            if "momentum_buffer" not in st:
                st["momentum_buffer"] = _C.zeros_like(p.grad)

        lr = group["lr"]
        lr = lr.item() if isinstance(lr, Tensor) else lr
        momentum, weight_decay = group["momentum"], group["weight_decay"]
        for p in params:
            grad = p.grad
            if grad.ndim != 2:
                raise ValueError("Param gradient must be a 2D matrix")
            buf = self.state[p]["momentum_buffer"]
            buf.lerp_(grad, 1 - momentum)
            m = grad.lerp(buf, momentum) if group["nesterov"] else buf
            ortho = _newton_schulz(m, group["ns_coefficients"], group["ns_steps"], group["eps"])
            p.mul_(1 - lr * weight_decay)
            p.add_(ortho, alpha=-lr * _lr_ratio(group["adjust_lr_fn"], p.shape))
