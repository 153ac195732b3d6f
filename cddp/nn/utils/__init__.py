"""cddp.nn.utils — clip_grad_norm_ / clip_grad_value_ (one C pass over all gradients),
parameters_to_vector / vector_to_parameters, and rnn (PackedSequence and padding helpers)."""
from ... import _C
from . import rnn  # noqa: F401

Tensor = _C.Tensor


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    out = []
    for p in parameters:
        g = p.grad
        if g is None:
            continue
        if not g.is_contiguous():
            g = p.grad = g.contiguous()
        out.append(g)
    return out


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale all gradients together so their total norm is at most max_norm; returns the
    total norm (before clipping) as a 0-dim tensor."""
    if isinstance(norm_type, str):
        if norm_type != "inf":
            raise ValueError(f"norm_type must be a number or 'inf', got {norm_type!r}")
        norm_type = float("inf")
    return _C._clip_grad_norm(_grads(parameters), float(max_norm), float(norm_type),
                              bool(error_if_nonfinite))


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient element to [-clip_value, clip_value] in place."""
    _C._clip_grad_value(_grads(parameters), float(clip_value))


def parameters_to_vector(parameters):
    """One flat 1-D tensor of all parameters, in order."""
    return _C.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of vec into the parameters (in place, out of autograd)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected cddp.Tensor, but got: {type(vec).__name__}")
    from ...autograd.grad_mode import no_grad
    pointer = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[pointer:pointer + n].view_as(p) if hasattr(vec, "view_as")
                    else vec[pointer:pointer + n].reshape(tuple(p.shape)))
            pointer += n
    if pointer != vec.numel():
        raise RuntimeError(f"vector has {vec.numel()} elements but the parameters hold {pointer}")
