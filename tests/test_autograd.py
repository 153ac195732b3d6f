"""The autograd engine: graph walk order, accumulation, retain_graph, hooks, version counter,
grad modes, and memory behaviour of graphs. Values are checked against hand derivations and,
when torch is importable, against torch on the same expressions."""
import gc
import weakref

import numpy as np
import pytest

import cddp
from conftest import gradcheck, n, t


def test_shared_subexpression_accumulates():
    # y = x*x + x*x*x: x is reached along three paths; dy/dx = 2x + 3x^2
    x = t([1.0, 2.0, -3.0], requires_grad=True)
    y = (x * x + x * x * x).sum()
    y.backward()
    xv = np.array([1.0, 2.0, -3.0])
    np.testing.assert_allclose(n(x.grad), 2 * xv + 3 * xv ** 2, rtol=1e-6)


def test_diamond_graph_runs_each_node_once():
    x = t([0.5, 1.5], requires_grad=True)
    a = x.exp()
    b = a * 2
    c = a * 3
    (b + c).sum().backward()
    np.testing.assert_allclose(n(x.grad), 5 * np.exp([0.5, 1.5]), rtol=1e-6)


def test_grad_accumulates_across_backward_calls():
    x = t([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    (x * 4).sum().backward()
    np.testing.assert_allclose(n(x.grad), [7.0, 7.0])


def test_second_backward_without_retain_graph_raises():
    x = t([1.0, 2.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_retain_graph_allows_second_backward():
    x = t([1.0, 2.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    g1 = n(x.grad)
    y.backward()
    np.testing.assert_allclose(n(x.grad), 2 * g1, rtol=1e-6)


def test_inplace_modification_of_saved_tensor_raises():
    x = t([1.0, 2.0], requires_grad=True)
    y = x.exp()          # exp saves its output
    z = (y * 1.0).sum()
    w = y.sum() * 0 + (x * y).sum()   # x*y saves y
    with cddp.no_grad():
        y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.backward()
    del z


def test_version_counter_shared_by_views():
    x = t(np.zeros((2, 3)))
    v0 = x._version
    row = x[0]
    row.add_(1.0)
    assert x._version == v0 + 1 and row._version == x._version


def test_no_grad_records_nothing():
    x = t([1.0, 2.0], requires_grad=True)
    with cddp.no_grad():
        y = x * 2
    assert y.grad_fn is None and not y.requires_grad
    z = x * 2
    assert z.grad_fn is not None and z.grad_fn.name() == "MulBackward0"


def test_next_functions_lead_to_accumulate_grad():
    x = t([1.0], requires_grad=True)
    y = x * 2
    (fn, nr), = [e for e in y.grad_fn.next_functions if e[0] is not None]
    assert fn.name() == "AccumulateGrad" and fn.variable is x and nr == 0


def test_non_leaf_hook_can_replace_gradient():
    x = t([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    np.testing.assert_allclose(n(x.grad), [30.0, 30.0])


def test_leaf_hook_replaces_before_accumulation():
    x = t([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: g + 1)
    (x * 2).sum().backward()
    np.testing.assert_allclose(n(x.grad), [3.0, 3.0])


def test_post_accumulate_hook_sees_final_grad_once_per_backward():
    w1 = t([1.0, 2.0], requires_grad=True)
    w2 = t([3.0], requires_grad=True)
    order = []
    w1.register_post_accumulate_grad_hook(lambda p: order.append(("w1", n(p.grad).tolist())))
    w2.register_post_accumulate_grad_hook(lambda p: order.append(("w2", n(p.grad).tolist())))
    # w1 is used twice: its hook must fire once, after both contributions arrived
    loss = (w1 * 2).sum() + (w1 * w2).sum()
    loss.backward()
    names = [o[0] for o in order]
    assert sorted(names) == ["w1", "w2"]
    got = dict(order)
    np.testing.assert_allclose(got["w1"], [2 + 3, 2 + 3])
    np.testing.assert_allclose(got["w2"], [3.0])


def test_retain_grad_on_non_leaf():
    x = t([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    (y * y).sum().backward()
    np.testing.assert_allclose(n(y.grad), [4.0, 8.0])
    np.testing.assert_allclose(n(x.grad), [8.0, 16.0])


def test_backward_with_gradient_argument():
    x = t([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.backward(t([1.0, 0.5, 0.0]))
    np.testing.assert_allclose(n(x.grad), [2.0, 2.0, 0.0])


def test_autograd_backward_function_multiple_roots():
    x = t([1.0, 2.0], requires_grad=True)
    a = (x * 2).sum()
    b = (x * 5).sum()
    cddp.autograd.backward([a, b])
    np.testing.assert_allclose(n(x.grad), [7.0, 7.0])


def test_graph_is_freed_when_output_dies():
    x = t(np.ones(4), requires_grad=True)
    y = (x * 2).exp().sum()
    ref = weakref.ref(y.grad_fn)
    del y
    gc.collect()
    assert ref() is None


def test_long_chain_backward_and_free_do_not_overflow():
    x = t([1.0], requires_grad=True)
    y = x
    for _ in range(20000):
        y = y * 1.0
    y.sum().backward()
    np.testing.assert_allclose(n(x.grad), [1.0])
    del y
    gc.collect()


def test_requires_grad_cannot_flip_on_non_leaf():
    x = t([1.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="leaf variables"):
        y.requires_grad = False


def test_detach_shares_storage_but_not_graph():
    x = t([1.0, 2.0], requires_grad=True)
    d = x.detach()
    assert d.grad_fn is None and not d.requires_grad
    d.add_(1.0)
    np.testing.assert_allclose(n(x), [2.0, 3.0])


def test_inplace_on_leaf_requiring_grad_raises():
    x = t([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1.0)


def test_gradcheck_composite_expression():
    gradcheck(lambda a, b: ((a * b).exp() + a / (b * b + 1.0)).sum(dim=0),
              np.random.default_rng(1).standard_normal((3, 2)) * 0.5,
              np.random.default_rng(2).standard_normal((3, 2)) * 0.5)


def test_matches_torch_on_a_small_mlp(torch):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 5)).astype(np.float32)
    W1 = rng.standard_normal((5, 7)).astype(np.float32)
    W2 = rng.standard_normal((7, 3)).astype(np.float32)
    y = rng.integers(0, 3, 8)

    def run(lib, mk):
        w1, w2 = mk(W1), mk(W2)
        h = (lib.tensor(X) @ w1).relu()
        logits = h @ w2
        logp = logits.log_softmax(dim=1)
        loss = -logp[lib.arange(8), lib.tensor(y)].mean()
        loss.backward()
        return loss.item(), w1.grad.numpy(), w2.grad.numpy()

    ours = run(cddp, lambda a: cddp.tensor(a, requires_grad=True))
    ref = run(torch, lambda a: torch.tensor(a, requires_grad=True))
    assert abs(ours[0] - ref[0]) < 1e-5 * max(1, abs(ref[0]))
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours[2], ref[2], rtol=1e-4, atol=1e-6)


def test_hook_handles_remove():
    x = t([1.0, 2.0], requires_grad=True)
    h = x.register_hook(lambda g: g * 100)
    h.remove()
    (x * 1).sum().backward()
    np.testing.assert_allclose(n(x.grad), [1.0, 1.0])


def test_autograd_grad_returns_without_accumulating(torch):
    x = cddp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = cddp.tensor([0.5], requires_grad=True)
    (gx, gy) = cddp.autograd.grad((x * x * y).sum(), [x, y])
    tx = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    ty = torch.tensor([0.5], requires_grad=True)
    rx, ry = torch.autograd.grad((tx * tx * ty).sum(), [tx, ty])
    np.testing.assert_allclose(n(gx), rx.numpy())
    np.testing.assert_allclose(n(gy), ry.numpy())
    assert x.grad is None and y.grad is None
    z = cddp.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="not have been used"):
        cddp.autograd.grad((x * 2).sum(), [z])


def test_sort_topk_allclose_equal_match_torch(torch):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    for dim in (0, 1, -1):
        for desc in (False, True):
            v, i = cddp.sort(cddp.tensor(a), dim=dim, descending=desc)
            tv, ti = torch.sort(torch.tensor(a), dim=dim, descending=desc)
            np.testing.assert_array_equal(n(v), tv.numpy())
            np.testing.assert_array_equal(n(i), ti.numpy())
    v, i = cddp.tensor(a).topk(2, dim=1)
    tv, ti = torch.tensor(a).topk(2, dim=1)
    np.testing.assert_array_equal(n(v), tv.numpy())
    np.testing.assert_array_equal(n(i), ti.numpy())
    x = cddp.tensor(a, requires_grad=True)
    x.topk(2, dim=1).values.sum().backward()
    assert n(x.grad).sum() == 6.0
    assert cddp.allclose(cddp.tensor(a), cddp.tensor(a + 1e-7))
    assert not cddp.allclose(cddp.tensor(a), cddp.tensor(a + 1e-2))
    assert cddp.equal(cddp.tensor(a), cddp.tensor(a)) and not cddp.equal(cddp.tensor(a), cddp.tensor(a[:2]))
    assert cddp.tensor([1, 2]).type_as(cddp.tensor([1.0])).dtype == cddp.float32


def test_autograd_grad_leaves_every_grad_and_post_accumulate_hook_alone():
    # torch.autograd.grad returns gradients and writes no .grad, not even of the leaves it
    # did not ask for (a gradient penalty mid-step must not pollute the parameters' .grad,
    # nor fire DDP's post-accumulate hooks)
    x = cddp.tensor([1.0, 2.0], requires_grad=True)
    w = cddp.tensor([3.0, 4.0], requires_grad=True)
    w.grad = cddp.tensor([0.5, 0.5])
    fired = []
    x.register_post_accumulate_grad_hook(lambda p: fired.append(p))
    (g,) = cddp.autograd.grad((x * w).sum(), w)
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0])
    assert x.grad is None and fired == []
    np.testing.assert_array_equal(w.grad.numpy(), [0.5, 0.5])
    seen = []
    w.register_hook(lambda gr: seen.append(gr.numpy().copy()))
    cddp.autograd.grad((x * w).sum(), w)                # a leaf's own hook still runs
    np.testing.assert_array_equal(seen[0], [1.0, 2.0])
    (x * w).sum().backward()                          # and backward still accumulates
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    assert len(fired) == 1


def test_is_grads_batched_gives_one_vjp_per_row():
    x = cddp.tensor([0.5, -1.0, 2.0], requires_grad=True)
    w = cddp.tensor([[1.0, 2.0, 0.0], [0.0, -1.0, 3.0]], requires_grad=True)
    y = w @ (x ** 2)                                   # (2,): Jacobian wrt x = w * 2x
    eye = cddp.eye(2)
    jx, jw = cddp.autograd.grad(y, (x, w), eye, is_grads_batched=True)
    xs = np.array([0.5, -1.0, 2.0])
    ws = np.array([[1.0, 2.0, 0.0], [0.0, -1.0, 3.0]])
    np.testing.assert_allclose(n(jx), ws * 2 * xs, rtol=1e-6)
    want_w = np.zeros((2, 2, 3))
    want_w[0, 0], want_w[1, 1] = xs ** 2, xs ** 2      # d y_i / d w = e_i (x**2)^T
    np.testing.assert_allclose(n(jw), want_w, rtol=1e-6)
    assert x.grad is None and w.grad is None
    with pytest.raises(RuntimeError, match="leading batch dimension"):
        cddp.autograd.grad(y, x, None, is_grads_batched=True)
    with pytest.raises(RuntimeError, match="batch dimensions differ"):
        cddp.autograd.grad((y, y), x, (eye, cddp.ones(3, 2)), is_grads_batched=True)


def test_is_grads_batched_matches_torch(torch):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    m = rng.standard_normal((3, 5)).astype(np.float32)
    v = rng.standard_normal((6, 4, 5)).astype(np.float32)
    res = []
    for mod in (torch, cddp):
        x = mod.tensor(a, requires_grad=True)
        p = mod.tensor(m, requires_grad=True)
        y = mod.tanh(x @ p)
        gx, gp = mod.autograd.grad(y, (x, p), mod.tensor(v), is_grads_batched=True,
                                   create_graph=True)
        (gh,) = mod.autograd.grad(gx.sum(), p)         # through the batched rows again
        res.append([t.detach().numpy() for t in (gx, gp, gh)])
    for t, c in zip(*res):
        np.testing.assert_allclose(c, t, rtol=1e-5, atol=1e-6)


def test_retain_grad_follows_in_place_ops():
    """retain_grad() keeps the gradient of the tensor's latest version, as torch moves its
    retains_grad hook on in-place ops (a timm sweep saw 3x gradients on a tensor that a ReLU
    modified in place after forward hooks had called retain_grad on it; values by hand)."""
    x = cddp.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.relu_()
    y.retain_grad()
    (y * cddp.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert y.grad.tolist() == [1.0, 10.0, 100.0]          # d/dy of the final y, once
    assert x.grad.tolist() == [2.0, 0.0, 200.0]
    y = x * 2
    y.retain_grad()
    y.mul_(2)                                             # retained before, not after
    (y * 3).sum().backward()
    assert y.grad.tolist() == [3.0, 3.0, 3.0]
    b = x * 1
    b.retain_grad()
    b[1:].mul_(5)                                         # through a view: b gets CopySlices
    (b * cddp.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert b.grad.tolist() == [1.0, 2.0, 3.0]
    b = x * 1
    v = b[1:]
    v.retain_grad()
    b.mul_(2)                                             # the view's history is rebuilt
    (v * 7).sum().backward()
    assert v.grad.tolist() == [7.0, 7.0]
