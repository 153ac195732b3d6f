"""Shared test helpers: NumPy round trips, central finite differences, and the torch oracle.

Every helper here compares against something independent of cddp (NumPy, finite
differences, torch when importable), so a wrong kernel or backward fails a test.
"""
import multiprocessing
import os
import sys

import numpy as np
import pytest

# tests import the freshly built package from the checkout when run from its root
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import cddp  # noqa: E402

# where the cddp under test lives (the checkout with an in-place build, or site-packages):
# subprocesses must import that same one
CDDP_PATH = os.path.dirname(os.path.dirname(os.path.abspath(cddp.__file__)))


def subprocess_env(**extra):
    """Environment for a child Python that imports the cddp under test."""
    env = dict(os.environ)
    env["PYTHONPATH"] = CDDP_PATH + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def t(a, requires_grad=False):
    """cddp tensor holding a copy of NumPy array/list `a` (dtype preserved)."""
    a = np.array(a)
    x = cddp.from_numpy(a.copy())
    if requires_grad:
        x.requires_grad_(True)
    return x


def n(x):
    """NumPy copy of a cddp tensor (detached)."""
    return np.array(x.detach().numpy(), copy=True)


def numeric_grad(f, inputs, eps=1e-6):
    """Central differences of sum(f(*inputs) * w) for a fixed random w, per float64 input.

    f maps NumPy float64 arrays to a NumPy array. Returns (w, [d/d input_i]).
    """
    rng = np.random.default_rng(0)
    out = np.asarray(f(*inputs))
    w = rng.standard_normal(out.shape)
    grads = []
    for i, x in enumerate(inputs):
        g = np.zeros_like(x, dtype=np.float64)
        flat = x.reshape(-1)
        gf = g.reshape(-1)
        for k in range(flat.size):
            old = flat[k]
            flat[k] = old + eps
            fp = np.sum(np.asarray(f(*inputs)) * w)
            flat[k] = old - eps
            fm = np.sum(np.asarray(f(*inputs)) * w)
            flat[k] = old
            gf[k] = (fp - fm) / (2 * eps)
        grads.append(g)
    return w, grads


def fd_jacobian(fn, args, which, out, h=1e-6):
    """d fn(*args)[out] / d args[which] by central differences (NumPy arrays in and out):
    shape out.shape + args[which].shape."""
    base = np.asarray(fn(*args)[out])
    jac = np.zeros(base.shape + args[which].shape)
    for idx in np.ndindex(args[which].shape):
        hi = [a.copy() for a in args]
        lo = [a.copy() for a in args]
        hi[which][idx] += h
        lo[which][idx] -= h
        jac[(...,) + idx] = (np.asarray(fn(*hi)[out]) - np.asarray(fn(*lo)[out])) / (2 * h)
    return jac


def graph_names(ys):
    """Names of every node in the graphs of the tensors ys."""
    seen, names, stack = set(), set(), [y.grad_fn for y in ys]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(node.name())
        stack.extend(m for m, _ in node.next_functions)
    return names


def gradcheck(op, *arrays, eps=1e-6, atol=1e-6, rtol=1e-5):
    """Check cddp's backward of `op` (cddp tensors -> cddp tensor) against central finite
    differences of the same op evaluated in float64 through cddp's forward."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]

    def f(*xs):
        with cddp.no_grad():
            return n(op(*[t(x) for x in xs]))

    w, num = numeric_grad(f, arrays, eps)
    xs = [t(a, requires_grad=True) for a in arrays]
    out = op(*xs)
    out.backward(t(w))
    for i, (x, g) in enumerate(zip(xs, num)):
        got = np.zeros_like(g) if x.grad is None else n(x.grad)
        np.testing.assert_allclose(got, g, atol=atol, rtol=rtol,
                                   err_msg=f"gradient of input {i} differs from finite differences")


@pytest.fixture
def torch():
    """The oracle: skips the test when torch is not installed."""
    return pytest.importorskip("torch")


def _libraries():
    """cddp, then torch when it is installed (the oracle runs the same case)."""
    import cddp
    try:
        import torch as oracle
    except ImportError:
        return [cddp]
    return [cddp, oracle]


@pytest.fixture(params=_libraries(), ids=lambda m: m.__name__)
def lib(request):
    """Each of cddp and torch in turn: a test written once against `lib` checks both."""
    return request.param
