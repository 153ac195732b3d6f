"""cddp.nn.init — torch.nn.init's initialisers (in place, under no_grad, return the tensor).

Gains and fans follow torch: calculate_gain, fan_in = size(1) * receptive field,
fan_out = size(0) * receptive field. Every initialiser draws what torch's draws, in its order,
so a seeded run gives torch's values: trunc_normal_ (torch 2.13's rejection sampling),
orthogonal_ (normal_ then QR, by LAPACK through numpy.linalg.qr; the result agrees with
torch's to rounding), sparse_ (normal_, then one randperm per column).
"""
import math
import warnings

import numpy as np

from ..autograd.grad_mode import no_grad


def calculate_gain(nonlinearity, param=None):
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                  "conv_transpose2d", "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    dims = tensor.dim()
    if dims < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    num_input_fmaps = tensor.size(1)
    num_output_fmaps = tensor.size(0)
    receptive_field_size = 1
    for s in tensor.shape[2:]:
        receptive_field_size *= s
    return num_input_fmaps * receptive_field_size, num_output_fmaps * receptive_field_size


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    with no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    with no_grad():
        return tensor.normal_(mean, std, generator=generator)


def constant_(tensor, val):
    with no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    with no_grad():
        return tensor.zero_()


def eye_(tensor):
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    if tensor.is_meta:       # no values to initialize (torch's meta kernels do nothing)
        return tensor
    from .. import eye
    with no_grad():
        tensor.copy_(eye(*tensor.shape))
    return tensor


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op")
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    std = gain / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op")
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    std = gain / math.sqrt(fan)
    return normal_(tensor, 0, std, generator)


def dirac_(tensor, groups=1):
    """Zeros with a 1 at the centre of the kernel of each (out, in) pair of a group's
    diagonal: a convolution with it keeps its input's channels (3, 4 or 5 dims)."""
    dimensions = tensor.dim()
    if dimensions not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tensor.shape
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    if tensor.is_meta:       # no values to initialize (torch's meta kernels do nothing)
        return tensor
    from .. import arange
    out_chans_per_grp = sizes[0] // groups
    min_dim = min(out_chans_per_grp, sizes[1])
    d = arange(min_dim).unsqueeze(0)                               # (1, min_dim)
    outs = (arange(groups).unsqueeze(1) * out_chans_per_grp + d).reshape(-1)
    ins = d.expand(groups, min_dim).reshape(-1)
    centre = tuple(s // 2 for s in sizes[2:])
    with no_grad():
        tensor.zero_()
        if outs.numel():
            tensor[(outs, ins) + centre] = 1
    return tensor


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std^2) truncated to [a, b] by rejection, as torch 2.13 draws it (it replaced
    the older uniform_ + erfinv_ inverse-CDF recipe): when [a, b] holds more than 0.3 of the
    mass, normal_ draws with each out-of-range value redrawn (a full-size normal_ per round);
    otherwise uniform_(a, b) proposals accepted when log(uniform_()) <= the log density
    relative to its peak, pending values redrawn the same way."""
    if tensor.is_meta:       # no values to initialize (torch's meta kernels do nothing)
        return tensor
    def norm_cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    from .. import empty_like, tensor as as_tensor, where
    with no_grad():
        p = norm_cdf((b - mean) / std) - norm_cdf((a - mean) / std)
        if p > 0.3:
            # the bounds rounded to the tensor's dtype, so the test matches what is stored
            lo = as_tensor(a, dtype=tensor.dtype).item()
            hi = as_tensor(b, dtype=tensor.dtype).item()
            result = tensor.normal_(mean, std, generator=generator)
            while True:
                mask = (result < lo).logical_or(result > hi)
                if not bool(mask.any()):
                    break
                result = where(mask, empty_like(result).normal_(mean, std, generator=generator),
                               result)
            if tensor is not result:
                tensor.copy_(result)
            return tensor
        mode = max(a, min(mean, b))
        log_peak = -0.5 * ((mode - mean) / std) ** 2
        candidates = empty_like(tensor)
        accept_buf = empty_like(tensor)
        tensor.uniform_(a, b, generator=generator)
        candidates.copy_(tensor)
        candidates.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)   # log pdf / peak
        pending = accept_buf.uniform_(0.0, 1.0, generator=generator).log_().gt(candidates)
        if bool(pending.any()):
            result = tensor
            while True:
                candidates.uniform_(a, b, generator=generator)
                result = where(pending, candidates, result)
                candidates.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)
                pending = where(pending, accept_buf.uniform_(0.0, 1.0, generator=generator)
                                .log_().gt(candidates), pending)
                if not bool(pending.any()):
                    break
            tensor.copy_(result)
        return tensor


def orthogonal_(tensor, gain=1, generator=None):
    """A (semi-)orthogonal matrix of tensor viewed (size(0), -1), scaled by gain: Q of the QR
    of an N(0, 1) draw, each column signed by diag(R) as torch's."""
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.is_meta:       # no values to initialize (torch's meta kernels do nothing)
        return tensor
    if tensor.numel() == 0:
        return tensor
    from .. import empty, from_numpy
    rows = tensor.size(0)
    cols = tensor.numel() // rows
    flattened = empty((rows, cols), dtype=tensor.dtype).normal_(0, 1, generator=generator)
    if rows < cols:
        flattened = flattened.t()
    q, r = np.linalg.qr(flattened.numpy())
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with no_grad():
        tensor.view(rows, cols).copy_(from_numpy(np.ascontiguousarray(q)))
        tensor.mul_(gain)
    return tensor


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """N(0, std^2) with ceil(sparsity * rows) random entries of each column zeroed (one
    randperm of the rows per column, from the default generator, as torch's)."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    if tensor.is_meta:       # no values to initialize (torch's meta kernels do nothing)
        return tensor
    from .. import arange, randperm, stack
    rows, cols = tensor.shape
    num_zeros = int(math.ceil(sparsity * rows))
    with no_grad():
        tensor.normal_(0, std, generator=generator)
        if cols and num_zeros:
            zero_rows = stack([randperm(rows)[:num_zeros] for _ in range(cols)], 1)  # (nz, cols)
            tensor[zero_rows, arange(cols)] = 0
    return tensor


def _deprecated(fn):
    """torch's pre-0.4 names without the trailing underscore: the same function, warned."""
    old = fn.__name__[:-1]

    def alias(*args, **kwargs):
        warnings.warn(f"`nn.init.{old}` is now deprecated in favor of `nn.init.{fn.__name__}`.",
                      FutureWarning, stacklevel=2)
        return fn(*args, **kwargs)
    alias.__name__ = alias.__qualname__ = old
    alias.__doc__ = fn.__doc__
    return alias


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)
