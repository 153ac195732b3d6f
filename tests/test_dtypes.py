"""The five storage dtypes — float16, bfloat16, uint8, int8, int16 — in the core: dtype objects,
torch's promotion table, conversions bit for bit, NumPy interop, printing, creation, saving,
collation, modules. Ops are in test_dtypes_ops.py, collectives in test_dtypes_dist.py.

Oracles: torch (every promotion pair, bits of conversions and factories, repr text, error
wording) when importable; without it NumPy (np.float16 is IEEE binary16 with round to
nearest even; bfloat16 by dtype_util.bf16_round) and closed forms.
"""
import io
import pickle

import numpy as np
import pytest

import cddp
from dtype_util import ALL, FLOATS, NEW, SMALL_INTS, bf16_round, bits, cd, same_bits, to_torch, vals

# ---- dtype objects --------------------------------------------------------------------------

ATTRS = {  # name: (itemsize, is_floating_point, is_signed)
    "float16": (2, True, True), "bfloat16": (2, True, True), "uint8": (1, False, False),
    "int8": (1, False, True), "int16": (2, False, True), "float32": (4, True, True),
    "bool": (1, False, False),
}


@pytest.mark.parametrize("name", list(ATTRS))
def test_dtype_attributes(name):
    d = cd(name)
    size, fl, signed = ATTRS[name]
    assert (d.itemsize, d.is_floating_point, d.is_signed, d.is_complex) == (size, fl, signed, False)
    assert repr(d) == f"cddp.{name}" and d.to_real() is d
    assert pickle.loads(pickle.dumps(d)) is d
    x = cddp.zeros(3, dtype=d)
    assert x.dtype is d and x.element_size() == size and x.is_floating_point() == fl


def test_dtype_aliases_and_torch_attributes(torch):
    assert cddp.half is cddp.float16 and cddp.short is cddp.int16
    for name in ALL:
        d, td = cd(name), getattr(torch, name)
        assert (d.itemsize, d.is_floating_point, d.is_signed, d.is_complex) == \
            (td.itemsize, td.is_floating_point, td.is_signed, td.is_complex)
        assert repr(d).replace("cddp", "torch") == repr(td)


# ---- promotion ------------------------------------------------------------------------------

def test_promote_types_closed_form():
    P = lambda a, b: cddp.promote_types(cd(a), cd(b))  # noqa: E731
    expect = {("uint8", "int8"): "int16", ("uint8", "int16"): "int16", ("uint8", "int32"): "int32",
              ("int8", "int16"): "int16", ("int16", "float16"): "float16",
              ("int64", "bfloat16"): "bfloat16", ("float16", "bfloat16"): "float32",
              ("float16", "float32"): "float32", ("bfloat16", "float64"): "float64",
              ("bool", "uint8"): "uint8", ("bool", "float16"): "float16"}
    for (a, b), c in expect.items():
        assert P(a, b) is cd(c) and P(b, a) is cd(c), (a, b)
    for a in ALL:
        assert P(a, a) is cd(a) and P(a, "bool") is cd(a)
    with pytest.raises(TypeError, match="must be cddp.dtype"):
        cddp.promote_types(cddp.float16, 3)


def test_promote_types_and_can_cast_every_pair_vs_torch(torch):
    for a in ALL:
        for b in ALL:
            got = cddp.promote_types(cd(a), cd(b))
            assert repr(got) == repr(torch.promote_types(getattr(torch, a), getattr(torch, b))
                                     ).replace("torch", "cddp"), (a, b)
            assert cddp.can_cast(cd(a), cd(b)) == torch.can_cast(getattr(torch, a),
                                                                 getattr(torch, b)), (a, b)


def test_result_type_with_wrapped_numbers_vs_torch(torch):
    scalars = [True, 2, -3, 2.5, 1e6]
    for a in ALL:
        for dim in (True, False):
            x = cddp.ones(2 if dim else (), dtype=cd(a))
            tx = torch.ones(2 if dim else (), dtype=getattr(torch, a))
            for s in scalars:
                want = repr(torch.result_type(tx, s)).replace("torch", "cddp")
                assert repr(cddp.result_type(x, s)) == want, (a, dim, s)
                assert repr(cddp.result_type(s, x)) == want, (a, dim, s)
                op = (x * s) if a != "bool" or isinstance(s, bool) else None
                if op is not None:      # the ops follow the same rule
                    assert repr(op.dtype) == repr((tx * s).dtype).replace("torch", "cddp")
            for b in ALL:               # a dimensioned tensor meets a 0-dim one
                y = cddp.ones((), dtype=cd(b))
                ty = torch.ones((), dtype=getattr(torch, b))
                assert repr(cddp.result_type(x, y)) == \
                    repr(torch.result_type(tx, ty)).replace("torch", "cddp"), (a, dim, b)


def test_finfo_iinfo_closed_form():
    h, b = cddp.finfo(cddp.float16), cddp.finfo(cddp.bfloat16)
    assert (h.bits, h.eps, h.max, h.min, h.tiny, h.resolution) == \
        (16, 2.0 ** -10, 65504.0, -65504.0, 2.0 ** -14, 0.001)
    assert (b.bits, b.eps, b.tiny, b.resolution, b.dtype) == (16, 2.0 ** -7, 2.0 ** -126, 0.01,
                                                              "bfloat16")
    assert b.max == float(bf16_round(np.float32(3.3895314e38))[0]) and b.smallest_normal == b.tiny
    assert cddp.finfo() == cddp.finfo(cddp.float32)
    for name in SMALL_INTS:
        i = cddp.iinfo(cd(name))
        assert (i.min, i.max, i.bits) == (int(np.iinfo(name).min), int(np.iinfo(name).max),
                                          np.iinfo(name).bits)
    with pytest.raises(TypeError, match="requires a floating point"):
        cddp.finfo(cddp.uint8)
    with pytest.raises(TypeError, match="requires an integer"):
        cddp.iinfo(cddp.float16)
    with pytest.raises(TypeError, match="bool is not supported"):
        cddp.iinfo(cddp.bool)


def test_finfo_iinfo_vs_torch(torch):
    for name in ["float16", "bfloat16", "float32", "float64"]:
        a, b = cddp.finfo(cd(name)), torch.finfo(getattr(torch, name))
        assert repr(a) == repr(b)
        for k in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
            assert getattr(a, k) == getattr(b, k), (name, k)
    for name in SMALL_INTS + ["int32", "int64"]:
        a, b = cddp.iinfo(cd(name)), torch.iinfo(getattr(torch, name))
        assert repr(a) == repr(b) and (a.min, a.max, a.bits) == (b.min, b.max, b.bits)


# ---- conversions ----------------------------------------------------------------------------

ALL_HALF = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def test_float16_widens_exactly_every_value():
    h = ALL_HALF.view(np.float16)
    want = h.astype(np.float32)
    for x in (cddp.from_numpy(h), cddp.from_numpy(np.repeat(h, 2))[::2]):   # vector and strided
        got = x.float().numpy()
        nan = np.isnan(want)
        assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
        assert np.isnan(got[nan]).all()


def test_bfloat16_widens_exactly_every_value():
    words = ALL_HALF.view(np.int16)
    x = cddp.from_numpy(words.copy()).view(cddp.bfloat16)
    got = x.float().numpy().view(np.uint32)
    assert np.array_equal(got, ALL_HALF.astype(np.uint32) << 16)       # bits << 16, NaN too


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0, 1e6,
                     2.0 ** -24, 2.0 ** -25, 1.5 * 2 ** -25, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25,
                     1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 3.3895314e38, 3.4e38, 1e-40, 1e-45,
                     1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -1.00390625], dtype=np.float32)


def random_float32(rng, k):
    return rng.integers(0, 1 << 32, k, dtype=np.uint64).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("name", FLOATS)
def test_float32_rounds_to_nearest_even(name):
    """float32 -> float16/bfloat16 against NumPy's float16 cast / the bfloat16 oracle: random
    bit patterns (every exponent, NaNs, infinities, subnormals) plus ties and overflow edges."""
    rng = np.random.default_rng(1)
    f = np.concatenate([SPECIALS, random_float32(rng, 1 << 18)])
    with np.errstate(over="ignore"):
        want = f.astype(np.float16).astype(np.float32) if name == "float16" else bf16_round(f)
    for x in (cddp.from_numpy(f), cddp.from_numpy(np.repeat(f, 2))[::2]):
        got = vals(x.to(cd(name))).astype(np.float32)
        nan = np.isnan(want)
        assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
        assert np.isnan(got[nan]).all()


def test_reduced_precision_conversions_vs_torch(torch):
    rng = np.random.default_rng(2)
    f = np.concatenate([SPECIALS, random_float32(rng, 1 << 14)])
    with np.errstate(invalid="ignore"):       # signalling NaN patterns
        d = np.concatenate([f.astype(np.float64), [1 + 2.0 ** -11 + 2.0 ** -40, 1e300, -1e-300]])
    for name in FLOATS:
        td = getattr(torch, name)
        assert same_bits(cddp.from_numpy(f).to(cd(name)), torch.from_numpy(f).to(td))
        # float64 goes through float first, as c10 (a double-rounding case is in d)
        assert same_bits(cddp.from_numpy(d).to(cd(name)), torch.from_numpy(d).to(td))
        assert same_bits(cddp.tensor(d.tolist(), dtype=cd(name)), torch.tensor(d.tolist(), dtype=td))
        h = cddp.from_numpy(f).to(cd(name))
        for other in ["float64", "int64", "bool", "float16", "bfloat16"]:
            assert same_bits(h.to(cd(other)), to_torch(torch, h).to(getattr(torch, other)))


def test_double_rounding_through_float_as_c10():
    # 1 + 2^-11 + 2^-40 rounds to float32 as the float16 tie 1 + 2^-11, which goes to even (1.0);
    # a direct double -> float16 rounding would give 1 + 2^-10
    x = 1 + 2.0 ** -11 + 2.0 ** -40
    assert cddp.tensor([x], dtype=cddp.float16).item() == 1.0
    assert cddp.tensor([x], dtype=cddp.float64).half().item() == 1.0


@pytest.mark.parametrize("name", SMALL_INTS)
def test_float_and_int_to_small_integers(name):
    info = np.iinfo(name)
    rng = np.random.default_rng(3)
    inr = rng.uniform(info.min - 0.99, info.max + 0.99, 2000)
    for src in ("float64", "float32", "float16", "bfloat16"):
        x = cddp.tensor(inr, dtype=cddp.float64).to(cd(src))
        want = np.trunc(vals(x)).astype(name)           # C's truncation toward zero in range
        assert np.array_equal(x.to(cd(name)).numpy(), want), src
    ints = rng.integers(-(1 << 40), 1 << 40, 2000)        # integers wrap modulo 2^bits
    assert np.array_equal(cddp.from_numpy(ints).to(cd(name)).numpy(), ints.astype(name))
    assert np.array_equal(cddp.from_numpy(ints.astype(name)).long().numpy(),
                          ints.astype(name).astype(np.int64))
    # out of range / NaN is undefined in torch: defined here, never a crash
    odd = cddp.tensor([np.nan, np.inf, -np.inf, 1e10, -1e10, 300.0, -129.0])
    assert odd.to(cd(name)).dtype is cd(name)


def test_out_of_range_float_casts_as_torch_on_x86(torch):
    f = [float("nan"), 300.0, -1.0, 1e10, -129.0, 1e5, -1e10, 70000.5]
    for name in SMALL_INTS:
        assert np.array_equal(cddp.tensor(f).to(cd(name)).numpy(),
                              torch.tensor(f).to(getattr(torch, name)).numpy()), name


# ---- NumPy ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["float16", "uint8", "int8", "int16"])
def test_numpy_zero_copy_both_ways(name):
    a = np.arange(6).astype(name).reshape(2, 3)
    x = cddp.from_numpy(a)
    assert x.dtype is cd(name)
    a[0, 0] = 5
    assert x[0, 0].item() == 5                            # shares memory
    v = x.numpy()
    assert v.dtype == np.dtype(name)
    v[1, 2] = 7
    assert x[1, 2].item() == 7
    assert cddp.as_tensor(a).numpy().ctypes.data == a.ctypes.data
    assert memoryview(x).format == {"float16": "e", "uint8": "B", "int8": "b", "int16": "h"}[name]
    assert cddp.tensor(a).dtype is cd(name)               # tensor() keeps NumPy's dtype (a copy)


def test_bfloat16_has_no_numpy_dtype():
    x = cddp.tensor([1.0, 0.1, -3.0], dtype=cddp.bfloat16)
    with pytest.raises(TypeError, match="Got unsupported ScalarType BFloat16"):
        x.numpy()
    assert np.array_equal(vals(x), bf16_round([1.0, 0.1, -3.0]))
    y = cddp.tensor(np.array([0.1, 1e39]), dtype=cddp.bfloat16)  # from NumPy, through float32
    assert np.array_equal(vals(y), bf16_round([0.1, np.inf]))
    assert memoryview(x).format == "H"                    # raw words for the buffer protocol


# ---- printing, Python values ----------------------------------------------------------------

def repr_cases(lib):
    def T(v, name, **kw):
        return lib.tensor(v, dtype=getattr(lib, name), **kw)
    return [T([1.5, 2.0, 1000.25], "float16"), T([0.1, 2.0], "bfloat16"), T([1, 2, 255], "uint8"),
            T([-128, 5], "int8"), T([[1, -2], [300, 4]], "int16"), T([], "float16"),
            T(3.5, "float16"), T([1e-5, 1e4], "float16"), T([1.0, 2.0], "bfloat16", requires_grad=True),
            T([float("inf"), float("nan"), 1.0], "float16"), lib.arange(2000, dtype=lib.int16),
            lib.zeros(2, 0, dtype=lib.uint8)]


def test_repr_as_torch_prints(torch):
    for c, tr in zip(repr_cases(cddp), repr_cases(torch)):
        assert repr(c) == repr(tr).replace("torch.", "cddp."), repr(tr)


def test_tolist_item_and_python_numbers():
    h = cddp.tensor([0.1, 2.5], dtype=cddp.float16)
    assert h.tolist() == [float(np.float16(0.1)), 2.5] and isinstance(h[1].item(), float)
    assert float(cddp.tensor(2.5, dtype=cddp.bfloat16)) == 2.5
    u = cddp.tensor([250, 3], dtype=cddp.uint8)
    assert u.tolist() == [250, 3] and isinstance(u[0].item(), int) and int(u[0]) == 250
    assert [1, 2, 3][cddp.tensor(1, dtype=cddp.int8)] == 2          # __index__
    with pytest.raises(TypeError, match="only integer tensors"):
        [1, 2][cddp.tensor(1.0, dtype=cddp.float16)]


def test_type_strings_and_conversion_methods():
    x = cddp.arange(3.0)
    for meth, name, legacy in [("half", "float16", "HalfTensor"),
                               ("bfloat16", "bfloat16", "BFloat16Tensor"),
                               ("byte", "uint8", "ByteTensor"), ("char", "int8", "CharTensor"),
                               ("short", "int16", "ShortTensor")]:
        y = getattr(x, meth)()
        assert y.dtype is cd(name) and y.type() == f"torch.{legacy}"
        assert x.type(f"torch.{legacy}").dtype is cd(name) and x.type(cd(name)).dtype is cd(name)
        assert x.to(cd(name)).dtype is cd(name) and y.type_as(x).dtype is cddp.float32
    assert x.half().to(np.float16).dtype is cddp.float16


# ---- creation -------------------------------------------------------------------------------

def test_factories_in_every_new_dtype():
    for name in NEW:
        d = cd(name)
        for x in (cddp.zeros(2, 3, dtype=d), cddp.ones(4, dtype=d), cddp.empty(5, dtype=d),
                  cddp.full((2,), 7, dtype=d), cddp.eye(3, dtype=d),
                  cddp.zeros_like(cddp.ones(2), dtype=d), cddp.ones(3).new_zeros(2, dtype=d)):
            assert x.dtype is d
        assert vals(cddp.ones(4, dtype=d)).tolist() == [1] * 4
        assert np.array_equal(vals(cddp.eye(3, dtype=d)), np.eye(3))
        assert cddp.full_like(cddp.ones(2, dtype=d), 5).dtype is d
    # closed forms: integer arange wraps, float16 linspace ends exactly
    assert np.array_equal(cddp.arange(300, dtype=cddp.uint8).numpy(), np.arange(300) % 256)
    assert np.array_equal(cddp.arange(-3, 3, dtype=cddp.int8).numpy(), np.arange(-3, 3))
    lin = vals(cddp.linspace(0, 1, 7, dtype=cddp.float16))
    assert lin[0] == 0 and lin[-1] == 1 and np.all(np.diff(lin) > 0)


def test_factories_bit_for_bit_vs_torch(torch):
    for name in NEW:
        d, td = cd(name), getattr(torch, name)
        cases = [lambda L, D: L.arange(300, dtype=D), lambda L, D: L.arange(-3, 100, 7, dtype=D),
                 lambda L, D: L.linspace(0, 10, 7, dtype=D), lambda L, D: L.full((3,), -1, dtype=D),
                 lambda L, D: L.eye(2, 3, dtype=D)]
        if name in FLOATS:
            cases += [lambda L, D, a=a, b=b, s=s: L.arange(a, b, s, dtype=D)
                      for a, b, s in [(0, 10, 0.1), (0.3, 100.7, 0.37), (-5, 5, 0.013)]]
            cases += [lambda L, D, a=a, b=b, k=k: L.linspace(a, b, k, dtype=D)
                      for a, b, k in [(0, 1, 7), (0.3, 100.7, 100), (-5, 5, 1000), (-3.3, 7.1, 77)]]
        for f in cases:
            assert same_bits(f(cddp, d), f(torch, td)), (name, f(torch, td))


def test_fill_overflow_errors_as_torch(torch):
    for name in NEW:
        for v in [300, -1, -255, -256, 1e6, 70000.0, 3.7, -1.5, float("inf"), float("nan"), 1e39]:
            res = []
            for lib in (torch, cddp):
                for f in (lambda: lib.full((2,), v, dtype=getattr(lib, name)),
                          lambda: lib.tensor([v], dtype=getattr(lib, name))):
                    try:
                        res.append(repr(f().tolist()))
                    except RuntimeError as e:
                        res.append(str(e))
            assert res[:2] == res[2:], (name, v, res)


# ---- save / load, pickling, collation, modules ----------------------------------------------

def saved_dict():
    rng = np.random.default_rng(4)
    d = {name: cddp.tensor(rng.standard_normal((3, 4)) * 50, dtype=cd(name)) if name in FLOATS
         else cddp.from_numpy(rng.integers(0, 100, (3, 4)).astype(name)) for name in NEW}
    d["scalar"] = cddp.tensor(1.5, dtype=cddp.bfloat16)
    d["strided"] = d["bfloat16"].t()
    d["param"] = cddp.nn.Parameter(cddp.ones(2, dtype=cddp.float16))
    return d


def test_save_load_round_trip_and_safetensors_names(tmp_path):
    d = saved_dict()
    path = tmp_path / "ck.pt"
    cddp.save(d, path)
    e = cddp.load(path)
    for k, v in d.items():
        assert e[k].dtype is v.dtype and np.array_equal(bits(e[k]), bits(v)), k
    assert isinstance(e["param"], cddp.nn.Parameter)
    import json
    import struct
    raw = path.read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    names = {header[k]["dtype"] for k in d}          # entries are named by their keys
    assert {"F16", "BF16", "U8", "I8", "I16"} <= names
    st = pytest.importorskip("safetensors.numpy")
    nobf = {k: v for k, v in d.items() if v.dtype is not cddp.bfloat16}  # NumPy lacks bfloat16
    cddp.save(nobf, tmp_path / "nobf.pt")
    arrays = st.load_file(str(tmp_path / "nobf.pt"))
    for k in nobf:                            # a foreign reader sees the same values, by key
        assert np.array_equal(arrays[k], nobf[k].detach().numpy()), k


def test_bfloat16_checkpoint_read_by_torch(torch, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    d = saved_dict()
    cddp.save(d, tmp_path / "ck.pt")
    loaded = st.load_file(str(tmp_path / "ck.pt"))
    for k in d:
        assert same_bits(d[k], loaded[k]), k


def test_pickle_and_deepcopy_keep_dtypes():
    import copy
    for name in NEW:
        x = cddp.arange(6, dtype=cd(name)).reshape(2, 3)
        for y in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x)):
            assert y.dtype is x.dtype and np.array_equal(bits(y), bits(x))
    p = cddp.nn.Parameter(cddp.ones(3, dtype=cddp.bfloat16))
    q = pickle.loads(pickle.dumps(p))
    assert isinstance(q, cddp.nn.Parameter) and q.dtype is cddp.bfloat16 and q.requires_grad


def test_default_collate_keeps_dtypes():
    from cddp.utils.data import default_collate
    imgs = [np.full((2, 2), i, np.uint8) for i in range(3)]
    b = default_collate(imgs)
    assert b.dtype is cddp.uint8 and np.array_equal(b.numpy(), np.stack(imgs))
    h = default_collate([cddp.ones(2, dtype=cddp.float16) * i for i in range(3)])
    assert h.dtype is cddp.float16 and vals(h).tolist() == [[0, 0], [1, 1], [2, 2]]
    s = default_collate([np.float16(1.5), np.float16(2)])
    assert s.dtype is cddp.float16
    pairs = default_collate([(np.int8(1), cddp.tensor(1.0, dtype=cddp.bfloat16))] * 2)
    assert pairs[0].dtype is cddp.int8 and pairs[1].dtype is cddp.bfloat16


def test_module_half_and_bfloat16():
    m = cddp.nn.Sequential(cddp.nn.Linear(3, 4), cddp.nn.ReLU(), cddp.nn.Linear(4, 2))
    m.register_buffer("steps", cddp.zeros(1, dtype=cddp.int64))
    for meth, d in (("half", cddp.float16), ("bfloat16", cddp.bfloat16), ("float", cddp.float32)):
        getattr(m, meth)()
        assert all(p.dtype is d for p in m.parameters()) and m.steps.dtype is cddp.int64
    m.to(cddp.float16)
    assert m(cddp.ones(5, 3, dtype=cddp.float16)).dtype is cddp.float16
    with pytest.raises(TypeError, match="floating point dtypes"):
        m.to(cddp.uint8)
