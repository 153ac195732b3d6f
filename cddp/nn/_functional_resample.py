"""interpolate's separable filters: mode="bicubic" (4-D) and antialias=True (bilinear, bicubic
and lanczos, 4-D), as torch's upsample_bicubic2d and _upsample_{bilinear,bicubic,lanczos}2d_aa.

Each spatial axis is resampled on its own: output position o along an axis of length n reads
K input positions idx[o, :] with weights w[o, :] (tables built here in float64, O(out * K)
numbers), so an (N, C, H, W) image becomes (N, C, H, OW) along W, then (N, C, OH, OW) along H.
An axis pass is one GEMM with the table as a dense (out, n) matrix — x @ M^T along W, M @ x
along H — while out * n stays under _DENSE_MAX (4M entries: 2048 -> 2048), else K gathers of
whole columns (index_select), each scaled by its weight column and summed. The per-element
work runs in cddp's C kernels; autograd differentiates the products, so the backward is the
exact adjoint (and differentiable again). The dense GEMM spends n / K times the multiply-adds
of a K-tap kernel, but at image sizes it runs faster than torch's scalar kernels
(bench/spatial3d.py's interpolate rows).

Tables (torch's, aten/native/UpSample.h and UpSampleKernel.cpp):
- scale s = (n - 1) / (out - 1) with align_corners (0 when out == 1), else 1 / scale_factor
  when one was given (and not recomputed), else n / out.
- bicubic: source x = s * o (align_corners) or s * (o + 0.5) - 0.5; taps floor(x) - 1 .. + 2
  clamped to [0, n - 1]; Keys' cubic convolution with A = -0.75 at t = x - floor(x).
- antialias: a filter of support (interp_size / 2) * max(s, 1) centred at s * (o + 0.5), taps
  where it is non-zero within [0, n), weights filter((j - centre + 0.5) / max(s, 1)) divided by
  their sum — the triangle for bilinear (interp_size 2), Keys' cubic with A = -0.5 for
  bicubic (interp_size 4, PIL's), Lanczos-3 sinc(x) sinc(x / 3) for lanczos (interp_size 6).
  Upsampling (s < 1) then interpolates, with the weights renormalised at the borders instead
  of clamping.
float16 / bfloat16 images are resampled as float32 copies and rounded once, as torch's CPU
kernels accumulate them in float32.
"""
import math

import numpy as np

from .. import _C
from .._ops import autocast_suspended

Tensor = _C.Tensor


def _scale(n, out, align_corners, scale_factor):
    """torch's area_pixel_compute_scale."""
    if align_corners:
        return (n - 1) / (out - 1) if out > 1 else 0.0
    if scale_factor is not None and scale_factor > 0:
        return 1.0 / scale_factor
    return n / out


def _keys(x, a):
    """Keys' cubic convolution kernel at |x| (0 outside [0, 2))."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _bicubic_table(n, out, align_corners, scale_factor, ft):
    """ft: the dtype torch computes source positions in (the input's: float32 or float64) —
    kept, since the fractional position's rounding moves every weight."""
    s = ft(_scale(n, out, align_corners, scale_factor))
    o = np.arange(out).astype(ft)
    src = (s * o if align_corners else s * (o + ft(0.5)) - ft(0.5)).astype(np.float64)
    i0 = np.floor(src)
    t = src - i0
    k = np.arange(-1, 3)
    idx = np.clip(i0[:, None].astype(np.int64) + k[None, :], 0, n - 1)
    w = _keys(t[:, None] - k[None, :], -0.75)
    return idx, w


def _aa_table(n, out, align_corners, scale_factor, interp_size, filt):
    s = _scale(n, out, align_corners, scale_factor)
    support = interp_size * 0.5 * s if s >= 1.0 else interp_size * 0.5
    K = int(math.ceil(support)) * 2 + 1
    inv = 1.0 / s if s >= 1.0 else 1.0
    idx = np.zeros((out, K), dtype=np.int64)
    w = np.zeros((out, K), dtype=np.float64)
    for o in range(out):
        centre = s * (o + 0.5)
        lo = max(int(centre - support + 0.5), 0)
        size = min(max(min(int(centre + support + 0.5), n) - lo, 0), K)
        j = np.arange(size)
        ws = filt((j + lo - centre + 0.5) * inv)
        total = ws.sum()
        if total != 0.0:
            ws = ws / total
        idx[o, :size] = lo + j
        idx[o, size:] = lo if size else 0
        w[o, :size] = ws
    return idx, w


def _triangle(x):
    return np.maximum(0.0, 1.0 - np.abs(x))


def _lanczos3(x):
    """sinc(x) sinc(x / 3) on (-3, 3), 0 outside (np.sinc is sin(pi x) / (pi x))."""
    return np.where(np.abs(x) < 3, np.sinc(x) * np.sinc(x / 3), 0.0)


# Above this many table entries (out x n) an axis is resampled by gathers, not one GEMM.
_DENSE_MAX = 1 << 22


def _resample(x, idx, w, axis):
    """Resample axis -1 (axis=3) or -2 (axis=2) of x (N, C, H, W) with a table."""
    out, n = idx.shape[0], int(x.shape[axis])
    dt = np.float32 if x.dtype == _C.float32 else np.float64
    if out * n <= _DENSE_MAX:
        # the table as a dense (out, n) matrix: one GEMM per axis (the kernels' rate beats
        # K strided gathers by far at image sizes); clamped taps that repeat an index add up
        m = np.zeros((out, n), dtype=np.float64)
        np.add.at(m, (np.repeat(np.arange(out), idx.shape[1]), idx.ravel()), w.ravel())
        if axis == 3:
            return x @ _C.from_numpy(np.ascontiguousarray(m.T, dtype=dt))
        return _C.from_numpy(m.astype(dt)) @ x
    if axis == 2:
        return _resample(x.transpose(2, 3), idx, w, 3).transpose(2, 3)
    y = None
    for k in range(idx.shape[1]):
        wk = w[:, k]
        if not wk.any():
            continue
        term = x.index_select(-1, _C.from_numpy(np.ascontiguousarray(idx[:, k]))) * \
            _C.from_numpy(wk.astype(dt))
        y = term if y is None else y + term
    if y is None:                              # every weight zero: an all-zero output
        y = x.new_zeros(tuple(x.shape[:-1]) + (out,))
    return y


def resample2d(input, out, scales, mode, align_corners, antialias):  # noqa: A002
    """(N, C, H, W) -> (N, C, out[0], out[1]) for interpolate's bicubic / antialias modes;
    scales is [sh, sw] (scale factors given by the caller, not recomputed) or None. Inside an
    autocast region it runs in the input's dtype, as torch's kernels: the GEMMs below must not
    be cast."""
    if _C._autocast_lower_dtype() is not None:
        with autocast_suspended():
            return resample2d(input, out, scales, mode, align_corners, antialias)
    H, W = int(input.shape[2]), int(input.shape[3])
    if H <= 0 or W <= 0 or out[0] <= 0 or out[1] <= 0:
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"(H: {H}, W: {W}) output (H: {out[0]}, W: {out[1]})")
    if not input.is_floating_point():
        raise NotImplementedError(f'"upsample_{mode}2d" not implemented for {input.dtype}')
    low = input.dtype if input.dtype in (_C.float16, _C.bfloat16) else None
    x = input.float() if low is not None else input
    sh, sw = (None, None) if scales is None else scales
    if antialias:
        filt, size = {"bilinear": (_triangle, 2), "bicubic": (lambda v: _keys(v, -0.5), 4),
                      "lanczos": (_lanczos3, 6)}[mode]
        tw = _aa_table(W, out[1], align_corners, sw, size, filt)
        th = _aa_table(H, out[0], align_corners, sh, size, filt)
    else:
        ft = np.float64 if x.dtype == _C.float64 else np.float32
        tw = _bicubic_table(W, out[1], align_corners, sw, ft)
        th = _bicubic_table(H, out[0], align_corners, sh, ft)
    y = _resample(_resample(x, *tw, 3), *th, 2).contiguous()
    return y.to(low) if low is not None else y
