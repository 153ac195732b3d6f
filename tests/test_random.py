"""cddp.Generator and the random functions: torch-identical streams (randperm, rand, randn,
randint, uniform_, normal_, random_, bernoulli, multinomial with replacement) for the same seed
when torch is installed; reproducibility, state round trips, distribution sanity and bad
input everywhere."""
import os
import pickle

import numpy as np
import pytest

import cddp
from conftest import n

SEEDS = [0, 1, 42, 2 ** 32 + 7, 2 ** 63 + 5, -3]


def pair(torch, seed):
    return torch.Generator().manual_seed(seed), cddp.Generator().manual_seed(seed)


def eq(a, b, what):
    a = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else np.asarray(a)
    b = n(b) if isinstance(b, cddp.Tensor) else np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
    np.testing.assert_array_equal(b, a, err_msg=str(what))


# ---- exact agreement with torch --------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_randperm_matches_torch(torch, seed):
    for size in [0, 1, 2, 3, 10, 17, 100, 1000, 4097, 70000]:
        tg, cg = pair(torch, seed)
        eq(torch.randperm(size, generator=tg), cddp.randperm(size, generator=cg), (seed, size))
        # consecutive calls continue the same stream
        eq(torch.randperm(size, generator=tg), cddp.randperm(size, generator=cg), (seed, size, 2))
    tg, cg = pair(torch, seed)
    for dt in ["int32", "float32", "float64"]:
        eq(torch.randperm(50, generator=tg, dtype=getattr(torch, dt)),
           cddp.randperm(50, generator=cg, dtype=getattr(cddp, dt)), dt)


@pytest.mark.skipif(not os.environ.get("CDDP_SLOW_TESTS"), reason="set CDDP_SLOW_TESTS=1: ~4 GB, minutes")
def test_randperm_large_n_switches_algorithm_like_torch(torch):
    # torch uses random() % (n - i) below UINT32_MAX / 20 and the inside-out shuffle on
    # random64() from there on; check both sides of the switch
    for size, seed in [(214748364 - 1, 4), (214748364 + 5, 3)]:
        tg, cg = pair(torch, seed)
        eq(torch.randperm(size, generator=tg), cddp.randperm(size, generator=cg), size)


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_rand_randn_match_torch(torch, seed):
    # sizes below, at and above randn's 16-element vectorized path, odd tails, 2-d
    shapes = [(1,), (5,), (15,), (16,), (17,), (33,), (3, 7), (1000,), (4, 1, 64)]
    for dt in ["float32", "float64"]:
        tg, cg = pair(torch, seed)
        for shape in shapes:
            for fn in ["rand", "randn"]:
                eq(getattr(torch, fn)(*shape, generator=tg, dtype=getattr(torch, dt)),
                   getattr(cddp, fn)(*shape, generator=cg, dtype=getattr(cddp, dt)),
                   (fn, shape, dt))


def test_default_generator_matches_torch(torch):
    torch.manual_seed(123)
    g = cddp.manual_seed(123)
    assert g is cddp.default_generator
    eq(torch.rand(10), cddp.rand(10), "rand")
    eq(torch.randn(20), cddp.randn(20), "randn")
    eq(torch.randint(0, 10, (7,)), cddp.randint(0, 10, (7,)), "randint")
    eq(torch.randperm(30), cddp.randperm(30), "randperm")
    eq(torch.empty(5).uniform_(), cddp.empty(5).uniform_(), "uniform_")
    assert torch.initial_seed() == cddp.initial_seed() == 123


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_randint_matches_torch(torch, seed):
    cases = [((10, (5,)), None), ((0, 7, (3, 4)), None), ((-5, 5, (100,)), None),
             ((0, 2 ** 33, (50,)), None), ((-2 ** 40, 2 ** 40, (20,)), None), ((3, (1000,)), None),
             ((0, 100, (9,)), "int32"), ((0, 100, (9,)), "float32"), ((-7, 7, (9,)), "float64"),
             ((2, (6,)), "bool")]
    tg, cg = pair(torch, seed)
    for args, dt in cases:
        kt = {"dtype": getattr(torch, dt)} if dt else {}
        kc = {"dtype": getattr(cddp, dt)} if dt else {}
        eq(torch.randint(*args, generator=tg, **kt), cddp.randint(*args, generator=cg, **kc), (args, dt))
    eq(torch.randint(low=2, high=9, size=(4,), generator=tg),
       cddp.randint(low=2, high=9, size=(4,), generator=cg), "keywords")


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_inplace_distributions_match_torch(torch, seed):
    tg, cg = pair(torch, seed)
    for shape in [(7,), (20,), (4, 5)]:
        for dt in ["float32", "float64"]:
            T = lambda: torch.empty(shape, dtype=getattr(torch, dt))  # noqa: E731
            C = lambda: cddp.empty(shape, dtype=getattr(cddp, dt))    # noqa: E731
            eq(T().uniform_(-2.5, 3.25, generator=tg), C().uniform_(-2.5, 3.25, generator=cg), "uniform_")
            eq(T().normal_(1.5, 0.3, generator=tg), C().normal_(1.5, 0.3, generator=cg), "normal_")
            eq(T().random_(generator=tg), C().random_(generator=cg), "random_()")
            eq(T().random_(17, generator=tg), C().random_(17, generator=cg), "random_(to)")
            eq(T().bernoulli_(0.3, generator=tg), C().bernoulli_(0.3, generator=cg), "bernoulli_")
    for dt in ["int64", "int32", "bool"]:
        eq(torch.empty(50, dtype=getattr(torch, dt)).random_(generator=tg),
           cddp.empty(50, dtype=getattr(cddp, dt)).random_(generator=cg), dt)
    eq(torch.empty(50, dtype=torch.int64).random_(-3, None, generator=tg),
       cddp.empty(50, dtype=cddp.int64).random_(-3, None, generator=cg), "random_(from, None)")
    eq(torch.empty(50, dtype=torch.int64).random_(-2 ** 63, None, generator=tg),
       cddp.empty(50, dtype=cddp.int64).random_(-2 ** 63, None, generator=cg), "full range")
    # the DataLoader/RandomSampler seed idiom
    assert torch.empty((), dtype=torch.int64).random_(generator=tg).item() == \
        cddp.empty((), dtype=cddp.int64).random_(generator=cg).item()
    eq(torch.rand(5, generator=tg), cddp.rand(5, generator=cg), "stream still aligned")


def test_noncontiguous_targets_fill_in_memory_order(torch):
    tg, cg = pair(torch, 5)
    a = torch.empty(5, 40).t()
    a.normal_(generator=tg)
    b = cddp.from_numpy(np.empty((5, 40), np.float32).T)
    b.normal_(generator=cg)
    eq(a, b, "transposed normal_")
    a = torch.empty(6, 8)[:, ::2]
    a.uniform_(generator=tg)
    b = cddp.from_numpy(np.empty((6, 8), np.float32)[:, ::2])
    b.uniform_(generator=cg)
    eq(a, b, "sliced uniform_")


def test_sampling_functions_match_torch(torch):
    tg, cg = pair(torch, 9)
    p = np.linspace(0, 1, 30).astype(np.float32)
    eq(torch.bernoulli(torch.from_numpy(p), generator=tg), cddp.bernoulli(cddp.from_numpy(p), generator=cg), "f32 p")
    p64 = np.linspace(0, 1, 30)
    eq(torch.bernoulli(torch.from_numpy(p64), generator=tg), cddp.bernoulli(cddp.from_numpy(p64), generator=cg), "f64 p")
    w = np.array([0.1, 2, 0.5, 3, 0.01], np.float32)
    eq(torch.multinomial(torch.from_numpy(w), 20, True, generator=tg),
       cddp.multinomial(cddp.from_numpy(w), 20, True, generator=cg), "multinomial")
    w2 = np.random.RandomState(0).rand(3, 6)
    eq(torch.multinomial(torch.from_numpy(w2), 7, replacement=True, generator=tg),
       cddp.multinomial(cddp.from_numpy(w2), 7, replacement=True, generator=cg), "multinomial 2d")
    eq(torch.normal(2.0, 3.0, (5, 7), generator=tg), cddp.normal(2.0, 3.0, (5, 7), generator=cg), "normal")
    eq(torch.rand(3, generator=tg), cddp.rand(3, generator=cg), "aligned")


def test_like_functions_match_torch(torch):
    x = np.zeros((3, 4), np.float64)
    torch.manual_seed(3)
    cddp.manual_seed(3)
    eq(torch.rand_like(torch.from_numpy(x)), cddp.rand_like(cddp.from_numpy(x)), "rand_like")
    eq(torch.randn_like(torch.from_numpy(x)), cddp.randn_like(cddp.from_numpy(x)), "randn_like")
    eq(torch.randint_like(torch.from_numpy(x), 2, 9), cddp.randint_like(cddp.from_numpy(x), 2, 9), "randint_like")
    eq(torch.randint_like(torch.from_numpy(x), 9), cddp.randint_like(cddp.from_numpy(x), 9), "randint_like(high)")
    eq(torch.rand_like(torch.from_numpy(x), dtype=torch.float32),
       cddp.rand_like(cddp.from_numpy(x), dtype=cddp.float32), "dtype override")


# ---- without torch: reproducibility and state ------------------------------------------

def test_same_seed_same_values_different_seed_different():
    for fn in [lambda g: cddp.rand(50, generator=g), lambda g: cddp.randn(50, generator=g),
               lambda g: cddp.randint(0, 1000, (50,), generator=g), lambda g: cddp.randperm(50, generator=g)]:
        a = n(fn(cddp.Generator().manual_seed(5)))
        b = n(fn(cddp.Generator().manual_seed(5)))
        c = n(fn(cddp.Generator().manual_seed(6)))
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)
    cddp.manual_seed(77)
    a = n(cddp.rand(10))
    cddp.manual_seed(77)
    np.testing.assert_array_equal(n(cddp.rand(10)), a)


def test_known_mt19937_stream():
    # mt19937 seeded with 5489 (the reference seed): first outputs 3499211612, 581869302, ...
    # rand() float32 = (draw & 0xFFFFFF) / 2**24
    g = cddp.Generator().manual_seed(5489)
    expect = np.array([3499211612, 581869302, 3890346734, 3586334585], np.uint64)
    np.testing.assert_array_equal(n(cddp.rand(4, generator=g)),
                                  ((expect & 0xFFFFFF) / 2.0 ** 24).astype(np.float32))
    # randperm(2) uses draw % 2
    g = cddp.Generator().manual_seed(5489)
    assert cddp.randperm(2, generator=g).tolist() == ([0, 1] if 3499211612 % 2 == 0 else [1, 0])


def test_generator_api():
    g = cddp.Generator()
    assert g.initial_seed() == 67280421310721             # torch.Generator()'s default
    assert g.manual_seed(3) is g and g.initial_seed() == 3
    assert g.manual_seed(-1).initial_seed() == 2 ** 64 - 1
    assert g.manual_seed(np.int64(9)).initial_seed() == 9
    assert g.device.type == "cpu" and cddp.Generator(device="cpu").device == cddp.device("cpu")
    s = g.seed()
    assert isinstance(s, int) and g.initial_seed() == s and 0 <= s < 2 ** 53
    assert cddp.manual_seed(4.9).initial_seed() == 4                   # torch does int(seed)
    assert isinstance(cddp.seed(), int) and cddp.initial_seed() == cddp.default_generator.initial_seed()
    assert "Generator" in repr(g)


STATE_SIZE, LEGACY_SIZE = 5056, 5048     # torch's CPUGeneratorImplState / ...StateLegacy


def decode_state(st):
    """The fields of torch's state layout, read with NumPy (not with the code under test)."""
    b = n(st).tobytes()
    return {"seed": int(np.frombuffer(b, "<u8", 1, 0)[0]),
            "left": int(np.frombuffer(b, "<i4", 1, 8)[0]),
            "seeded": int(np.frombuffer(b, "<i4", 1, 12)[0]),
            "next": int(np.frombuffer(b, "<u8", 1, 16)[0]),
            "words": np.frombuffer(b, "<u8", 624, 24),
            "normal_y": float(np.frombuffer(b, "<f8", 1, 5024)[0]),
            "normal_valid": int(np.frombuffer(b, "<i4", 1, 5040)[0]),
            "float_normal": float(np.frombuffer(b, "<f4", 1, 5048)[0]),
            "float_valid": b[5052]}


def test_state_round_trip_includes_normal_cache():
    g = cddp.Generator().manual_seed(10)
    cddp.randn(3, generator=g)                  # odd count: a cached Box-Muller value remains
    st = g.get_state()
    assert st.dtype == cddp.uint8 and st.shape == (STATE_SIZE,)
    f = decode_state(st)
    assert f["seed"] == 10 and f["seeded"] == 1 and 0 < f["left"] <= 624
    assert f["normal_valid"] == 1 and f["words"].max() < 2 ** 32
    a = n(cddp.randn(5, generator=g))
    b = n(cddp.rand(700, generator=g))          # crosses a 624-word reload
    g.set_state(st)
    np.testing.assert_array_equal(n(cddp.randn(5, generator=g)), a)
    np.testing.assert_array_equal(n(cddp.rand(700, generator=g)), b)
    # torch's legacy size (no float-normal slot) restores the same stream
    g.set_state(st[:LEGACY_SIZE])
    np.testing.assert_array_equal(n(cddp.randn(5, generator=g)), a)
    # module-level state of the default generator; copies on another generator
    cddp.manual_seed(1)
    s = cddp.get_rng_state()
    x = n(cddp.rand(4))
    cddp.set_rng_state(s)
    np.testing.assert_array_equal(n(cddp.rand(4)), x)
    h = cddp.Generator().set_state(s)
    np.testing.assert_array_equal(n(cddp.rand(4, generator=h)), x)
    # pickling keeps the stream
    g2 = pickle.loads(pickle.dumps(g))
    np.testing.assert_array_equal(n(cddp.rand(6, generator=g2)), n(cddp.rand(6, generator=g)))


def old_words(st):
    """The int64[632] state earlier cddp versions returned, built from torch's layout."""
    f = decode_state(st)
    w = np.zeros(632, np.int64)
    w[0], w[1], w[2], w[3] = 1, np.uint64(f["seed"]).view(np.int64), f["left"], f["next"]
    w[4:628] = f["words"].astype(np.int64)
    w[630] = f["normal_valid"]
    w[631] = np.float64(f["normal_y"]).view(np.int64)
    return w


def test_state_of_earlier_versions_still_loads():
    g = cddp.Generator().manual_seed(77)
    cddp.randn(5, generator=g)
    st = g.get_state()
    a = n(cddp.randn(9, generator=g))
    words = old_words(st)
    g.set_state(cddp.tensor(words))
    np.testing.assert_array_equal(n(cddp.randn(9, generator=g)), a)
    g.__setstate__(words.tobytes())               # a Generator pickled by an earlier version
    np.testing.assert_array_equal(n(cddp.randn(9, generator=g)), a)


def test_state_validation():
    g = cddp.Generator()
    with pytest.raises(RuntimeError, match="of size 5048 or a CPUGeneratorImplState of size 5056"):
        g.set_state(cddp.zeros(5, dtype=cddp.uint8))
    with pytest.raises(TypeError, match="uint8"):
        g.set_state(cddp.zeros(STATE_SIZE))
    with pytest.raises(TypeError, match="uint8"):
        g.set_state(cddp.zeros(5, dtype=cddp.int64))
    good = n(g.get_state())
    for offset, value in ((8, 0), (8, 625), (12, 0), (16, 625)):   # left, seeded, next
        bad = good.copy()
        bad[offset:offset + 4] = np.frombuffer(np.int32(value).tobytes(), np.uint8)
        with pytest.raises(RuntimeError, match="Invalid mt19937 state"):
            g.set_state(cddp.tensor(bad))
    bad = old_words(g.get_state())
    bad[2] = 0                                   # left out of range, earlier format
    with pytest.raises(RuntimeError, match="Invalid mt19937 state"):
        g.set_state(cddp.tensor(bad))
    with pytest.raises(RuntimeError, match="Invalid mt19937 state"):
        g.__setstate__({"torch_state": b"\0" * STATE_SIZE})
    with pytest.raises(RuntimeError, match="Invalid mt19937 state"):
        g.__setstate__(b"\0" * STATE_SIZE)      # as earlier versions' words: version 0
    with pytest.raises(RuntimeError, match="Invalid mt19937 state"):
        g.__setstate__(b"\1" * 8)
    with pytest.raises(TypeError):
        g.set_state(np.zeros(STATE_SIZE, np.uint8))
    g.set_state(cddp.tensor(good))               # a failed set_state left nothing half-written
    np.testing.assert_array_equal(n(g.get_state()), good)


@pytest.mark.parametrize("seed", [0, 42, 2 ** 63 + 5])
def test_state_is_torchs_bytes_and_moves_between_them(torch, seed):
    tg, cg = pair(torch, seed)
    for draw in (lambda m, g: m.randn(3, generator=g),                    # double normal cache
                 lambda m, g: m.rand(700, generator=g),                   # a reload
                 lambda m, g: m.randn(1, generator=g, dtype=m.float64)):
        draw(torch, tg)
        draw(cddp, cg)
        eq(tg.get_state(), cg.get_state(), ("state bytes", seed))
    # torch's state (as a checkpoint would carry it) continues torch's stream in cddp
    cddp.set_rng_state(cddp.tensor(tg.get_state().numpy()))
    eq(torch.randn(7, generator=tg), cddp.randn(7), "torch state -> cddp")
    # and cddp's state continues in torch
    torch.set_rng_state(torch.from_numpy(n(cddp.get_rng_state()).copy()))
    eq(torch.rand(5), cddp.rand(5), "cddp state -> torch")


def test_torch_checkpoint_rng_state_resumes_in_cddp(torch, tmp_path):
    torch.manual_seed(5)
    torch.rand(11)
    path = tmp_path / "ckpt.pt"
    torch.save({"rng_state": torch.get_rng_state(), "epoch": 3}, path)
    expect = torch.rand(6)
    ck = cddp.load(path)
    cddp.set_rng_state(ck["rng_state"])
    eq(expect, cddp.rand(6), "resumed stream")


# ---- distributions ---------------------------------------------------------------------

def test_distribution_sanity():
    g = cddp.Generator().manual_seed(2024)
    z = n(cddp.randn(100000, generator=g)).astype(np.float64)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    z64 = n(cddp.randn(100001, generator=g, dtype=cddp.float64))
    assert abs(z64.mean()) < 0.02 and abs(z64.std() - 1) < 0.02
    u = n(cddp.rand(100000, generator=g))
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    v = n(cddp.empty(50000).uniform_(-3, 5, generator=g))
    assert v.min() >= -3 and v.max() < 5 and abs(v.mean() - 1) < 0.05
    w = n(cddp.empty(50000, dtype=cddp.float64).normal_(10, 2, generator=g))
    assert abs(w.mean() - 10) < 0.05 and abs(w.std() - 2) < 0.05
    r = n(cddp.randint(-4, 6, (50000,), generator=g))
    assert r.min() == -4 and r.max() == 5 and set(np.unique(r)) == set(range(-4, 6))
    b = n(cddp.empty(50000).bernoulli_(0.25, generator=g))
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 0.01
    p = n(cddp.randperm(1000, generator=g))
    assert sorted(p.tolist()) == list(range(1000))
    m = n(cddp.multinomial(cddp.tensor([0.0, 1.0, 3.0]), 20000, replacement=True, generator=g))
    assert set(np.unique(m)) == {1, 2} and abs((m == 2).mean() - 0.75) < 0.02
    m2 = n(cddp.multinomial(cddp.tensor([[0.5, 0.0, 0.5, 1.0]]), 3, generator=g))
    assert m2.shape == (1, 3) and sorted(m2[0].tolist()) == [0, 2, 3]   # no repeats, never p=0
    e = n(cddp.empty(50000, dtype=cddp.float64).exponential_(2.0, generator=g))
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.02
    nt = n(cddp.normal(cddp.tensor([0.0, 100.0]), cddp.tensor([1.0, 0.0]), generator=g))
    assert nt[1] == 100.0 and abs(nt[0]) < 6


def test_factory_options():
    x = cddp.rand(2, 3, requires_grad=True)
    assert x.requires_grad and x.is_leaf and x.dtype == cddp.float32
    assert cddp.randn((2, 3)).shape == (2, 3) and cddp.rand(size=(4,)).shape == (4,)
    assert cddp.rand(0).shape == (0,) and cddp.randn(2, 0).shape == (2, 0)
    assert cddp.rand(()).shape == () and cddp.randn(()).shape == ()
    assert cddp.randint(5, (2, 2)).dtype == cddp.int64
    assert cddp.randperm(5, dtype=cddp.int32).dtype == cddp.int32
    assert cddp.rand(3, dtype=cddp.float64, device="cpu").dtype == cddp.float64
    y = cddp.zeros(3, dtype=cddp.float64)
    v = y._version
    assert y.normal_() is y and y._version > v


# ---- bad input -------------------------------------------------------------------------

def test_bad_inputs():
    with pytest.raises(RuntimeError, match="negative dimension"):
        cddp.rand(-1)
    with pytest.raises(TypeError, match="must be tuple of ints"):
        cddp.randn(2.5)
    with pytest.raises(NotImplementedError, match="check_uniform_bounds.*Long"):
        cddp.rand(2, dtype=cddp.int64)
    with pytest.raises(NotImplementedError, match="normal_kernel_cpu.*Long"):
        cddp.randn(2, dtype=cddp.int64)
    with pytest.raises(NotImplementedError):
        cddp.zeros(2, dtype=cddp.int32).uniform_()
    with pytest.raises(RuntimeError, match="from=5 >= to=2"):
        cddp.randint(5, 2, (3,))
    with pytest.raises(RuntimeError, match="from=0 >= to=0"):
        cddp.randint(0, (3,))
    with pytest.raises(RuntimeError, match="out of bounds for bool"):
        cddp.randint(5, (3,), dtype=cddp.bool)
    with pytest.raises(RuntimeError, match="out of bounds for int"):
        cddp.zeros(2, dtype=cddp.int32).random_(2 ** 40)
    with pytest.raises(TypeError, match="'size' must be tuple of ints, not int"):
        cddp.randint(5, 3)
    with pytest.raises(TypeError, match="'high' must be int, not float"):
        cddp.randint(3.5, (3,))
    with pytest.raises(TypeError, match="missing"):
        cddp.randint(5)
    with pytest.raises(RuntimeError, match="negative dimension"):
        cddp.randperm(-1)
    with pytest.raises(RuntimeError, match="2\\^24\\+1"):
        cddp.randperm(2 ** 25, dtype=cddp.float32)
    with pytest.raises(TypeError, match="must be int"):
        cddp.randperm(2.0)
    with pytest.raises(TypeError, match="cddp.Generator"):
        cddp.rand(2, generator=3)
    with pytest.raises(TypeError, match="cddp.Generator"):
        cddp.randperm(3, generator="g")
    with pytest.raises(RuntimeError, match="from=2 > to=1"):
        cddp.zeros(3).uniform_(2, 1)
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        cddp.zeros(3).normal_(0, -1)
    with pytest.raises(RuntimeError, match="manual_seed expected a long, but got float"):
        cddp.Generator().manual_seed(1.5)
    with pytest.raises(RuntimeError, match="manual_seed expected a long"):
        cddp.Generator().manual_seed("a")
    with pytest.raises(ValueError, match="Overflow"):
        cddp.manual_seed(2 ** 64)
    with pytest.raises(ValueError, match="Overflow"):
        cddp.manual_seed(-2 ** 63 - 1)
    with pytest.raises(ValueError):
        cddp.manual_seed("a")
    with pytest.raises(RuntimeError):
        cddp.Generator(device="tpu")
    with pytest.raises(RuntimeError, match="single memory location"):
        cddp.from_numpy(np.broadcast_to(np.zeros(1, np.float32), (4,))).uniform_()
    with pytest.raises(RuntimeError, match="p to be in"):
        cddp.zeros(3).bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="p_in"):
        cddp.bernoulli(cddp.tensor([0.5, 2.0]))
    with pytest.raises(RuntimeError, match="without replacement"):
        cddp.multinomial(cddp.tensor([1.0, 1.0]), 3)
    with pytest.raises(RuntimeError, match="inf.*nan.*< 0"):
        cddp.multinomial(cddp.tensor([1.0, -1.0]), 1)
    with pytest.raises(RuntimeError, match="sum of probabilities"):
        cddp.multinomial(cddp.tensor([0.0, 0.0]), 1)
    with pytest.raises(TypeError, match="size is required"):
        cddp.normal(0.0, 1.0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        cddp.rand(2, seed=3)


def test_randint_positional_low_high_with_size_keyword():
    """randint(0, 10, size=(3,)) is (low, high) (torchvision's RandomCrop calls it so);
    randint(10, (3,)) is (high, size); the same draws as the all-keyword form."""
    cddp.manual_seed(5)
    a = cddp.randint(2, 9, size=(50,))
    cddp.manual_seed(5)
    b = cddp.randint(low=2, high=9, size=(50,))
    assert a.tolist() == b.tolist() and min(a.tolist()) >= 2 and max(a.tolist()) < 9
    cddp.manual_seed(5)
    c = cddp.randint(2, high=9, size=(50,))
    assert c.tolist() == a.tolist()
    assert max(cddp.randint(4, (100,)).tolist()) < 4
