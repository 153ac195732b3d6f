"""Memory layouts (csrc/core/layout.c): an elementwise result, a clone, a *_like and a dtype
conversion are laid out as their inputs are (torch's TensorIterator and preserve_format), and
the explicit memory formats. Strides are derived by hand and hold on cddp and torch alike (the
`lib` fixture); values are checked against NumPy; the seeded cases against torch itself."""
import numpy as np
import pytest


def _t(lib):
    # (2, 4, 3) with the memory of a (2, 3, 4): strides (12, 1, 4)
    return lib.arange(24.0).reshape(2, 3, 4).transpose(1, 2)


def test_a_unary_or_binary_result_takes_its_inputs_layout(lib):
    t = _t(lib)
    ref = np.arange(24.0).reshape(2, 3, 4).transpose(0, 2, 1)
    for r, want in [(t + 1, ref + 1), (t * t, ref * ref), (t.exp(), np.exp(ref)),
                    (lib.sigmoid(t), 1 / (1 + np.exp(-ref))), (lib.relu(t - 5), np.maximum(ref - 5, 0)),
                    (lib.where(t > 3, t, 0.0), np.where(ref > 3, ref, 0)),
                    (t + lib.ones(3), ref + 1)]:       # a broadcast operand does not vote
        assert r.stride() == (12, 1, 4)
        np.testing.assert_allclose(r.numpy(), want, rtol=1e-6)
    assert (t > 1).stride() == (12, 1, 4) and (t > 1).dtype == lib.bool


def test_the_first_operand_decides_between_two_layouts(lib):
    t, c = _t(lib), lib.ones(2, 4, 3)
    assert (t + c).stride() == (12, 1, 4)
    assert (c + t).stride() == (12, 3, 1)
    np.testing.assert_array_equal((t + c).numpy(), (c + t).numpy())


def test_a_three_dim_permutation_is_kept(lib):
    a = lib.arange(24.0).reshape(2, 3, 4)
    p = a.permute(2, 0, 1)
    assert (p + 0).stride() == (1, 12, 4)
    np.testing.assert_array_equal((p * 2).numpy(), np.arange(24.0).reshape(2, 3, 4).transpose(2, 0, 1) * 2)


def test_a_slice_with_gaps_gives_a_dense_result_in_its_order(lib):
    a = lib.arange(40.0).reshape(4, 10)[:, ::2].t()      # (5, 4), strides (2, 10)
    r = a * 2
    assert r.stride() == (1, 5) and r.is_contiguous() is False
    np.testing.assert_array_equal(r.numpy(), np.arange(40.0).reshape(4, 10)[:, ::2].T * 2)


def test_like_clone_and_conversions_preserve_the_layout(lib):
    t = _t(lib)
    for r in (lib.empty_like(t), lib.zeros_like(t), lib.ones_like(t), lib.full_like(t, 2.0),
              lib.rand_like(t), lib.randn_like(t), t.clone(), t.double(), t.to(lib.float16),
              t.to(lib.int64)):
        assert r.stride() == (12, 1, 4)
    assert lib.zeros_like(t, memory_format=lib.contiguous_format).stride() == (12, 3, 1)
    assert t.clone(memory_format=lib.contiguous_format).stride() == (12, 3, 1)
    np.testing.assert_array_equal(t.double().numpy(), t.numpy().astype(np.float64))
    np.testing.assert_array_equal(t.clone().numpy(), t.numpy())
    # a gapped slice: preserve_format infers a dense layout in its order
    g = lib.arange(40.0).reshape(4, 10)[:, ::2].t()
    assert lib.empty_like(g).stride() == (1, 5) and g.clone().stride() == (1, 5)


def test_channels_last_formats(lib):
    x = lib.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5)
    cl = x.contiguous(memory_format=lib.channels_last)
    assert cl.stride() == (60, 1, 15, 3)
    assert cl.is_contiguous(memory_format=lib.channels_last) and not cl.is_contiguous()
    np.testing.assert_array_equal(cl.numpy(), x.numpy())
    assert cl.contiguous(memory_format=lib.channels_last) is cl
    assert x.to(memory_format=lib.channels_last).stride() == (60, 1, 15, 3)
    assert cl.to(memory_format=lib.channels_last) is cl
    assert cl.contiguous().stride() == (60, 20, 5, 1)
    assert (cl + 1).stride() == (60, 1, 15, 3) and lib.relu(cl).stride() == (60, 1, 15, 3)
    assert lib.empty(2, 3, 4, 5, memory_format=lib.channels_last).stride() == (60, 1, 15, 3)
    assert lib.zeros_like(x, memory_format=lib.channels_last).stride() == (60, 1, 15, 3)
    y = lib.zeros(1, 2, 3, 4, 5).contiguous(memory_format=lib.channels_last_3d)
    assert y.stride() == (120, 1, 40, 10, 2)
    with pytest.raises(RuntimeError):
        lib.zeros(3, 4).contiguous(memory_format=lib.channels_last)
    assert x.contiguous(memory_format=lib.preserve_format) is x
    with pytest.raises(RuntimeError):
        cl.contiguous(memory_format=lib.preserve_format)


def test_in_place_and_out_keep_their_own_layout(lib):
    t = _t(lib).clone()
    t.add_(1)
    assert t.stride() == (12, 1, 4)
    out = lib.empty(2, 4, 3)
    lib.add(_t(lib), 1, out=out)
    assert out.stride() == (12, 3, 1)
    np.testing.assert_array_equal(out.numpy(), _t(lib).numpy() + 1)


def test_half_precision_and_mixed_dtypes_on_permuted_inputs(lib):
    t = _t(lib)
    h = t.half()
    r = h * 2 + t.to(lib.int32)
    assert r.dtype == lib.float16 and r.stride() == (12, 1, 4)
    np.testing.assert_array_equal(r.float().numpy(), t.numpy() * 3)


def test_gradients_through_permuted_results_are_right(lib):
    a = lib.tensor(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)
    b = lib.tensor(np.random.default_rng(1).standard_normal((4, 3)))
    y = (a.t() * b).exp()
    assert y.stride() == (1, 4)
    y.sum().backward()
    an, bn = a.detach().numpy(), b.numpy()
    np.testing.assert_allclose(a.grad.numpy(), (np.exp(an.T * bn) * bn).T, rtol=1e-12)


@pytest.mark.parametrize("make", ["sgd", "sgd_momentum", "adam", "adamw"])
def test_optimizers_step_a_permuted_parameter_as_a_contiguous_one(lib, make):
    # torch allows a parameter of any layout; its state (zeros_like) follows the layout
    w0 = np.random.default_rng(2).standard_normal((3, 5))
    results = []
    for layout in ("permuted", "contiguous"):
        src = lib.tensor(w0.T.copy()).t() if layout == "permuted" else lib.tensor(w0)
        p = lib.nn.Parameter(src)
        assert p.is_contiguous() == (layout == "contiguous")
        opt = {"sgd": lambda: lib.optim.SGD([p], lr=0.1),
               "sgd_momentum": lambda: lib.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True),
               "adam": lambda: lib.optim.Adam([p], lr=0.1),
               "adamw": lambda: lib.optim.AdamW([p], lr=0.1, weight_decay=0.1)}[make]()
        for _ in range(3):
            opt.zero_grad()
            ((p * p).sum() + p[0].sum()).backward()
            opt.step()
        results.append(p.detach().numpy().copy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=1e-12)


def test_an_optimizer_takes_a_gradient_of_another_layout():
    import cddp
    p = cddp.nn.Parameter(cddp.zeros(5, 3).t())
    p.grad = cddp.ones(3, 5) * cddp.arange(5.0)          # contiguous, the param is not
    cddp.optim.SGD([p], lr=1.0).step()
    np.testing.assert_array_equal(p.detach().numpy(), -np.tile(np.arange(5.0), (3, 1)))


# ---- against torch: the seeded draws follow the memory order -------------------------------

def test_dropout_after_a_transposed_add_draws_torchs_mask():
    # Time-Series-Library's embedding: conv1d(x).transpose(1, 2) + position, then dropout
    torch = pytest.importorskip("torch")
    import cddp
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 16, 32)).astype(np.float32)
    b = rng.standard_normal((4, 32, 16)).astype(np.float32)
    masks = []
    for lib in (torch, cddp):
        lib.manual_seed(0)
        x = lib.from_numpy(a).transpose(1, 2) + lib.from_numpy(b)
        masks.append((lib.nn.functional.dropout(x, 0.3, training=True) == 0).numpy())
    np.testing.assert_array_equal(masks[0], masks[1])


def test_randn_like_of_a_permuted_tensor_draws_torchs_values():
    torch = pytest.importorskip("torch")
    import cddp
    got = []
    for lib in (torch, cddp):
        lib.manual_seed(3)
        t = lib.zeros(2, 3, 20).transpose(1, 2)
        got.append((lib.randn_like(t).numpy(), lib.rand_like(t).numpy()))
    np.testing.assert_array_equal(got[0][0], got[1][0])
    np.testing.assert_array_equal(got[0][1], got[1][1])


@pytest.mark.parametrize("case", range(6))
def test_strides_equal_torchs_on_mixed_layouts(case):
    torch = pytest.importorskip("torch")
    import cddp

    def build(lib):
        base = lib.arange(120.0).reshape(2, 3, 4, 5)
        x = [base.permute(0, 2, 3, 1), base.permute(3, 1, 0, 2)[:, :, :1],
             base[:, :, :, ::2], base.transpose(0, 3)][case % 4]
        other = [lib.ones(x.shape[-1]), lib.ones(x.shape), x.contiguous()][case % 3]
        return [(x + other).stride(), (other * x).stride(), x.sin().stride(),
                lib.zeros_like(x).stride(), x.clone().stride(), x.double().stride()]

    assert build(cddp) == build(torch)


def test_to_with_a_memory_format_aliases_as_torchs():
    torch = pytest.importorskip("torch")
    import cddp
    for lib in (torch, cddp):
        t = lib.zeros(3, 4).t()
        # a 2-D tensor's suggested format is contiguous_format whatever its strides: no copy
        assert t.to(memory_format=lib.contiguous_format) is t
        x = lib.zeros(2, 3, 4, 5)
        assert x.to(memory_format=lib.contiguous_format) is x
        assert x.to(memory_format=lib.channels_last) is not x


def test_a_leaf_gradient_is_laid_out_as_the_leaf(lib):
    x = lib.arange(12.0).reshape(4, 3).t().clone().detach().requires_grad_()
    assert x.stride() == (1, 3)
    (x * x).sum().backward()
    assert x.grad.stride() == (1, 3)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * np.arange(12.0).reshape(4, 3).T)
    (x * 3).sum().backward()                              # accumulates in place
    assert x.grad.stride() == (1, 3)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * np.arange(12.0).reshape(4, 3).T + 3)


def test_cat_of_channels_last_inputs_is_channels_last(lib):
    x = lib.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5).contiguous(memory_format=lib.channels_last)
    c = lib.cat([x, x], 1)
    assert c.is_contiguous(memory_format=lib.channels_last)
    np.testing.assert_array_equal(c.numpy(), np.concatenate([x.numpy()] * 2, 1))
    assert lib.cat([x, x.contiguous()], 1).is_contiguous()


_CL_OPS = {
    "conv2d": lambda F, x, T: F.conv2d(x, T.ones(6, 4, 3, 3, dtype=x.dtype) * 0.1, padding=1),
    "conv_transpose2d": lambda F, x, T: F.conv_transpose2d(x, T.ones(4, 2, 3, 3, dtype=x.dtype) * 0.1),
    "batch_norm": lambda F, x, T: F.batch_norm(x, None, None, training=True),
    "group_norm": lambda F, x, T: F.group_norm(x, 2),
    "max_pool2d": lambda F, x, T: F.max_pool2d(x, 2),
    "avg_pool2d": lambda F, x, T: F.avg_pool2d(x, 2),
    "adaptive_avg_pool2d": lambda F, x, T: F.adaptive_avg_pool2d(x, 3),
    "interpolate": lambda F, x, T: F.interpolate(x, scale_factor=2, mode="bilinear"),
    "pad": lambda F, x, T: F.pad(x, (1, 1, 1, 1), mode="reflect"),
    "prelu": lambda F, x, T: F.prelu(x, T.ones(4, dtype=x.dtype) * 0.25),
}


@pytest.mark.parametrize("op", sorted(_CL_OPS))
def test_channels_last_inputs_give_torchs_channels_last_results(op):
    # then a seeded dropout on the result draws torch's mask (labml's DDPM UNet: GroupNorm of
    # a permuted attention output, then Dropout)
    torch = pytest.importorskip("torch")
    import cddp
    a = np.random.default_rng(4).standard_normal((2, 4, 6, 6))
    got = []
    for lib in (torch, cddp):
        x = lib.tensor(a).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
        y = _CL_OPS[op](lib.nn.functional, x, lib)
        lib.manual_seed(0)
        got.append((y.stride(), y.detach().numpy(),
                    lib.nn.functional.dropout(y, 0.5).detach().numpy()))
    assert got[0][0] == got[1][0]
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(got[1][2] == 0, got[0][2] == 0)
