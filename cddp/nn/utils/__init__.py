"""cddp.nn.utils — clip_grad_norm_ / clip_grad_value_ (one C pass over all gradients for
the common cases, torch's composition for the rest),
get_total_norm / clip_grads_with_norm_ (torch 2.6's two halves of clip_grad_norm_; DTensor
gradients, as FSDP2's, give the global norm through cddp.distributed.tensor._norm),
parameters_to_vector / vector_to_parameters, and the submodules: rnn (PackedSequence and
padding helpers), parametrize / parametrizations, weight_norm and spectral_norm (hook-based),
fusion (conv/linear + BatchNorm folding), stateless (functional_call), skip_init, prune."""
import sys

from ... import _C
from ..._shape_ops import _real_views
from . import rnn  # noqa: F401
from . import parametrize, parametrizations, stateless, prune  # noqa: F401
from .weight_norm import weight_norm, remove_weight_norm  # noqa: F401
from .spectral_norm import spectral_norm, remove_spectral_norm  # noqa: F401
from .fusion import (fuse_conv_bn_eval, fuse_conv_bn_weights,  # noqa: F401
                     fuse_linear_bn_eval, fuse_linear_bn_weights)
from .init import skip_init  # noqa: F401

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
    total norm (before clipping) as a 0-dim tensor. torch's composition: get_total_norm, then
    clip_grads_with_norm_ (a nan total makes every gradient nan). The one-pass C kernel
    serves the 2- and inf-norms of gradients of one dtype, where it gives torch's values."""
    if isinstance(norm_type, str):
        if norm_type != "inf":
            raise ValueError(f"norm_type must be a number or 'inf', got {norm_type!r}")
        norm_type = float("inf")
    norm_type = float(norm_type)
    parameters = [parameters] if isinstance(parameters, Tensor) else _real_views(list(parameters))
    grads = _grads(parameters)
    if norm_type in (2.0, float("inf")) and grads and len({g.dtype for g in grads}) == 1 \
            and not _any_dtensor(grads):
        total_norm = _C._clip_grad_norm(grads, float(max_norm), norm_type,
                                        bool(error_if_nonfinite))
        if bool(total_norm.isnan()):     # the kernel leaves the gradients; torch scales by nan
            from ...autograd.grad_mode import no_grad
            with no_grad():
                for g in grads:
                    g.fill_(float("nan"))
        return total_norm
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch's deprecated name for clip_grad_norm_."""
    import warnings
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
                  "`torch.nn.utils.clip_grad_norm_`.", FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The norm of the tensors taken together, as if concatenated into one vector (the norm
    of their norms), as a 0-dim tensor; an empty list gives tensor(0.)."""
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    else:
        tensors = list(tensors)
    norm_type = float(norm_type)
    if len(tensors) == 0:
        return _C.tensor(0.0)
    if _any_dtensor(tensors):
        # sharded gradients (FSDP2): the norm of the global values, local parts' norms
        # combined across each DTensor's mesh (cddp/distributed/tensor/_norm.py)
        from ...distributed.tensor._norm import total_norm as _dtensor_total_norm
        total_norm = _dtensor_total_norm(tensors, norm_type)
    else:
        # each norm in its tensor's dtype; stack promotes (float32 with float64: float64)
        total_norm = _C.stack([t.norm(norm_type) for t in tensors]).norm(norm_type)
    if error_if_nonfinite and not bool(total_norm.isfinite()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from "
            "`parameters` is non-finite, so it cannot be clipped. To disable "
            "this error and scale the gradients by the non-finite norm anyway, "
            "set `error_if_nonfinite=False`")
    return total_norm


def _any_dtensor(tensors):
    """Whether a tensor is a DTensor (its class carries the marker). No DTensor can exist
    before cddp.distributed.tensor is imported, so clipping without it scans nothing."""
    return "cddp.distributed.tensor._api" in sys.modules and \
        any(getattr(type(t), "_is_dtensor", False) for t in tensors)


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale every gradient by min(max_norm / (total_norm + 1e-6), 1), in place."""
    from ...autograd.grad_mode import no_grad
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if len(grads) == 0:
        return
    clip_coef_clamped = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
    with no_grad():
        for g in grads:
            g.mul_(clip_coef_clamped.to(g.dtype))


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient element to [-clip_value, clip_value] in place. A negative
    clip_value makes min > max, where clamp gives max: every element becomes clip_value
    (nan stays nan), as torch's clamp_(min=-clip_value, max=clip_value)."""
    clip_value = float(clip_value)
    grads = _grads(parameters)
    if clip_value >= 0:
        _C._clip_grad_value(grads, clip_value)
        return
    from ...autograd.grad_mode import no_grad
    with no_grad():
        for g in grads:
            g.clamp_(min=-clip_value, max=clip_value)


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


def convert_conv2d_weight_memory_format(module, memory_format):
    """torch converts every Conv2d / ConvTranspose2d weight to memory_format; cddp keeps one
    layout (cddp/_compat.py's memory formats), so the module comes back as it is."""
    return module


def convert_conv3d_weight_memory_format(module, memory_format):
    """The Conv3d form of convert_conv2d_weight_memory_format: the module as it is."""
    return module


from . import clip_grad  # noqa: E402,F401  (torch's module path; needs the functions above)
