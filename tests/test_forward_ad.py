"""cddp.autograd.forward_ad (torch.autograd.forward_ad): make_dual / unpack_dual give
Jacobian-vector products. Checked against closed forms, finite differences (float64) and
torch's own forward AD."""
import numpy as np
import pytest

import cddp
import cddp.autograd.forward_ad as fwAD
import cddp.nn as nn
import cddp.nn.functional as F


def n(t):
    return t.detach().numpy()


def _fd_jvp(f, x, t, eps=1e-6):
    return (n(f(x + eps * t)) - n(f(x - eps * t))) / (2 * eps)


FUNCS = {
    "poly": lambda x: x ** 3 - 2 * x * x.sin(),
    "softmax": lambda x: F.softmax(x, dim=-1) * x.exp(),
    "log_softmax": lambda x: F.log_softmax(x.tanh(), dim=1).sum(0),
    "matmul": lambda x: (x @ x.t()).relu() + x.mean(),
    "norm": lambda x: F.layer_norm(x, (x.shape[-1],)) * x.sigmoid(),
    "reduce": lambda x: x.logsumexp(1) / x.pow(2).sum(),
}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_jvp_matches_finite_differences(name):
    f = FUNCS[name]
    cddp.manual_seed(0)
    x = cddp.randn(4, 5, dtype=cddp.float64)
    t = cddp.randn(4, 5, dtype=cddp.float64)
    with fwAD.dual_level():
        y = f(fwAD.make_dual(x, t))
        primal, tangent = fwAD.unpack_dual(y)
    np.testing.assert_allclose(n(primal), n(f(x)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(n(tangent), _fd_jvp(f, x, t), rtol=1e-6, atol=1e-8)
    assert not primal.requires_grad


def test_two_duals_sum_their_products():
    x, tx = cddp.randn(3, dtype=cddp.float64), cddp.randn(3, dtype=cddp.float64)
    y, ty = cddp.randn(3, dtype=cddp.float64), cddp.randn(3, dtype=cddp.float64)
    other = cddp.randn(3, dtype=cddp.float64)
    with fwAD.dual_level():
        out = fwAD.make_dual(x, tx) * fwAD.make_dual(y, ty) + other
        jvp = fwAD.unpack_dual(out).tangent
    np.testing.assert_allclose(n(jvp), n(tx * y + x * ty), rtol=1e-12)


def test_duals_plain_tensors_and_closing_the_level():
    x, t = cddp.randn(3), cddp.randn(3)
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t)
        got = fwAD.unpack_dual(d)
        assert got.tangent is t and got.primal.shape == x.shape
        assert fwAD.unpack_dual(cddp.ones(3)).tangent is None
        assert fwAD.unpack_dual(cddp.ones(3) * 2).tangent is None
        out = d * 2
        assert isinstance(fwAD.unpack_dual(out), fwAD.UnpackedDualTensor)
    assert fwAD.unpack_dual(out).tangent is None          # after the level: no tangent
    assert fwAD.unpack_dual(d).tangent is None


def test_module_parameters_as_duals():
    # torch's forward-mode AD tutorial: a Linear's parameters swapped for duals
    model = nn.Linear(5, 4)
    inp = cddp.randn(16, 5)
    params = dict(model.named_parameters())
    tangents = {k: cddp.rand_like(p) for k, p in params.items()}
    with fwAD.dual_level():
        for k, p in params.items():
            delattr(model, k)
            setattr(model, k, fwAD.make_dual(p, tangents[k]))
        jvp = fwAD.unpack_dual(model(inp)).tangent
    want = inp @ tangents["weight"].t() + tangents["bias"]
    np.testing.assert_allclose(n(jvp), n(want), rtol=1e-5, atol=1e-6)


class Exp(cddp.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.exp()
        ctx.result = result
        return result

    @staticmethod
    def jvp(ctx, g):
        out = g * ctx.result
        del ctx.result
        return out


def test_custom_function_jvp_is_used():
    x = cddp.randn(4, 4, dtype=cddp.float64, requires_grad=True)
    t = cddp.randn(4, 4, dtype=cddp.float64)
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t)
        direct = fwAD.unpack_dual(Exp.apply(d)).tangent
        chained = fwAD.unpack_dual(Exp.apply(d * 2).sin()).tangent
    e2 = (2 * x).exp()
    np.testing.assert_allclose(n(direct), n(t * x.exp()), rtol=1e-12)
    np.testing.assert_allclose(n(chained), n(e2.cos() * e2 * 2 * t), rtol=1e-12)


def test_errors_as_torch():
    with pytest.raises(RuntimeError, match="no level exists"):
        fwAD.make_dual(cddp.randn(2), cddp.randn(2))
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="different size"):
            fwAD.make_dual(cddp.randn(2), cddp.randn(3))
        with pytest.raises(ValueError, match="floating point"):
            fwAD.make_dual(cddp.arange(2), cddp.arange(2))
        with pytest.raises(RuntimeError, match="Nested forward mode AD"):
            fwAD.enter_dual_level()
    assert fwAD.unpack_dual(cddp.ones(2)).tangent is None


def test_decorator_and_explicit_levels():
    @fwAD.dual_level()
    def jvp_of_square(x, t):
        return fwAD.unpack_dual(fwAD.make_dual(x, t) ** 2).tangent

    x, t = cddp.randn(3), cddp.randn(3)
    np.testing.assert_allclose(n(jvp_of_square(x, t)), n(2 * x * t), rtol=1e-6)
    level = fwAD.enter_dual_level()
    try:
        out = fwAD.make_dual(x, t).exp()
        np.testing.assert_allclose(n(fwAD.unpack_dual(out, level=level).tangent),
                                   n(x.exp() * t), rtol=1e-6)
    finally:
        fwAD.exit_dual_level(level=level)


def test_agrees_with_torch_forward_ad():
    torch = pytest.importorskip("torch")
    tfw = torch.autograd.forward_ad
    rng = np.random.default_rng(3)
    w1, w2 = rng.standard_normal((8, 6)), rng.standard_normal((3, 8))
    x, t = rng.standard_normal((5, 6)), rng.standard_normal((5, 6))

    def run(lib, fw):
        with fw.dual_level():
            d = fw.make_dual(lib.tensor(x), lib.tensor(t))
            h = lib.tanh(d @ lib.tensor(w1).T)
            y = lib.nn.functional.log_softmax(h @ lib.tensor(w2).T, dim=1)
            return fw.unpack_dual(y).tangent.detach().numpy()

    np.testing.assert_allclose(run(cddp, fwAD), run(torch, tfw), rtol=1e-10, atol=1e-12)
