"""In-place ops through views reach the base's history (torch's CopySlices), and views whose
base was written in place get their history rebuilt (autograd/view.c).

Oracle: central finite differences of the same program in float64 (its forward values are
plain tensor ops), and torch's gradients when torch is installed. Each case is a program
`f(T, a) -> scalar` written once and run on cddp and torch alike.
"""
import gc
import weakref

import numpy as np
import pytest

import cddp

# name -> program text; `a` is a (3, 4) float64 leaf, `T` the library
CASES = {
    "mul_column": "o = a * 1; o[:, 0].mul_(5); r = (o * o).sum()",
    "sigmoid_row": "o = a * 1; v = o[1]; v.sigmoid_(); r = (o * o).sum()",
    "disjoint_views": "o = a * 2; p = o[:, :2]; q = o[:, 2:]; p.mul_(3); q.add_(1); r = (o * o).sum()",
    "overlapping_views": "o = a * 1; v = o[0:2]; w = o[1:3]; v.mul_(2); w.mul_(3); r = (o * o).sum()",
    "base_written_after_view": "o = a * 1; v = o[0]; o.mul_(2); r = (v * v).sum()",
    "sibling_written": "o = a * 1; v = o[0]; w = o[:, 1]; w.mul_(3); r = (v * v).sum()",
    "copy_into_buffer": "buf = T.zeros(3, 4, dtype=T.float64); buf[:, 1].copy_(a[:, 1] * 3); "
                        "r = (buf * buf).sum()",
    "rnn_buffer": "buf = T.zeros(3, 4, dtype=T.float64); h = a[:, 0]\n"
                  "for t in range(4):\n"
                  "    h = T.tanh(h * 0.5 + a[:, t]); buf[:, t].copy_(h)\n"
                  "r = (buf * buf).sum()",
    "t_row_zero": "o = a * 1; o.t()[1].zero_(); r = (o * o).sum()",
    "flat_add": "o = a * 1; o.view(-1)[3:5].add_(a[0, :2] * 2); r = (o * o).sum()",
    "narrow_fill": "o = a * 1; o.narrow(1, 1, 2).fill_(0.5); r = (o * o).sum()",
    "setitem_in_view": "o = a * 1; y = o[0]; y[1] = a[2, 2] * 7; r = (o * o).sum()",
    "clamp_unsqueezed": "o = a * 1; o.unsqueeze(0)[0, 1].clamp_(max=5.5); r = (o * o).sum()",
    "diagonal": "o = a * 1; o.diagonal().mul_(3); r = (o * o).sum()",
    "select": "o = a * 1; o.select(1, 2).mul_(4); r = (o * o).sum()",
    "permute_row": "o = a * 1; o.permute(1, 0)[2].mul_(4); r = (o * o).sum()",
    "reshape_row": "o = a * 1; o.reshape(2, 6)[1].mul_(4); r = (o * o).sum()",
    "strided": "o = a * 1; o.flatten()[::2].mul_(4); r = (o * o).sum()",
    "chain": "o = a * 1; s = o.transpose(0, 1).squeeze()[1:3]; s.mul_(-1); s.relu_(); "
             "r = (o * o).sum()",
    "view_of_view": "o = a * 1; s = o[1]; s[1:3].mul_(2); r = (s * s).sum()",
    "base_row_then_view": "o = a * 1; s = o[1:]; o[0].mul_(5); r = (s * o[1:]).sum() + o.sum()",
    "masked_fill": "o = a * 1; o[1].masked_fill_(o[1] > 5, 0.0); r = (o * o).sum()",
    "index_add": "o = a * 1; o[:, 1:3].index_add_(0, T.tensor([0, 2]), a[:2, :2] * 1); "
                 "r = (o * o).sum()",
    "scatter": "o = a * 1; o[1].scatter_(0, T.tensor([0, 3]), a[0, :2] * 2); r = (o * o).sum()",
    "addmm": "o = a * 1; o[:2, :2].addmm_(a[:2, :2] * 1, a[1:3, 1:3] * 1); r = (o * o).sum()",
    "tril": "o = a * 1; o[:3, :3].tril_(); r = (o * o).sum()",
    "mul_by_other": "o = a * 1; o[2].mul_(a[0]); r = (o * o).sum()",
    "detached_alias": "o = a * 1; d = o.detach()[0]; d.mul_(2); r = (o * 2).sum()",
}

# torch refuses an in-place op on one output of a multi-output view op; cddp gives the
# gradient of what the program computes (checked by finite differences only)
CDDP_ONLY = {
    "chunk": "o = a * 1; c = o.chunk(2, dim=1); c[1].mul_(4); r = (o * o).sum()",
    "unbind": "o = a * 1; u = o.unbind(0); u[2].mul_(4); r = (o * o).sum()",
    "split": "o = a * 1; s = o.split([1, 3], dim=1); s[1].mul_(4); r = (o * o).sum()",
}

A0 = np.arange(1.0, 13.0).reshape(3, 4) * 0.37 - 1.1


def run(T, code, a):
    env = {"T": T, "a": a}
    exec(code, env)
    return env["r"]


def grad_of(T, code, values):
    a = T.tensor(values, dtype=T.float64, requires_grad=True)
    run(T, code, a).backward()
    return np.array(a.grad.tolist())


def finite_differences(code, values, eps=1e-6):
    g = np.zeros_like(values)
    with cddp.no_grad():
        for i in np.ndindex(values.shape):
            hi, lo = values.copy(), values.copy()
            hi[i] += eps
            lo[i] -= eps
            f_hi = run(cddp, code, cddp.tensor(hi)).item()
            f_lo = run(cddp, code, cddp.tensor(lo)).item()
            g[i] = (f_hi - f_lo) / (2 * eps)
    return g


# a write through detach() is invisible to autograd by definition (torch's too), so finite
# differences see a dependence the gradient must not have
NOT_DIFFERENTIABLE = {"detached_alias"}
ALL = {k: v for k, v in {**CASES, **CDDP_ONLY}.items() if k not in NOT_DIFFERENTIABLE}


@pytest.mark.parametrize("name", sorted(ALL))
def test_gradient_matches_finite_differences(name):
    code = ALL[name]
    np.testing.assert_allclose(grad_of(cddp, code, A0), finite_differences(code, A0),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_torch(name):
    torch = pytest.importorskip("torch")
    code = CASES[name]
    np.testing.assert_allclose(grad_of(cddp, code, A0), grad_of(torch, code, A0),
                               rtol=1e-12, atol=1e-12)


def test_detached_write_is_not_tracked():
    assert grad_of(cddp, CASES["detached_alias"], A0).tolist() == [[2.0] * 4] * 3


def test_old_behaviour_would_fail_here():
    # the case that motivated the change: a write through a view was invisible to the base
    a = cddp.ones(2, 3, requires_grad=True)
    o = a * 1
    o[:, 0].mul_(5)
    o.sum().backward()
    assert a.grad.tolist() == [[5.0, 1.0, 1.0], [5.0, 1.0, 1.0]]


def test_grad_fn_names():
    a = cddp.ones(2, 3, requires_grad=True)
    o = a * 1
    v = o[1]
    assert v.grad_fn.name() == "SelectBackward0"
    v.mul_(2)
    assert o.grad_fn.name() == "CopySlices"
    assert v.grad_fn.name() == "AsStridedBackward0"
    w = o[0]
    o.add_(1)                      # w is stale now: its history is rebuilt over o's
    assert w.grad_fn.name() == "AsStridedBackward0"
    assert not w.is_leaf


def test_buffer_without_history_gains_it():
    a = cddp.ones(3, requires_grad=True)
    buf = cddp.zeros(2, 3)
    other = buf[1]
    assert not buf.requires_grad and not other.requires_grad
    buf[0].copy_(a * 2)
    assert buf.requires_grad and buf.grad_fn.name() == "CopySlices"
    assert other.requires_grad      # a sibling view sees the base's new history
    (buf.sum() + other.sum()).backward()
    assert a.grad.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("code", [
    "a[0].mul_(2)",
    "a.view(-1).zero_()",
    "a.t()[1].fill_(3.0)",
    "a[:, 1].copy_(cddp.ones(3))",
])
def test_view_of_leaf_refused(code):
    a = cddp.ones(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is "
                                           "being used in an in-place operation"):
        exec(code, {"a": a, "cddp": cddp})


def test_view_of_leaf_allowed_under_no_grad():
    a = cddp.ones(3, 4, requires_grad=True)
    with cddp.no_grad():
        a[0].mul_(2)
        a.view(-1)[5:7].zero_()
    assert a.tolist()[0] == [2.0] * 4 and a.tolist()[1][1:3] == [0.0, 0.0]
    assert a.is_leaf and a.grad_fn is None


def test_view_made_under_no_grad_refused_when_tracked():
    a = cddp.ones(3, requires_grad=True)
    o = a * 1
    with cddp.no_grad():
        v = o[:2]
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        v.mul_(2)
    buf = cddp.zeros(3)
    with cddp.no_grad():
        w = buf[:2]
    w.mul_(2)                       # nothing to track: allowed, as torch
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        w.mul_(a[:2])               # would be tracked through a


def test_view_made_under_no_grad_matches_torch_messages():
    torch = pytest.importorskip("torch")
    for T in (torch, cddp):
        a = T.ones(3, requires_grad=True)
        o = a * 1
        with T.no_grad():
            v = o[:2]
        with pytest.raises(RuntimeError) as e:
            v.mul_(2)
        assert str(e.value).startswith("A view was created in no_grad mode and is being "
                                       "modified inplace with grad mode enabled.")


def test_version_check_still_catches_saved_values():
    # sigmoid_ keeps its output; writing the same storage through another view invalidates
    # it, and backward says so (torch raises here too)
    a = cddp.ones(2, 4, requires_grad=True)
    o = a * 2
    o[:, :2].sigmoid_()
    o[:, 2:].exp_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        o.sum().backward()


def test_views_keep_no_cycles():
    a = cddp.ones(4, 4, requires_grad=True)
    o = a * 1
    v = o[1]
    v.mul_(2)
    ref = weakref.ref(o)
    gc.disable()
    try:
        del o, v                    # plain refcounting frees the base: no cycle holds it
        assert ref() is None
    finally:
        gc.enable()


def test_data_assignment_ends_the_view():
    a = cddp.ones(2, 3, requires_grad=True)
    o = a * 1
    v = o[0]
    v.data = cddp.zeros(3)          # v now has memory of its own
    v.mul_(a[1])
    assert o.grad_fn.name() == "MulBackward0"        # o's history did not take the write
    assert o.tolist() == [[1.0] * 3, [1.0] * 3]


def test_training_step_through_view_writes():
    # a small recurrent model that writes each step into a preallocated buffer: the loss's
    # gradient matches the same model built with torch.stack-style concatenation
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4)) * 0.3
    x = rng.standard_normal((5, 2, 4))

    def loss(use_buffer):
        W = cddp.tensor(w, requires_grad=True)
        h = cddp.zeros(2, 4, dtype=cddp.float64)
        outs = cddp.zeros(5, 2, 4, dtype=cddp.float64) if use_buffer else []
        for t in range(5):
            h = cddp.tanh(cddp.tensor(x[t]) + h @ W)
            if use_buffer:
                outs[t].copy_(h)
            else:
                outs.append(h)
        y = outs if use_buffer else cddp.stack(outs)
        (y.pow(2).sum()).backward()
        return np.array(W.grad.tolist())

    np.testing.assert_allclose(loss(True), loss(False), rtol=1e-12, atol=1e-12)


def test_repr_of_a_stale_view_names_its_current_grad_fn():
    # repr reads grad_fn as torch does, so a view whose base was written since shows the
    # rebuilt history, not the one it was made with
    o = cddp.ones(2, 3, requires_grad=True) * 1
    v = o[0]
    assert "grad_fn=<SelectBackward0>" in repr(v)
    o.mul_(2)
    assert "grad_fn=<AsStridedBackward0>" in repr(v)
