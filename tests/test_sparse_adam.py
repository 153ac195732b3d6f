"""SparseAdam on cddp's dense embedding gradients: each step equals torch's SparseAdam on the
sparse gradient of the same lookups (rows never looked up keep their moments and values), and
a NumPy lazy-Adam reference without torch."""
import math

import numpy as np
import pytest

import cddp

BATCHES = [[1, 3, 3], [0, 1], [4], [1, 2]]


def _numpy_reference(w0, lr=0.05, betas=(0.9, 0.999), eps=1e-8):
    w, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for step, rows in enumerate(BATCHES, 1):
        g = np.zeros_like(w)
        for r in rows:                       # d/dw of sum(w[r]**2) per lookup
            g[r] += 2 * w[r]
        touched = sorted(set(rows))
        m[touched] += (g[touched] - m[touched]) * (1 - betas[0])
        v[touched] += (g[touched] ** 2 - v[touched]) * (1 - betas[1])
        size = lr * math.sqrt(1 - betas[1] ** step) / (1 - betas[0] ** step)
        w[touched] -= size * m[touched] / (np.sqrt(v[touched]) + eps)
    return w


def _run(lib, w0, sparse):
    emb = lib.nn.Embedding(5, 3, sparse=sparse)
    with lib.no_grad():
        emb.weight.copy_(lib.tensor(w0))
    opt = lib.optim.SparseAdam(emb.parameters(), lr=0.05)
    for rows in BATCHES:
        opt.zero_grad()
        emb(lib.tensor(rows)).pow(2).sum().backward()
        opt.step()
    return emb.weight.detach().numpy()


def test_lazy_adam_against_numpy(monkeypatch):
    w0 = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    # the dense-gradient warning comes once per process: another test may have had it
    monkeypatch.setattr(cddp.nn.functional, "_sparse_warned", [])
    with pytest.warns(UserWarning, match="sparse"):
        got = _run(cddp, w0, True)
    np.testing.assert_allclose(got, _numpy_reference(w0.astype(np.float64)), rtol=1e-5,
                               atol=1e-6)
    assert (got[4] != w0[4]).all() and (got[2] != w0[2]).all()


def test_matches_torch_sparse_adam():
    torch = pytest.importorskip("torch")
    w0 = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = _run(cddp, w0, True)
    theirs = _run(torch, w0, True)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_arguments():
    p = [cddp.nn.Parameter(cddp.ones(2))]
    with pytest.raises(ValueError, match="learning rate"):
        cddp.optim.SparseAdam(p, lr=0)
    with pytest.raises(ValueError, match="beta parameter at index 1"):
        cddp.optim.SparseAdam(p, betas=(0.9, 1.0))
