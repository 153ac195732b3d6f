"""cddp._cuda's kernels and allocator on a real GPU (issue 11). Every test skips without one
("no CUDA device"); a GPU session runs this file directly (docs/gpu.md has the command).

Kernels run through the test binding _cuda._run_kernel (host bytes in, host bytes out: device
tensors do not exist yet) and are compared with NumPy: fill, cast float32 <-> float16 <->
bfloat16 (bit-exact: both round to nearest even), add/mul (float32 bit-exact; half types
computed in float and rounded once, so bit-exact against NumPy doing the same) and sum
(float accumulation: a relative tolerance against a float64 sum). Sizes cover the vectorized
body and the scalar tail (n not a multiple of 8), 0 and 1 elements, and more than one grid;
offset=1 shifts every buffer off 16-byte alignment, so the scalar paths run too."""
import numpy as np
import pytest

import cddp

F32, F16, BF16 = 0, 1, 2
SIZES = [0, 1, 7, 8, 1000, 4099, 1 << 20 | 3]


@pytest.fixture(scope="module")
def ext():
    if cddp.version.cuda is None:
        pytest.skip("no CUDA device (cddp._cuda not built)")
    from cddp import _cuda
    if _cuda.device_count() == 0:
        pytest.skip("no CUDA device")
    return _cuda


def to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (NaN-free inputs)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b):
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode(x32, dtype):
    """float32 values -> the bytes of that dtype, and those values back as float32."""
    if dtype == F32:
        return x32.astype(np.float32).tobytes(), x32.astype(np.float32)
    if dtype == F16:
        h = x32.astype(np.float16)
        return h.tobytes(), h.astype(np.float32)
    b = to_bf16_bits(x32)
    return b.tobytes(), from_bf16_bits(b)


def decode(buf, dtype):
    if dtype == F32:
        return np.frombuffer(buf, np.float32)
    if dtype == F16:
        return np.frombuffer(buf, np.float16).astype(np.float32)
    return from_bf16_bits(np.frombuffer(buf, np.uint16))


def rnd(n, seed):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32) * 3


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_fill(ext, dtype):
    for n in SIZES:
        out = decode(ext._run_kernel("fill", dtype, dtype, n, None, None, 1.337), dtype)
        _, want = encode(np.full(n, 1.337, np.float32), dtype)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("src", [F32, F16, BF16])
@pytest.mark.parametrize("dst", [F32, F16, BF16])
def test_cast(ext, src, dst):
    for n in SIZES:
        a_bytes, a = encode(rnd(n, n), src)
        out = decode(ext._run_kernel("cast", src, dst, n, a_bytes, None, 0.0), dst)
        _, want = encode(a, dst)                       # exact values of src, rounded to dst
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_binary(ext, op, dtype, offset):
    for n in SIZES:
        a_bytes, a = encode(rnd(n, 1), dtype)
        b_bytes, b = encode(rnd(n, 2), dtype)
        out = decode(ext._run_kernel(op, dtype, dtype, n, a_bytes, b_bytes, 0.0, offset), dtype)
        _, want = encode(a + b if op == "add" else a * b, dtype)   # float math, one rounding
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_sum(ext, dtype, offset):
    for n in SIZES:
        a_bytes, a = encode(rnd(n, 3) + 0.5, dtype)
        out = decode(ext._run_kernel("sum", dtype, dtype, n, a_bytes, None, 0.0, offset), dtype)[0]
        exact = a.astype(np.float64).sum()
        # float accumulation, then one rounding to the output dtype
        tol = {F32: 1e-5, F16: 2e-3, BF16: 1e-2}[dtype] * (np.abs(a).sum() + 1)
        assert abs(float(out) - exact) <= tol, (n, out, exact)
        again = decode(ext._run_kernel("sum", dtype, dtype, n, a_bytes, None, 0.0, offset), dtype)[0]
        assert again == out                             # a fixed order: the same bits


def test_allocator_stats_on_device(ext):
    cddp.cuda.empty_cache()
    cddp.cuda.reset_peak_memory_stats(0)
    n = 1 << 20
    a_bytes, _ = encode(rnd(n, 4), F32)
    ext._run_kernel("add", F32, F32, n, a_bytes, a_bytes, 0.0)
    s = ext._memory("stats", 0)
    assert s["allocated"] == 0                          # every buffer given back ...
    assert s["peak_allocated"] >= 3 * 4 * n             # ... after a, b, out were live at once
    assert s["reserved"] >= s["peak_allocated"]             # all of it cached
    before = s["n_raw_alloc"]
    ext._run_kernel("add", F32, F32, n, a_bytes, a_bytes, 0.0)
    assert ext._memory("stats", 0)["n_raw_alloc"] == before   # the second run reuses the cache
    cddp.cuda.empty_cache()
    assert cddp.cuda.memory_reserved(0) == 0
    assert cddp.cuda.max_memory_allocated(0) == s["peak_allocated"]


def test_bad_arguments(ext):
    with pytest.raises(ValueError):
        ext._run_kernel("add", 9, 9, 4, b"\0" * 16, b"\0" * 16, 0.0)
    with pytest.raises(ValueError, match="unknown kernel"):
        ext._run_kernel("nope", F32, F32, 4, b"\0" * 16, b"\0" * 16, 0.0)
    with pytest.raises(ValueError, match="offset"):
        ext._run_kernel("add", F32, F32, 4, b"\0" * 16, b"\0" * 16, 0.0, -1)
    with pytest.raises(ValueError, match="inputs must hold"):
        ext._run_kernel("add", F32, F32, 4, b"\0" * 15, b"\0" * 16, 0.0)
