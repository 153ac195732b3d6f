"""Differences from torch found by porting public scripts (pytorch/tutorials,
pytorch/examples): each case runs on cddp and, when installed, on torch (the `lib` fixture),
and asserts values derived by hand or by NumPy, so both libraries must give them."""
import numpy as np
import pytest


# ---- affine_grid: torch's two roundings (the spatial transformer tutorial) -------------------

@pytest.mark.parametrize("size", [(1, 1, 28, 28), (2, 3, 5, 7)])
def test_affine_grid_and_its_sampling_gradient_equal_torchs(size):
    # the base grid is linspace * (W - 1) / W, rounded twice as torch does; at the identity
    # map the points sit on pixel centres, where one ulp flips grid_sample's floor() and
    # theta's gradient (the tutorial's initial transform) moved by ~10%
    torch = pytest.importorskip("torch")
    import cddp
    img = np.random.default_rng(0).random(size).astype(np.float32)
    got = {}
    for lib in (cddp, torch):
        theta = lib.tensor([[[1.0, 0, 0], [0, 1.0, 0]]] * size[0], requires_grad=True)
        F = lib.nn.functional
        grid = F.affine_grid(theta, size, align_corners=False)
        F.grid_sample(lib.tensor(img), grid, align_corners=False).sum().backward()
        got[lib] = grid.detach().numpy(), theta.grad.numpy()
    np.testing.assert_array_equal(got[cddp][0], got[torch][0])
    np.testing.assert_allclose(got[cddp][1], got[torch][1], rtol=1e-4, atol=1e-4)


# ---- gather / scatter with a 0-dim index (one-hot targets in the data tutorial) ---------------

def test_scatter_and_gather_take_a_0_dim_index(lib):
    assert lib.zeros(10).scatter_(0, lib.tensor(3), value=1).tolist() == [0] * 3 + [1] + [0] * 6
    assert lib.zeros(5).scatter(0, lib.tensor(1), lib.tensor(7.0)).tolist() == [0, 7, 0, 0, 0]
    assert lib.zeros(5).scatter(0, lib.tensor(1), lib.tensor([7.0, 8])).tolist() == [0, 7, 0, 0, 0]
    assert lib.zeros(5).scatter(0, lib.tensor([1]), lib.tensor(7.0)).tolist() == [0, 7, 0, 0, 0]
    assert lib.zeros(5).scatter_add(0, lib.tensor(4), lib.tensor(2.0)).tolist() == [0, 0, 0, 0, 2]
    x = lib.arange(5.0).requires_grad_()
    g = x.gather(0, lib.tensor(2))
    g.backward()
    assert g.shape == () and g.item() == 2.0 and x.grad.tolist() == [0, 0, 1, 0, 0]
    s = lib.tensor(3.0, requires_grad=True)
    y = lib.zeros(4).scatter(0, lib.tensor(2), s * 2)
    y.sum().backward()
    assert y.tolist() == [0, 0, 6, 0] and s.grad.item() == 2.0


def test_a_0_dim_index_is_still_one_dim_only(lib):
    with pytest.raises(RuntimeError):
        lib.zeros(2, 3).gather(0, lib.tensor(1))
    with pytest.raises(RuntimeError):
        lib.zeros(2, 3).scatter_(0, lib.tensor(1), value=1.0)
    with pytest.raises(RuntimeError):      # index larger than a 0-dim src
        lib.zeros(5).scatter(0, lib.tensor([1, 2]), lib.tensor(7.0))


def test_sort_and_topk_results_are_named(lib):
    x = lib.tensor([[3.0, 1, 2]])
    r = lib.sort(x)
    assert r.values.tolist() == [[1, 2, 3]] and r.indices.tolist() == [[1, 2, 0]]
    assert repr(r).startswith("torch.return_types.sort(\nvalues=tensor(")
    t = x.topk(2)
    assert t.values.tolist() == [[3, 2]] and t.indices.tolist() == [[0, 2]]
    assert repr(t).startswith("torch.return_types.topk(\nvalues=tensor(")
    v, i = t
    assert v.tolist() == [[3, 2]]


# ---- stacking and promotion over every dtype (meta-llama's generate in bfloat16) --------------

@pytest.mark.parametrize("dt", ["bfloat16", "float16", "uint8", "int8", "int16", "complex64"])
def test_stacks_keep_every_dtype(lib, dt):
    d = getattr(lib, dt)
    a, b = lib.zeros(2, 2, dtype=d), lib.ones(2, 3, dtype=d)
    want = np.hstack([np.zeros((2, 2)), np.ones((2, 3))])
    for fn, args, shape in (("hstack", [a, b], (2, 5)), ("column_stack", [a, b], (2, 5)),
                            ("vstack", [a, a], (4, 2)), ("row_stack", [a, a], (4, 2)),
                            ("dstack", [a, a], (2, 2, 2))):
        r = getattr(lib, fn)(args)
        assert r.dtype == d and tuple(r.shape) == shape, fn
    np.testing.assert_array_equal(lib.hstack([a, b]).real.double().numpy() if dt == "complex64"
                                  else lib.hstack([a, b]).double().numpy(), want)
    bd = lib.block_diag(lib.ones(1, 2, dtype=d), lib.ones(1, 1, dtype=d))
    assert bd.dtype == d and tuple(bd.shape) == (2, 3)


def test_stacks_and_promote_types_promote_as_torch(lib):
    assert lib.hstack([lib.zeros(2, 2), lib.zeros(2, 2, dtype=lib.bfloat16)]).dtype == lib.float32
    u8, i8 = lib.zeros(1, dtype=lib.uint8), lib.zeros(1, dtype=lib.int8)
    assert lib.vstack([u8, i8]).dtype == lib.int16
    assert lib.block_diag(lib.ones(1, dtype=lib.bfloat16),
                          lib.ones(1, 1, dtype=lib.float16)).dtype == lib.float32
    pt = lib.promote_types
    assert pt(lib.complex64, lib.float64) == lib.complex128
    assert pt(lib.complex64, lib.int64) == pt(lib.float16, lib.complex64) == lib.complex64
    assert pt(lib.complex128, lib.complex64) == lib.complex128
    assert pt(lib.bfloat16, lib.float16) == lib.float32


# ---- a checkpoint naming a class the loader lacks (build-nanogpt's GPTConfig) -----------------

def test_loading_a_missing_class_raises_attribute_error(tmp_path):
    import subprocess
    import sys
    import cddp
    p = tmp_path / "ck.pt"
    writer = ("import sys, dataclasses, cddp\n"
              "@dataclasses.dataclass\nclass Cfg:\n    n: int = 3\n"
              "cddp.save({'config': Cfg(), 'w': cddp.ones(2)}, sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", writer, str(p)], check=True, timeout=60,
                   env={**__import__("os").environ,
                        "PYTHONPATH": str(__import__("pathlib").Path(cddp.__file__).parents[1])})
    with pytest.raises(AttributeError, match="Cfg") as e:
        cddp.load(p, weights_only=False)       # torch: pickle's AttributeError
    assert isinstance(e.value, cddp.serialization.CheckpointError)
    assert "cannot import" in str(e.value)


# ---- gamma family, Poisson, binomial: torch's numbers (cleanrl-style Beta policies) ---------

@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_gamma_family_poisson_and_binomial_draws_equal_torchs(dt):
    torch = pytest.importorskip("torch")
    import cddp

    def draws(T):
        d, D, out = getattr(T, dt), T.distributions, []

        def t(v):
            return T.tensor(v, dtype=d)
        for seed, make, shape in (
                (0, lambda: D.Gamma(t([0.5, 2.0, 40.0]), t(3.0)), (5,)),
                (1, lambda: D.Chi2(t([3.0])), (6,)),
                (2, lambda: D.Beta(t([2.0, 0.3]), t([3.0, 0.7])), (4,)),
                (3, lambda: D.Dirichlet(t([[0.5, 1.0, 2.0], [3.0, 0.2, 0.7]])), (3,)),
                (4, lambda: D.StudentT(t([3.0, 5.0])), (3,)),
                (5, lambda: D.InverseGamma(t([2.0]), t([1.0])), (4,)),
                (6, lambda: D.Poisson(t([0.0, 3.0, 9.99, 10.0, 250.0])), (4,)),
                (7, lambda: D.NegativeBinomial(t([5.0]), logits=t([0.3])), (5,))):
            T.manual_seed(seed)
            out.append(make().sample(shape).numpy())
            out.append(T.rand(2, dtype=d).numpy())          # the stream stays in step
        T.manual_seed(6)       # the kernel on edge values (cddp's _standard_gamma refuses them)
        edge = T.tensor([-1.0, 0.0, float("inf"), float("nan"), 1e-3, 0.5], dtype=d)
        out.append((T._C._gamma_draw if T is cddp else T._standard_gamma)(edge).numpy())
        out.append(T._sample_dirichlet(T.tensor([[0.1, 0.1], [5.0, 9.0]], dtype=d)).numpy())
        out.append(T.poisson(T.tensor(np.linspace(0, 40, 81), dtype=d)).numpy())
        T.manual_seed(8)
        count = t([0.0, 1, 5, 10, 11, 20, 100, 1e6, 3, 50, 50, 7, 1000, 2000])
        prob = t([0.5, 0.0, 0.999, 0.5, 0.91, 0.5, 0.1, 0.3, 1e-6, 0.2, 0.8, 0.99, 0.004, 0.6])
        out.append(T.binomial(count, prob).numpy())
        T.manual_seed(9)
        out.append(D.Binomial(t([30.0, 400.0]), probs=t([0.3, 0.75])).sample((4,)).numpy())
        return out
    for got, want in zip(draws(cddp), draws(torch)):
        np.testing.assert_array_equal(got, want)


def test_dirichlet_rsample_gradient_is_a_reparameterization_gradient():
    # the values are torch's; the gradient flows through the gamma draws' implicit
    # reparameterization: E[d x_0 / d a] is d/da of the mean a_0 / sum(a), here by Monte Carlo
    import cddp
    a = cddp.tensor([0.7, 1.5, 2.0], dtype=cddp.float64, requires_grad=True)
    cddp.manual_seed(0)
    x = cddp.distributions.Dirichlet(a).rsample((20000,))
    x[:, 0].mean().backward()
    s = 4.2
    np.testing.assert_allclose(a.grad.numpy(), [1 / s - 0.7 / s ** 2, -0.7 / s ** 2, -0.7 / s ** 2],
                               atol=4e-3)
