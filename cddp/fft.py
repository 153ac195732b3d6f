"""cddp.fft — torch.fft: discrete Fourier transforms over cddp's complex tensors.

    spec = torch.fft.rfft2(img)                          # (..., H, W // 2 + 1), complex64
    img2 = torch.fft.irfft2(spec, s=img.shape[-2:])      # back, float32
    loss = (torch.fft.fft(x, norm="ortho") - torch.fft.fft(y, norm="ortho")).abs().mean()

Contract:
- fft / ifft / rfft / irfft / hfft / ihfft (one dim), fft2 / ifft2 / rfft2 / irfft2, fftn /
  ifftn / rfftn / irfftn take torch 2.13's arguments (n or s, dim, norm in None, "backward",
  "forward", "ortho") and give its shapes and dtypes: complex64 from float32 or complex64
  input (complex128 from float64), real inputs of the complex transforms taken as complex,
  integer inputs as float32. `n` / `s` zero-pad or truncate each transformed dim first
  (irfft's default n is 2 * (m - 1)).
- The transforms are NumPy's pocketfft (C, at the input's precision) on the complex layout of
  cddp/_complex.py. Each is one autograd node with torch's adjoint: c2c backward is the
  opposite transform with the dual norm ("backward" <-> "forward"); rfft's is the real part
  of the inverse of the zero-padded gradient (one c2r transform of its Hermitian part);
  irfft's is rfft of the gradient with the bins
  that stand for two (1 .. n - (n // 2 + 1)) doubled. Backward is not itself
  differentiable (no double backward through a transform).
- fftfreq / rfftfreq / fftshift / ifftshift as torch (shift: a roll by n // 2, real or complex
  input).
"""
import numpy as np

from . import _C
from ._C import Tensor
from ._complex import ComplexTensor, _from_numpy, _join, _to_numpy
from .nn import functional as F
from .autograd.function import Function

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2",
           "fftn", "ifftn", "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _norm(norm):
    if norm is None:
        return "backward"
    if norm not in _DUAL:
        raise ValueError(f"Invalid normalization mode: {norm}")
    return norm


# ---- NumPy views of cddp tensors (the complex ones: cddp/_complex.py's _to_numpy / _from_numpy)

def _wide(a):
    """a in double precision: NumPy 2's pocketfft is 1.2-5x slower in single precision than
    in double (measured on the shapes of bench/complex.py), so float32 data is transformed in
    float64 and rounded once on the way out (closer to the exact transform than a float32
    FFT's rounding)."""
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64, copy=False)


def _from_real(a, real_dtype):
    return _C.from_numpy(np.ascontiguousarray(a, dtype=np.float32 if real_dtype == _C.float32
                                              else np.float64))


# ---- the autograd nodes (on real representations) -------------------------------------------

class _C2C(Function):
    @staticmethod
    def forward(ctx, r, dims, inverse, norm):
        ctx.dims, ctx.inverse, ctx.norm = dims, inverse, norm
        f = np.fft.ifftn if inverse else np.fft.fftn
        return _from_numpy(f(_wide(_to_numpy(r)), axes=dims, norm=norm), r.dtype)

    @staticmethod
    def backward(ctx, g):
        f = np.fft.fftn if ctx.inverse else np.fft.ifftn
        return (_from_numpy(f(_wide(_to_numpy(g)), axes=ctx.dims, norm=_DUAL[ctx.norm]),
                              g.dtype), None, None, None)


class _R2C(Function):
    @staticmethod
    def forward(ctx, x, dims, norm):
        ctx.dims, ctx.norm, ctx.n = dims, norm, x.shape[dims[-1]]
        return _from_numpy(np.fft.rfftn(_wide(x.detach().numpy()), axes=dims, norm=norm),
                             x.dtype)

    @staticmethod
    def backward(ctx, g):
        # The adjoint is Re(ifftn(g zero-padded to n in the last dim)). Its Hermitian part
        # is g with the last dim's bins 1 .. (n - 1) // 2 halved (their mirrors are the
        # zeros), so it is one c2r transform of half the data instead of a full c2c one
        a = _to_numpy(g).astype(np.complex128)        # a copy, in double precision
        last = ctx.dims[-1]
        idx = [slice(None)] * a.ndim
        idx[last] = slice(1, (ctx.n + 1) // 2)
        a[tuple(idx)] *= 0.5
        s = [a.shape[d] for d in ctx.dims[:-1]] + [ctx.n]
        return _from_real(np.fft.irfftn(a, s=s, axes=ctx.dims, norm=_DUAL[ctx.norm]),
                          g.dtype), None, None


class _C2R(Function):
    @staticmethod
    def forward(ctx, r, dims, n, norm):
        ctx.dims, ctx.norm = dims, norm
        a = _wide(_to_numpy(r))
        s = [a.shape[d] for d in dims[:-1]] + [n]
        return _from_real(np.fft.irfftn(a, s=s, axes=dims, norm=norm), r.dtype)

    @staticmethod
    def backward(ctx, g):
        gi = np.fft.rfftn(_wide(g.detach().numpy()), axes=ctx.dims, norm=_DUAL[ctx.norm])
        last = ctx.dims[-1]
        double = g.shape[last] - gi.shape[last]
        if double > 0:
            idx = [slice(None)] * gi.ndim
            idx[last] = slice(1, 1 + double)
            gi[tuple(idx)] *= 2
        return _from_numpy(gi, g.dtype), None, None, None


# ---- argument handling -----------------------------------------------------------------------

def _as_complex(x, name):
    if isinstance(x, ComplexTensor):
        return x
    if not isinstance(x, Tensor):
        raise TypeError(f"fft_{name}(): argument 'input' must be Tensor, not {type(x).__name__}")
    return _join(_as_float(x), None)


def _as_float(x):
    if isinstance(x, ComplexTensor):
        return x
    return x if x.dtype in (_C.float32, _C.float64) else x.to(_C.float32)


def _resize(t, dim, size):
    """t (real tensor or complex representation) with dim zero-padded or cut to size."""
    cur = t.shape[dim]
    if size == cur:
        return t
    if size < 1:
        raise RuntimeError(f"Invalid number of data points ({size}) specified")
    return F.pad(t, [0, 0] * (t.dim() - 1 - dim) + [0, size - cur])   # negative: a cut


def _plan(x, s, dim, ndim_default_all):
    """The (non-negative, sorted as given) dims and sizes of an n-dim transform."""
    nd = x.dim()
    if dim is None:
        if s is None:
            dims = list(range(nd)) if ndim_default_all else [nd - 1]
        else:
            dims = list(range(nd - len(s), nd))
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
    dims = [d + nd if d < 0 else d for d in dims]
    for d in dims:
        if not 0 <= d < max(nd, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, "
                             f"{nd - 1}], but got {d if d < nd else d - nd})")
    if len(set(dims)) != len(dims):
        raise RuntimeError("FFT dims must be unique")
    if s is not None:
        s = [s] if isinstance(s, int) else list(s)
        if len(s) != len(dims):
            raise RuntimeError("When given, dim and shape arguments must have the same length")
        s = [x.shape[d] if v == -1 else v for v, d in zip(s, dims)]
    return dims, s


def _c2c(x, s, dim, norm, inverse, name, all_dims=True):
    z = _as_complex(x, name)
    dims, s = _plan(z, s, dim, all_dims)
    r = z._r
    for d, v in zip(dims, s or ()):
        r = _resize(r, d, v)
    return ComplexTensor(_C2C.apply(r, tuple(dims), inverse, _norm(norm)))


def _r2c(x, s, dim, norm, name, all_dims=True):
    if isinstance(x, ComplexTensor):
        raise RuntimeError(f"{name} expects a real input tensor, but got {x.dtype}")
    x = _as_float(x)
    dims, s = _plan(x, s, dim, all_dims)
    for d, v in zip(dims, s or ()):
        x = _resize(x, d, v)
    return ComplexTensor(_R2C.apply(x, tuple(dims), _norm(norm)))


def _c2r(x, s, dim, norm, name, all_dims=True):
    z = _as_complex(x, name)
    dims, s = _plan(z, s, dim, all_dims)
    last = dims[-1]
    n = s[-1] if s is not None else 2 * (z.shape[last] - 1)
    if n < 1:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")
    r = z._r
    for d, v in zip(dims[:-1], (s or [None] * len(dims))[:-1]):
        if v is not None:
            r = _resize(r, d, v)
    r = _resize(r, last, n // 2 + 1)
    return _C2R.apply(r, tuple(dims), n, _norm(norm))


# ---- torch.fft's functions -------------------------------------------------------------------

def fft(input, n=None, dim=-1, norm=None, *, out=None):  # noqa: A002
    return _c2c(input, None if n is None else [n], dim, norm, False, "fft")


def ifft(input, n=None, dim=-1, norm=None, *, out=None):  # noqa: A002
    return _c2c(input, None if n is None else [n], dim, norm, True, "ifft")


def rfft(input, n=None, dim=-1, norm=None, *, out=None):  # noqa: A002
    return _r2c(input, None if n is None else [n], dim, norm, "rfft")


def irfft(input, n=None, dim=-1, norm=None, *, out=None):  # noqa: A002
    return _c2r(input, None if n is None else [n], dim, norm, "irfft")


def hfft(input, n=None, dim=-1, norm=None, *, out=None):  # noqa: A002
    """The real spectrum of a Hermitian half-signal: irfft of its conjugate with the
    opposite normalization (torch's definition)."""
    return irfft(_as_complex(input, "hfft").conj(), n, dim, _DUAL[_norm(norm)])


def ihfft(input, n=None, dim=-1, norm=None, *, out=None):  # noqa: A002
    """The inverse of hfft: the conjugate of rfft with the opposite normalization."""
    return rfft(input, n, dim, _DUAL[_norm(norm)]).conj()


def fft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):  # noqa: A002
    return _c2c(input, s, dim, norm, False, "fft2")


def ifft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):  # noqa: A002
    return _c2c(input, s, dim, norm, True, "ifft2")


def rfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):  # noqa: A002
    return _r2c(input, s, dim, norm, "rfft2")


def irfft2(input, s=None, dim=(-2, -1), norm=None, *, out=None):  # noqa: A002
    return _c2r(input, s, dim, norm, "irfft2")


def fftn(input, s=None, dim=None, norm=None, *, out=None):  # noqa: A002
    return _c2c(input, s, dim, norm, False, "fftn")


def ifftn(input, s=None, dim=None, norm=None, *, out=None):  # noqa: A002
    return _c2c(input, s, dim, norm, True, "ifftn")


def rfftn(input, s=None, dim=None, norm=None, *, out=None):  # noqa: A002
    return _r2c(input, s, dim, norm, "rfftn")


def irfftn(input, s=None, dim=None, norm=None, *, out=None):  # noqa: A002
    return _c2r(input, s, dim, norm, "irfftn")


def fftfreq(n, d=1.0, *, out=None, dtype=None, layout=None, device=None, requires_grad=False,
            pin_memory=False):
    """[0, 1, ..., (n - 1) // 2, -(n // 2), ..., -1] / (d * n)."""
    k = _C.arange(n, dtype=dtype or _C.get_default_dtype())
    k = _C.where(k >= (n + 1) // 2, k - n, k) / (d * n)
    return k.requires_grad_(requires_grad)


def rfftfreq(n, d=1.0, *, out=None, dtype=None, layout=None, device=None, requires_grad=False,
             pin_memory=False):
    """[0, 1, ..., n // 2] / (d * n)."""
    k = _C.arange(n // 2 + 1, dtype=dtype or _C.get_default_dtype()) / (d * n)
    return k.requires_grad_(requires_grad)


def _shift(x, dim, sign):
    dims = list(range(x.dim())) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    shifts = [sign * (x.shape[d] // 2) for d in dims]
    if not dims:
        return x
    return x.roll(tuple(shifts), tuple(dims))


def fftshift(input, dim=None):  # noqa: A002
    return _shift(input, dim, 1)


def ifftshift(input, dim=None):  # noqa: A002
    return _shift(input, dim, -1)
