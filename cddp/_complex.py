"""cddp._complex — complex tensors: torch.complex64 / complex128 as pairs of real parts.

    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))    # LLaMA's RoPE
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq)
    loss = (torch.fft.rfft2(pred) - torch.fft.rfft2(target)).abs().mean()  # a spectral loss

Contract:
- A ComplexTensor of shape S holds one real tensor `_r` of shape S + (2,), float32 for
  complex64 and float64 for complex128: real parts at [..., 0], imaginary parts at [..., 1],
  torch.view_as_real's layout. view_as_real(z) returns `_r` itself and view_as_complex(x)
  wraps x without copying: both are views, as torch's.
- Every operation is composed of cddp's real ops on `_r`, so autograd flows through it; the
  gradient of a real loss with respect to a complex tensor is dL/dRe + i dL/dIm, which is
  torch's convention (what a complex leaf's .grad holds).
- Arithmetic: + - * / ** with complex tensors, real tensors and Python numbers (complex ones
  included), unary -, @ (matmul), ==; in place add_ sub_ mul_ div_ addcmul_ addcdiv_ (+= ...);
  abs, angle, exp, log, sqrt, sin, cos, sinh, cosh, tanh, tan, sigmoid, reciprocal, pow (real
  exponents), conj, sgn, square, norm, isfinite / isnan / isinf; prod; gather; tril / triu; real / imag (views); sum / mean / cumsum; shape ops (view,
  reshape, flatten, unsqueeze, squeeze, permute, transpose, t, T, H, mT, mH, expand,
  expand_as, repeat, flip, roll, chunk, split, unbind, indexing, setitem, masked_fill,
  contiguous, clone, detach, new_zeros); to / type_as / float / double (a real dtype keeps the
  real part and warns, as torch), numpy(), item(), tolist(). Result dtypes follow the real
  parts' promotion (a float64 operand makes complex128).
- torch.real / imag / conj / is_complex take complex tensors (cddp/_shape_ops.py); torch.abs /
  absolute / angle / exp / sgn / square / conj_physical / resolve_conj / roll / einsum / sqrt /
  sinh / cosh / tanh / tan / sigmoid / prod / gather / tril / triu /
  log / sin / cos / reciprocal / flip / cumsum / isfinite / isnan / isinf / norm / pow /
  masked_fill, linalg.vector_norm / norm and the *_like factories take complex tensors once
  this module is loaded (the first complex dtype, view or constructor): they are wrapped
  then (_install), so a program without complex numbers calls the C functions directly. The
  hot binary, reduction and shape functions (torch.add / sub / mul / div / matmul / mm / bmm /
  sum / mean / reshape / transpose / permute / unsqueeze / movedim / narrow / index_select ...,
  _FALLBACK) are wrapped too, but call the C function first: only its TypeError over a
  complex argument reaches the ComplexTensor method (one Python frame, ~100-180 ns, per real
  call in a program that uses complex numbers).
- From the start, without wrappers (the C entry points hand these over on their failure paths
  only: no cost to real calls): zeros / ones / empty / rand / randn / full with dtype=
  complex64 / complex128 (ops/out_arg.c -> _factory_call; torch's draws for a seed: rand
  uniform in each part, randn with each part's variance 1/2); torch.tensor of complex numbers
  or with a complex dtype (ops/creation/data.c -> _tensor_call); torch.cat / stack with a
  complex tensor among the inputs (ops/shape/join.c -> _join_call); torch.where with a complex
  operand (ops/elementwise/select.c -> _where_call); a real tensor's operators
  with a Python complex number, 1j * x (ops/elementwise/binary_driver.c -> _slot_call).
- nn.Parameter(complex) is a ComplexParameter: `_r` is a real Parameter, which cddp's
  optimizers step (torch's built-in optimizers also treat complex parameters as their real
  views; an Optimizer subclass of the user's sees the complex parameter, as in torch), DDP
  broadcasts and reduces, clip_grad_norm_ scales and cddp.save stores (float (..., 2) with a
  "complex" mark; load gives the complex tensor back).

Differences from torch:
- A complex tensor is not an instance of torch.Tensor, and ops beyond the above raise
  TypeError; arange / linspace / randint ... refuse complex dtypes.
- conj() returns a new tensor (torch: a lazy conjugate view; is_conj() is False here).
- clip_grad_norm_ with norm_type=inf takes the largest |re| or |im| (torch: the largest |z|).
"""
import builtins
import math
import numbers
import warnings

from . import _C, atan2 as _atan2, broadcast_tensors as _broadcast_tensors
from ._C import Tensor
from ._ops import _dim, autocast_fp32_op  # _dim: a complex dim (the real dim is never named)
from .autograd.function import Function


class _ComplexDType:
    """torch.complex64 / complex128: what a complex tensor's .dtype answers."""
    is_complex = True
    is_floating_point = False
    is_signed = True
    _cddp_complex = True            # what ops/out_arg.c looks for in a factory's dtype=
    __slots__ = ("_name", "_real", "itemsize")

    def __init__(self, name, real):
        self._name, self._real = name, real
        self.itemsize = 2 * real.itemsize

    def to_real(self):
        return self._real

    def to_complex(self):
        return self

    def __repr__(self):
        return f"cddp.{self._name}"

    def __reduce__(self):
        return (_dtype_named, (self._name,))


complex64 = cfloat = _ComplexDType("complex64", _C.float32)
complex128 = cdouble = _ComplexDType("complex128", _C.float64)
_OF_REAL = {_C.float32: complex64, _C.float64: complex128}


class _Formatter:
    """torch's element formatter (torch/_tensor_str.py), for one part of a complex tensor:
    integer mode ("1.") when every finite nonzero value is an integer, scientific notation
    when they span more than 1000x (or reach 1e8, or go below 1e-4 outside integer mode),
    else 4 decimals; right-aligned to the widest finite nonzero value."""

    def __init__(self, a):
        import numpy as np
        v = a[np.isfinite(a) & (a != 0)].astype(np.float64)
        self.int_mode, self.sci_mode, self.width = True, False, 1
        if v.size == 0:
            return
        lo, hi = np.abs(v).min(), np.abs(v).max()
        self.int_mode = bool((v == np.ceil(v)).all())
        self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or (not self.int_mode and lo < 1.0e-4)
        fmt = "{:.4e}" if self.sci_mode else "{:.0f}" if self.int_mode else "{:.4f}"
        extra = 1 if self.int_mode and not self.sci_mode else 0
        self.width = max(len(fmt.format(x)) + extra for x in v)

    def format(self, x):
        if self.sci_mode:
            r = f"{x:{self.width}.4e}"
        elif self.int_mode:
            r = f"{x:.0f}" + ("" if math.isinf(x) or math.isnan(x) else ".")
        else:
            r = f"{x:.4f}"
        return (self.width - len(r)) * " " + r


def _dtype_named(name):
    return {"complex64": complex64, "complex128": complex128}[name]


def _to_numpy(r):
    """The complex ndarray over r (..., 2), a real cddp tensor (no copy when its parts are
    adjacent)."""
    import numpy as np
    a = r.detach().numpy()
    if a.strides[-1] != a.itemsize or (a.ndim > 1 and a.strides[-2] != 2 * a.itemsize):
        a = np.ascontiguousarray(a)
    return a.view(np.complex64 if a.dtype == np.float32 else np.complex128)[..., 0]


def _from_numpy(a, real_dtype, device=None):
    """The real (..., 2) cddp tensor holding the complex ndarray a, in real_dtype's precision."""
    import numpy as np
    a = np.asarray(a, dtype=np.complex64 if real_dtype == _C.float32 else np.complex128,
                   order="C")              # (ascontiguousarray would make a 0-d array 1-d)
    r = _C.from_numpy(_pairs(a))
    return r if device is None else r.to(device)


def _pairs(a):
    """The (..., 2) real view (real, imaginary) of a complex64 / complex128 ndarray's bytes,
    any non-negative strides, no copy."""
    import numpy as np
    re = a.real
    return np.lib.stride_tricks.as_strided(re, shape=a.shape + (2,),
                                           strides=a.strides + (re.itemsize,))


def _is_c(x):
    return isinstance(x, ComplexTensor)


def _parts(x):
    """(re, im) of an operand; im is None for a real one."""
    if _is_c(x):
        return x._r[..., 0], x._r[..., 1]
    if isinstance(x, builtins.complex):
        return x.real, x.imag
    if isinstance(x, (Tensor, numbers.Real)):
        return x, None
    raise TypeError(f"unsupported operand for a complex tensor: {type(x).__name__}")


def _join(re, im):
    """The complex tensor with parts re and im (im None: zero); a real part that is a Python
    number takes im's shape."""
    _install()
    if im is None:
        im = re * 0.0
    elif not isinstance(re, Tensor):
        re = im * 0.0 + re
    elif not isinstance(im, Tensor):
        im = re * 0.0 + im
    if not re.is_floating_point():
        re = re.float()
    if im.dtype != re.dtype:
        dt = _C.promote_types(re.dtype, im.dtype)
        re, im = re.to(dt), im.to(dt)
    if re.dtype not in _OF_REAL:
        re, im = re.float(), im.float()
    re, im = _broadcast_tensors(re, im)
    return ComplexTensor(_C.stack([re, im], -1))


def _add(a, b, sign):
    ar, ai = _parts(a)
    br, bi = _parts(b)
    re = ar + br if sign > 0 else ar - br
    if bi is None:
        im = ai
    elif ai is None:
        im = bi if sign > 0 else -bi
    else:
        im = ai + bi if sign > 0 else ai - bi
    return _join(re, im)


class _Mul(Function):
    """The complex x * y of two (..., 2) layouts, one C pass (_C._complex_mul) each way:
    dx = g * conj(y), dy = g * conj(x), summed back over broadcast dims."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return _C._complex_mul(*_broadcast_tensors(x, y))

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        gx = gy = None
        if g.stride(-1) != 1:             # a consumer that permuted the (re, im) dim
            g = g.contiguous()
        if ctx.needs_input_grad[0]:
            gx = _C._complex_mul(*_broadcast_tensors(g, y), True)
            gx = gx.sum_to_size(x.shape) if gx.shape != x.shape else gx
        if ctx.needs_input_grad[1]:
            gy = _C._complex_mul(*_broadcast_tensors(g, x), True)
            gy = gy.sum_to_size(y.shape) if gy.shape != y.shape else gy
        return gx, gy


def _mul(a, b):
    if _is_c(a) and _is_c(b) and a._r.dim() == b._r.dim() and \
            a._r.dtype == b._r.dtype and a._r.stride(-1) == 1 and b._r.stride(-1) == 1:
        if (a._r.requires_grad or b._r.requires_grad) and _C.is_grad_enabled():
            return ComplexTensor(_Mul.apply(a._r, b._r))
        return ComplexTensor(_C._complex_mul(*_broadcast_tensors(a._r, b._r)))
    ar, ai = _parts(a)
    br, bi = _parts(b)
    if ai is None:
        return _join(ar * br, None if bi is None else ar * bi)
    if bi is None:
        return _join(ar * br, ai * br)
    return _join(ar * br - ai * bi, ar * bi + ai * br)


def _div(a, b):
    ar, ai = _parts(a)
    br, bi = _parts(b)
    if bi is None:
        return _join(ar / br, None if ai is None else ai / br)
    den = br * br + bi * bi
    if ai is None:
        return _join(ar * br / den, -(ar * bi) / den)
    return _join((ar * br + ai * bi) / den, (ai * br - ar * bi) / den)


def _matmul(a, b):
    ar, ai = _parts(a)
    br, bi = _parts(b)
    mm = _C.matmul
    if ai is None:
        return _join(mm(ar, br), None if bi is None else mm(ar, bi))
    if bi is None:
        return _join(mm(ar, br), mm(ai, br))
    return _join(mm(ar, br) - mm(ai, bi), mm(ar, bi) + mm(ai, br))


def _real_dtype(dt):
    return dt._real if isinstance(dt, _ComplexDType) else dt


class ComplexTensor:
    """A complex tensor (see the module docstring): `_r` holds its real and imaginary parts
    in a trailing dimension of 2."""
    __slots__ = ("_r", "__weakref__")
    _is_complex_tensor = True
    _cddp_complex = True               # what the C entry points look for (cddp_is_complex_obj)
    __array_priority__ = 1000          # NumPy defers to our reflected operators
    __hash__ = object.__hash__

    def __init__(self, r):
        self._r = r

    # ---- description ------------------------------------------------------------------
    @property
    def shape(self):
        return self._r.shape[:-1]

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[_dim(dim, self.ndim)]

    @property
    def ndim(self):
        return self._r.dim() - 1

    def dim(self):
        return self._r.dim() - 1

    ndimension = dim

    def numel(self):
        return self._r.numel() // 2

    nelement = numel

    def element_size(self):
        return 2 * self._r.element_size()

    @property
    def dtype(self):
        return _OF_REAL[self._r.dtype]

    @property
    def device(self):
        return self._r.device

    @property
    def is_cuda(self):
        return self._r.is_cuda

    @property
    def is_meta(self):
        return self._r.is_meta

    @property
    def requires_grad(self):
        return self._r.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self._r.requires_grad = flag

    def requires_grad_(self, flag=True):
        self._r.requires_grad_(flag)
        return self

    @property
    def grad(self):
        g = self._r.grad
        return None if g is None else ComplexTensor(g)

    @grad.setter
    def grad(self, value):
        self._r.grad = None if value is None else value._r

    @property
    def is_leaf(self):
        return self._r.is_leaf

    @property
    def grad_fn(self):
        return self._r.grad_fn

    @property
    def data(self):
        return ComplexTensor(self._r.data)

    @data.setter
    def data(self, value):
        self._r.data = value._r

    def is_complex(self):
        return True

    def is_floating_point(self):
        return False

    def is_conj(self):
        return False

    def is_contiguous(self, memory_format=None):
        return self._r.is_contiguous()

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def backward(self, gradient=None, *args, **kwargs):
        if gradient is None:
            raise RuntimeError("grad can be implicitly created only for real scalar outputs")
        self._r.backward(gradient._r if _is_c(gradient) else gradient, *args, **kwargs)

    # ---- parts and elementwise functions -----------------------------------------------
    @property
    def real(self):
        return self._r[..., 0]

    @property
    def imag(self):
        return self._r[..., 1]

    def conj(self):
        return _join(self._r[..., 0], -self._r[..., 1])

    conj_physical = resolve_conj = conj

    def abs(self):
        # |z| as a 2-norm: its gradient at 0 is 0 (torch's sgn(0) = 0), no overflow in re²
        return self._r.norm(dim=-1)

    absolute = abs

    def angle(self):
        return _atan2(self._r[..., 1], self._r[..., 0])

    def exp(self):
        e = self._r[..., 0].exp()
        im = self._r[..., 1]
        return _join(e * im.cos(), e * im.sin())

    def sgn(self):
        a = self.abs()
        z = _C.where(a == 0, _C.zeros_like(a), 1.0 / _C.where(a == 0, _C.ones_like(a), a))
        return _mul(self, z)

    def square(self):
        return _mul(self, self)

    def sqrt(self):
        # the principal root: (sqrt((|z| + re) / 2), sign(im) sqrt((|z| - re) / 2))
        a, re, im = self.abs(), self._r[..., 0], self._r[..., 1]
        sign = _C.where(im < 0, -_C.ones_like(im), _C.ones_like(im))
        return _join(((a + re) * 0.5).clamp(min=0).sqrt(),
                     sign * ((a - re) * 0.5).clamp(min=0).sqrt())

    def log(self):
        return _join(self.abs().log(), self.angle())

    def sin(self):
        re, im = self._r[..., 0], self._r[..., 1]
        return _join(re.sin() * im.cosh(), re.cos() * im.sinh())

    def cos(self):
        re, im = self._r[..., 0], self._r[..., 1]
        return _join(re.cos() * im.cosh(), -(re.sin() * im.sinh()))

    def sinh(self):
        re, im = self._r[..., 0], self._r[..., 1]
        return _join(re.sinh() * im.cos(), re.cosh() * im.sin())

    def cosh(self):
        re, im = self._r[..., 0], self._r[..., 1]
        return _join(re.cosh() * im.cos(), re.sinh() * im.sin())

    def tanh(self):
        """(sinh 2a + i sin 2b) / (cosh 2a + cos 2b); beyond |a| = 20 that is
        sign(a) + i 2 sin(2b) exp(-2|a|) to double precision, taken directly (the ratio of the
        two would overflow)."""
        re, im = self._r[..., 0], self._r[..., 1]
        big = re.abs() > 20
        a2 = _C.where(big, _C.zeros_like(re), 2 * re)
        d = a2.cosh() + (2 * im).cos()
        far = 2 * (2 * im).sin() * (-2 * re.abs()).exp()
        return _join(_C.where(big, re.sign(), a2.sinh() / d),
                     _C.where(big, far, (2 * im).sin() / d))

    def tan(self):
        """tan z = -i tanh(i z)."""
        re, im = self._r[..., 0], self._r[..., 1]
        t = _join(-im, re).tanh()
        return _join(t._r[..., 1], -t._r[..., 0])

    def sigmoid(self):
        return _div(1.0, 1.0 + (-self).exp())

    def prod(self, dim=None, keepdim=False, dtype=None):
        """The product in polar form: prod |z| * exp(i sum angle z)."""
        mag, ang = self.abs(), self.angle()
        if dim is None:
            r, a = mag.prod(), ang.sum()
        else:
            d = _dim(dim, self.ndim)
            r, a = mag.prod(d, keepdim), ang.sum(d, keepdim)
        out = _join(r * a.cos(), r * a.sin())
        return out if dtype is None else out.to(dtype)

    def gather(self, dim, index):
        idx = index.unsqueeze(-1).expand(*index.shape, 2)
        return ComplexTensor(self._r.gather(_dim(dim, self.ndim), idx))

    def tril(self, diagonal=0):
        return ComplexTensor(self._r.movedim(-1, 0).tril(diagonal).movedim(0, -1))

    def triu(self, diagonal=0):
        return ComplexTensor(self._r.movedim(-1, 0).triu(diagonal).movedim(0, -1))

    def reciprocal(self):
        return _div(1.0, self)

    def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
        """torch.norm of a complex tensor: the p-norm of |z| over dim (all dims when None)."""
        if p in ("fro", 2, 2.0, None):
            dims = tuple(range(self.ndim)) if dim is None else \
                self._dims((dim,) if isinstance(dim, int) else dim)
            out = self._r.norm(2, dims + (self.ndim,), keepdim)
            return out.squeeze(-1) if keepdim else out
        a = self.abs()
        return a.norm(p, dim, keepdim) if dim is not None else a.norm(p)

    def isfinite(self):
        return self._r[..., 0].isfinite() & self._r[..., 1].isfinite()

    def isnan(self):
        return self._r[..., 0].isnan() | self._r[..., 1].isnan()

    def isinf(self):
        return self._r[..., 0].isinf() | self._r[..., 1].isinf()

    def flip(self, *dims):
        dims = self._sizes(dims)
        return ComplexTensor(self._r.flip(self._dims(dims)))

    def cumsum(self, dim, dtype=None):
        return ComplexTensor(self._r.cumsum(_dim(dim, self.ndim)))

    def masked_fill(self, mask, value):
        re, im = _parts(value)
        return _join(self._r[..., 0].masked_fill(mask, re),
                     self._r[..., 1].masked_fill(mask, 0.0 if im is None else im))

    def new_zeros(self, *size, dtype=None, **kwargs):
        return ComplexTensor(self._r.new_zeros(*self._sizes(size), 2, **kwargs))

    # in place: the value computed out of place, then copied into the real view (autograd
    # records the copy, as for any in-place op on a view)
    def _assign(self, value):
        self._r.copy_(value._r if _is_c(value) else _join(value, None)._r)
        return self

    def add_(self, other, *, alpha=1):
        return self._assign(self.add(other, alpha=alpha))

    def sub_(self, other, *, alpha=1):
        return self._assign(self.sub(other, alpha=alpha))

    def mul_(self, other):
        return self._assign(_mul(self, other))

    def div_(self, other):
        return self._assign(_div(self, other))

    def addcmul_(self, t1, t2, *, value=1):
        return self.add_(_mul(t1, t2), alpha=value)

    def addcdiv_(self, t1, t2, *, value=1):
        return self.add_(_div(t1, t2), alpha=value)

    def add(self, other, *, alpha=1):
        return _add(self, other if alpha == 1 else _mul(other, alpha), 1)

    def sub(self, other, *, alpha=1):
        return _add(self, other if alpha == 1 else _mul(other, alpha), -1)

    __iadd__ = add_
    __isub__ = sub_
    __imul__ = mul_
    __itruediv__ = div_

    def sum(self, dim=None, keepdim=False, dtype=None):
        r = self._r if dtype is None else self._r.to(_real_dtype(dtype))
        if dim is None:
            return ComplexTensor(r.reshape(-1, 2).sum(0))
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        return ComplexTensor(r.sum(tuple(_dim(d, self.ndim) for d in dims), keepdim))

    def mean(self, dim=None, keepdim=False, dtype=None):
        n = self.numel() if dim is None else 1
        if dim is not None:
            for d in ((dim,) if isinstance(dim, int) else dim):
                n *= self.shape[_dim(d, self.ndim)]
        return ComplexTensor(self.sum(dim, keepdim, dtype)._r / n)

    # ---- arithmetic --------------------------------------------------------------------
    def __add__(self, o):
        return _add(self, o, 1)

    __radd__ = __add__

    def __sub__(self, o):
        return _add(self, o, -1)

    def __rsub__(self, o):
        return _add(o, self, -1)

    def __mul__(self, o):
        return _mul(self, o)

    __rmul__ = mul = __mul__

    def __truediv__(self, o):
        return _div(self, o)

    div = __truediv__

    def __rtruediv__(self, o):
        return _div(o, self)

    def __matmul__(self, o):
        return _matmul(self, o)

    matmul = __matmul__

    def __rmatmul__(self, o):
        return _matmul(o, self)

    def __neg__(self):
        return ComplexTensor(-self._r)

    def __pos__(self):
        return self

    def __pow__(self, p):
        if isinstance(p, int) and 0 <= p <= 64:
            out = _join(self._r[..., 0] * 0 + 1, None)
            base = self
            while p:
                if p & 1:
                    out = _mul(out, base)
                base, p = _mul(base, base), p >> 1
            return out
        if isinstance(p, (int, float)):
            if p == 0.5:
                return self.sqrt()
            a = self.abs()
            return _join(a.pow(p) * (self.angle() * p).cos(), a.pow(p) * (self.angle() * p).sin())
        raise TypeError("complex tensors take real scalar powers only")

    pow = __pow__

    def __rpow__(self, base):
        """base ** z for a real number or real tensor base: exp(z log base), log of a negative
        base being log|base| + i pi; a zero base gives 0 (torch: 0 for Re z > 0)."""
        if isinstance(base, (int, float)) and not isinstance(base, bool):
            if base == 0:
                return _join(self._r[..., 0] * 0, None)
            lg = builtins.complex(math.log(abs(base)), math.pi if base < 0 else 0.0)
            return _mul(self, lg).exp()
        if isinstance(base, _C.Tensor) and base.is_floating_point():
            mag = base.abs()
            lg = _join(_C.where(mag == 0, _C.full_like(mag, -math.inf), mag).log(),
                       _C.where(base < 0, _C.full_like(mag, math.pi), _C.zeros_like(mag)))
            return _mul(self, lg).exp()
        return NotImplemented

    def __abs__(self):
        return self.abs()

    def __eq__(self, o):
        ar, ai = _parts(self)
        br, bi = _parts(o)
        return (ar == br) & (ai == (0 if bi is None else bi))

    def __ne__(self, o):
        return ~(self == o)

    # ---- shapes ------------------------------------------------------------------------
    def _dims(self, dims):
        return tuple(_dim(d, self.ndim) for d in dims)

    @staticmethod
    def _sizes(shape):
        return tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape

    def view(self, *shape):
        return ComplexTensor(self._r.view(*self._sizes(shape), 2))

    def reshape(self, *shape):
        return ComplexTensor(self._r.reshape(*self._sizes(shape), 2))

    def view_as(self, other):
        return self.view(other.shape)

    reshape_as = view_as

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._dims((start_dim, end_dim))
        return ComplexTensor(self._r.flatten(s, e))

    def unsqueeze(self, dim):
        n = self.ndim + 1
        return ComplexTensor(self._r.unsqueeze(_dim(dim, n)))

    def squeeze(self, dim=None):
        shape = list(self.shape)
        if dim is None:
            keep = [s for s in shape if s != 1]
        else:
            drop = set(self._dims((dim,) if isinstance(dim, int) else dim))
            keep = [s for i, s in enumerate(shape) if i not in drop or s != 1]
        return self.reshape(keep)

    def permute(self, *dims):
        dims = self._sizes(dims)
        return ComplexTensor(self._r.permute(*self._dims(dims), self.ndim))

    def transpose(self, d0, d1):
        d0, d1 = self._dims((d0, d1))
        return ComplexTensor(self._r.transpose(d0, d1))

    swapaxes = swapdims = transpose

    def t(self):
        return self if self.ndim < 2 else self.transpose(0, 1)

    @property
    def T(self):
        return self.permute(*reversed(range(self.ndim)))

    @property
    def H(self):
        if self.ndim != 2:
            raise RuntimeError("tensor.H is only supported on matrices (2-D tensors).")
        return self.t().conj()

    @property
    def mT(self):
        return self.transpose(-2, -1)

    @property
    def mH(self):
        return self.transpose(-2, -1).conj()

    def expand(self, *sizes):
        return ComplexTensor(self._r.expand(*self._sizes(sizes), 2))

    def expand_as(self, other):
        return self.expand(other.shape)

    def repeat(self, *sizes):
        return ComplexTensor(self._r.repeat(*self._sizes(sizes), 1))

    def chunk(self, chunks, dim=0):
        return tuple(ComplexTensor(c) for c in self._r.chunk(chunks, _dim(dim, self.ndim)))

    def split(self, split_size, dim=0):
        return tuple(ComplexTensor(c) for c in self._r.split(split_size,
                                                             _dim(dim, self.ndim)))

    def unbind(self, dim=0):
        return tuple(ComplexTensor(c) for c in self._r.unbind(_dim(dim, self.ndim)))

    def movedim(self, source, destination):
        src = (source,) if isinstance(source, int) else tuple(source)
        dst = (destination,) if isinstance(destination, int) else tuple(destination)
        return ComplexTensor(self._r.movedim(self._dims(src), self._dims(dst)))

    moveaxis = movedim

    def narrow(self, dim, start, length):
        return ComplexTensor(self._r.narrow(_dim(dim, self.ndim), start, length))

    def select(self, dim, index):
        return ComplexTensor(self._r.select(_dim(dim, self.ndim), index))

    def index_select(self, dim, index):
        return ComplexTensor(self._r.index_select(_dim(dim, self.ndim), index))

    def repeat_interleave(self, repeats, dim=None):
        if dim is None:
            return self.reshape(-1).repeat_interleave(repeats, 0)
        return ComplexTensor(self._r.repeat_interleave(repeats, _dim(dim, self.ndim)))

    def tile(self, *dims):
        dims = self._sizes(dims)
        dims = (1,) * (self.ndim - len(dims)) + tuple(dims)
        return self.repeat(*dims)

    def outer(self, other):
        return self.reshape(-1, 1) * (other.reshape(1, -1) if _is_c(other) else
                                      _join(other.reshape(1, -1), None))

    def dot(self, other):
        return (self * other).sum()

    def vdot(self, other):
        """sum(conj(self) * other), as torch.vdot."""
        return (self.conj() * other).sum()

    def mm(self, other):
        return _matmul(self, other)

    bmm = mm

    def roll(self, shifts, dims=None):
        if dims is None:
            return ComplexTensor(self._r.reshape(-1, 2).roll(shifts, 0)).view(self.shape)
        if isinstance(dims, int):
            return ComplexTensor(self._r.roll(shifts, _dim(dims, self.ndim)))
        return ComplexTensor(self._r.roll(shifts, self._dims(dims)))

    @staticmethod
    def _key(key):
        """key for _r: the complex dims' key, then the whole trailing (real, imag) dim."""
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            return key + (slice(None),)
        return key + (Ellipsis, slice(None))

    def __getitem__(self, key):
        return ComplexTensor(self._r[self._key(key)])

    def __setitem__(self, key, value):
        if _is_c(value):
            self._r[self._key(key)] = value._r
        else:
            re, im = _parts(value)
            k = self._key(key)[:-1]
            self._r[k + (0,)] = re
            self._r[k + (1,)] = 0 if im is None else im

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def contiguous(self, memory_format=None):
        return ComplexTensor(self._r.contiguous())

    def clone(self, memory_format=None):
        return ComplexTensor(self._r.clone())

    def detach(self):
        return ComplexTensor(self._r.detach())

    def copy_(self, src):
        self._r.copy_(src._r if _is_c(src) else _join(src, None)._r)
        return self

    def zero_(self):
        self._r.zero_()
        return self

    # ---- conversion --------------------------------------------------------------------
    def to(self, *args, **kwargs):
        dtype = kwargs.pop("dtype", None)
        rest = []
        for a in args:
            if isinstance(a, (_ComplexDType, _C.dtype)):
                dtype = a
            elif _is_c(a) or isinstance(a, Tensor):
                dtype = a.dtype
                rest.append(a.device)
            else:
                rest.append(a)
        r = self._r.to(*rest, **kwargs) if rest or kwargs else self._r
        if dtype is None or isinstance(dtype, _ComplexDType):
            return ComplexTensor(r if dtype is None else r.to(dtype._real))
        warnings.warn("Casting complex values to real discards the imaginary part",
                      UserWarning, stacklevel=2)
        return r[..., 0].to(dtype)

    def stft(self, *args, **kwargs):
        from ._spectral import stft
        return stft(self, *args, **kwargs)

    def istft(self, *args, **kwargs):
        from ._spectral import istft
        return istft(self, *args, **kwargs)

    def type_as(self, other):
        return self.to(other.dtype)

    def float(self):
        return self.to(_C.float32)

    def double(self):
        return self.to(_C.float64)

    def cpu(self):
        return self

    def cuda(self, *args, **kwargs):
        return ComplexTensor(self._r.cuda(*args, **kwargs))

    def numpy(self, force=False):
        return _to_numpy(self._r)

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to "
                               "Scalar")
        re, im = self._r.reshape(2).tolist()
        return builtins.complex(re, im)

    def tolist(self):
        return self.numpy().tolist()

    def __repr__(self):
        import numpy as np
        a = self.detach().numpy()
        fr, fi = _Formatter(a.real), _Formatter(a.imag)

        def element(z):
            imag = (fi.format(z.imag) + "j").lstrip()
            return fr.format(z.real) + (imag if imag[0] in "+-" else "+" + imag)
        body = element(a[()]) if a.ndim == 0 else np.array2string(
            a, separator=", ", prefix="tensor(", formatter={"complex_kind": element})
        extra = "" if self.dtype is complex64 else f", dtype={self.dtype!r}"
        if self.grad_fn is not None:
            extra += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"


class ComplexParameter(ComplexTensor):
    """nn.Parameter(complex tensor): `_r` is a real Parameter (the leaf autograd and the
    optimizers see: torch's optimizers also step complex parameters as their real views);
    Modules register it as a parameter."""
    __slots__ = ()
    _is_complex_parameter = True

    def __repr__(self):
        # as nn.Parameter prints: the flag inside the tensor's parens, no grad_fn
        body = ComplexTensor.__repr__(ComplexTensor(self._r.detach()))
        return "Parameter containing:\n" + (body[:-1] + ", requires_grad=True)"
                                              if self.requires_grad else body)

    def __deepcopy__(self, memo):
        from .nn.parameter import Parameter
        new = ComplexParameter(Parameter(self._r.detach().clone(), self.requires_grad))
        memo[id(self)] = new
        return new


# ---- constructors (torch.view_as_complex, view_as_real, polar, complex) --------------------

@autocast_fp32_op
def view_as_complex(input):  # noqa: A002
    """The complex view of a real tensor whose last dimension is 2 (real, imaginary)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"view_as_complex(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    if input.dtype not in _OF_REAL:
        raise RuntimeError("view_as_complex is only supported for float and double tensors, "
                           f"but got a tensor of scalar type: {input.dtype}")
    if input.dim() == 0 or input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if input.stride(-1) != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in input.stride()[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
    _install()
    return ComplexTensor(input)


def view_as_real(input):  # noqa: A002
    """The real view (..., 2) of a complex tensor."""
    if not _is_c(input):
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return input._r


@autocast_fp32_op
def polar(abs, angle, *, out=None):  # noqa: A002
    """abs * (cos(angle) + i sin(angle))."""
    _check_pair("polar", abs, angle)
    return _join(abs * angle.cos(), abs * angle.sin())


def complex(real, imag, *, out=None):  # noqa: A002
    """real + i imag (same floating dtype)."""
    _check_pair("complex", real, imag)
    return _join(real, imag)


def _check_pair(name, a, b):
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        raise TypeError(f"{name}(): arguments must be Tensors")
    if a.dtype != b.dtype:
        raise RuntimeError(f"Expected object of scalar type {a.dtype} but got scalar type "
                           f"{b.dtype} for second argument")
    if a.dtype not in _OF_REAL:
        raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got "
                           f"{a.dtype} and {b.dtype}")


# ---- the module functions, complex-aware once a complex tensor exists ---------------------

def _any_c(args):
    for a in args:
        if _is_c(a):
            return True
        if isinstance(a, (list, tuple)) and any(_is_c(x) for x in a):
            return True
    return False


def _einsum(equation, *operands):
    """einsum with complex operands: the product expanded into real einsums over the parts
    (i^k for k imaginary factors)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    parts = [_parts(o) for o in operands]
    re = im = None
    for pick in range(1 << len(parts)):
        terms = []
        for j, (r, i) in enumerate(parts):
            t = i if pick >> j & 1 else r
            if t is None:
                break
            terms.append(t)
        else:
            k = bin(pick).count("1") % 4               # i^k: 1, i, -1, -i
            v = _C.einsum(equation, *terms)
            if k in (0, 2):
                re = (v if k == 0 else -v) if re is None else (re + v if k == 0 else re - v)
            else:
                im = (v if k == 1 else -v) if im is None else (im + v if k == 1 else im - v)
    return _join(re, im)


def _factory_call(name_fn, *args, **kwargs):
    """zeros / ones / empty / rand / randn / full with a complex dtype (called from C, ops/
    out_arg.c, when a creation function gets one): the real (..., 2) tensor the same C function
    makes — randn with each part's variance 1/2 and rand uniform in each part, as torch's
    complex normal_ / uniform_ work on the real view."""
    name, fn = name_fn
    dt = kwargs.pop("dtype")
    if name not in ("zeros", "ones", "empty", "rand", "randn", "full"):
        raise TypeError(f"{name}(): complex dtypes are not supported by cddp here "
                        f"(got dtype={dt!r})")
    if kwargs.pop("out", None) is not None:
        raise TypeError(f"{name}(): out= with a complex dtype is not supported")
    kwargs["dtype"] = dt._real
    grad = kwargs.pop("requires_grad", False)
    if name == "full":
        size = args[0] if args else kwargs.pop("size")
        value = builtins.complex(args[1] if len(args) > 1 else kwargs.pop("fill_value"))
        r = _C.empty(*tuple(size), 2, **kwargs)
        r[..., 0] = value.real
        r[..., 1] = value.imag
    else:
        size = tuple(args[0]) if len(args) == 1 and not isinstance(args[0], int) else args
        if "size" in kwargs:
            size = tuple(kwargs.pop("size"))
        r = fn(*size, 2, **kwargs)
        if name == "randn":
            r = r * 0.7071067811865476
        elif name == "ones":
            r[..., 1] = 0
    return ComplexTensor(r.requires_grad_(grad) if grad else r)


def _slot_call(op, a, b):
    """A real tensor's operator with a Python complex number (1j * x), from the C number
    slots (ops/elementwise/binary_driver.c): the tensor taken as complex."""
    import operator
    a = _join(a, None) if isinstance(a, Tensor) else a
    b = _join(b, None) if isinstance(b, Tensor) else b
    return getattr(operator, op)(a, b)


def _where_call(condition, x, y):
    """torch.where with a complex operand (from ops/elementwise/select.c): per part."""
    xr, xi = _parts(x)
    yr, yi = _parts(y)
    return _join(_C.where(condition, xr, yr),
                 _C.where(condition, 0.0 if xi is None else xi, 0.0 if yi is None else yi))


def _join_call(fname, tensors, dim=0, *, out=None, axis=None):
    """torch.cat / stack with complex tensors among the inputs (from ops/shape/join.c)."""
    if out is not None:
        raise TypeError(f"{fname}(): out= with complex tensors is not supported")
    dim = axis if axis is not None else dim
    zs = [t if _is_c(t) else _join(t, None) for t in tensors]
    if fname == "stack":
        return ComplexTensor(_C.stack([z._r for z in zs], _dim(dim, zs[0].ndim + 1)))
    return ComplexTensor(_C.cat([z._r for z in zs], _dim(dim, zs[0].ndim)))


def _wrapper(fn, name, cfn, module="cddp"):
    """fn standing in for the module function cfn: its name, doc and module (pickled by
    reference: <module>.<name> is fn), and __wrapped__ the C function underneath."""
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = module
    fn.__doc__ = getattr(cfn, "__doc__", None)
    fn.__wrapped__ = getattr(cfn, "__wrapped__", cfn)
    return fn


def _like_factory(name, cfn):
    """zeros_like / ones_like / ... of a complex tensor (or with a complex dtype)."""
    def fn(input, *args, **kwargs):  # noqa: A002
        dt = kwargs.get("dtype")
        if dt is None and _is_c(input):
            dt = input.dtype
        if not isinstance(dt, _ComplexDType):
            return cfn(input, *args, **kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("memory_format", "dtype")}
        import cddp
        return getattr(cddp, name[:-5])(tuple(input.shape), *args, dtype=dt, **kwargs)
    return _wrapper(fn, name, cfn)


def _numpy_complex_dtype(a):
    """complex64 / complex128 for a complex ndarray (torch keeps an array's precision)."""
    import numpy as np
    return complex64 if a.dtype == np.complex64 else complex128


def _from_numpy_call(a):
    """torch.from_numpy of a complex ndarray (from C, module.c): a complex tensor sharing its
    memory — the real and imaginary parts are a (..., 2) strided view of the array's bytes,
    any non-negative strides (a complex256 array is refused, as torch)."""
    import numpy as np
    if a.dtype not in (np.complex64, np.complex128):
        raise TypeError(f"can't convert np.ndarray of type {a.dtype}. The only supported "
                        "complex types are complex64 and complex128.")
    return ComplexTensor(_C.from_numpy(_pairs(a)))


def _as_tensor_call(data, dtype=None, device=None):
    """torch.as_tensor with complex data or dtype (from C, ops/creation/data.c): a complex
    ndarray of that precision shares memory, anything else is copied (torch.tensor)."""
    import numpy as np
    if isinstance(data, np.ndarray) and np.iscomplexobj(data) and \
            (dtype is None or dtype is _numpy_complex_dtype(data)):
        return _from_numpy_call(data)
    if _is_c(data) and (dtype is None or dtype is data.dtype):
        return data
    return _tensor_call(data, dtype=dtype, device=device)


def _real_to_call(x, *args, **kwargs):
    """A real tensor's .to / .type with a complex dtype (from C, ops/shape/convert.c): the
    complex tensor with x as its real part and zero imaginary part (a differentiable copy)."""
    dtype = next((a for a in list(args) + list(kwargs.values())
                  if isinstance(a, _ComplexDType)), complex64)
    re = x.to(dtype._real)
    return _join(re, _C.zeros_like(re))


def _tensor_call(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """torch.tensor with complex numbers in the data or a complex dtype (from C,
    ops/creation/data.c): complex64 unless dtype, a complex ndarray's precision or a float64
    default says complex128."""
    import numpy as np
    if dtype is None and isinstance(data, np.ndarray) and np.iscomplexobj(data):
        dtype = _numpy_complex_dtype(data)
    if dtype is None:
        dtype = complex128 if _C.get_default_dtype() == _C.float64 else complex64
    if not isinstance(dtype, _ComplexDType):
        raise TypeError(f"tensor(): complex data cannot be stored as {dtype!r}")
    a = np.asarray(data.numpy() if _is_c(data) else data, dtype=np.complex128)
    r = _from_numpy(a, dtype._real, device)
    return ComplexTensor(r.requires_grad_(True) if requires_grad else r)


_LIKE = ("zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like")

# the module functions that take complex tensors once this module is loaded, and the
# ComplexTensor method each becomes (the hot ones are in _FALLBACK below; cat / stack / where
# hand over from C)
_METHOD = {"abs": "abs", "absolute": "abs", "angle": "angle", "exp": "exp", "sgn": "sgn",
           "square": "square", "conj_physical": "conj", "resolve_conj": "conj", "roll": "roll",
           "sqrt": "sqrt", "log": "log", "sin": "sin", "cos": "cos", "reciprocal": "reciprocal",
           "flip": "flip", "cumsum": "cumsum", "isfinite": "isfinite", "isnan": "isnan",
           "isinf": "isinf", "norm": "norm", "pow": "__pow__", "masked_fill": "masked_fill",
           "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "tan": "tan", "sigmoid": "sigmoid",
           "prod": "prod", "gather": "gather", "tril": "tril", "triu": "triu"}
_installed = []


def _method_call(method, args, kwargs):
    """Module function args (a complex tensor among them) as ComplexTensor `method`: the
    first argument made complex (pow(x, 1j), mul(x, z)), add / sub's alpha= applied to the
    second, out= dropped; real / imag are attributes."""
    kwargs.pop("out", None)
    alpha = kwargs.pop("alpha", None)
    first = args[0] if _is_c(args[0]) else _join(args[0], None)
    rest = args[1:] if alpha is None else (args[1] * alpha,) + args[2:]
    attr = getattr(first, method)
    return attr if method in ("real", "imag") else attr(*rest, **kwargs)


def _dispatcher(name, cfn):
    method = _METHOD.get(name)

    def fn(*args, **kwargs):
        if not args and "input" in kwargs:            # torch.exp(input=z)
            args = (kwargs.pop("input"),)
        if not _any_c(args):
            return cfn(*args, **kwargs)
        if name == "einsum":
            return _einsum(*args)
        return _method_call(method, args, kwargs)
    return _wrapper(fn, name, cfn)


# hot module functions whose C entry points run first: only their TypeError over a complex
# argument ("... is a complex tensor", the C argument checks) comes here, so a real call pays
# one Python frame and nothing else — once this module is loaded (complex numbers in use)
_FALLBACK = {"add": "__add__", "sub": "__sub__", "subtract": "__sub__", "mul": "__mul__",
             "multiply": "__mul__", "div": "__truediv__", "divide": "__truediv__",
             "true_divide": "__truediv__", "matmul": "__matmul__", "mm": "__matmul__",
             "bmm": "__matmul__", "sum": "sum", "mean": "mean", "transpose": "transpose",
             "swapaxes": "transpose", "swapdims": "transpose", "reshape": "reshape",
             "unsqueeze": "unsqueeze", "squeeze": "squeeze", "flatten": "flatten",
             "chunk": "chunk", "split": "split", "unbind": "unbind", "permute": "permute",
             "movedim": "movedim", "moveaxis": "movedim", "narrow": "narrow",
             "select": "select", "index_select": "index_select", "t": "t", "clone": "clone",
             "repeat_interleave": "repeat_interleave", "tile": "tile", "outer": "outer",
             "dot": "dot", "vdot": "vdot", "conj": "conj", "real": "real", "imag": "imag"}


def _fallback(name, cfn):
    method = _FALLBACK[name]

    def fn(*args, **kwargs):
        try:
            return cfn(*args, **kwargs)
        except TypeError:
            if not args and "input" in kwargs:        # torch.sum(input=z)
                args = (kwargs.pop("input"),)
            if not _any_c(args) or kwargs.get("out") is not None:
                raise
        return _method_call(method, args, kwargs)
    return _wrapper(fn, name, cfn)


def _norm_dispatcher(name, cfn):
    """linalg.vector_norm / linalg.norm: a complex input's norm is that of |z|."""
    def fn(x, *args, **kwargs):
        return cfn(x.abs() if _is_c(x) else x, *args, **kwargs)
    return _wrapper(fn, name, cfn, "cddp.linalg")


def _install():
    """Wrap cddp's module functions so that they take complex tensors (once per process)."""
    if _installed:
        return
    _installed.append(True)
    import cddp
    for name in list(_METHOD) + ["einsum"]:
        cfn = getattr(cddp, name, None)
        if cfn is not None:
            setattr(cddp, name, _dispatcher(name, cfn))
    for name in _FALLBACK:
        cfn = getattr(cddp, name, None)
        if cfn is not None:
            setattr(cddp, name, _fallback(name, cfn))
    from . import linalg
    for name in ("vector_norm", "norm"):
        cfn = getattr(linalg, name)
        setattr(linalg, name, _norm_dispatcher(name, cfn))
    for name in _LIKE:
        setattr(cddp, name, _like_factory(name, getattr(cddp, name)))


_install()       # loading this module means complex numbers are in use (a dtype, a view)
