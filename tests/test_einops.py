"""einops on cddp tensors (cddp/_einops.py): every function against einops on NumPy arrays
(the oracle: the same patterns through einops' own NumPy backend), gradients through the
rearrangements, both import orders, and a patch-embedding model against torch."""
import subprocess
import sys

import numpy as np
import pytest

import cddp
from conftest import n, subprocess_env

einops = pytest.importorskip("einops")

REARRANGE = [
    ("b c h w -> b h w c", {}),
    ("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", {"p1": 2, "p2": 3}),
    ("b c h w -> (b c) (h w)", {}),
    ("b ... w -> w ... b", {}),
    ("b c h w -> b c 1 h w 1", {}),
    ("b c h w -> c (w b h)", {}),
    ("b (c1 c2) h w -> b c2 c1 h w", {"c1": 3}),
]


def data(shape=(2, 6, 4, 6), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("pattern,axes", REARRANGE)
def test_rearrange_matches_numpy_backend(pattern, axes):
    a = data()
    y = einops.rearrange(cddp.tensor(a), pattern, **axes)
    assert isinstance(y, cddp.Tensor)
    np.testing.assert_array_equal(n(y), einops.rearrange(a, pattern, **axes))


@pytest.mark.parametrize("op", ["min", "max", "sum", "mean", "prod"])
@pytest.mark.parametrize("pattern,axes", [("b c h w -> b c", {}),
                                          ("b c (h h2) (w w2) -> b c h w", {"h2": 2, "w2": 3}),
                                          ("b c h w -> c", {}), ("b c h w -> b () () c", {})])
def test_reduce_matches_numpy_backend(op, pattern, axes):
    a = data()
    y = einops.reduce(cddp.tensor(a), pattern, op, **axes)
    np.testing.assert_allclose(n(y), einops.reduce(a, pattern, op, **axes), rtol=2e-5,
                               atol=1e-6)


@pytest.mark.parametrize("op", ["any", "all"])
def test_boolean_reductions(op):
    a = data() > 0.5
    y = einops.reduce(cddp.tensor(a), "b c h w -> b w", op)
    np.testing.assert_array_equal(n(y), einops.reduce(a, "b c h w -> b w", op))


@pytest.mark.parametrize("pattern,axes", [("b c h w -> b c h w r", {"r": 2}),
                                          ("b c h w -> b (c r) h w", {"r": 3}),
                                          ("b c h w -> (r b) c (h s) w", {"r": 2, "s": 2}),
                                          ("h w -> b h w", {"b": 4})])
def test_repeat_matches_numpy_backend(pattern, axes):
    a = data() if pattern.startswith("b") else data((3, 5))
    y = einops.repeat(cddp.tensor(a), pattern, **axes)
    np.testing.assert_array_equal(n(y), einops.repeat(a, pattern, **axes))


def test_pack_unpack_einsum_parse_shape_asnumpy():
    a, b, c = data((2, 3, 5)), data((2, 5), 1), data((2, 4, 3, 5), 2)
    packed, ps = einops.pack([cddp.tensor(a), cddp.tensor(b), cddp.tensor(c)], "b * d")
    ref, ref_ps = einops.pack([a, b, c], "b * d")
    np.testing.assert_array_equal(n(packed), ref)
    assert ps == ref_ps
    for got, want in zip(einops.unpack(packed, ps, "b * d"), (a, b, c)):
        np.testing.assert_array_equal(n(got), want)
    x, w = data((4, 7)), data((7, 3), 3)
    y = einops.einsum(cddp.tensor(x), cddp.tensor(w), "n i, i o -> n o")
    np.testing.assert_allclose(n(y), x @ w, rtol=1e-5, atol=1e-6)
    assert einops.parse_shape(cddp.tensor(c), "b _ h w") == {"b": 2, "h": 3, "w": 5}
    np.testing.assert_array_equal(einops.asnumpy(cddp.tensor(a)), a)
    np.testing.assert_array_equal(einops.asnumpy(cddp.tensor(a, requires_grad=True)), a)


def test_gradients_flow_through_the_rearrangements():
    a = data()
    w = data((2, 4, 36), 5)                    # the rearranged shape
    pattern = "b c (h p1) (w p2) -> b (h w) (p1 p2 c)"
    x = cddp.tensor(a, requires_grad=True)
    (einops.rearrange(x, pattern, p1=2, p2=3) * cddp.tensor(w)).sum().backward()
    # d/dx sum(R(x) * w) = R^-1(w): the inverse pattern, through the NumPy backend
    want = einops.rearrange(w, "b (h w) (p1 p2 c) -> b c (h p1) (w p2)", p1=2, p2=3, h=2)
    np.testing.assert_array_equal(n(x.grad), want)
    x.grad = None
    einops.reduce(x, "b c h w -> b c", "mean").sum().backward()
    np.testing.assert_allclose(n(x.grad), np.full(a.shape, 1 / 24, np.float32), rtol=1e-6)
    p = cddp.nn.Parameter(cddp.tensor(data((3, 5))))
    einops.repeat(p, "h w -> h w r", r=4).sum().backward()
    np.testing.assert_array_equal(n(p.grad), np.full((3, 5), 4, np.float32))


IMPORT_ORDER = """
import sys
{first}
{second}
x = cddp.arange(6.).reshape(2, 3)
assert einops.rearrange(x, "a b -> b a").tolist() == [[0., 3.], [1., 4.], [2., 5.]]
print("ok")
"""


@pytest.mark.parametrize("first,second", [("import einops", "import cddp"),
                                          ("import cddp", "import einops"),
                                          ("import cddp", "from einops import rearrange; import einops")])
def test_either_import_order(first, second):
    code = IMPORT_ORDER.format(first=first, second=second)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=subprocess_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_importing_cddp_does_not_import_einops():
    code = "import sys, cddp; print('einops' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=subprocess_env())
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


def patch_embed(mod, einops_mod):
    """A ViT patch embedding written as public models write it (einops in forward)."""
    nn = mod.nn

    class PatchEmbed(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(2 * 2 * 3, 8)
            self.cls = nn.Parameter(mod.zeros(1, 1, 8))

        def forward(self, img):
            x = einops_mod.rearrange(img, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=2, p2=2)
            x = self.proj(x)
            cls = einops_mod.repeat(self.cls, "1 1 d -> b 1 d", b=x.shape[0])
            x = mod.cat([cls, x], dim=1)
            return einops_mod.reduce(x, "b n d -> b d", "mean")

    return PatchEmbed()


def test_patch_embedding_model_matches_torch():
    torch = pytest.importorskip("torch")
    img = data((2, 3, 4, 6))
    m_t, m_c = patch_embed(torch, einops), patch_embed(cddp, einops)
    with torch.no_grad():
        m_t.cls.normal_()
    m_c.load_state_dict({k: cddp.tensor(v.detach().numpy()) for k, v in m_t.state_dict().items()})
    x_t = torch.tensor(img, requires_grad=True)
    x_c = cddp.tensor(img, requires_grad=True)
    out_t, out_c = m_t(x_t), m_c(x_c)
    np.testing.assert_allclose(n(out_c), out_t.detach().numpy(), rtol=1e-5, atol=1e-6)
    (out_t ** 2).sum().backward()
    (out_c ** 2).sum().backward()
    np.testing.assert_allclose(n(x_c.grad), x_t.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(n(m_c.cls.grad), m_t.cls.grad.numpy(), rtol=1e-4, atol=1e-6)


# ---- einops.layers.torch: Rearrange / Reduce / EinMix as cddp modules ------------------------

LAYERS_WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None                 # as on a machine without torch
import numpy as np
import cddp
from einops import rearrange, reduce
from einops.layers.torch import Rearrange, Reduce, EinMix
x = cddp.tensor(np.arange(24.0, dtype=np.float32).reshape(2, 3, 4))
model = cddp.nn.Sequential(EinMix("b t c -> b t d", weight_shape="c d", bias_shape="d", c=4, d=5),
                           Reduce("b t d -> b d", "max"), Rearrange("b d -> d b"))
out = model(x)
want = reduce(cddp.einsum("btc,cd->btd", x, model[0].weight) + model[0].bias, "b t d -> b d",
              "max").t()
assert isinstance(model[0], cddp.nn.Module) and out.shape == (5, 2)
assert float((out - want).abs().max()) == 0
out.sum().backward()
assert model[0].weight.grad.shape == (4, 5)
print("ok", type(model[1]).__module__)
"""


def test_layers_without_torch():
    r = subprocess.run([sys.executable, "-c", LAYERS_WITHOUT_TORCH], env=subprocess_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["ok", "cddp._einops_layers"]


def test_torch_layers_become_cddp_modules():
    torch = pytest.importorskip("torch")
    from einops.layers.torch import EinMix, Rearrange, Reduce
    mix = EinMix("b (h w) c -> b h w d", weight_shape="c d", bias_shape="d", c=3, d=4, h=2)
    seq = cddp.nn.Sequential(Rearrange("b c h w -> b (h w) c"), mix)

    class Net(cddp.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = seq
            self.pool = Reduce("b h w d -> b d", "mean")        # through __setattr__
    net = Net()
    net.add_module("head", Rearrange("b d -> d b"))
    assert all(isinstance(m, cddp.nn.Module) for m in net.modules())
    assert [k for k, _ in net.named_parameters()] == ["body.1.weight", "body.1.bias"]
    x = np.random.default_rng(0).standard_normal((2, 3, 2, 2)).astype(np.float32)
    ours = net.head(net.pool(seq(cddp.tensor(x))))
    theirs = Rearrange("b d -> d b")(Reduce("b h w d -> b d", "mean")(
        mix(Rearrange("b c h w -> b (h w) c")(torch.tensor(x)))))
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6,
                               atol=1e-6)
