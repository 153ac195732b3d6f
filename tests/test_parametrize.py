"""torch.nn.utils.parametrize and parametrizations (weight_norm, spectral_norm, orthogonal).

Oracles: NumPy (a symmetric parametrization and its gradient written by hand, g * v / ||v||,
the top singular value from np.linalg.svd, W^T W = I), and torch when installed: the same
seeds give the same u/v buffers, state dict keys equal, torch's state dicts load, and values,
gradients and a few SGD steps agree.
"""
import numpy as np
import pytest

import cddp
from cddp import nn
from cddp.nn.utils import parametrize, parametrizations as P
from conftest import n, t


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(0, 1)

    def right_inverse(self, A):
        return A.triu()


class Scale(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, X):
        return X * self.c

    def right_inverse(self, A):
        return A / self.c


class Split(nn.Module):
    """Two originals: W = a + b, right_inverse splits evenly."""

    def forward(self, a, b):
        return a + b

    def right_inverse(self, W):
        return W / 2, W / 2


def _linear(i, o, dtype=np.float64):
    m = nn.Linear(i, o)
    return m.double() if dtype == np.float64 else m


def test_register_symmetric_value_grad_keys():
    m = _linear(3, 3)
    W0 = n(m.weight)
    parametrize.register_parametrization(m, "weight", Symmetric())
    assert type(m).__name__ == "ParametrizedLinear"
    assert parametrize.type_before_parametrizations(m) is nn.Linear
    assert parametrize.is_parametrized(m) and parametrize.is_parametrized(m, "weight")
    assert not parametrize.is_parametrized(m, "bias")
    assert list(m.state_dict()) == ["bias", "parametrizations.weight.original"]
    # right_inverse ran: original holds triu(W0)
    np.testing.assert_array_equal(n(m.parametrizations.weight.original), np.triu(W0))
    Wn = np.triu(W0) + np.triu(W0, 1).T
    np.testing.assert_allclose(n(m.weight), Wn)
    x = np.random.default_rng(0).standard_normal((4, 3))
    C = np.random.default_rng(1).standard_normal((4, 3))
    (m(t(x)) * t(C)).sum().backward()
    G = C.T @ x                                  # dL/dW
    want = np.triu(G) + np.triu(G.T, 1)          # through W = triu(A) + triu(A, 1)^T
    np.testing.assert_allclose(n(m.parametrizations.weight.original.grad), want, atol=1e-12)
    # the original Linear class is untouched
    assert "weight" not in nn.Linear.__dict__


def test_assign_runs_right_inverse_and_chain():
    m = _linear(3, 3)
    parametrize.register_parametrization(m, "weight", Symmetric())
    parametrize.register_parametrization(m, "weight", Scale(2.0))
    plist = m.parametrizations.weight
    assert isinstance(plist, parametrize.ParametrizationList) and len(plist) == 2
    S = np.array([[1.0, 2, 3], [2, 4, 5], [3, 5, 6]])
    orig = plist.original
    m.weight = t(S)
    assert plist.original is orig           # assigned in place: same Parameter
    np.testing.assert_allclose(n(orig), np.triu(S) / 2)
    np.testing.assert_allclose(n(m.weight), S)


def test_sequence_right_inverse_original0_1_and_remove():
    m = _linear(2, 3)
    W0 = n(m.weight)
    parametrize.register_parametrization(m, "weight", Split())
    keys = list(m.state_dict())
    assert "parametrizations.weight.original0" in keys and \
        "parametrizations.weight.original1" in keys
    np.testing.assert_allclose(n(m.weight), W0)
    with pytest.raises(ValueError, match="sequence of tensors"):
        parametrize.remove_parametrizations(m, "weight", leave_parametrized=False)
    parametrize.remove_parametrizations(m, "weight")
    assert type(m) is nn.Linear and not hasattr(m, "parametrizations")
    assert isinstance(m.weight, nn.Parameter) and m.weight.grad_fn is None
    np.testing.assert_allclose(n(m.weight), W0)


def test_unsafe_and_checks():
    class Grow(nn.Module):
        def forward(self, X):
            return cddp.cat([X, X])

    m = _linear(2, 3)
    with pytest.raises(ValueError, match="may not change the shape"):
        parametrize.register_parametrization(m, "weight", Grow())
    assert type(m) is nn.Linear and "weight" in m._parameters   # left intact
    parametrize.register_parametrization(m, "weight", Grow(), unsafe=True)
    assert tuple(m.weight.shape) == (6, 2)
    with pytest.raises(ValueError, match="does not have a parameter"):
        parametrize.register_parametrization(m, "nope", Grow())


def test_remove_leave_parametrized_false_and_true():
    m = _linear(3, 3)
    W0 = n(m.weight)
    parametrize.register_parametrization(m, "weight", Scale(3.0))
    p = m.parametrizations.weight.original
    parametrize.remove_parametrizations(m, "weight", leave_parametrized=False)
    assert m.weight is p
    np.testing.assert_allclose(n(m.weight), W0 / 3.0)
    parametrize.register_parametrization(m, "weight", Scale(3.0))
    parametrize.remove_parametrizations(m, "weight")
    np.testing.assert_allclose(n(m.weight), W0 / 3.0)


def test_cached_evaluates_once():
    calls = []

    class Count(nn.Module):
        def forward(self, X):
            calls.append(1)
            return X * 1.0

    m = _linear(2, 2)
    parametrize.register_parametrization(m, "weight", Count())
    calls.clear()
    with parametrize.cached():
        a = m.weight
        b = m.weight
    assert a is b and len(calls) == 1
    m.weight  # noqa: B018  (outside the context: evaluated again)
    assert len(calls) == 2


def test_deepcopy_and_pickle_refused():
    import copy
    import pickle
    m = _linear(2, 2)
    parametrize.register_parametrization(m, "weight", Scale(2.0))
    m2 = copy.deepcopy(m)
    np.testing.assert_allclose(n(m2.weight), n(m.weight))
    assert m2.parametrizations.weight.original is not m.parametrizations.weight.original
    with pytest.raises(RuntimeError, match="only supported through state_dict"):
        pickle.dumps(m)


# ---- parametrizations, torch-free ------------------------------------------------------------

def test_weight_norm_numpy():
    m = _linear(4, 3)
    W0 = n(m.weight)
    P.weight_norm(m)
    g = n(m.parametrizations.weight.original0)
    v = n(m.parametrizations.weight.original1)
    np.testing.assert_allclose(g, np.linalg.norm(W0, axis=1, keepdims=True))
    np.testing.assert_allclose(v, W0)
    with cddp.no_grad():
        m.parametrizations.weight.original0.mul_(2.0)
    np.testing.assert_allclose(n(m.weight), 2 * W0, rtol=1e-12)
    # dim=None: one norm for the whole tensor
    m2 = _linear(4, 3)
    P.weight_norm(m2, dim=None)
    assert m2.parametrizations.weight.original0.dim() == 0
    np.testing.assert_allclose(float(m2.parametrizations.weight.original0),
                               np.linalg.norm(n(m2.weight)))


def test_weight_norm_loads_hook_based_state_dict():
    a = _linear(4, 3)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        nn.utils.weight_norm(a)
    sd = a.state_dict()
    assert set(sd) == {"bias", "weight_g", "weight_v"}
    b = _linear(4, 3)
    P.weight_norm(b)
    b.load_state_dict(sd)
    x = t(np.random.default_rng(0).standard_normal((2, 4)))
    np.testing.assert_allclose(n(b(x)), n(a(x)), rtol=1e-12)


def test_spectral_norm_numpy():
    cddp.manual_seed(0)
    m = nn.Linear(6, 5).double()
    W = n(m.weight)
    P.spectral_norm(m, n_power_iterations=3)
    assert list(m.state_dict()) == ["bias", "parametrizations.weight.original",
                                    "parametrizations.weight.0._u",
                                    "parametrizations.weight.0._v"]
    for _ in range(20):
        Wn = n(m.weight)
    sigma = np.linalg.svd(W, compute_uv=False)[0]
    np.testing.assert_allclose(Wn, W / sigma, rtol=1e-6)
    # eval: u, v are read, not updated
    m.eval()
    u = n(m.parametrizations.weight[0]._u)
    m.weight  # noqa: B018
    np.testing.assert_array_equal(n(m.parametrizations.weight[0]._u), u)


def test_orthogonal_numpy():
    for shape in [(4, 4), (5, 3), (3, 5)]:
        cddp.manual_seed(1)
        m = nn.Linear(shape[1], shape[0]).double()
        P.orthogonal(m)
        W = n(m.weight)
        k = min(shape)
        G = W.T @ W if shape[0] >= shape[1] else W @ W.T
        np.testing.assert_allclose(G, np.eye(k), atol=1e-12)
        opt = cddp.optim.SGD(m.parameters(), lr=0.1)
        x = t(np.random.default_rng(0).standard_normal((3, shape[1])))
        for _ in range(3):
            opt.zero_grad()
            (m(x) ** 2).sum().backward()
            opt.step()
        W = n(m.weight)
        G = W.T @ W if shape[0] >= shape[1] else W @ W.T
        np.testing.assert_allclose(G, np.eye(k), atol=1e-12)


def test_orthogonal_maps_gradient_fd():
    """The composed matrix_exp / cayley / householder maps have the right gradient."""
    from cddp.nn.utils.parametrizations import _Orthogonal, _OrthMaps
    rng = np.random.default_rng(2)
    for omap, shape in [("matrix_exp", (4, 4)), ("cayley", (4, 3)), ("householder", (5, 3))]:
        X = rng.standard_normal(shape)
        if omap == "householder":
            np.fill_diagonal(X, -1.0)
        C = rng.standard_normal(shape)
        orth = _Orthogonal(t(X), getattr(_OrthMaps, omap), use_trivialization=False)

        def f(Xa):
            return float((n(orth(t(Xa))) * C).sum())

        xt = t(X, requires_grad=True)
        (orth(xt) * t(C)).sum().backward()
        g = n(xt.grad)
        eps = 1e-6
        num = np.zeros_like(X)
        for idx in np.ndindex(*X.shape):
            if omap == "householder" and idx[0] == idx[1]:
                continue     # the sign diagonal is not differentiated (as torch)
            Xp, Xm = X.copy(), X.copy()
            Xp[idx] += eps
            Xm[idx] -= eps
            num[idx] = (f(Xp) - f(Xm)) / (2 * eps)
        np.testing.assert_allclose(g, num, atol=1e-7)
        Q = n(orth(t(X)))
        np.testing.assert_allclose(Q.T @ Q, np.eye(shape[1]), atol=1e-12)


def test_orthogonal_errors():
    with pytest.raises(ValueError, match="orthogonal_map has to be one of"):
        P.orthogonal(nn.Linear(3, 3), orthogonal_map="qr")
    with pytest.raises(ValueError, match="Expected a matrix"):
        P.orthogonal(nn.Linear(3, 3), name="bias")


# ---- torch as the oracle ---------------------------------------------------------------------

def _pair(torch, make_t, make_c, seed=0):
    torch.manual_seed(seed)
    a = make_t()
    cddp.manual_seed(seed)
    b = make_c()
    return a, b


def _sd_to_cddp(sd):
    return {k: cddp.from_numpy(v.detach().numpy().copy()) for k, v in sd.items()}


CASES = [
    ("weight_norm", {}, "linear"), ("weight_norm", {"dim": 1}, "conv"),
    ("weight_norm", {"dim": None}, "linear"),
    ("spectral_norm", {}, "linear"), ("spectral_norm", {"n_power_iterations": 3}, "conv"),
    ("spectral_norm", {}, "convT"),
    ("orthogonal", {}, "linear"), ("orthogonal", {}, "square"),
    ("orthogonal", {"orthogonal_map": "cayley"}, "square"),
]


@pytest.mark.parametrize("fn,kw,kind", CASES)
def test_against_torch(fn, kw, kind):
    torch = pytest.importorskip("torch")

    def make(lib):
        return {"linear": lambda: lib.nn.Linear(4, 6),
                "square": lambda: lib.nn.Linear(5, 5),
                "conv": lambda: lib.nn.Conv2d(2, 3, 3),
                "convT": lambda: lib.nn.ConvTranspose2d(2, 3, 3)}[kind]().double()

    def wrap(lib, m):
        mod = lib.nn.utils.parametrizations if lib is torch else P
        getattr(mod, fn)(m, **kw)
        return m

    a, b = _pair(torch, lambda: wrap(torch, make(torch)), lambda: wrap(cddp, make(cddp)))
    assert list(a.state_dict()) == list(b.state_dict())
    assert type(a).__name__ == type(b).__name__
    for k, v in a.state_dict().items():    # same seeds: same u, v, base, originals
        np.testing.assert_allclose(n(b.state_dict()[k]), v.numpy(), atol=1e-10, err_msg=k)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4) if kind == "linear" else
                            (3, 5) if kind == "square" else (2, 2, 6, 6))
    opt_a = torch.optim.SGD(a.parameters(), lr=0.05)
    opt_b = cddp.optim.SGD(b.parameters(), lr=0.05)
    for _ in range(3):
        for m, opt, lib in ((a, opt_a, torch), (b, opt_b, cddp)):
            opt.zero_grad()
            (m(lib.from_numpy(x)) ** 2).sum().backward()
            opt.step()
    np.testing.assert_allclose(n(b.weight), a.weight.detach().numpy(), atol=1e-9)
    for k, v in a.state_dict().items():
        np.testing.assert_allclose(n(b.state_dict()[k]), v.numpy(), atol=1e-9, err_msg=k)
    # torch's state dict loads into a fresh cddp model
    c = wrap(cddp, make(cddp))
    c.load_state_dict(_sd_to_cddp(a.state_dict()))
    a.eval()
    c.eval()
    np.testing.assert_allclose(n(c(cddp.from_numpy(x))), a(torch.from_numpy(x)).detach().numpy(),
                               atol=1e-9)


def test_remove_against_torch():
    torch = pytest.importorskip("torch")
    a, b = _pair(torch, lambda: torch.nn.Linear(3, 4), lambda: nn.Linear(3, 4))
    torch.nn.utils.parametrizations.spectral_norm(a)
    P.spectral_norm(b)
    torch.nn.utils.parametrize.remove_parametrizations(a, "weight")
    parametrize.remove_parametrizations(b, "weight")
    assert list(a.state_dict()) == list(b.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(n(b.weight), a.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
