"""cddp.func's transforms: grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian, vmap,
stack_module_state, functionalize.

Oracles: closed forms, central finite differences of the same function in NumPy, per-sample
loops of plain backward(), manual stacking; torch.func (when importable) for the result
structures, values and error messages of the same calls. Nesting is checked where it can go
silently wrong: grad(grad(f)), a grad the caller differentiates again (a closed-over
parameter, MAML), vmap(grad(f)).
"""
import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from cddp.func import (functional_call, functionalize, grad, grad_and_value, hessian, jacfwd,
                       jacrev, jvp, stack_module_state, vjp, vmap)
from conftest import fd_jacobian, n, t

RNG = np.random.default_rng(11)
XS = RNG.standard_normal(3)
YS = RNG.standard_normal((2, 2))


def f_np(x, y):
    return np.sin(x) * (y ** 2).sum(), np.tanh(x[:2, None] * y)


def f_cddp(x, y):
    return x.sin() * (y ** 2).sum(), (x[:2].unsqueeze(1) * y).tanh()


def assert_tree_close(got, want, rtol=1e-7, atol=1e-10):
    """Same pytree structure (container types and dict keys) and close leaves (got's may be
    cddp tensors, want's NumPy arrays)."""
    if isinstance(want, np.ndarray):
        got = got if isinstance(got, np.ndarray) else n(got)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        return
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            assert_tree_close(got[k], want[k], rtol, atol)
    else:
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_tree_close(a, b, rtol, atol)


# ---------------------------------------------------------------- grad / grad_and_value

def test_grad_of_sin_sum_is_cos_and_writes_no_grad():
    x = t(XS)
    g = grad(lambda a: a.sin().sum())(x)
    np.testing.assert_allclose(n(g), np.cos(XS), rtol=1e-12)
    assert not g.requires_grad and g.grad_fn is None
    assert x.grad is None and not x.requires_grad


def test_grad_argnums_int_tuple_and_negative():
    def f(x, y):
        return (x * y ** 2).sum()
    x, y = t(XS), t(XS[::-1].copy())
    gy = grad(f, argnums=1)(x, y)
    np.testing.assert_allclose(n(gy), 2 * XS * XS[::-1], rtol=1e-12)
    both = grad(f, argnums=(0, 1))(x, y)
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_allclose(n(both[0]), XS[::-1] ** 2, rtol=1e-12)
    np.testing.assert_allclose(n(both[1]), n(gy), rtol=1e-12)
    np.testing.assert_allclose(n(grad(f, argnums=-1)(x, y)), n(gy), rtol=1e-12)
    # the non-differentiated argument is passed as it is, keyword arguments too
    g = grad(lambda a, b, *, scale: (a * b).sum() * scale)(x, y, scale=3.0)
    np.testing.assert_allclose(n(g), 3 * XS[::-1], rtol=1e-12)


def test_grad_pytree_argument_keeps_its_structure():
    def f(p):
        return (p["w"] * p["pair"][0]).sum() + (p["pair"][1] ** 3).sum() + p["list"][0].sum()
    p = {"w": t(XS), "pair": (t(XS + 1), t(YS)), "list": [t(YS)]}
    g = grad(f)(p)
    want = {"w": XS + 1, "pair": (XS, 3 * YS ** 2), "list": [np.ones((2, 2))]}
    assert_tree_close(g, want, rtol=1e-12)


def test_grad_and_value_and_has_aux_structures():
    x = t(XS)

    def f(a):
        return (a ** 2).sum(), {"double": a * 2, "pair": (a.sum(),)}
    g, aux = grad(f, has_aux=True)(x)
    np.testing.assert_allclose(n(g), 2 * XS, rtol=1e-12)
    assert list(aux) == ["double", "pair"] and isinstance(aux["pair"], tuple)
    assert not aux["double"].requires_grad
    np.testing.assert_allclose(n(aux["double"]), 2 * XS)
    g2, (value, aux2) = grad_and_value(f, has_aux=True)(x)
    np.testing.assert_allclose(n(g2), 2 * XS, rtol=1e-12)
    np.testing.assert_allclose(n(value), (XS ** 2).sum(), rtol=1e-12)
    assert not value.requires_grad
    np.testing.assert_allclose(n(aux2["pair"][0]), XS.sum(), rtol=1e-12)
    g3, v3 = grad_and_value(lambda a: a.exp().sum())(x)
    np.testing.assert_allclose(n(g3), np.exp(XS), rtol=1e-12)
    np.testing.assert_allclose(n(v3), np.exp(XS).sum(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="Expected tensors, got unsupported type <class "
                       "'int'>"):
        grad(lambda a: (a.sum(), 7), has_aux=True)(x)


def test_grad_of_a_constant_or_the_input_itself():
    x, s = t(XS), t(2.5)
    np.testing.assert_array_equal(n(grad(lambda a: (a * 0).sum() + 1)(x)), np.zeros(3))
    np.testing.assert_array_equal(n(grad(lambda a, b: b.sum(), argnums=0)(x, x)), np.zeros(3))
    assert float(grad(lambda a: a)(s)) == 1.0


@pytest.mark.parametrize("call, message", [
    (lambda x: grad(lambda a: a * 2)(x), "Expected f(*args) to return a scalar Tensor, got "
     "tensor with 1 dims"),
    (lambda x: grad(lambda a: a.sum(0, keepdim=True))(x), "got tensor with 1 dims"),
    (lambda x: grad(lambda a: 3.0)(x), "Expected f(*args) to return a Tensor, got <class "
     "'float'>"),
    (lambda x: grad(lambda a: a.sum(), has_aux=True)(x), "output of function f should be a "
     "tuple: (output, aux) if has_aux is True"),
    (lambda x: grad(lambda a: a.sum(), argnums=1)(x), "Got argnum=1, but only 1 positional "
     "inputs"),
    (lambda x: grad(lambda a: a.sum(), argnums=(0, 0))(x), "argnums elements must be unique"),
    (lambda x: grad(lambda a: a.sum(), argnums=())(x), "argnums must be non-empty"),
    (lambda x: grad(lambda a: a.sum(), argnums=[0])(x), "argnums must be int or Tuple"),
])
def test_grad_errors(call, message):
    with pytest.raises(RuntimeError) as e:
        call(t(XS))
    assert message in str(e.value)


def test_grad_non_tensor_argument_is_refused():
    with pytest.raises(ValueError, match="Thing passed to transform API must be Tensor"):
        grad(lambda a: a * 2)(3.0)


def test_grad_of_grad_is_the_second_derivative():
    x = t(XS)
    second = grad(lambda a: grad(lambda b: (b ** 3).sum())(a).sum())(x)
    np.testing.assert_allclose(n(second), 6 * XS, rtol=1e-12)
    s = t(0.7)
    assert float(grad(grad(lambda a: a.sin()))(s)) == pytest.approx(-np.sin(0.7), rel=1e-12)
    assert float(grad(grad(grad(lambda a: a ** 4)))(s)) == pytest.approx(24 * 0.7, rel=1e-12)
    assert x.grad is None


def test_nested_grad_keeps_the_two_variables_apart():
    # d/dx [ d/dy (x*y) at y=x ] = d/dx x = 1, not 2 (perturbation confusion)
    x = t(1.5)
    assert float(grad(lambda a: grad(lambda b: a * b)(a))(x)) == pytest.approx(1.0)
    # d/dx [ x * d/dy (x*y^2) at y=x ] = d/dx 2x^3 = 6x^2
    out = grad(lambda a: a * grad(lambda b: a * b ** 2)(a))(x)
    assert float(out) == pytest.approx(6 * 1.5 ** 2, rel=1e-12)


def test_grad_of_closure_stays_differentiable_in_the_closed_over_parameter():
    w = t(XS[::-1].copy(), requires_grad=True)
    x = t(XS)
    g = grad(lambda a: (a * w).sum() * a.sum())(x)       # w * sum(a) + (a.w)
    assert g.requires_grad
    np.testing.assert_allclose(n(g), XS[::-1] * XS.sum() + XS @ XS[::-1], rtol=1e-12)
    g.sum().backward()                                   # d/dw: sum(a) + 3 a
    np.testing.assert_allclose(n(w.grad), XS.sum() + 3 * XS, rtol=1e-12)
    assert x.grad is None


def test_maml_meta_gradient_through_an_inner_grad():
    a = np.array([0.5, 1.0, 2.0])
    lr = 0.1
    p = t([1.0, -2.0, 0.5], requires_grad=True)

    def loss(q):
        return (t(a) * q ** 2).sum()
    adapted = p - lr * grad(loss)(p)
    loss(adapted).backward()
    want = 2 * a * n(p) * (1 - 2 * a * lr) ** 2
    np.testing.assert_allclose(n(p.grad), want, rtol=1e-12)


def test_grad_under_no_grad_returns_constants():
    x = t(XS, requires_grad=True)
    with cddp.no_grad():
        g = grad(lambda a: (a ** 2).sum())(x)
    assert not g.requires_grad
    np.testing.assert_allclose(n(g), 2 * XS, rtol=1e-12)


def _mlp():
    cddp.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()


def test_grad_wrt_parameter_dict_matches_backward_and_leaves_grad_none():
    model = _mlp()
    x = t(RNG.standard_normal((5, 4)))
    y = cddp.tensor([0, 2, 1, 1, 0])
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p):
        return F.cross_entropy(functional_call(model, p, (x,)), y)
    g = grad(loss)(params)
    assert all(p.grad is None for p in model.parameters())
    F.cross_entropy(model(x), y).backward()
    assert list(g) == [k for k, _ in model.named_parameters()]
    for k, p in model.named_parameters():
        np.testing.assert_allclose(n(g[k]), n(p.grad), rtol=1e-10, atol=1e-14)


def test_per_sample_gradients_equal_a_loop_of_backward():
    model = _mlp()
    xs = t(RNG.standard_normal((4, 4)))
    ys = cddp.tensor([2, 0, 1, 2])
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, x, y):
        return F.cross_entropy(functional_call(model, p, (x.unsqueeze(0),)), y.unsqueeze(0))
    per = vmap(grad(loss), in_dims=(None, 0, 0))(params, xs, ys)
    for i in range(4):
        model.zero_grad()
        F.cross_entropy(model(xs[i:i + 1]), ys[i:i + 1]).backward()
        for k, p in model.named_parameters():
            assert tuple(per[k].shape) == (4,) + tuple(p.shape)
            np.testing.assert_allclose(n(per[k][i]), n(p.grad), rtol=1e-10, atol=1e-14)


# ---------------------------------------------------------------- vjp / jvp

def test_vjp_matches_the_transposed_jacobian_and_keeps_pytree_structure():
    x, y = t(XS), t(YS)
    out, vjp_fn = vjp(f_cddp, x, y)
    np.testing.assert_allclose(n(out[0]), f_np(XS, YS)[0], rtol=1e-12)
    assert not out[0].requires_grad
    v0, v1 = RNG.standard_normal(3), RNG.standard_normal((2, 2))
    gx, gy = vjp_fn((t(v0), t(v1)))
    jac = [[fd_jacobian(f_np, [XS.copy(), YS.copy()], j, i) for j in range(2)] for i in range(2)]
    np.testing.assert_allclose(n(gx), v0 @ jac[0][0] + np.tensordot(v1, jac[1][0], 2),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(n(gy), np.tensordot(v0, jac[0][1], 1) +
                               np.tensordot(v1, jac[1][1], 2), rtol=1e-6, atol=1e-8)
    # called again (retain_graph): same answer
    np.testing.assert_allclose(n(vjp_fn((t(v0), t(v1)))[0]), n(gx))
    with pytest.raises(RuntimeError, match="Expected pytree structure of cotangents"):
        vjp_fn(t(v0))


def test_vjp_pytree_primals_and_aux():
    def f(a, d):
        return a * d["q"], {"k": a.sum()}
    out, vjp_fn, aux = vjp(f, t(XS), {"q": t(XS + 2)}, has_aux=True)
    assert not aux["k"].requires_grad and float(aux["k"]) == pytest.approx(XS.sum())
    ga, gd = vjp_fn(t(np.ones(3)))
    np.testing.assert_allclose(n(ga), XS + 2)
    assert list(gd) == ["q"]
    np.testing.assert_allclose(n(gd["q"]), XS)


def test_vjp_fn_is_linear_in_a_cotangent_that_requires_grad():
    # J^T u differentiated in u along v gives J v (the double-vjp trick, by hand)
    x = t(XS)
    _, vjp_fn = vjp(lambda a: a.sin() * a.sum(), x)
    u = t(np.zeros(3), requires_grad=True)
    (g,) = vjp_fn(u)
    assert g.requires_grad
    v = RNG.standard_normal(3)
    (jv,) = cddp.autograd.grad(g, u, t(v))
    jac = fd_jacobian(lambda a: (np.sin(a) * a.sum(),), [XS.copy()], 0, 0)
    np.testing.assert_allclose(n(jv), jac @ v, rtol=1e-6, atol=1e-8)


def test_jvp_matches_finite_differences():
    v0, v1 = RNG.standard_normal(3), RNG.standard_normal((2, 2))
    out, tangent = jvp(f_cddp, (t(XS), t(YS)), (t(v0), t(v1)))
    h = 1e-6
    hi, lo = f_np(XS + h * v0, YS + h * v1), f_np(XS - h * v0, YS - h * v1)
    assert isinstance(tangent, tuple) and len(tangent) == 2
    for k in range(2):
        np.testing.assert_allclose(n(out[k]), f_np(XS, YS)[k], rtol=1e-12)
        np.testing.assert_allclose(n(tangent[k]), (hi[k] - lo[k]) / (2 * h), rtol=1e-6,
                                   atol=1e-8)
        assert not tangent[k].requires_grad


def test_jvp_aux_identity_constant_and_errors():
    x, v = t(XS), t(RNG.standard_normal(3))
    out, tan, aux = jvp(lambda a: (a.exp(), a * 3), (x,), (v,), has_aux=True)
    np.testing.assert_allclose(n(tan), np.exp(XS) * n(v), rtol=1e-12)
    np.testing.assert_allclose(n(aux), 3 * XS)
    np.testing.assert_allclose(n(jvp(lambda a: a, (x,), (v,))[1]), n(v))
    const = t(YS)
    np.testing.assert_array_equal(n(jvp(lambda a: const, (x,), (v,))[1]), np.zeros((2, 2)))
    with pytest.raises(RuntimeError, match="independent of the inputs"):
        jvp(lambda a: const, (x,), (v,), strict=True)
    with pytest.raises(RuntimeError, match="Expected primals to be a tuple"):
        jvp(lambda a: a, x, (v,))
    with pytest.raises(RuntimeError, match="same python structure"):
        jvp(lambda a: a, (x,), [v])
    with pytest.raises(RuntimeError, match="different size"):
        jvp(lambda a: a, (x,), (t(np.ones(2)),))


def test_grad_of_jvp_is_differentiable_in_the_primal():
    # d/dx <J(x) v> for f = sin: d/dx sum(cos(x) v) = -sin(x) v
    v = RNG.standard_normal(3)
    g = grad(lambda a: jvp(lambda b: b.sin(), (a,), (t(v),))[1].sum())(t(XS))
    np.testing.assert_allclose(n(g), -np.sin(XS) * v, rtol=1e-12)


# ---------------------------------------------------------------- jacobians, hessian

@pytest.mark.parametrize("jac", [jacrev, jacfwd])
def test_jacobians_match_finite_differences(jac):
    J = jac(f_cddp, argnums=(0, 1))(t(XS), t(YS))
    assert isinstance(J, tuple) and all(isinstance(row, tuple) and len(row) == 2 for row in J)
    for i in range(2):
        for j in range(2):
            want = fd_jacobian(f_np, [XS.copy(), YS.copy()], j, i)
            assert tuple(J[i][j].shape) == want.shape
            np.testing.assert_allclose(n(J[i][j]), want, rtol=1e-6, atol=1e-8)
    single = jac(lambda a: a.sin() * a.sum())(t(XS))
    want = fd_jacobian(lambda a: (np.sin(a) * a.sum(),), [XS.copy()], 0, 0)
    np.testing.assert_allclose(n(single), want, rtol=1e-6, atol=1e-8)
    assert not single.requires_grad


def test_jacrev_has_aux_pytree_input_and_checks():
    J, aux = jacrev(lambda d: ((d["u"] * d["v"]).exp(), d["u"].sum()), has_aux=True)(
        {"u": t(XS), "v": t(XS + 1)})
    assert list(J) == ["u", "v"] and float(aux) == pytest.approx(XS.sum())
    e = np.exp(XS * (XS + 1))
    np.testing.assert_allclose(n(J["u"]), np.diag(e * (XS + 1)), rtol=1e-12)
    np.testing.assert_allclose(n(J["v"]), np.diag(e * XS), rtol=1e-12)
    with pytest.raises(ValueError, match="`chunk_size` should be greater than 0"):
        jacrev(lambda a: a, chunk_size=0)
    np.testing.assert_allclose(n(jacrev(lambda a: a * 2, chunk_size=1)(t(XS))), 2 * np.eye(3))
    # jacfwd's blocks take the output's dtype (tangents), jacrev's the input's (gradients)
    assert jacfwd(lambda a: a.float())(t(XS)).dtype == cddp.float32
    assert jacrev(lambda a: a.float())(t(XS)).dtype == cddp.float64
    with pytest.raises(RuntimeError, match="randomness error mode"):
        jacfwd(lambda a: a + cddp.randn(3))(t(XS))
    np.testing.assert_allclose(n(jacfwd(lambda a: a + cddp.randn(3, dtype=cddp.float64),
                                        randomness="same")(t(XS))), np.eye(3))


def test_hessian_matches_closed_form():
    # f = sum(x^2 y) + x0 x1 x2 : d2/dx2 = diag(2y) + the product's cross terms
    x, y = XS, XS[::-1].copy()
    H = hessian(lambda a, b: (a ** 2 * b).sum() + a.prod())(t(x), t(y))
    want = np.diag(2 * y)
    for i in range(3):
        for j in range(3):
            if i != j:
                want[i, j] += np.prod([x[k] for k in range(3) if k not in (i, j)])
    assert tuple(H.shape) == (3, 3)
    np.testing.assert_allclose(n(H), want, rtol=1e-12, atol=1e-14)
    Hxy = hessian(lambda a, b: (a ** 2 * b).sum(), argnums=(0, 1))(t(x), t(y))
    np.testing.assert_allclose(n(Hxy[0][1]), np.diag(2 * x), rtol=1e-12)
    np.testing.assert_allclose(n(Hxy[1][1]), np.zeros((3, 3)))
    # a matrix input: shape in.shape + in.shape
    assert tuple(hessian(lambda m: (m ** 3).sum())(t(YS)).shape) == (2, 2, 2, 2)


# ---------------------------------------------------------------- vmap

def test_vmap_in_dims_variants():
    a = t(RNG.standard_normal((2, 3)))
    b = t(RNG.standard_normal(3))
    np.testing.assert_allclose(n(vmap(lambda u, v: u * v, in_dims=(0, None))(a, b)),
                               n(a) * n(b))
    np.testing.assert_allclose(n(vmap(lambda u: u.sum())(a)), n(a).sum(1))
    np.testing.assert_allclose(n(vmap(lambda u: u.sum(), in_dims=1)(a)), n(a).sum(0))
    np.testing.assert_allclose(n(vmap(lambda u: u.sum(), in_dims=-1)(a)), n(a).sum(0))
    d = vmap(lambda p: p["x"] + p["y"], in_dims=({"x": 1, "y": None},))(
        {"x": a, "y": t([1.0, 2.0])})
    np.testing.assert_allclose(n(d), n(a).T + [1.0, 2.0])
    # keyword arguments are not mapped; non-tensor arguments take in_dim None
    np.testing.assert_allclose(n(vmap(lambda u, scale, extra: u * scale, in_dims=(0, None, None))(
        a, 2.0, None)), 2 * n(a))
    np.testing.assert_allclose(n(vmap(lambda u, *, scale: u * scale)(a, scale=b)), n(a) * n(b))


def test_vmap_out_dims_and_output_structures():
    a = t(RNG.standard_normal((2, 3)))
    assert tuple(vmap(lambda u: u, out_dims=1)(a).shape) == (3, 2)
    assert tuple(vmap(lambda u: u, out_dims=-1)(a).shape) == (3, 2)
    assert tuple(vmap(lambda u: u, out_dims=(1,))(a).shape) == (3, 2)
    p, q = vmap(lambda u: (u, u.sum()), out_dims=(1, 0))(a)
    np.testing.assert_allclose(n(p), n(a).T)
    np.testing.assert_allclose(n(q), n(a).sum(1))
    out = vmap(lambda u: {"s": u * 2, "l": [u, 4.0]}, out_dims={"s": 0, "l": [1, None]})(a)
    assert list(out) == ["s", "l"] and out["l"][1] == 4.0
    np.testing.assert_allclose(n(out["l"][0]), n(a).T)
    const = t(np.arange(3.0))
    same, _ = vmap(lambda u: (const, u), out_dims=(None, 0))(a)
    assert same is const


def test_nested_vmap_is_an_outer_product_and_matches_a_loop():
    a, b = t(RNG.standard_normal(4)), t(RNG.standard_normal(5))
    outer = vmap(vmap(lambda u, v: u * v, in_dims=(None, 0)), in_dims=(0, None))(a, b)
    np.testing.assert_allclose(n(outer), np.outer(n(a), n(b)), rtol=1e-12)
    m = t(RNG.standard_normal((2, 3, 4)))
    np.testing.assert_allclose(n(vmap(vmap(lambda r: r.max()))(m)), n(m).max(-1))


def test_vmap_of_jacrev_and_of_hessian():
    xs = RNG.standard_normal((3, 2))
    J = vmap(jacrev(lambda a: a.sin() * a.sum()))(t(xs))
    assert tuple(J.shape) == (3, 2, 2)
    for i in range(3):
        want = fd_jacobian(lambda a: (np.sin(a) * a.sum(),), [xs[i].copy()], 0, 0)
        np.testing.assert_allclose(n(J[i]), want, rtol=1e-6, atol=1e-8)
    H = vmap(hessian(lambda a: (a ** 3).sum()))(t(xs))
    np.testing.assert_allclose(n(H), np.stack([np.diag(6 * r) for r in xs]), rtol=1e-12)


def test_grad_through_vmap():
    x = t(XS)
    g = grad(lambda a: vmap(lambda r: r.sin())(a).sum())(x)
    np.testing.assert_allclose(n(g), np.cos(XS), rtol=1e-12)


def test_vmap_empty_batch_and_slices_are_views():
    out = vmap(lambda u: (u * 2, u.sum()))(t(np.zeros((0, 3))))
    assert tuple(out[0].shape) == (0, 3) and tuple(out[1].shape) == (0,)
    a = t(np.zeros((2, 3)))
    vmap(lambda u: u.add_(1))(a)
    np.testing.assert_array_equal(n(a), np.ones((2, 3)))


@pytest.mark.parametrize("call, error, message", [
    (lambda a: vmap(lambda u, v: u + v)(a, t(np.ones(3))), ValueError,
     "vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
     "[2, 3] for the mapped dimension"),
    (lambda a: vmap(lambda u: u, in_dims=2)(a), ValueError,
     "Got in_dim=2 for some input, but that input is a Tensor of dimensionality 2 so expected "
     "in_dim to satisfy -2 <= in_dim < 2."),
    (lambda a: vmap(lambda u: u, in_dims=(None,))(a), ValueError,
     "vmap: Expected at least one Tensor to vmap over"),
    (lambda a: vmap(lambda u: u, in_dims=None)(a), ValueError, "expected `in_dims` to be int"),
    (lambda a: vmap(lambda u: u, in_dims=(0, 0))(a), ValueError,
     "in_dims is not compatible with the structure of `inputs`"),
    (lambda a: vmap(lambda u: u)(3.0), ValueError, "We cannot vmap over non-Tensor arguments"),
    (lambda a: vmap(lambda u: u)(), ValueError, "got no inputs"),
    (lambda a: vmap(lambda u: 3.0)(a), ValueError, "must only return Tensors, got type <class "
     "'float'>. Did you mean to set out_dims= to None for output?"),
    (lambda a: vmap(lambda u: (u, u), out_dims=(0, 0, 0))(a), ValueError,
     "out_dims is not compatible with the structure of `outputs`"),
    (lambda a: vmap(lambda u: [u, u], out_dims=(0, 1))(a), ValueError,
     "out_dims is not compatible with the structure of `outputs`"),
    (lambda a: vmap(lambda u: u, out_dims=1.5)(a), ValueError, "`out_dims` must be an int"),
    (lambda a: vmap(lambda u: u, out_dims=None)(a), ValueError,
     "can not return a BatchedTensor when out_dim is None"),
    (lambda a: vmap(lambda u: u, randomness="sometimes"), RuntimeError,
     "Only allowed values for randomness are 'error', 'different', or 'same'. Got sometimes"),
    (lambda a: vmap(lambda u: u, chunk_size=0), ValueError,
     "vmap: chunk_size should be None or greater than 0. (got 0)"),
])
def test_vmap_errors(call, error, message):
    with pytest.raises(error) as e:
        call(t(RNG.standard_normal((2, 3))))
    assert message in str(e.value)


def test_vmap_randomness_modes():
    z = cddp.zeros(4, 2)
    with pytest.raises(RuntimeError, match="called random operation while in randomness error "
                       "mode. Please either use the 'same' or 'different' randomness flags"):
        vmap(lambda u: u + cddp.randn(2))(z)
    cddp.manual_seed(3)
    same = vmap(lambda u: u + cddp.randn(2), randomness="same")(z)
    after_same = cddp.randn(2)
    cddp.manual_seed(3)
    one = cddp.randn(2)
    after_one = cddp.randn(2)
    for i in range(4):
        np.testing.assert_array_equal(n(same[i]), n(one))
    np.testing.assert_array_equal(n(after_same), n(after_one))    # advanced as after one call
    cddp.manual_seed(3)
    diff = vmap(lambda u: u + cddp.randn(2), randomness="different")(z)
    rows = {tuple(r) for r in n(diff)}
    assert len(rows) == 4
    cddp.manual_seed(3)
    np.testing.assert_array_equal(n(diff), n(cddp.stack([cddp.randn(2) for _ in range(4)])))
    # no randomness: 'error' is fine and leaves the generator alone
    np.testing.assert_array_equal(n(vmap(lambda u: u * 2)(z)), np.zeros((4, 2)))


# ---------------------------------------------------------------- module state

def test_stack_module_state_and_an_ensemble_through_vmap():
    cddp.manual_seed(1)
    models = [nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).double() for _ in range(3)]
    params, buffers = stack_module_state(models)
    names = [k for k, _ in models[0].named_parameters()]
    assert list(params) == names
    assert list(buffers) == [k for k, _ in models[0].named_buffers()]
    for k in names:
        want = np.stack([n(dict(m.named_parameters())[k]) for m in models])
        np.testing.assert_array_equal(n(params[k]), want)
        assert params[k].requires_grad and params[k].grad_fn is None
    for k, b in buffers.items():
        np.testing.assert_array_equal(n(b), np.stack([n(dict(m.named_buffers())[k])
                                                      for m in models]))
        assert not b.requires_grad
    for m in models:
        m.eval()
    x = t(RNG.standard_normal((5, 3)))
    out = vmap(lambda p, b, inp: functional_call(models[0], (p, b), (inp,)),
               in_dims=(0, 0, None))(params, buffers, x)
    for i, m in enumerate(models):
        np.testing.assert_allclose(n(out[i]), n(m(x)), rtol=1e-12)
    out.sum().backward()                       # gradients reach the stacked leaves
    assert tuple(params[names[0]].grad.shape) == (3, 4, 3)
    with pytest.raises(RuntimeError, match="Expected at least one model"):
        stack_module_state([])
    models[0].train()
    with pytest.raises(RuntimeError, match="same training/eval mode"):
        stack_module_state(models)
    models[0].eval()
    models[1][0].weight.requires_grad_(False)
    with pytest.raises(RuntimeError, match="Expected 0.weight from each model to have the same "
                       ".requires_grad"):
        stack_module_state(models)


def test_functionalize_returns_the_function():
    def f(a):
        return a.add_(1)
    assert functionalize(f) is f
    assert functionalize(f, remove="mutations_and_views") is f
    with pytest.raises(RuntimeError, match="received invalid argument for remove"):
        functionalize(f, remove="views")


# ---------------------------------------------------------------- torch.func as the oracle

def _to_np(tree):
    """A pytree of tensors (either library) as the same pytree of NumPy arrays."""
    if isinstance(tree, dict):
        return {k: _to_np(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_to_np(v) for v in tree)
    return np.array(tree.detach().numpy(), copy=True)


def _leaves(tree):
    """The tensors of a pytree, in order."""
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    if isinstance(tree, (tuple, list)):
        return [x for v in tree for x in _leaves(v)]
    return [tree]


W_ORACLE = np.random.default_rng(2).standard_normal((2, 3))
X_ORACLE = np.random.default_rng(3).standard_normal((4, 3))
Y_ORACLE = np.random.default_rng(4).standard_normal((4, 2))


def _case(lib, api, F_):
    """The same computation written for torch or cddp (lib), F_ the functional module."""
    x = lib.tensor(XS)
    y = lib.tensor(YS)

    def f(a, b):
        return a.sin() * (b ** 2).sum(), {"t": (a[:2].unsqueeze(1) * b).tanh(), "e": (b.exp(),)}

    def scalar(a, d):
        return (a.sin() * d["w"]).sum() + (d["m"] ** 3).sum()
    d = {"w": lib.tensor(XS[::-1].copy()), "m": y}
    if api == "jacrev":
        return lib.func.jacrev(f, argnums=(0, 1))(x, y)
    if api == "jacfwd":
        return lib.func.jacfwd(f, argnums=(1, 0))(x, y)
    if api == "hessian":
        return lib.func.hessian(scalar, argnums=1)(x, d)
    if api == "grad_and_value":
        return lib.func.grad_and_value(
            lambda a, dd: (scalar(a, dd), {"aux": a * 2}), argnums=(0, 1), has_aux=True)(x, d)
    if api == "vjp":
        out, fn, aux = lib.func.vjp(lambda a, dd: (f(a, dd["m"]), a.cos()), x, d,
                                    has_aux=True)
        ct = (lib.tensor(XS + 1), {"t": lib.tensor(np.ones((2, 2))),
                                   "e": (lib.tensor(YS),)})
        return out, fn(ct), aux
    if api == "jvp":
        return lib.func.jvp(f, (x, y), (lib.tensor(XS[::-1].copy()), lib.tensor(YS.T.copy())))
    if api == "vmap":
        return lib.func.vmap(lambda r, s: {"p": (r * s, r.sum()), "q": [r.exp()]},
                             in_dims=(1, None), out_dims={"p": (-1, 0), "q": 1})(y, x[:2])
    if api == "per_sample":
        def loss(w, xi, yi):
            return F_.mse_loss((w["a"] @ xi).tanh(), yi)
        w = {"a": lib.tensor(W_ORACLE)}
        return lib.func.vmap(lib.func.grad(loss), in_dims=(None, 0, 0))(
            w, lib.tensor(X_ORACLE), lib.tensor(Y_ORACLE))
    raise AssertionError(api)


@pytest.mark.parametrize("api", ["jacrev", "jacfwd", "hessian", "grad_and_value", "vjp", "jvp",
                                 "vmap", "per_sample"])
def test_structures_and_values_match_torch_func(torch, api):
    import torch.nn.functional as TF
    want = _to_np(_case(torch, api, TF))
    got = _to_np(_case(cddp, api, F))
    assert_tree_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("call", [
    lambda lib: lib.func.vmap(lambda u, v: u + v)(lib.ones(2), lib.ones(3)),
    lambda lib: lib.func.vmap(lambda u: u, in_dims=1)(lib.ones(2)),
    lambda lib: lib.func.vmap(lambda u: u, in_dims=(1.0,))(lib.ones(2)),
    lambda lib: lib.func.vmap(lambda u: u + lib.randn(()))(lib.ones(2)),
    lambda lib: lib.func.grad(lambda u: u * 2)(lib.ones(2)),
    lambda lib: lib.func.grad(lambda u: (u.sum(), 1))(lib.ones(2)),
    lambda lib: lib.func.grad(lambda u: u.sum(), argnums=2)(lib.ones(2)),
    lambda lib: lib.func.grad(lambda u: (u.sum(), None), has_aux=True)(lib.ones(2)),
    lambda lib: lib.func.vjp(lambda u: 3.0, lib.ones(2)),
    lambda lib: lib.func.vjp(lambda u: (u, u.sum()), lib.ones(2))[1](lib.ones(2)),
    lambda lib: lib.func.jvp(lambda u: u, (lib.ones(2),), (lib.ones(3),)),
    lambda lib: lib.func.jvp(lambda u, v: u, (lib.ones(2), {"k": [lib.ones(2)]}),
                             (lib.ones(2), {"k": (lib.ones(2),)})),
    lambda lib: lib.func.jacrev(lambda u: u.argmax())(lib.ones(2)),
    lambda lib: lib.func.jacfwd(lambda u: u, randomness="x")(lib.ones(2)),
    lambda lib: lib.func.vmap(lambda u, v: u, in_dims=(0, (0,)))(lib.ones(2), [lib.ones(2)]),
    lambda lib: lib.func.vmap(lambda u: [u, u], out_dims=(0, 1))(lib.ones(2)),
])
def test_error_messages_match_torch_func(torch, call):
    with pytest.raises(Exception) as want:
        call(torch)
    with pytest.raises(Exception) as got:
        call(cddp)
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value).replace("torch.", "cddp.")


@pytest.mark.parametrize("call", [
    # w requires grad, x does not: a closed-over parameter, an input or a cotangent or a
    # tangent that requires grad, plain inputs, vmap around them (each with grad mode on/off)
    lambda lib, w, x: lib.func.grad(lambda a: (a * w).sum() * a.sum())(x),
    lambda lib, w, x: lib.func.grad(lambda a: (a ** 3).sum())(w),
    lambda lib, w, x: lib.func.grad_and_value(lambda a: (a ** 3).sum())(x),
    lambda lib, w, x: lib.func.grad(lambda a: (a ** 3).sum(), has_aux=False)(w.detach()),
    lambda lib, w, x: lib.func.vjp(lambda a: a.sin() * w, x)[1](x),
    lambda lib, w, x: lib.func.vjp(lambda a: a.sin(), x)[1](x),
    lambda lib, w, x: lib.func.vjp(lambda a: a.sin(), x)[1](w),
    lambda lib, w, x: lib.func.jvp(lambda a: a.sin(), (x,), (w,)),
    lambda lib, w, x: lib.func.jvp(lambda a: a.sin(), (x,), (x,)),
    lambda lib, w, x: lib.func.jacrev(lambda a: a.sin() * w)(x),
    lambda lib, w, x: lib.func.jacfwd(lambda a: a.sin())(x),
    lambda lib, w, x: lib.func.hessian(lambda a: (a.sin() * w).sum())(x),
    lambda lib, w, x: lib.func.vmap(lambda a: a * 2)(w),
    lambda lib, w, x: lib.func.vmap(lib.func.grad(lambda a: (a ** 3).sum()))(x.unsqueeze(0)),
])
def test_results_carry_a_graph_exactly_when_torchs_do(torch, call):
    def flags(lib, grad_mode):
        w = lib.tensor(XS[::-1].copy(), requires_grad=True)
        x = lib.tensor(XS)
        with lib.set_grad_enabled(grad_mode):
            out = call(lib, w, x)
        return [bool(o.requires_grad) for o in _leaves(out)], _to_np(out)
    for grad_mode in (True, False):
        (want, want_vals), (got, got_vals) = flags(torch, grad_mode), flags(cddp, grad_mode)
        assert got == want
        assert_tree_close(got_vals, want_vals, rtol=1e-10, atol=1e-12)


def test_transforms_leave_no_reference_cycles():
    # a cycle (a recursive closure in the pytree code) kept every call's tensors alive until
    # the cyclic GC ran: memory grew without bound under timeit, which turns the GC off
    import gc
    w, x = cddp.randn(16, 16), cddp.randn(4, 16)

    def fn(w, x):
        return (x @ w).tanh().sum()

    calls = [lambda: grad(fn)(w, x), lambda: vmap(grad(fn), in_dims=(None, 0))(w, x),
             lambda: jacrev(lambda v: (v @ w).tanh())(x),
             lambda: vjp(lambda v: (v @ w).tanh(), x)[1](cddp.ones(4, 16)),
             lambda: jvp(lambda v: (v @ w).tanh(), (x,), (cddp.ones(4, 16),)),
             lambda: hessian(lambda v: (v * v).sin().sum())(x[0])]
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for call in calls:
            call()
        found = gc.collect()
    finally:
        if enabled:
            gc.enable()
    assert found == 0


def test_jacfwd_by_columns_when_inputs_are_fewer():
    # fewer input than output elements: jacfwd takes one Jacobian-vector product per input
    # element; blocks, structure and values must equal jacrev's and finite differences
    wn = np.random.default_rng(7).standard_normal((6, 3))
    w = cddp.tensor(wn)

    def fc(x, y):
        return (w @ x).tanh() * y.sum(), (x.sum() * y).exp(), y[0] * 0 + 1.0

    def fn(x, y):
        return np.tanh(wn @ x) * y.sum(), np.exp(x.sum() * y), np.ones(())

    xs, ys = np.array([0.3, -0.2, 0.5]), np.array([0.7, -1.1])
    fwd = jacfwd(fc, argnums=(0, 1))(t(xs), t(ys))
    rev = jacrev(fc, argnums=(0, 1))(t(xs), t(ys))
    for i in range(3):
        for j in range(2):
            want = fd_jacobian(fn, [xs.copy(), ys.copy()], j, i)
            assert tuple(fwd[i][j].shape) == want.shape
            np.testing.assert_allclose(n(fwd[i][j]), want, rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(n(fwd[i][j]), n(rev[i][j]), rtol=1e-12, atol=1e-14)
    # nested under grad: the columns keep their graph (d/dx of sum of the Jacobian)
    g = grad(lambda x: jacfwd(lambda v: (w @ v).tanh())(x).sum())(t(xs))
    h = 1e-6
    fd = [(np.sum((1 - np.tanh(wn @ (xs + h * e)) ** 2)[:, None] * wn) -
           np.sum((1 - np.tanh(wn @ (xs - h * e)) ** 2)[:, None] * wn)) / (2 * h)
          for e in np.eye(3)]
    np.testing.assert_allclose(n(g), fd, rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------- fast paths
# (functional_call's direct module walk, vmap's per-argument slicing, the pytree shortcuts,
# the byte-wise generator check): each against the generic code it stands in for.

from collections import OrderedDict, namedtuple  # noqa: E402

from cddp.func import _pytree  # noqa: E402
from cddp.nn.utils import stateless  # noqa: E402

_Pair = namedtuple("_Pair", "a b")


def _generic_named(m):
    return (list(m.named_parameters(remove_duplicate=False)) +
            list(m.named_buffers(remove_duplicate=False)))


def _shared_tree():
    """Tied weights, a submodule registered twice, a None parameter and buffers."""
    inner = nn.Linear(3, 3)
    m = nn.Sequential(nn.Linear(3, 3), inner, nn.Tanh(), inner, nn.BatchNorm1d(3))
    m[0].weight = m[1].weight
    m[0].register_parameter("bias", None)
    m.register_buffer("scale", cddp.ones(3))
    return m


def test_functional_call_walk_lists_what_named_parameters_and_buffers_list():
    m = _shared_tree()
    got = stateless._named_tensors(m)
    want = _generic_named(m)
    assert [k for k, _ in got] == [k for k, _ in want]
    assert all(a is b for (_, a), (_, b) in zip(got, want))


def test_functional_call_walk_defers_to_overridden_traversals():
    class Hidden(nn.Module):                  # its own weight is not listed by the override
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
            yield "lin.bias", self.lin.bias

    class Child(nn.Linear):                   # lists itself twice
        def named_modules(self, memo=None, prefix="", remove_duplicate=True):
            yield prefix, self
            yield prefix + ".alias", self

    h = Hidden()
    assert stateless._named_tensors(h) == _generic_named(h)
    with pytest.raises(RuntimeError, match="Unexpected key\\(s\\): 'lin.weight'"):
        functional_call(h, {"lin.weight": cddp.zeros(2, 2), "lin.bias": cddp.zeros(2)},
                        (cddp.zeros(1, 2),), strict=True)
    m = nn.Sequential(Child(2, 2), nn.Linear(2, 2))
    got, want = stateless._named_tensors(m), _generic_named(m)
    assert [k for k, _ in got] == [k for k, _ in want]
    assert "0.alias.weight" in dict(got)
    with pytest.raises(ValueError, match="which are tied"):
        functional_call(m, {"0.weight": cddp.zeros(2, 2), "0.alias.weight": cddp.ones(2, 2)},
                        (cddp.zeros(1, 2),))
    m.register_buffer("b", None)
    m.add_module("gone", None)
    got, want = stateless._named_tensors(m), _generic_named(m)
    assert [k for k, _ in got] == [k for k, _ in want]


def test_functional_call_ties_strict_and_restore_through_the_walk():
    m = _shared_tree()
    originals = {k: v for k, v in _generic_named(m)}
    x = cddp.randn(4, 3)
    w = cddp.randn(3, 3)
    # the tie reaches 0.weight and 3.weight (the same module as 1): all three use w
    h = x @ w.t()
    h = (h @ w.t() + m[1].bias).tanh() @ w.t() + m[1].bias
    with pytest.raises(ValueError, match="which are tied"):
        functional_call(m, {"0.weight": w, "1.weight": cddp.randn(3, 3)}, (x,))
    with pytest.raises(RuntimeError, match="Missing key\\(s\\)"):
        functional_call(m, {"1.weight": w}, (x,), strict=True)
    with pytest.raises(AttributeError, match="Sequential has no attribute `9`"):
        functional_call(m, {"1.weight": w, "9.weight": w}, (x,))
    with pytest.raises(AttributeError, match="`2` is not|Tanh has no attribute"):
        functional_call(m, {"2.x.weight": w}, (x,))
    for k, v in _generic_named(m):
        assert originals[k] is v
    # values: the walk's result used with eval-mode BatchNorm equals a manual computation
    m.eval()
    got = functional_call(m, {"1.weight": w}, (x,))
    bn = m[4]
    want = (h - bn.running_mean) / (bn.running_var + bn.eps).sqrt() * bn.weight + bn.bias
    np.testing.assert_allclose(n(got), n(want), rtol=1e-5, atol=1e-6)


def test_vmap_slices_each_argument_as_the_whole_tree_rebuild_did():
    xs = t(RNG.standard_normal((3, 4)))
    ys = t(RNG.standard_normal((4, 3)))
    c = t(RNG.standard_normal(4))
    seen = []

    def f(p, x, pair, y):
        seen.append(p)
        p["k"] = 1                            # a fresh container per call: nothing leaks
        return p["w"] * x + pair.a.sum() * pair.b + y

    got = vmap(f, in_dims=({"w": None}, 0, _Pair(None, 1), 1))(
        {"w": c}, xs, _Pair(c, ys), ys)
    want = cddp.stack([c * xs[i] + c.sum() * ys[:, i] + ys[:, i] for i in range(3)])
    np.testing.assert_allclose(n(got), n(want), rtol=1e-12)
    assert len({id(p) for p in seen}) == 3 and all(list(p) == ["w", "k"] for p in seen)


def test_vmap_of_grad_matches_a_loop_of_autograd_grad():
    w = t(RNG.standard_normal((3, 4)), requires_grad=True)     # closed over, stays live
    xs = t(RNG.standard_normal((5, 4)))
    b = t(RNG.standard_normal(3))

    def loss(p, x):
        return ((p["b"] + w @ x).tanh() ** 2).sum() * p["s"]

    p = {"b": b, "s": cddp.tensor(2.0, dtype=cddp.float64)}
    got = vmap(grad(loss), in_dims=(None, 0))(p, xs)
    for i in range(5):
        q = {k: v.detach().requires_grad_() for k, v in p.items()}
        want = cddp.autograd.grad(loss(q, xs[i]), list(q.values()))
        for k, g in zip(q, want):
            np.testing.assert_allclose(n(got[k][i].detach()), n(g), rtol=1e-12)
    assert got["b"].requires_grad                # w requires grad: the outer graph is kept
    (gw,) = cddp.autograd.grad(got["b"].sum(), [w])
    assert tuple(gw.shape) == (3, 4)


def test_vmap_randomness_error_sees_a_draw_in_any_sample():
    xs = cddp.zeros(4, 2)

    def f(x):
        return x + (cddp.rand(2) if float(x.sum()) > 0 else 0)

    vmap(f)(xs)                                  # no draw: allowed
    with pytest.raises(RuntimeError, match="randomness error mode"):
        vmap(f)(xs + cddp.tensor([0.0, 0.0, 1.0, 0.0]).unsqueeze(1))
    before = cddp.get_rng_state()
    out = vmap(lambda x: x + cddp.rand(2), randomness="same")(xs)
    assert (out[0] == out[3]).all()
    assert not (before == cddp.get_rng_state()).all()


_ONE, _TWO = cddp.ones(1), cddp.zeros(2)


@pytest.mark.parametrize("tree, leaves", [
    (((), (1, 2)), [1, 2]),                      # an empty child beside a flat one
    ([(), [_ONE], {}], [_ONE]),
    ({"a": (_ONE, ()), "b": OrderedDict(x=2, y=[3, _TWO])}, [_ONE, 2, 3, _TWO]),
    (_Pair(_ONE, _Pair((), None)), [_ONE, None]),
    (cddp.Size([2, 3]), [2, 3]),
    (_TWO, [_TWO]),
    (5, [5]),
])
def test_pytree_round_trip_and_leaf_order(tree, leaves):
    got, spec = _pytree.tree_flatten(tree)
    assert len(got) == len(leaves) and all(a is b for a, b in zip(got, leaves))
    assert spec.num_leaves == len(leaves)
    back = _pytree.tree_unflatten(got, spec)

    def same(a, b):
        assert type(a) is type(b)
        if isinstance(a, dict):
            assert list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        elif isinstance(a, (tuple, list)):
            assert len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        else:
            assert a is b
        return True
    assert same(back, tree)
    assert _pytree.tree_flatten(back)[1] == spec
