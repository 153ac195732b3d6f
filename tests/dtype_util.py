"""Helpers of the dtype tests (test_dtypes*.py): the dtype lists, inputs, the bfloat16 rounding
oracle in NumPy, bit views, and cddp <-> torch conversions for the torch comparisons.

bf16_round is written independently of cddp's kernel (common/half.h adds a rounding bias to
the bits): it takes the two bfloat16 neighbours of each float32 value and picks the nearer in
float64, ties to the even one, so a shared mistake cannot hide in both.
"""
import numpy as np

import cddp

OLD = ["float32", "float64", "int64", "int32", "bool"]
FLOATS = ["float16", "bfloat16"]
SMALL_INTS = ["uint8", "int8", "int16"]
NEW = FLOATS + SMALL_INTS
ALL = OLD + NEW


def cd(name):
    return getattr(cddp, name)


def bf16_round(x):
    """float32 values rounded to bfloat16 (nearest, ties to even; overflow to inf), as float32."""
    x = np.atleast_1d(np.asarray(x, dtype=np.float32))
    u = x.view(np.uint32).astype(np.int64)
    lo = u & 0xFFFF0000
    hi = lo + 0x10000
    sign = np.where(u & 0x80000000, -1.0, 1.0)

    def value(bits):
        b = bits & 0xFFFFFFFF
        mag = (b & 0x7FFFFFFF)
        v = (mag.astype(np.uint32)).view(np.float32).astype(np.float64)
        v = np.where(mag >= 0x7F800000, 2.0 ** 128, v)      # the step past the largest finite
        return v * sign

    with np.errstate(invalid="ignore", over="ignore"):
        xd = x.astype(np.float64)
        dl, dh = np.abs(xd - value(lo)), np.abs(value(hi) - xd)
        pick_hi = (dh < dl) | ((dh == dl) & ((lo >> 16) & 1 == 1))
        out = np.where(pick_hi, hi, lo) & 0xFFFFFFFF
        res = out.astype(np.uint32).view(np.float32).copy()
        res[np.abs(xd) == np.inf] = x[np.abs(xd) == np.inf]
        res[np.isnan(x)] = np.nan
    return res


def round_to(name, x):
    """float32 values rounded to float16 (NumPy's RNE) or bfloat16, as float32."""
    x = np.atleast_1d(np.asarray(x, dtype=np.float32))
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32) if name == "float16" else bf16_round(x)


def vals(x):
    """float64 / int64 NumPy values of a cddp tensor (float16/bfloat16 exactly)."""
    x = x.detach()
    if x.dtype in (cddp.float16, cddp.bfloat16):
        return x.float().numpy().astype(np.float64)
    return np.array(x.numpy(), copy=True)


def bits(x):
    """The raw element bits of a cddp tensor as NumPy integers (16-bit floats as int16)."""
    x = x.detach()
    if x.dtype in (cddp.float16, cddp.bfloat16):
        return np.array(x.contiguous().view(cddp.int16).numpy(), copy=True)
    return np.array(x.numpy(), copy=True)


def data(name, shape, rng, pos=False, specials=True):
    """Values exactly representable in dtype `name` (float64 array): normals of a few
    magnitudes for floats (with 0, -0, 1, 2.5 first), the whole range for small integers."""
    size = int(np.prod(shape)) if shape else 1
    if name in FLOATS:
        a = rng.standard_normal(size) * np.where(rng.random(size) < 0.5, 3.0, 300.0)
        if pos:
            a = np.abs(a) + 0.25
        elif specials and size >= 4:
            a[:4] = [0.0, -0.0, 1.0, 2.5]
        a = round_to(name, a).astype(np.float64)
    else:
        info = np.iinfo(name)
        a = rng.integers(1 if pos else info.min, info.max + 1, size).astype(np.float64)
    return a.reshape(shape)


def make(name, a):
    """cddp tensor of dtype `name` holding the (representable) values a."""
    return cddp.tensor(np.asarray(a, dtype=np.float64), dtype=cd(name)) if name in FLOATS + OLD \
        else cddp.from_numpy(np.asarray(a).astype(name).copy())


def to_torch(torch, x):
    """torch tensor equal to cddp tensor x (same dtype, same values, bit for bit)."""
    name = str(x.dtype).split(".")[-1]
    td = getattr(torch, name)
    if name in FLOATS:
        return torch.from_numpy(bits(x)).view(td)
    return torch.from_numpy(np.array(x.detach().numpy(), copy=True))


def torch_bits(t):
    import torch
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.detach().contiguous().view(torch.int16).numpy()
    return t.detach().numpy()


def same_bits(x, t, nan_equal=True):
    """cddp tensor x equals torch tensor t: same dtype name, shape and element bits (any NaN
    matches any NaN: NaN payloads differ between torch's own vector and scalar paths)."""
    assert str(x.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], (x.dtype, t.dtype)
    assert tuple(x.shape) == tuple(t.shape), (tuple(x.shape), tuple(t.shape))
    a, b = bits(x), torch_bits(t)
    if nan_equal and str(t.dtype).split(".")[-1] in FLOATS + ["float32", "float64"]:
        va, vb = vals(x), t.detach().double().numpy()
        ok = (a == b) | (np.isnan(va) & np.isnan(vb))
    else:
        ok = a == b
    return bool(np.all(ok))


def ulps(name, a, b):
    """Distance in units of the last place of dtype `name` between value arrays a and b."""
    a, b = np.atleast_1d(np.asarray(a, np.float64)), np.atleast_1d(np.asarray(b, np.float64))
    mant = {"float16": 10, "bfloat16": 7, "float32": 23}[name]
    tiny = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126, "float32": 2.0 ** -126}[name]
    scale = np.maximum(np.abs(a), tiny)
    ulp = 2.0 ** (np.floor(np.log2(scale)) - mant)
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b) / ulp
    d[(a == b) | (np.isnan(a) & np.isnan(b))] = 0
    return d
