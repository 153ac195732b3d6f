"""torch's order statistics and NaN-aware reductions as compositions of cddp's C kernels:
median / nanmedian, kthvalue, quantile / nanquantile, msort, aminmax, nansum / nanmean,
std_mean / var_mean, logcumsumexp, cdist / dist, trapezoid (trapz) — the functions and their
Tensor methods. Order statistics sort once (C) and gather the chosen positions from the input,
so values carry the input's gradient at the chosen elements, as torch's.

Decisions: median's index among equal values is the one a stable sort puts at the median
position (torch leaves it unspecified); cdist computes p = 2 through matrix products when
either side has more than 25 rows, as torch's default compute_mode, else directly."""
import math

from . import _C
from ._ops import _dim, _return_type, autocast_fp32_op, numpy_names

Tensor = _C.Tensor


median_result = _return_type("median", module=__name__)
nanmedian_result = _return_type("nanmedian", module=__name__)
kthvalue_result = _return_type("kthvalue", module=__name__)
aminmax_result = _return_type("aminmax", ("min", "max"), module=__name__)


def _pick(input, dim, k, keepdim):  # noqa: A002
    """(values, indices) of the k-th smallest along dim (k: a tensor of positions per row, or
    an int); NaN sorts last."""
    order = input.sort(dim=dim, stable=True)[1]
    if isinstance(k, Tensor):
        pos = k.unsqueeze(dim)
    else:
        shape = list(order.shape)
        shape[dim] = 1
        pos = _C.full(shape, k, dtype=_C.int64)
    idx = order.gather(dim, pos)
    vals = input.gather(dim, idx)
    if not keepdim:
        idx, vals = idx.squeeze(dim), vals.squeeze(dim)
    return vals, idx


def _nan_count(input, dim):  # noqa: A002
    return _C.isnan(input).sum(dim=dim, keepdim=False) if input.is_floating_point() else None


def median(input, dim=None, keepdim=False):  # noqa: A002
    """The lower median (the ((n - 1) // 2)-th smallest); NaN where the values hold NaN. Without
    dim, one value over the flattened tensor; with dim, (values, indices)."""
    if dim is None:
        flat = input.reshape(-1)
        if flat.numel() == 0:
            return _C.full((), math.nan, dtype=input.dtype)
        v, _ = _median_along(flat, 0, False, False)
        return _spread_over_ties(flat, v)
    return median_result(_median_along(input, _dim(dim, input.dim()), keepdim, False))


def nanmedian(input, dim=None, keepdim=False):  # noqa: A002
    """median of the non-NaN values (NaN only where a row is all NaN)."""
    if dim is None:
        flat = input.reshape(-1)
        v, _ = _median_along(flat, 0, False, True)
        return _spread_over_ties(flat, v)
    return nanmedian_result(_median_along(input, _dim(dim, input.dim()), keepdim, True))


def _spread_over_ties(flat, v):
    """The median v of flat with torch's gradient for median()/nanmedian() without dim: spread
    evenly over every element equal to v (with dim, torch sends it to the returned index). The
    value stays v exactly: v + (sum of zeros) / count."""
    if not flat.requires_grad or not _C.isfinite(v).item():
        return v
    vd = v.detach()
    tie = flat.detach() == vd
    return vd + _C.where(tie, flat - vd, _C.zeros_like(flat)).sum() / tie.sum()


def _median_along(input, dim, keepdim, ignore_nan):  # noqa: A002
    if input.dim() == 0:
        return input.clone(), _C.zeros((), dtype=_C.int64)
    n = input.shape[dim]
    if n == 0:
        raise IndexError(f"median(): Expected reduction dim {dim} to have non-zero size.")
    nans = _nan_count(input, dim)
    if nans is None:
        return _pick(input, dim, (n - 1) // 2, keepdim)
    valid = n - nans
    if ignore_nan:       # all-NaN rows take position 0, a NaN
        k = ((valid - 1) // 2).clamp(min=0)
    else:                # a row with NaN takes its first NaN, which sorts right after the rest
        k = _C.where(nans > 0, valid, _C.full_like(valid, (n - 1) // 2))
    return _pick(input, dim, k, keepdim)


def kthvalue(input, k, dim=-1, keepdim=False):  # noqa: A002
    """The k-th smallest value along dim (1-based k) and its index."""
    d = _dim(dim, input.dim())
    n = input.shape[d] if input.dim() else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    if input.dim() == 0:
        return kthvalue_result((input.clone(), _C.zeros((), dtype=_C.int64)))
    return kthvalue_result(_pick(input, d, k - 1, keepdim))


def msort(input):  # noqa: A002
    return input.sort(dim=0)[0]


def aminmax(input, *, dim=None, keepdim=False):  # noqa: A002
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as "
                               "the operation has no identity.")
        mn, mx = input.min(), input.max()
        if keepdim:
            shape = (1,) * input.dim()
            mn, mx = mn.reshape(shape), mx.reshape(shape)
        return aminmax_result((mn, mx))
    return aminmax_result((input.amin(dim=dim, keepdim=keepdim),
                           input.amax(dim=dim, keepdim=keepdim)))


def _quantile(input, q, dim, keepdim, interpolation, ignore_nan, fname):  # noqa: A002
    if interpolation not in ("linear", "lower", "higher", "midpoint", "nearest"):
        raise RuntimeError(f"{fname}() interpolation must be one of linear, lower, higher, "
                         f"midpoint or nearest. Got {interpolation}")
    if not input.is_floating_point():
        raise RuntimeError(f"{fname}() input tensor must be either float or double dtype")
    scalar_q = not isinstance(q, Tensor)
    if not scalar_q and q.dim() > 1:
        raise RuntimeError(f"{fname}() q must be a scalar or 1D tensor")
    qt = _C.tensor([float(q)], dtype=input.dtype) if scalar_q else q.to(input.dtype).reshape(-1)
    if bool(((qt < 0) | (qt > 1)).any()):
        raise RuntimeError(f"{fname}() q values must be in the range [0, 1]")
    x = input.reshape(-1) if dim is None else input
    d = 0 if dim is None else _dim(dim, input.dim())
    if x.dim() == 0:
        x = x.reshape(1)
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"{fname}() input tensor must be non-empty")
    srt = x.sort(dim=d)[0]                             # NaN last
    nans = _C.isnan(x).sum(dim=d, keepdim=True).to(x.dtype)
    last = (n - nans - 1) if ignore_nan else _C.full_like(nans, n - 1)
    last = last.clamp(min=0)
    outs = []
    for i in range(qt.shape[0]):                       # one gather per requested quantile
        rank = qt[i] * last
        lo = rank.floor()
        hi = rank.ceil()
        if interpolation == "lower":
            pos_lo = pos_hi = lo
        elif interpolation == "higher":
            pos_lo = pos_hi = hi
        elif interpolation == "nearest":
            pos_lo = pos_hi = rank.round()
        else:
            pos_lo, pos_hi = lo, hi
        vlo = srt.gather(d, pos_lo.to(_C.int64))
        vhi = srt.gather(d, pos_hi.to(_C.int64))
        if interpolation == "linear":
            v = vlo + (vhi - vlo) * (rank - lo)
        elif interpolation == "midpoint":
            v = vlo + (vhi - vlo) * 0.5
        else:
            v = vlo
        # a row with NaN is NaN (quantile), an all-NaN row is NaN (nanquantile)
        bad = (nans == n) if ignore_nan else (nans > 0)
        v = _C.where(bad, _C.full_like(v, math.nan), v)
        if dim is None:
            v = v.reshape(()) if not keepdim else v.reshape((1,) * input.dim())
        elif not keepdim:
            v = v.squeeze(d)
        outs.append(v)
    return outs[0] if scalar_q else _C.stack(outs)


@autocast_fp32_op
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):  # noqa: A002
    return _quantile(input, q, dim, keepdim, interpolation, False, "quantile")


@autocast_fp32_op
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):  # noqa: A002
    return _quantile(input, q, dim, keepdim, interpolation, True, "nanquantile")


def nansum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    x = _C.where(_C.isnan(input), _C.zeros_like(input), input) if input.is_floating_point() \
        else input
    if dim is None:
        return x.sum(dtype=dtype) if dtype is not None else x.sum()
    return x.sum(dim=dim, keepdim=keepdim, dtype=dtype) if dtype is not None else \
        x.sum(dim=dim, keepdim=keepdim)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    if not input.is_floating_point():
        raise RuntimeError("nanmean(): expected input to have floating point dtype but got "
                           f"{input.dtype}")
    cnt = (~_C.isnan(input)).sum(dim=dim, keepdim=keepdim) if dim is not None else \
        (~_C.isnan(input)).sum()
    return nansum(input, dim, keepdim, dtype=dtype) / cnt


def _moments(fn, input, dim, unbiased, keepdim, correction):  # noqa: A002
    kw = {}
    if correction is not None:
        kw["correction"] = correction
    elif unbiased is not None:
        kw["unbiased"] = unbiased
    if dim is None:
        s = getattr(input, fn)(**kw)
        m = input.mean()
        if keepdim:
            shape = (1,) * input.dim()
            s, m = s.reshape(shape), m.reshape(shape)
        return s, m
    return getattr(input, fn)(dim, keepdim=keepdim, **kw), input.mean(dim, keepdim=keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    """(std, mean) over dim; torch's positional forms std_mean(x, unbiased) and
    std_mean(x, dim, unbiased, keepdim) both work."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _moments("std", input, dim, unbiased, keepdim, correction)


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _moments("var", input, dim, unbiased, keepdim, correction)


def logcumsumexp(input, dim):  # noqa: A002
    """log(cumsum(exp(x))) along dim, shifted by the row's maximum so it cannot overflow."""
    d = _dim(dim, input.dim())
    x = input if input.is_floating_point() else input.to(_C.get_default_dtype())
    if x.dim() == 0 or x.shape[d] == 0:
        return x.clone()
    m = x.detach().amax(dim=d, keepdim=True)
    m = _C.where(_C.isinf(m), _C.zeros_like(m), m)     # all -inf (or an inf) row: no shift
    return _C.log(_C.exp(x - m).cumsum(d)) + m


def dist(input, other, p=2):  # noqa: A002
    return (input - other).norm(p=p)


@autocast_fp32_op
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """Pairwise p-norm distances between the rows of x1 (..., P, M) and x2 (..., R, M):
    (..., P, R)."""
    if x1.dim() < 2 or x2.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.dim()}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError("X1 and X2 must have the same number of columns. X1: "
                           f"{x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    modes = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
             "donot_use_mm_for_euclid_dist")
    if compute_mode not in modes:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    rows_p, rows_r = x1.shape[-2], x2.shape[-2]
    use_mm = p == 2 and (compute_mode == "use_mm_for_euclid_dist" or (
        compute_mode == modes[0] and (rows_p > 25 or rows_r > 25)))
    if use_mm:
        # ||a||^2 - 2 a.b + ||b||^2, clamped at 0 (rounding can make it slightly negative)
        n1 = (x1 * x1).sum(-1, keepdim=True)
        n2 = (x2 * x2).sum(-1, keepdim=True)
        d2 = n1 - 2 * x1.matmul(x2.transpose(-2, -1)) + n2.transpose(-2, -1)
        return d2.clamp(min=1e-30).sqrt()
    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()   # (..., P, R, M)
    if p == 0:                     # a count: zero gradient, but a graph as torch's has
        return (diff != 0).to(x1.dtype).sum(-1) + diff.sum(-1) * 0
    if math.isinf(p):
        # torch's gradient goes in full to every coordinate tied for the maximum (amax would
        # split it): the value is the detached maximum, the gradient flows through the mask
        top = diff.detach().amax(-1)
        mask = (diff.detach() == top.unsqueeze(-1)).to(diff.dtype)
        return top + ((diff - diff.detach()) * mask).sum(-1)
    if p == 1:
        return diff.sum(-1)
    s = (diff * diff).sum(-1) if p == 2 else (diff ** p).sum(-1)
    # the root's derivative is infinite at a zero distance: take it of 1 there (gradient 0)
    zero = s == 0
    root = _C.where(zero, _C.ones_like(s), s)
    root = root.sqrt() if p == 2 else root ** (1.0 / p)
    return _C.where(zero, _C.zeros_like(s), root)


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoid rule along dim, with sample points x or a constant spacing dx (default 1)."""
    d = _dim(dim, y.dim())
    n = y.shape[d]
    if n == 0:
        return y.sum(d) * 0
    left, right = y.narrow(d, 0, n - 1), y.narrow(d, 1, n - 1)
    if x is None:
        return (left + right).sum(d) * ((1.0 if dx is None else dx) / 2)
    if not isinstance(x, Tensor):
        return (left + right).sum(d) * (x / 2)
    xd = x.narrow(-1 if x.dim() == 1 else d, 1, n - 1) - \
        x.narrow(-1 if x.dim() == 1 else d, 0, n - 1)
    if x.dim() == 1 and y.dim() > 1:
        shape = [1] * y.dim()
        shape[d] = n - 1
        xd = xd.reshape(shape)
    return ((left + right) * xd).sum(d) / 2


def trapz(y, x=None, *, dx=None, dim=-1):
    return trapezoid(y, x, dx=dx, dim=dim)


for _n in ("median", "nanmedian", "kthvalue", "aminmax", "quantile", "nanquantile", "nansum",
           "nanmean", "std_mean", "var_mean", "logcumsumexp"):
    globals()[_n] = numpy_names(globals()[_n])
for _n in ("median", "nanmedian", "kthvalue", "msort", "aminmax", "quantile", "nanquantile",
           "nansum", "nanmean", "logcumsumexp", "dist"):
    setattr(Tensor, _n, globals()[_n])
del _n
__all__ = ["median", "nanmedian", "kthvalue", "msort", "aminmax", "quantile", "nanquantile",
           "nansum", "nanmean", "std_mean", "var_mean", "logcumsumexp", "dist", "cdist",
           "trapezoid", "trapz"]


# ---- covariance, correlation, mode, histogram -------------------------------------------------

def cov(input, *, correction=1, fweights=None, aweights=None):  # noqa: A002
    """The covariance of the rows (variables) of input (V, O) over its columns
    (observations), with frequency / analytic weights as torch (a 1-D input is one variable:
    a 0-d result)."""
    if input.dim() > 2:
        raise ValueError(f"cov(): expected input to have two or fewer dimensions but got an "
                         f"input with {input.dim()} dimensions")
    x = input if input.dim() == 2 else input.reshape(1, -1)
    if not x.is_floating_point():
        x = x.to(_C.get_default_dtype())
    w = None
    for name, wt in (("fweights", fweights), ("aweights", aweights)):
        if wt is None:
            continue
        if wt.dim() > 1 or wt.numel() != x.shape[1]:
            raise RuntimeError(f"cov(): expected {name} to have one dimension and the same "
                               f"number of observations as input ({x.shape[1]})")
        if bool((wt < 0).any()):
            raise RuntimeError(f"cov(): {name} cannot be negative")
        w = wt.to(x.dtype) if w is None else w * wt.to(x.dtype)
    if w is None:
        w_sum = float(x.shape[1])
        avg = x.mean(1, keepdim=True)
    else:
        w_sum = w.sum()
        avg = (x * w).sum(1, keepdim=True) / w_sum
    if w is None or aweights is None or correction == 0:
        norm = w_sum - correction
    else:
        norm = w_sum - correction * (w * aweights.to(x.dtype)).sum() / w_sum
    d = x - avg
    c = (d * w if w is not None else d).matmul(d.T) / norm
    return c.reshape(()) if input.dim() < 2 else c


def corrcoef(input):  # noqa: A002
    """Pearson correlation coefficients of the rows of input, clipped to [-1, 1]."""
    c = cov(input)
    if c.dim() == 0:
        return c / c
    sd = c.diagonal().sqrt()
    return (c / sd.unsqueeze(1) / sd.unsqueeze(0)).clamp(-1, 1)


_mode_result = _return_type("mode")


def mode(input, dim=-1, keepdim=False):  # noqa: A002
    """(values, indices): the most frequent value along dim (the smallest of equally frequent
    ones) and the index of its last occurrence, as torch's CPU kernel."""
    d = _dim(dim, input.dim())
    x = input.movedim(d, -1) if input.dim() else input.reshape(1)
    lead = tuple(x.shape[:-1])
    n = x.shape[-1]
    if n == 0:
        raise IndexError("mode(): Expected reduction dim " + str(d) + " to have non-zero size.")
    rows = x.reshape(-1, n)
    from ._extras import sort
    s, perm = sort(rows, -1, stable=True)
    starts = _C.cat([_C.ones(rows.shape[0], 1, dtype=_C.bool), s[:, 1:] != s[:, :-1]], -1)
    run = starts.long().cumsum(-1) - 1                     # run id of each sorted position
    counts = _C.zeros(rows.shape, dtype=_C.int64).scatter_add(-1, run, _C.ones_like(run))
    per = counts.gather(-1, run)
    best = (per == per.amax(-1, keepdim=True)).to(_C.int64).argmax(-1, keepdim=True)
    value = s.gather(-1, best)                              # (R, 1): the smallest modal value
    index = _C.where(s == value, perm, _C.full_like(perm, -1)).amax(-1)
    values, indices = value.reshape(lead), index.reshape(lead)
    if keepdim and input.dim():
        values, indices = values.unsqueeze(d), indices.unsqueeze(d)
    return _mode_result((values, indices))


_histogram_result = _return_type("histogram", ("hist", "bin_edges"))


def histogram(input, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    """(hist, bin_edges) of input's values (NumPy's histogram: the same edges and counts as
    torch's for float inputs)."""
    import numpy as np
    x = input.detach().reshape(-1).numpy()
    b = bins.detach().numpy() if isinstance(bins, _C.Tensor) else bins
    w = None if weight is None else weight.detach().reshape(-1).numpy()
    hist, edges = np.histogram(x, bins=b, range=range, weights=w, density=density)
    return _histogram_result((_C.from_numpy(np.ascontiguousarray(hist.astype(x.dtype))),
                              _C.from_numpy(np.ascontiguousarray(edges.astype(x.dtype)))))


mode = numpy_names(mode)
Tensor.cov = cov
Tensor.corrcoef = corrcoef
Tensor.mode = mode
Tensor.histogram = histogram
__all__ += ["cov", "corrcoef", "mode", "histogram"]


_SEGMENT = {"sum": ("sum", 0.0), "mean": ("sum", 0.0), "max": ("amax", -math.inf),
            "min": ("amin", math.inf), "prod": ("prod", 1.0)}


def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    """torch.segment_reduce: reduce consecutive segments of data along axis (lengths, or
    offsets as their boundaries): one scatter_reduce into a tensor of the identity (or
    `initial`, which each segment then includes; mean divides by the segment's length only,
    and an empty segment is `initial`, else 0 / NaN / -inf / inf / 1 as torch's)."""
    if reduce not in _SEGMENT:
        raise RuntimeError(f"reduce argument must be either sum, max, min, mean or prod, "
                           f"got {reduce}")
    if indices is not None:
        raise NotImplementedError("segment_reduce(): indices based reduction is not supported "
                                  "yet.")
    if lengths is None and offsets is None:
        raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined")
    if lengths is None:
        lengths = offsets[..., 1:] - offsets[..., :-1]
    axis = axis + data.dim() if axis < 0 else axis
    if axis != lengths.dim() - 1:
        raise RuntimeError(f"segment_reduce(): Expected axis to be the last dimension of "
                           f"lengths but got {axis}.")
    if lengths.dim() != 1:
        raise NotImplementedError("cddp: segment_reduce takes one-dimensional lengths/offsets "
                                  "(a batch of segmentations is not supported)")
    x = data
    lengths = lengths.to(_C.int64)
    if not unsafe:
        if bool((lengths < 0).any()):
            raise RuntimeError("lengths contains negative value!")
        if int(lengths.sum()) != x.shape[0]:
            raise RuntimeError(f"segment_reduce(): Expected all rows of lengths along axis to "
                               f"sum to data.size(axis) ({x.shape[0]})")
    how, ident = _SEGMENT[reduce]
    n = lengths.numel()
    seg = _C.repeat_interleave(_C.arange(n), lengths)                      # (rows,)
    idx = seg.view((-1,) + (1,) * (x.dim() - 1)).expand(x.shape)
    start = ident if initial is None else float(initial)
    out = _C.full((n,) + tuple(x.shape[1:]), start, dtype=data.dtype)
    out = out.scatter_reduce(0, idx, x, how, include_self=True)
    if reduce == "mean":
        count = lengths.view((-1,) + (1,) * (x.dim() - 1)).to(out.dtype)
        empty = math.nan if initial is None else float(initial)
        out = _C.where(count > 0, out / count.clamp(min=1), empty)
    return out


__all__ += ["segment_reduce"]
