"""torch's top-level functional forms (torch._C._VariableFunctions): the aten signatures scripts
call as torch.X — positional orders that differ from torch.nn.functional's (batch_norm and
instance_norm take weight and bias before the running stats, embedding takes the weight
first), losses whose reduction is aten's integer (0 none, 1 mean, 2 sum), the RNN cells on
explicit weights — mapped onto cddp's functional implementations. Plus the signal windows,
cumulative_trapezoid, and the small tensor predicates and in-place forms torch also exposes
at the top level. Loaded on first use of one of these names (cddp/__init__.py's _LAZY).

Decisions: cudnn_enabled / cudnn_enable arguments are accepted and ignored (no cuDNN on the
CPU path); set_default_tensor_type maps torch's tensor-type names and classes to the default
dtype, a CUDA type name included (cddp.cuda places tensors; the dtype is what the name says).
"""
import math
import warnings

from . import _C
from ._compat import contiguous_format

Tensor = _C.Tensor

_REDUCTION = {0: "none", 1: "mean", 2: "sum"}


def _F():
    from .nn import functional
    return functional


def _reduction(r):
    """aten's integer reduction as functional's string (strings pass through)."""
    if isinstance(r, str):
        return r
    try:
        return _REDUCTION[int(r)]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{r} is not a valid value for reduction (0 none, 1 mean, 2 sum)") \
            from None


# ---- normalization, dropout, embedding: aten's argument orders -----------------------------

def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,  # noqa: A002
               cudnn_enabled=True):
    return _F().batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
                           eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,  # noqa: A002
                  eps, cudnn_enabled=True):
    return _F().instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
                              momentum, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):  # noqa: A002
    return _F().group_norm(input, num_groups, weight, bias, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):  # noqa: A002
    return _F().layer_norm(input, normalized_shape, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):  # noqa: A002
    return _F().rms_norm(input, normalized_shape, weight, eps)


def dropout(input, p, train):  # noqa: A002
    return _F().dropout(input, p, train)


def dropout_(input, p, train):  # noqa: A002
    return _F().dropout(input, p, train, inplace=True)


def alpha_dropout(input, p, train):  # noqa: A002
    return _F().alpha_dropout(input, p, train)


def alpha_dropout_(input, p, train):  # noqa: A002
    return _F().alpha_dropout(input, p, train, inplace=True)


def feature_alpha_dropout(input, p, train):  # noqa: A002
    return _F().feature_alpha_dropout(input, p, train)


def feature_alpha_dropout_(input, p, train):  # noqa: A002
    return _F().feature_alpha_dropout(input, p, train, inplace=True)


def feature_dropout(input, p, train):  # noqa: A002
    """Whole channels zeroed (dropout2d/3d without their shape checks)."""
    return _F()._dropout_impl(input, p, train, False, True, False)


def feature_dropout_(input, p, train):  # noqa: A002
    return _F()._dropout_impl(input, p, train, True, True, False)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return _F().embedding(indices, weight, None if padding_idx == -1 else padding_idx,
                          scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


# ---- activations ----------------------------------------------------------------------------

def prelu(input, weight):  # noqa: A002
    return _F().prelu(input, weight)


def celu(input, alpha=1.0):  # noqa: A002
    return _F().celu(input, alpha)


def celu_(input, alpha=1.0):  # noqa: A002
    return _F().celu(input, alpha, inplace=True)


def selu(input):  # noqa: A002
    return _F().selu(input)


def selu_(input):  # noqa: A002
    return _F().selu(input, inplace=True)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):  # noqa: A002
    return _F().rrelu(input, lower, upper, training)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):  # noqa: A002
    return _F().rrelu(input, lower, upper, training, inplace=True)


def threshold(input, threshold, value):  # noqa: A002
    return _F().threshold(input, threshold, value)


def threshold_(input, threshold, value):  # noqa: A002
    return _F().threshold(input, threshold, value, inplace=True)


def hardshrink(input, lambd=0.5):  # noqa: A002
    return _F().hardshrink(input, lambd)


# ---- distances and losses (aten's integer reduction) ---------------------------------------

def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    return _F().cosine_similarity(x1, x2, dim, eps)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    return _F().pairwise_distance(x1, x2, p, eps, keepdim)


def pdist(input, p=2.0):  # noqa: A002
    return _F().pdist(input, p)


def kl_div(input, target, reduction=1, *, log_target=False):  # noqa: A002
    red = _reduction(reduction)
    # aten's mean is the element mean (functional warns that 'mean' is not batchmean)
    out = _F().kl_div(input, target, reduction="none", log_target=log_target)
    return out.mean() if red == "mean" else out.sum() if red == "sum" else out


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=1):  # noqa: A002
    return _F().binary_cross_entropy_with_logits(input, target, weight,
                                                 reduction=_reduction(reduction),
                                                 pos_weight=pos_weight)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
             zero_infinity=False):
    return _F().ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
                         _reduction(reduction), zero_infinity)


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    return _F().margin_ranking_loss(input1, input2, target, margin,
                                    reduction=_reduction(reduction))


def hinge_embedding_loss(input, target, margin=1.0, reduction=1):  # noqa: A002
    return _F().hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    return _F().cosine_embedding_loss(input1, input2, target, margin,
                                      reduction=_reduction(reduction))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False,
                        reduction=1):
    return _F().triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                    reduction=_reduction(reduction))


def poisson_nll_loss(input, target, log_input, full, eps, reduction):  # noqa: A002
    return _F().poisson_nll_loss(input, target, log_input, full, eps=eps,
                                 reduction=_reduction(reduction))


# ---- layers on explicit weights -------------------------------------------------------------

def bilinear(input1, input2, weight, bias=None):
    return _F().bilinear(input1, input2, weight, bias)


def channel_shuffle(input, groups):  # noqa: A002
    return _F().channel_shuffle(input, groups)


native_channel_shuffle = channel_shuffle

_GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners):  # noqa: A002
    """aten's integer modes: interpolation 0 bilinear, 1 nearest, 2 bicubic; padding 0 zeros,
    1 border, 2 reflection."""
    if interpolation_mode not in _GRID_MODES or padding_mode not in _GRID_PADDING:
        raise ValueError(f"grid_sampler: interpolation_mode {interpolation_mode} / padding_mode "
                         f"{padding_mode} is not one of 0, 1, 2")
    return _F().grid_sample(input, grid, _GRID_MODES[interpolation_mode],
                            _GRID_PADDING[padding_mode], align_corners)


def affine_grid_generator(theta, size, align_corners):
    return _F().affine_grid(theta, list(size), align_corners)


def max_pool1d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False):
    return _F().max_pool1d(input, kernel_size, stride if stride not in ((), []) else None,
                           padding, dilation, ceil_mode, return_indices=True)


def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,  # noqa: A002
                groups):
    """aten::convolution: the conv{1,2,3}d / conv_transpose{1,2,3}d the weight's rank picks."""
    nd = weight.dim() - 2
    if nd not in (1, 2, 3):
        raise RuntimeError(f"convolution: expected a 3-D, 4-D or 5-D weight, got "
                           f"{weight.dim()}-D")
    F = _F()
    if transposed:
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
        return fn(input, weight, bias, stride, padding, output_padding, groups, dilation)
    fn = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    return fn(input, weight, bias, stride, padding, dilation, groups)


def _cell(mode, input, hx, cx, w_ih, w_hh, b_ih, b_hh):  # noqa: A002
    """One step of the C RNN layer op (N, I) -> its final states (nn.RNNCellBase._step)."""
    if input.dim() != 2:
        raise RuntimeError(f"Expected input to be 2D, got {input.dim()}D instead")
    _, fin = _C._rnn_layer(mode, input.unsqueeze(0), hx, cx, w_ih, w_hh, b_ih, b_hh, None,
                           False, None)
    return fin


def lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):  # noqa: A002
    h0, c0 = hx
    fin = _cell(0, input, h0, c0, w_ih, w_hh, b_ih, b_hh)
    n, p, h = input.shape[0], h0.shape[-1], c0.shape[-1]
    return fin[:n * p].view(n, p), fin[n * p:].view(n, h)


def gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):  # noqa: A002
    return _cell(1, input, hx, None, w_ih, w_hh, b_ih, b_hh)


def rnn_tanh_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):  # noqa: A002
    return _cell(2, input, hx, None, w_ih, w_hh, b_ih, b_hh)


def rnn_relu_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):  # noqa: A002
    return _cell(3, input, hx, None, w_ih, w_hh, b_ih, b_hh)


# ---- signal windows -------------------------------------------------------------------------
# Each window of length L is periodic (torch's default: the first L of a symmetric L + 1
# window, for spectral analysis) or symmetric; in float64 then cast, as NumPy's windows are
# computed, so values agree with torch to the dtype's rounding.

def _window(name, window_length, periodic, dtype, fn):
    if not isinstance(window_length, int) or isinstance(window_length, bool) or \
            window_length < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got "
                           f"window_length={window_length}")
    dtype = dtype if dtype is not None else _C.get_default_dtype()
    if not dtype.is_floating_point:
        raise RuntimeError(f"{name} expects floating point dtypes, got: {dtype}")
    if window_length <= 1:
        return _C.ones(window_length, dtype=dtype)
    n = window_length + 1 if periodic else window_length
    k = _C.arange(window_length, dtype=_C.float64)
    return fn(k, n).to(dtype)


def _cosine_sum(coefs):
    """sum_j (-1)^j a_j cos(2 pi j k / (n - 1)) over the window's points k."""
    def fn(k, n):
        out = _C.zeros(k.shape, dtype=_C.float64)
        for j, a in enumerate(coefs):
            out = out + ((-1) ** j) * a * _C.cos(k * (2 * math.pi * j / (n - 1)))
        return out
    return fn


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                pin_memory=None, requires_grad=False):
    return _window("hann_window", window_length, periodic, dtype,
                   _cosine_sum((0.5, 0.5))).requires_grad_(requires_grad)


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None,
                   layout=None, device=None, pin_memory=None, requires_grad=False):
    return _window("hamming_window", window_length, periodic, dtype,
                   _cosine_sum((alpha, beta))).requires_grad_(requires_grad)


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    pin_memory=None, requires_grad=False):
    return _window("blackman_window", window_length, periodic, dtype,
                   _cosine_sum((0.42, 0.5, 0.08))).requires_grad_(requires_grad)


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    pin_memory=None, requires_grad=False):
    def fn(k, n):                             # 1 - |2k / (n - 1) - 1|
        return 1 - (k * (2.0 / (n - 1)) - 1).abs()
    return _window("bartlett_window", window_length, periodic, dtype,
                   fn).requires_grad_(requires_grad)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None,
                  device=None, pin_memory=None, requires_grad=False):
    from .special import i0

    def fn(k, n):                             # I0(beta sqrt(1 - (2k/(n-1) - 1)^2)) / I0(beta)
        r = k * (2.0 / (n - 1)) - 1
        return i0(beta * (1 - r * r).clamp(min=0).sqrt()) / float(i0(_C.tensor(float(beta),
                                                                                dtype=_C.float64)))
    return _window("kaiser_window", window_length, periodic, dtype,
                   fn).requires_grad_(requires_grad)


# ---- integration ----------------------------------------------------------------------------

def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """Running trapezoid-rule integral of y along dim: one element shorter than y there."""
    n = y.shape[dim]
    if n == 0:
        return y.narrow(dim, 0, 0)
    left, right = y.narrow(dim, 0, n - 1), y.narrow(dim, 1, n - 1)
    avg = (left + right) / 2
    if x is not None:
        if x.dim() == 1:
            d = x[1:] - x[:-1]
            shape = [1] * y.dim()
            shape[dim] = n - 1
            d = d.view(shape)
        else:
            d = x.narrow(dim, 1, n - 1) - x.narrow(dim, 0, n - 1)
        return (avg * d).cumsum(dim)
    return (avg * (1.0 if dx is None else dx)).cumsum(dim)


# ---- predicates and in-place forms ----------------------------------------------------------

def is_same_size(input, other):  # noqa: A002
    return input.is_same_size(other)


def is_signed(input):  # noqa: A002
    return input.is_signed()


def is_inference(input):  # noqa: A002
    return input.is_inference()


def is_conj(input):  # noqa: A002
    return input.is_conj()


def is_neg(input):  # noqa: A002
    return input.is_neg()


def get_device(input):  # noqa: A002
    return input.get_device()


def detach(input):  # noqa: A002
    return input.detach()


def detach_(input):  # noqa: A002
    return input.detach_()


def fill(input, value):  # noqa: A002
    """A new tensor of input's shape and dtype filled with value (out-of-place fill_)."""
    return _C.empty_like(input).fill_(value)


def fill_(input, value):  # noqa: A002
    return input.fill_(value)


def zero_(input):  # noqa: A002
    return input.zero_()


def resize_as_(input, the_template, *, memory_format=None):  # noqa: A002
    return input.resize_(the_template.shape)


def index_put_(input, indices, values, accumulate=False):  # noqa: A002
    return input.index_put_(indices, values, accumulate)


def split_with_sizes(input, split_sizes, dim=0):  # noqa: A002
    return input.split_with_sizes(split_sizes, dim)


def unsafe_split(input, split_size, dim=0):  # noqa: A002
    return input.split(split_size, dim)


def unsafe_split_with_sizes(input, split_sizes, dim=0):  # noqa: A002
    return input.split_with_sizes(split_sizes, dim)


def unsafe_chunk(input, chunks, dim=0):  # noqa: A002
    return input.chunk(chunks, dim)


def _inplace_alias(name):
    def fn(input, *args, **kwargs):  # noqa: A002
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"torch.{name}(input, ...): input.{name}(...)"
    return fn


for _n in ("i0_", "gcd_", "lcm_", "ldexp_", "logit_", "nan_to_num_", "sinc_", "xlogy_"):
    globals()[_n] = _inplace_alias(_n)
del _n


def _dim_order(self, *, ambiguity_check=False):
    """The dims from outermost to innermost in memory (stride descending, ties by the
    higher dim first, as torch)."""
    st = self.stride()
    return tuple(sorted(range(self.dim()), key=lambda d: (-st[d], -d)))


Tensor.dim_order = _dim_order
Tensor.const_data_ptr = lambda self: self.data_ptr()
Tensor.new_empty_strided = lambda self, size, stride, *, dtype=None, device=None, \
    requires_grad=False, layout=None, pin_memory=False: empty_strided(
        size, stride, dtype=self.dtype if dtype is None else dtype, requires_grad=requires_grad)


# ---- the view ops' copying forms (torch.X_copy: functionalization's names) ------------------

def _view_copy(name, view):
    def fn(input, *args, out=None, **kwargs):  # noqa: A002
        r = view(input, *args, **kwargs)
        r = tuple(t.clone(memory_format=contiguous_format) for t in r) \
            if isinstance(r, (tuple, list)) else r.clone(memory_format=contiguous_format)
        if out is None:
            return r
        if isinstance(r, tuple):
            for o, t in zip(out, r):
                o.resize_(t.shape).copy_(t)
        else:
            out.resize_(r.shape).copy_(r)
        return out
    fn.__name__ = f"{name}_copy"
    fn.__doc__ = f"torch.{name}_copy(input, ...): a contiguous copy of input.{name}(...)"
    return fn


def _slice(input, dim=0, start=None, end=None, step=1):  # noqa: A002
    index = [slice(None)] * input.dim()
    index[dim] = slice(start, end, step)
    return input[tuple(index)]


def _complex():
    from . import _complex as c          # loaded on first complex use, not with this module
    return c


def _view(input, *args, **kwargs):  # noqa: A002
    """view(dtype) / view(shape), torch.view_copy's two forms."""
    return input.view(*args, **kwargs)


for _n, _f in (("alias", lambda t: t.view_as(t)), ("as_strided", Tensor.as_strided),
               ("detach", Tensor.detach), ("diagonal", Tensor.diagonal),
               ("expand", Tensor.expand), ("permute", Tensor.permute),
               ("select", Tensor.select), ("slice", _slice), ("split", Tensor.split),
               ("split_with_sizes", Tensor.split), ("squeeze", Tensor.squeeze),
               ("t", Tensor.t), ("transpose", Tensor.transpose), ("unbind", Tensor.unbind),
               ("unfold", Tensor.unfold), ("unsqueeze", Tensor.unsqueeze), ("view", _view),
               ("view_as_real", lambda t: _complex().view_as_real(t)),
               ("view_as_complex", lambda t: _complex().view_as_complex(t))):
    globals()[f"{_n}_copy"] = _view_copy(_n, _f)
del _n, _f


def _assert(condition, message):
    """torch._assert: `assert condition, message` as a function (tracing-friendly in torch)."""
    assert condition, message


def _shape_as_tensor(input):  # noqa: A002
    """torch._shape_as_tensor: input's shape as a 1-D int64 tensor."""
    return _C.tensor(list(input.shape), dtype=_C.int64)


def get_autocast_gpu_dtype():
    """Deprecated in torch: get_autocast_dtype('cuda')."""
    warnings.warn("torch.get_autocast_gpu_dtype() is deprecated. Please use "
                  "torch.get_autocast_dtype('cuda') instead.", DeprecationWarning, stacklevel=2)
    return _C.get_autocast_dtype("cuda")


def get_autocast_cpu_dtype():
    """Deprecated in torch: get_autocast_dtype('cpu')."""
    warnings.warn("torch.get_autocast_cpu_dtype() is deprecated. Please use "
                  "torch.get_autocast_dtype('cpu') instead.", DeprecationWarning, stacklevel=2)
    return _C.get_autocast_dtype("cpu")


def set_autocast_cpu_enabled(enabled):
    """Deprecated in torch: set_autocast_enabled('cpu', enabled)."""
    warnings.warn("torch.set_autocast_cpu_enabled(enabled) is deprecated. Please use "
                  "torch.set_autocast_enabled('cpu', enabled) instead.", DeprecationWarning,
                  stacklevel=2)
    _C.set_autocast_enabled("cpu", enabled)


def set_autocast_cpu_dtype(dtype):
    """Deprecated in torch: set_autocast_dtype('cpu', dtype)."""
    warnings.warn("torch.set_autocast_cpu_dtype(dtype) is deprecated. Please use "
                  "torch.set_autocast_dtype('cpu', dtype) instead.", DeprecationWarning,
                  stacklevel=2)
    _C.set_autocast_dtype("cpu", dtype)


def set_autocast_gpu_dtype(dtype):
    """Deprecated in torch: set_autocast_dtype('cuda', dtype)."""
    warnings.warn("torch.set_autocast_gpu_dtype(dtype) is deprecated. Please use "
                  "torch.set_autocast_dtype('cuda', dtype) instead.", DeprecationWarning,
                  stacklevel=2)
    _C.set_autocast_dtype("cuda", dtype)


# ---- strided allocation ---------------------------------------------------------------------

def _dense_order(size, stride):
    """The dims from outermost to innermost when (size, stride) is a dense, non-overlapping
    layout (a permutation of a contiguous one), else None."""
    dims = sorted((d for d in range(len(size))), key=lambda d: (-stride[d], -d))
    expect = 1
    for d in reversed(dims):
        if size[d] != 1 and stride[d] != expect:
            return None
        expect *= size[d]
    return dims


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False):
    """An uninitialised tensor with the given strides: a dense layout (the contiguous one or a
    permutation of it: transposed, channels-last ...) is a permuted contiguous tensor; strides
    that overlap or leave gaps view a storage spanning them (as_strided), as torch's."""
    size, stride = tuple(int(v) for v in size), tuple(int(v) for v in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape: {len(stride)} strides "
                           f"for {len(size)} dims")
    order = _dense_order(size, stride)
    if order is None:
        span = 1 + sum((a - 1) * b for a, b in zip(size, stride)) if all(size) else 0
        base = _C.empty((max(span, 0),), dtype=dtype)
        return base.as_strided(size, stride).requires_grad_(requires_grad)
    base = _C.empty(tuple(size[d] for d in order), dtype=dtype)
    inverse = [order.index(d) for d in range(len(size))]
    return base.permute(*inverse).requires_grad_(requires_grad)


# ---- process-wide switches ------------------------------------------------------------------

class AcceleratorError(RuntimeError):
    """torch.AcceleratorError: an accelerator (CUDA) runtime error."""


def set_flush_denormal(mode):
    """Denormal floats read and computed as zero (x86 FTZ + DAZ) on the calling thread, as
    torch's: True when set (x86), False where the CPU has no such mode."""
    return _C._set_flush_denormal(bool(mode))


_WARN_ALWAYS = [False]


def set_warn_always(b):
    """torch's flag for warnings it otherwise gives once per process: recorded and reported
    (cddp's once-per-process warnings go through Python's warnings filters, which a script
    controls with warnings.simplefilter("always"))."""
    _WARN_ALWAYS[0] = bool(b)


def is_warn_always_enabled():
    return _WARN_ALWAYS[0]


_TENSOR_TYPE_DTYPES = {"FloatTensor": "float32", "DoubleTensor": "float64",
                       "HalfTensor": "float16", "BFloat16Tensor": "bfloat16"}


def set_default_tensor_type(t):
    """torch's deprecated form of set_default_dtype: 'torch.FloatTensor', 'torch.DoubleTensor',
    their cuda. names, or the legacy classes (cddp.FloatTensor ...). Only floating types, as
    torch allows."""
    warnings.warn("torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
                  "torch.set_default_dtype() and torch.set_default_device() as alternatives.",
                  UserWarning, stacklevel=2)
    name = t if isinstance(t, str) else getattr(t, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(f"invalid type object: {t!r}")
    base = name.rsplit(".", 1)[-1]
    if base not in _TENSOR_TYPE_DTYPES:
        if base.endswith("Tensor"):
            raise TypeError("only floating-point types are supported as the default type")
        raise TypeError(f"invalid type: '{name}'")
    _C.set_default_dtype(getattr(_C, _TENSOR_TYPE_DTYPES[base]))


__all__ = [n for n in globals() if not n.startswith("_") and n not in
           ("math", "warnings", "Tensor")]
