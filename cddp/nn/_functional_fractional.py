"""torch.nn.functional's fractional max pooling (fractional_max_pool2d/3d and their
_with_indices forms; re-exported by functional.py), composed of cddp's C tensor ops (arange,
arithmetic, gather, argmax), so autograd needs no new backward.

Algorithm (torch's, aten/src/ATen/native/FractionalMaxPooling.h): every (n, c) plane has one
random sample u per pooled dim (2-D: u[0] for W, u[1] for H; 3-D: u[0] T, u[1] H, u[2] W). Along a
dim of input size I, pool size K and output size O the windows start at
    seq[i] = int((i + u) * alpha) - int(u * alpha),  i < O - 1,   alpha = (I - K) / (O - 1)
    seq[O - 1] = I - K
with the arithmetic in the input's dtype (float32 input: float32 alpha and products, so these
starts are torch's bit for bit) and int() truncating toward zero. Output (o1, o2[, o3]) is the
max over the K1 x K2 [x K3] window starting at (seq1[o1], seq2[o2][, seq3[o3]]); its index is
the flat position within the plane (h * W + w, or t * H * W + h * W + w), the first maximum in
(t, h, w) scan order, or the last NaN when the window holds one (torch's `val > max || isnan`).

Dimensions: B batch (1 for an unbatched input), C channels, S = (S1, .., Snd) input sizes,
K kernel, O output sizes, P = prod(S) positions per plane, L = prod(O), KK = prod(K).

Recipe: the flat positions of every window, idx (B, C, L, KK), are built from the per-plane
starts by broadcasting; one gather of the input viewed as (B, C, P) reads the windows, argmax
(with the NaN rule) picks one tap per window under no_grad, and a second gather reads the chosen
positions with autograd on, so the backward is gather's scatter-add: each output's gradient
lands on its argmax, and positions chosen by several overlapping windows accumulate, as torch's
backward does.
"""
import operator

from .. import _C
from .._ops import autocast_fp32_op
from ..autograd.grad_mode import no_grad
from ._functional_layers import _TORCH_TYPE_NAMES

Tensor = _C.Tensor

_FLOATS = (_C.float32, _C.float64, _C.float16, _C.bfloat16)


def _ntuple_like_torch(x, n):
    """torch.nn.modules.utils._ntuple: an iterable is kept as a tuple (any length), anything
    else repeated n times."""
    try:
        return tuple(x)
    except TypeError:
        return (x,) * n


def _int_list(v, n, fn, name, pos):
    """What torch's C argument parser makes of an int[n] argument: an int is repeated n times,
    a sequence of ints is kept (its length is checked later, by the op)."""
    def bad(kind):
        return TypeError(f"{fn}(): argument '{name}' (position {pos}) must be tuple of ints, "
                         f"{kind}")
    if isinstance(v, bool):
        raise bad("not bool")
    try:
        return (operator.index(v),) * n
    except TypeError:
        pass
    try:
        seq = list(v)
    except TypeError:
        raise bad(f"not {type(v).__name__}") from None
    out = []
    for i, e in enumerate(seq):
        if isinstance(e, bool):
            raise bad(f"but found element of type bool at pos {i}")
        try:
            out.append(operator.index(e))
        except TypeError:
            raise bad(f"but found element of type {type(e).__name__} at pos {i}") from None
    return tuple(out)


def _intervals(u, in_size, out_size, pool):
    """Window starts along one dim for every plane: u (R,) samples in the input's dtype ->
    (R, out_size) int64, torch's generate_intervals."""
    r = u.shape[0]
    last = _C.full((r, 1), in_size - pool, dtype=_C.int64)
    if out_size <= 1:
        return last[:, :out_size]
    dt = u.dtype
    # alpha as the op computes it: both sizes cast to the dtype, divided in the dtype
    alpha = _C.tensor(float(in_size - pool), dtype=dt) / _C.tensor(float(out_size - 1), dtype=dt)
    i = _C.arange(out_size - 1, dtype=dt)                          # (O-1,) i cast to the dtype
    hi = ((i + u.unsqueeze(1)) * alpha).to(_C.int64)               # (R, O-1), truncated
    lo = (u * alpha).to(_C.int64).unsqueeze(1)                     # (R, 1)
    return _C.cat([hi - lo, last], 1)


def _fractional_max_pool(input, kernel_size, output_size, samples, nd):  # noqa: A002
    """The op behind torch._C._nn.fractional_max_pool{nd}d: (output, indices), with torch's
    checks in torch's order."""
    fn = f"fractional_max_pool{nd}d"
    where = fn if nd == 2 else "fractional_max_pool3d_out"     # the kernels' message prefixes
    if not isinstance(input, Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    k = _int_list(kernel_size, nd, fn, "kernel_size", 2)
    o = _int_list(output_size, nd, fn, "output_size", 3)
    if not isinstance(samples, Tensor):
        raise TypeError(f"{fn}(): argument 'random_samples' (position 4) must be Tensor, not "
                        f"{type(samples).__name__}")
    if samples.requires_grad:
        raise RuntimeError(f"The function '{fn}' is not differentiable with respect to argument "
                           "'random_samples'. This input cannot have requires_grad True.")
    tail = " Ints" if nd == 2 else " three Ints"
    if len(k) != nd:
        raise RuntimeError(f"{fn}: kernel_size must either be a single Int or tuple of{tail}")
    if len(o) != nd:
        raise RuntimeError(f"{fn}: output_size must either be a single Int or tuple of{tail}")
    ndim = input.dim()
    if ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{where}(): Expected {nd + 1}D or {nd + 2}D tensor, but got: "
                           f"{list(input.shape)}")
    batched = ndim == nd + 2
    for d in range(1 if batched else 0, ndim):
        if input.shape[d] == 0:
            raise RuntimeError(f"{where}(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but got{list(input.shape)} with dimension {d} being "
                               "empty.")
    sizes = tuple(input.shape[ndim - nd:])
    # 2-D: H then W, output + kernel - 1 <= input; 3-D: T, W, H and strictly less (torch's)
    names = ("height", "width") if nd == 2 else ("time", "height", "width")
    order = (0, 1) if nd == 2 else (0, 2, 1)
    for d in order:
        ok = (o[d] + k[d] - 1 <= sizes[d]) if nd == 2 else (o[d] + k[d] - 1 < sizes[d])
        if not ok:
            raise RuntimeError(f"{where}(): pool {names[d]} {k[d]} too large relative to input "
                               f"{names[d]} {sizes[d]}")
    if samples.dtype != input.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if samples.dim() != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {samples.dim()}")
    nb = input.shape[0] if batched else 1
    c = input.shape[1] if batched else input.shape[0]
    if samples.shape[0] < nb:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != c:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if samples.shape[2] != nd:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {nd}; got "
                           f"{samples.shape[2]}.")
    if input.dtype not in _FLOATS:
        tname = _TORCH_TYPE_NAMES.get(str(input.dtype), str(input.dtype))
        raise NotImplementedError(f'"{fn}_out_frame" not implemented for \'{tname}\'')
    out_shape = ((nb,) if batched else ()) + (c,) + o
    if any(v < 0 for v in o):
        neg = next(v for v in o if v < 0)
        raise RuntimeError(f"Trying to create tensor with negative dimension {neg}: "
                           f"{list(out_shape)}")

    x = input if batched else input.unsqueeze(0)          # (B, C, *S)
    plane = 1
    for s in sizes:
        plane *= s
    strides = [1] * nd                                    # flat stride of each dim in a plane
    for d in range(nd - 2, -1, -1):
        strides[d] = strides[d + 1] * sizes[d + 1]
    length = 1
    for v in o:
        length *= v
    kk = 1
    for v in k:
        kk *= max(v, 0)
    rows = nb * c

    with no_grad():
        u = samples[:nb].reshape(rows, nd)                # (B*C, nd): one plane per row
        # which sample drives which dim: 2-D u[0] -> W, u[1] -> H; 3-D in (T, H, W) order
        col = (1, 0) if nd == 2 else (0, 1, 2)
        starts = [_intervals(u[:, col[d]].contiguous(), sizes[d], o[d], k[d])
                  for d in range(nd)]                     # nd x (B*C, O_d)
        lo = min((int(s.min()) for s in starts if s.numel()), default=0)
        bad = any(int(s.max()) > sizes[d] - k[d] for d, s in enumerate(starts) if s.numel())
        if kk and (lo < 0 or bad):
            raise RuntimeError(f"{fn}(): _random_samples give windows outside the input "
                               "(samples are expected in [0, 1))")
        # flat window start per output: (B*C, O1, .., Ond)
        base = None
        for d in range(nd):
            shape = [rows] + [o[j] if j == d else 1 for j in range(nd)]
            term = starts[d].mul(strides[d]).view(shape)
            base = term if base is None else base + term
        base = base.reshape(nb, c, length)                # (B, C, L)

    if kk == 0:
        # a kernel size <= 0 gives empty windows: torch returns -inf with the window's start
        # as the index (and its backward is undefined); the empty sum keeps the graph
        out = _C.full((nb, c, length), float("-inf"), dtype=input.dtype) \
            + x.reshape(-1)[:0].sum()
        idx = base
    else:
        xf = x.reshape(nb, c, plane)                      # (B, C, P)
        with no_grad():
            offs = None                                   # flat offsets of the taps: K1 x .. x Knd
            for d in range(nd):
                shape = [k[j] if j == d else 1 for j in range(nd)]
                term = _C.arange(k[d], dtype=_C.int64).mul(strides[d]).view(shape)
                offs = term if offs is None else offs + term
            win_idx = base.unsqueeze(3) + offs.reshape(1, 1, 1, kk)    # (B, C, L, KK)
            win = xf.gather(2, win_idx.reshape(nb, c, length * kk)).view(nb, c, length, kk)
            pick = win.argmax(3)                          # (B, C, L) first maximum
            nan = win.isnan()
            if bool(nan.any()):                           # torch keeps the last NaN
                last = (nan.to(_C.int64) * _C.arange(kk, dtype=_C.int64)).amax(3)
                pick = _C.where(nan.any(3), last, pick)
            idx = win_idx.gather(3, pick.unsqueeze(3)).squeeze(3)      # (B, C, L)
        out = xf.gather(2, idx)                           # (B, C, L), differentiable
    out = out.view(out_shape)
    idx = idx.view(out_shape)
    return out, idx


def _output_size_2d(input, output_size, output_ratio):  # noqa: A002
    """torch's wrapper: output_size, or int(input size * ratio) per dim."""
    if output_size is None and output_ratio is None:
        raise ValueError("fractional_max_pool2d requires specifying either an output_size or "
                         "an output_ratio")
    if output_size is None:
        # torch takes len() of the ratio here, so a bare float raises TypeError as in torch
        if len(output_ratio) > 2:
            raise ValueError("fractional_max_pool2d requires output_ratio to either be a single "
                             "Int or tuple of Ints.")
        r = _ntuple_like_torch(output_ratio, 2)
        output_size = [int(input.size(-2) * r[0]), int(input.size(-1) * r[1])]
    return output_size


def _output_size_3d(input, output_size, output_ratio):  # noqa: A002
    if output_size is None and output_ratio is None:
        raise ValueError("fractional_max_pool3d requires specifying either an output_size or "
                         "an output_ratio")
    if output_size is None:
        r = _ntuple_like_torch(output_ratio, 3)
        output_size = [int(input.size(-3) * r[0]), int(input.size(-2) * r[1]),
                       int(input.size(-1) * r[2])]
    return output_size


@autocast_fp32_op
def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None,  # noqa: A002
                                       output_ratio=None, return_indices=False,
                                       _random_samples=None):
    """2-D fractional max pooling over (N, C, H, W) or (C, H, W) -> (output, indices), indices
    flat h * W + w per plane. _random_samples (N, C, 2) in the input's dtype fixes the windows;
    without it they are drawn with cddp's RNG (cddp.manual_seed makes them repeatable)."""
    output_size = _output_size_2d(input, output_size, output_ratio)
    if _random_samples is None:
        n_batch = 1 if input.dim() == 3 else input.size(0)
        _random_samples = _C.rand(n_batch, input.size(-3), 2, dtype=input.dtype)
    return _fractional_max_pool(input, kernel_size, output_size, _random_samples, 2)


@autocast_fp32_op
def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None,  # noqa: A002
                          return_indices=False, _random_samples=None):
    """2-D fractional max pooling; (output, indices) when return_indices, else output."""
    out = fractional_max_pool2d_with_indices(input, kernel_size, output_size, output_ratio,
                                             return_indices, _random_samples)
    return out if return_indices else out[0]


@autocast_fp32_op
def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None,  # noqa: A002
                                       output_ratio=None, return_indices=False,
                                       _random_samples=None):
    """3-D fractional max pooling over (N, C, T, H, W) or (C, T, H, W) -> (output, indices),
    indices flat t * H * W + h * W + w per volume; _random_samples (N, C, 3)."""
    output_size = _output_size_3d(input, output_size, output_ratio)
    if _random_samples is None:
        n_batch = 1 if input.dim() == 4 else input.size(0)
        _random_samples = _C.rand(n_batch, input.size(-4), 3, dtype=input.dtype)
    return _fractional_max_pool(input, kernel_size, output_size, _random_samples, 3)


@autocast_fp32_op
def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None,  # noqa: A002
                          return_indices=False, _random_samples=None):
    """3-D fractional max pooling; (output, indices) when return_indices, else output."""
    out = fractional_max_pool3d_with_indices(input, kernel_size, output_size, output_ratio,
                                             return_indices, _random_samples)
    return out if return_indices else out[0]
