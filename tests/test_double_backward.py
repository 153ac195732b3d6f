"""Double backward (create_graph=True): the engine's semantics and whole programs.

The per-op formulas have their own files (test_double_backward_pointwise/_shape/_nn.py); here:
what backward / autograd.grad do with create_graph (leaf .grad with a history, hooks,
retain_grad, allow_unused, only the needed nodes run, a clear error for a node without a
formula), custom Functions (their backward differentiated again; once_differentiable refusing),
autograd.functional's second-order functions and gradgradcheck, and the programs people run:
a WGAN-GP gradient penalty, a MAML meta-gradient, an R1 penalty under 2-rank DDP. Oracles:
closed forms, central finite differences of first-order gradients, a 1-rank run, and torch
where installed.
"""
import numpy as np
import pytest

import cddp
import cddp.nn.functional as F
from cddp import autograd


def t64(a, grad=True):
    return cddp.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def first_grad(f, xs):
    """First-order gradients of f(*xs) (a scalar) at fresh leaves: the finite-difference oracle's
    building block (no create_graph involved)."""
    leaves = [cddp.tensor(x.detach().numpy(), requires_grad=True) for x in xs]
    return [g.numpy() for g in autograd.grad(f(*leaves), leaves)]


def fd_hvp(f, xs, vs, eps=1e-6):
    """d/dt of grad f(xs + t vs) at t = 0 by central differences: (H v) per input."""
    plus = first_grad(f, [cddp.tensor(x.detach().numpy() + eps * v) for x, v in zip(xs, vs)])
    minus = first_grad(f, [cddp.tensor(x.detach().numpy() - eps * v) for x, v in zip(xs, vs)])
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]


def test_polynomial_second_and_third_derivative():
    x = t64([1.0, -2.0, 0.5])
    (g,) = autograd.grad((x * x * x).sum(), x, create_graph=True)
    assert g.grad_fn is not None
    np.testing.assert_allclose(g.detach().numpy(), 3 * x.detach().numpy() ** 2)
    (h,) = autograd.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(h.detach().numpy(), 6 * x.detach().numpy())
    (k,) = autograd.grad(h.sum(), x)
    np.testing.assert_allclose(k.numpy(), [6.0, 6.0, 6.0])


def test_hessian_vector_product_matches_finite_differences():
    rng = np.random.default_rng(0)
    x, w = t64(rng.normal(size=(4, 3))), t64(rng.normal(size=(3, 2)))
    f = lambda x, w: (cddp.tanh(x @ w) * cddp.exp(0.3 * x).sum(1, keepdim=True)).sum()
    gx, gw = autograd.grad(f(x, w), (x, w), create_graph=True)
    u, v = rng.normal(size=(4, 3)), rng.normal(size=(3, 2))
    hx, hw = autograd.grad((gx * cddp.tensor(u)).sum() + (gw * cddp.tensor(v)).sum(), (x, w))
    ref = fd_hvp(f, [x, w], [u, v])
    np.testing.assert_allclose(hx.numpy(), ref[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(hw.numpy(), ref[1], rtol=1e-6, atol=1e-7)


def test_backward_create_graph_leaves_grad_with_history():
    x = t64([1.0, 2.0])
    with pytest.warns(UserWarning, match="reference cycle"):       # torch's warning
        (x * x * x).sum().backward(create_graph=True)
    assert x.grad.grad_fn is not None
    np.testing.assert_allclose(x.grad.detach().numpy(), [3.0, 12.0])
    g = x.grad
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 12.0])


def test_the_grad_graph_cycle_is_collected():
    # leaf -> .grad -> its graph -> AccumulateGrad -> leaf: the cycle torch warns about is
    # garbage the cyclic collector frees
    import gc
    import weakref
    x = t64([1.0, 2.0])
    with pytest.warns(UserWarning):
        (x * x * x).sum().backward(create_graph=True)
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None


def test_backward_create_graph_accumulates_like_torch():
    torch = pytest.importorskip("torch")
    vals = [0.5, -1.5, 2.0]
    out = []
    for lib in (cddp, torch):
        x = lib.tensor(vals, dtype=lib.float64, requires_grad=True)
        (x * x * x).sum().backward(create_graph=True)
        (x * x).sum().backward(create_graph=True)       # accumulates: 3x^2 + 2x
        first = x.grad.detach().numpy().copy()
        x.grad.sum().backward()                          # adds 6x + 2 into x.grad
        out.append((first, x.grad.detach().numpy()))
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-12)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-12)


def test_hooks_and_retain_grad_see_differentiable_gradients():
    x = t64([1.0, 2.0, 3.0])
    y = x * x
    y.retain_grad()
    seen = []
    y.register_hook(lambda g: seen.append(g) or g * 2)
    (g,) = autograd.grad((y * x).sum(), x, create_graph=True)
    assert len(seen) == 1 and seen[0].grad_fn is not None      # x, with x's history
    # d/dx (x^2 * x) with the hook doubling y's gradient: x^2 + 2 * (x * 2x) = 5x^2
    np.testing.assert_allclose(g.detach().numpy(), 5 * x.detach().numpy() ** 2)
    (h,) = autograd.grad(g.sum(), x)
    # the second pass runs through y's node again, so the hook doubles that path as well:
    # d/dx [2 * (y's part: x^2) + 4x^2] = 4x + 8x (torch gives the same)
    np.testing.assert_allclose(h.numpy(), 12 * x.detach().numpy())


def test_allow_unused_and_materialize():
    x, z = t64([1.0, 2.0]), t64([3.0])
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        autograd.grad(y, (x, z), create_graph=True)
    gx, gz = autograd.grad(y, (x, z), create_graph=True, allow_unused=True)
    assert gz is None and gx.grad_fn is not None
    gx, gz = autograd.grad(y, (x, z), create_graph=True, materialize_grads=True)
    np.testing.assert_array_equal(gz.detach().numpy(), [0.0])


def test_node_without_formula_raises_with_its_name_only_when_needed():
    lstm = cddp.nn.LSTM(3, 2).double()
    x, w = t64(np.full((2, 1, 3), 0.3)), t64([0.5, -1.0, 2.0])
    # the LSTM layer node has no double-backward formula: asking for it names the node
    with pytest.raises(NotImplementedError, match="LstmLayerBackward0"):
        autograd.grad(lstm(x * w)[0].sum(), x, create_graph=True)
    # a branch through it that does not lead to the differentiated input is never run
    c = lstm(x.detach() * 1.0)[0]
    (g,) = autograd.grad((x * w).sum() + c.sum(), w, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), x.detach().numpy().sum((0, 1)))


def test_a_non_leaf_input_is_captured_without_running_its_node():
    # the gradient of h = lstm(x) is wanted, not x's: the LSTM node (no formula) never runs
    lstm = cddp.nn.LSTM(3, 2).double()
    h = lstm(t64(np.full((2, 1, 3), 0.3)))[0]
    w = t64(np.ones((2, 1, 2)))
    (g,) = autograd.grad((h * h * w).sum(), h, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 2 * h.detach().numpy())
    (k,) = autograd.grad(g.sum(), w)      # g = 2 h w: d/dw of its sum is 2 h
    np.testing.assert_allclose(k.numpy(), 2 * h.detach().numpy())


def test_non_scalar_root_needs_grad_outputs():
    x = t64([1.0, 2.0])
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        autograd.grad(x * x, x, create_graph=True)
    (g,) = autograd.grad(x * x, x, grad_outputs=t64([1.0, 3.0], grad=False), create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [2.0, 12.0])


def test_grad_outputs_with_history_are_differentiated():
    x, v = t64([1.0, 2.0]), t64([0.5, -1.0])
    (g,) = autograd.grad(x * x, x, grad_outputs=v, create_graph=True)     # 2 x v
    gx, gv = autograd.grad(g.sum(), (x, v))
    np.testing.assert_allclose(gx.numpy(), 2 * v.detach().numpy())
    np.testing.assert_allclose(gv.numpy(), 2 * x.detach().numpy())


def test_backward_inputs_accumulates_only_there():
    x, w = t64([1.0, 2.0]), t64([3.0, 4.0])
    (x * w).sum().backward(inputs=[w])
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 2.0])
    autograd.backward((x * x * w).sum(), inputs=[x], create_graph=True)
    assert w.grad.grad_fn is None and x.grad.grad_fn is not None
    np.testing.assert_allclose(x.grad.detach().numpy(), [6.0, 16.0])


class Cube(autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * x * scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x * ctx.scale, None


class CubeOnce(autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    @autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x


def test_custom_function_backward_is_differentiated():
    x = t64([1.0, -2.0])
    (g,) = autograd.grad(Cube.apply(x, 2.0).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 6 * x.detach().numpy() ** 2)
    (h,) = autograd.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), 12 * x.detach().numpy())


def test_once_differentiable_refuses_a_second_derivative():
    x = t64([1.0, -2.0])
    (g,) = autograd.grad(CubeOnce.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * x.detach().numpy() ** 2)
    assert g.grad_fn is None                 # as torch: no history reached the backward
    v = t64([1.0, 1.0])
    (g,) = autograd.grad(CubeOnce.apply(x), x, grad_outputs=v, create_graph=True)
    assert g.grad_fn is not None
    with pytest.raises(RuntimeError, match="once_differentiable"):
        autograd.grad(g.sum(), v)


def test_gradgradcheck_passes_and_catches_a_wrong_second_derivative():
    x = t64(np.linspace(-1, 1, 5))
    assert autograd.gradgradcheck(lambda x: cddp.tanh(x) * x * x, (x,))

    class Wrong(autograd.Function):            # right first derivative, constant in x
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * (x * x).detach()

    assert autograd.gradcheck(Wrong.apply, (x,))
    assert not autograd.gradgradcheck(Wrong.apply, (x,), raise_exception=False)


def test_functional_second_order_against_finite_differences():
    rng = np.random.default_rng(1)
    x0 = rng.normal(size=3)
    f = lambda x: (cddp.exp(x * 0.5) * x).sum() * (x * x).sum()
    x = cddp.tensor(x0)
    H = autograd.functional.hessian(f, x).numpy()
    ref = np.stack([fd_hvp(f, [x], [e])[0] for e in np.eye(3)], 1)
    np.testing.assert_allclose(H, ref, rtol=1e-6, atol=1e-7)
    v = rng.normal(size=3)
    _, hv = autograd.functional.hvp(f, x, cddp.tensor(v))
    _, vh = autograd.functional.vhp(f, x, cddp.tensor(v))
    np.testing.assert_allclose(hv.numpy(), H @ v, rtol=1e-10)
    np.testing.assert_allclose(vh.numpy(), v @ H, rtol=1e-10)
    g = lambda x: cddp.tanh(x) * x.sum()
    _, jv = autograd.functional.jvp(g, x, cddp.tensor(v))
    J = autograd.functional.jacobian(g, x).numpy()
    np.testing.assert_allclose(jv.numpy(), J @ v, rtol=1e-10)


def test_functional_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    a, b, v = rng.normal(size=(3,)), rng.normal(size=(2, 3)), rng.normal(size=(3,))

    def run(lib, fun):
        f = lambda x, w: (lib.tanh(w @ x) * lib.exp(x).sum()).sum()
        x, w = lib.tensor(a), lib.tensor(b)
        fn = getattr(lib.autograd.functional, fun)
        if fun == "hessian":
            out = fn(f, (x, w))
            return [t.detach().numpy() for row in out for t in row]
        _, res = fn(f, (x, w), (lib.tensor(v), lib.tensor(b * 0.5)))
        return [t.detach().numpy() for t in res]

    for fun in ("hessian", "hvp", "vhp"):
        for ours, ref in zip(run(cddp, fun), run(torch, fun)):
            np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)


def test_functional_create_graph_keeps_the_callers_graph():
    x = t64([0.3, -0.7])
    _, (vj,) = autograd.functional.vjp(lambda x: x * x * x, (x,), (t64([1.0, 1.0], False),),
                                       create_graph=True)
    assert vj.grad_fn is not None
    (h,) = autograd.grad(vj.sum(), x)
    np.testing.assert_allclose(h.numpy(), 6 * x.detach().numpy())


def _critic(lib, p, x):
    h = lib.nn.functional.leaky_relu(lib.nn.functional.linear(x, p[0], p[1]), 0.2)
    return lib.nn.functional.linear(h, p[2], p[3])


def _wgan_gp(lib, params, real, fake, alpha):
    p = [lib.tensor(a, requires_grad=True) for a in params]
    xh = (lib.tensor(alpha) * lib.tensor(real) + (1 - lib.tensor(alpha)) * lib.tensor(fake))
    xh.requires_grad_(True)
    d = _critic(lib, p, xh)
    (g,) = lib.autograd.grad(d, xh, grad_outputs=lib.ones_like(d), create_graph=True)
    gp = ((g.reshape(g.shape[0], -1).norm(2, dim=1) - 1) ** 2).mean()
    loss = d.mean() + 10 * gp
    loss.backward()
    return [float(gp)] + [q.grad.numpy() for q in p]


def test_wgan_gp_penalty_gradients():
    rng = np.random.default_rng(3)
    params = [rng.normal(size=(8, 5)) * 0.5, rng.normal(size=8) * 0.1,
              rng.normal(size=(1, 8)) * 0.5, rng.normal(size=1) * 0.1]
    real, fake, alpha = rng.normal(size=(4, 5)), rng.normal(size=(4, 5)), rng.uniform(size=(4, 1))
    ours = _wgan_gp(cddp, params, real, fake, alpha)
    # torch-free: the parameter gradient of the penalised loss by finite differences
    def loss_of(k, eps_dir):
        ps = [a + (eps_dir if i == k else 0) for i, a in enumerate(params)]
        p = [cddp.tensor(a, requires_grad=True) for a in ps]
        xh = cddp.tensor(alpha * real + (1 - alpha) * fake, requires_grad=True)
        d = _critic(cddp, p, xh)
        (g,) = autograd.grad(d, xh, grad_outputs=cddp.ones_like(d))
        gp = ((np.linalg.norm(g.numpy(), axis=1) - 1) ** 2).mean()
        return float(d.mean()) + 10 * gp
    for k in range(4):
        e = np.zeros_like(params[k])
        num = np.zeros_like(params[k])
        for idx in np.ndindex(params[k].shape):
            e[idx] = 1e-6
            num[idx] = (loss_of(k, e) - loss_of(k, -e)) / 2e-6
            e[idx] = 0
        np.testing.assert_allclose(ours[1 + k], num, rtol=1e-5, atol=1e-7)
    torch = pytest.importorskip("torch")
    ref = _wgan_gp(torch, params, real, fake, alpha)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-12)
    for a, b in zip(ours[1:], ref[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def _maml(lib, params, xs, ys, xq, yq, lr=0.4):
    F_ = lib.nn.functional
    p = [lib.tensor(a, requires_grad=True) for a in params]

    def net(w, x):
        return F_.linear(F_.relu(F_.linear(x, w[0], w[1])), w[2], w[3])

    inner = F_.mse_loss(net(p, lib.tensor(xs)), lib.tensor(ys))
    gs = lib.autograd.grad(inner, p, create_graph=True)
    fast = [w - lr * g for w, g in zip(p, gs)]
    outer = F_.mse_loss(net(fast, lib.tensor(xq)), lib.tensor(yq))
    outer.backward()
    return [float(outer)] + [w.grad.numpy() for w in p]


def test_maml_meta_gradient():
    rng = np.random.default_rng(4)
    params = [rng.normal(size=(6, 2)), rng.normal(size=6) * 0.1, rng.normal(size=(1, 6)) * 0.5,
              rng.normal(size=1) * 0.1]
    xs, ys, xq, yq = (rng.normal(size=(5, 2)), rng.normal(size=(5, 1)), rng.normal(size=(7, 2)),
                      rng.normal(size=(7, 1)))
    ours = _maml(cddp, params, xs, ys, xq, yq)

    def outer_loss(ps):
        p = [cddp.tensor(a, requires_grad=True) for a in ps]
        net = lambda w, x: F.linear(F.relu(F.linear(x, w[0], w[1])), w[2], w[3])
        gs = autograd.grad(F.mse_loss(net(p, cddp.tensor(xs)), cddp.tensor(ys)), p)
        fast = [cddp.tensor(a - 0.4 * g.numpy()) for a, g in zip(ps, gs)]
        return float(F.mse_loss(net(fast, cddp.tensor(xq)), cddp.tensor(yq)))
    k = 0                                     # the first layer's weight, every element
    num = np.zeros_like(params[k])
    for idx in np.ndindex(params[k].shape):
        for s in (1, -1):
            ps = [a.copy() for a in params]
            ps[k][idx] += s * 1e-6
            num[idx] += s * outer_loss(ps) / 2e-6
    np.testing.assert_allclose(ours[1], num, rtol=1e-5, atol=1e-8)
    torch = pytest.importorskip("torch")
    ref = _maml(torch, params, xs, ys, xq, yq)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


GP_JOB = """
import os
import numpy as np
import cddp as torch
import cddp.distributed as dist
import cddp.nn as nn
from cddp.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
ddp = DDP(D)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
X = torch.tensor(np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32))
B = 8 // world
for step in range(3):
    x = X[rank * B:(rank + 1) * B].clone().requires_grad_(True)
    out = ddp(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True, only_inputs=True)
    loss = out.mean() + 0.5 * g.pow(2).sum(1).mean()       # an R1 penalty (StyleGAN2's)
    opt.zero_grad()
    loss.backward()
    opt.step()
np.save(os.path.join(OUT, f"w{world}_{rank}.npy"), D[0].weight.detach().numpy())
dist.destroy_process_group()
"""


def test_gradient_penalty_under_ddp_matches_one_rank(tmp_path):
    # autograd.grad(create_graph=True) on a DDP model's output, then backward of the penalised
    # loss: 2 ranks train to the weights of 1 rank over the same global batch (the penalty's
    # graph goes through DDP's reducer once, in the plain backward)
    from ddp_util import load, run_ranks
    for n in (1, 2):
        r = run_ranks(tmp_path, GP_JOB, nprocs=n)
        assert r.returncode == 0, r.stderr[-3000:]
    one = load(tmp_path, "w1_0.npy")
    for k in range(2):
        np.testing.assert_allclose(load(tmp_path, f"w2_{k}.npy"), one, rtol=1e-5, atol=1e-6)
