"""torch's sampling functions at the top level — torch.poisson, torch.binomial,
torch._standard_gamma, torch._sample_dirichlet — on the samplers cddp.distributions uses
(composition and rejection in float64, vectorized over the batch; see poisson.py, binomial.py,
gamma.py there). The draws follow the same laws as torch's, not the same numbers for a seed.
Loaded on first use of one of these names (cddp/__init__.py's _LAZY).

Decisions, where torch computes garbage silently: a NaN or infinite Poisson rate raises (torch
raises for NaN and returns -2**63 for inf), as does a NaN probability or a negative or NaN
count in binomial; probabilities outside [0, 1] are clamped into it (torch's kernel behaves so).
Gradients: poisson's output requires grad when the rate does and carries a zero gradient
(torch's PoissonBackward0); _standard_gamma is differentiable in its concentration (implicit
reparameterization, torch's StandardGammaBackward0); binomial and _sample_dirichlet have no
derivative (torch raises "derivative ... is not implemented" at backward; here the result
does not require grad).
"""
from . import _C
from ._ops import _torch_name
from ._shape_ops import _zero_grad_through, broadcast_tensors
from .autograd.grad_mode import no_grad

Tensor = _C.Tensor

__all__ = ["poisson", "binomial", "_standard_gamma", "_sample_dirichlet"]


def _float_arg(fn, name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"{fn}(): argument '{name}' must be Tensor, not {type(t).__name__}")
    if not t.is_floating_point():
        raise NotImplementedError(f'"{fn}_cpu" not implemented for \'{_torch_name(t.dtype)}\'')


def _positive_concentration(fn, input):  # noqa: A002
    _float_arg(fn, "input", input)
    with no_grad():
        if not bool((input > 0).all()):
            raise RuntimeError(f"{fn}: the concentration must be positive")


def poisson(input, generator=None):  # noqa: A002
    """Draws k ~ Poisson(rate) elementwise, in input's dtype and shape."""
    from .distributions.poisson import _poisson
    _float_arg("poisson", "input", input)
    with no_grad():
        ok = bool(((input >= 0) & _C.isfinite(input)).all())
    if not ok:
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative and finite "
                           "(input holds a negative, NaN or infinite entry)")
    return _zero_grad_through(_poisson(input, generator), (input,))


def binomial(count, prob, generator=None):
    """Draws k ~ Binomial(count, prob) elementwise (count and prob broadcast; one float dtype)."""
    from .distributions.binomial import _binomial
    _float_arg("binomial", "count", count)
    _float_arg("binomial", "prob", prob)
    if count.dtype is not prob.dtype:
        raise RuntimeError(f"Found dtype {_torch_name(prob.dtype)} but expected "
                           f"{_torch_name(count.dtype)}")
    with no_grad():
        c, p = broadcast_tensors(count.detach(), prob.detach())
        if not bool(((c >= 0) & _C.isfinite(c)).all()):
            raise RuntimeError("binomial: count must be non-negative and finite")
        if bool(_C.isnan(p).any()):
            raise RuntimeError("binomial: prob holds NaN")
        return _binomial(c, p.clamp(0, 1), generator)


def _standard_gamma(input, generator=None):  # noqa: A002
    """Gamma(input, 1) draws, differentiable in input (the concentration)."""
    from .distributions.gamma import _rsample_standard_gamma
    _positive_concentration("_standard_gamma", input)
    return _rsample_standard_gamma(input, generator)


def _sample_dirichlet(input, generator=None):  # noqa: A002
    """Dirichlet(input) draws over the last dim: Gamma(input, 1) draws, normalized."""
    from .distributions.gamma import _standard_gamma as _gamma
    _positive_concentration("_sample_dirichlet", input)
    if input.dtype in (_C.float32, _C.float64):        # torch's values (ops/random/rejection.c)
        return _C._gamma_draw(input.detach(), generator, True)[0]
    with no_grad():
        g = _gamma(input.detach(), generator)
        return g / g.sum(-1, keepdim=True)
