"""torch.nn.utils.prune: the reparametrization (weight_orig / weight_mask, the pre-hook that
recomputes weight), masks of each method, the container over repeated pruning, remove,
global_unstructured, custom_from_mask, is_pruned, state_dict keys and error messages.

Oracles: NumPy (the masks each method must give: bottom-k |w|, channel norms, the mask
intersection of repeated pruning, mask * orig in forward), and torch when installed: the
same seed and script give the same masks for the random methods too (cddp's rand /
rand_like draw what torch's do).
"""
import numpy as np
import pytest

import cddp
from cddp import nn
from cddp.nn.utils import prune

try:
    import torch
    import torch.nn.utils.prune  # noqa: F401 (torch loads it on request only)
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


def arr(x):
    return np.array(x.detach().numpy(), copy=True)


def scenario(lib):
    """A Linear pruned four times, a forward, remove; then global and custom pruning."""
    P = lib.nn.utils.prune
    out = {}
    lib.manual_seed(0)
    lin = lib.nn.Linear(6, 4)
    out["w0"] = arr(lin.weight)
    P.random_unstructured(lin, "weight", amount=0.3)
    out["keys"] = list(lin.state_dict().keys())
    out["params"] = [k for k, _ in lin.named_parameters()]
    out["m1"] = arr(lin.weight_mask)
    P.l1_unstructured(lin, "weight", amount=5)
    out["m2"] = arr(lin.weight_mask)
    P.random_structured(lin, "weight", amount=1, dim=0)
    out["m3"] = arr(lin.weight_mask)
    P.ln_structured(lin, "weight", amount=0.34, n=2, dim=1)
    out["m4"] = arr(lin.weight_mask)
    hooks = list(lin._forward_pre_hooks.values())
    out["container"] = (type(hooks[0]).__name__, len(hooks[0]), len(hooks))
    with lib.no_grad():
        lin.weight_orig.add_(1.0)          # forward sees mask * (new orig)
    out["y"] = arr(lin(lib.ones(2, 6)))
    out["pruned"] = P.is_pruned(lin)
    P.remove(lin, "weight")
    out["after"] = (list(lin.state_dict().keys()), P.is_pruned(lin), arr(lin.weight),
                    type(lin.weight).__name__)
    lib.manual_seed(1)
    m1, m2 = lib.nn.Linear(3, 2), lib.nn.Linear(2, 2)
    P.global_unstructured([(m1, "weight"), (m2, "weight")],
                          pruning_method=P.L1Unstructured, amount=4)
    out["global"] = (arr(m1.weight), arr(m1.weight_mask), arr(m2.weight), arr(m2.weight_mask))
    c = lib.nn.Conv2d(2, 3, 2)
    P.custom_from_mask(c, "bias", lib.tensor([1.0, 0.0, 1.0]))
    out["custom"] = arr(c.bias)
    P.identity(c, "weight")
    out["identity"] = float(c.weight_mask.sum())
    return out


def test_prune_numpy():
    out = scenario(cddp)
    w0 = out["w0"]
    assert out["keys"] == ["bias", "weight_orig", "weight_mask"]
    assert out["params"] == ["bias", "weight_orig"]
    m1, m2, m3, m4 = out["m1"], out["m2"], out["m3"], out["m4"]
    assert m1.sum() == 24 - round(0.3 * 24)
    # l1 prunes the 5 smallest |w| among the entries m1 kept
    kept = np.flatnonzero(m1.reshape(-1))
    order = kept[np.argsort(np.abs(w0.reshape(-1)[kept]))]
    expect = m1.reshape(-1).copy()
    expect[order[:5]] = 0
    np.testing.assert_array_equal(m2.reshape(-1), expect)
    # random_structured drops one whole row more, among the rows still alive
    dropped = [r for r in range(4) if m3[r].sum() == 0 and m2[r].sum() != 0]
    assert len(dropped) == 1 and np.array_equal(m3 * m2, m3)
    rows = [r for r in range(4) if r != dropped[0]]
    np.testing.assert_array_equal(m3[rows], m2[rows])
    # ln_structured (dim=1) on the columns still alive: drops round(0.34 * alive) of the
    # smallest L2 norms of the importance scores, the weight as pruned so far (mask * orig)
    alive = [c for c in range(6) if m3[:, c].sum() != 0]
    norms = np.linalg.norm((w0 * m3)[:, alive], axis=0)
    ndrop = round(0.34 * len(alive))
    drop = [alive[i] for i in np.argsort(norms)[:ndrop]]
    expect = m3.copy()
    expect[:, drop] = 0
    np.testing.assert_array_equal(m4, expect)
    assert out["container"] == ("PruningContainer", 4, 1)
    b = out["y"][0] - ((w0 + 1) * m4).sum(1)
    np.testing.assert_allclose(out["y"], np.tile(((w0 + 1) * m4).sum(1) + b, (2, 1)),
                               rtol=1e-5)
    assert out["pruned"]
    keys, pruned, w, kind = out["after"]
    assert keys == ["bias", "weight"] and not pruned and kind == "Parameter"
    np.testing.assert_allclose(w, (w0 + 1) * m4, rtol=1e-6)
    g1, gm1, g2, gm2 = out["global"]
    allw = np.abs(np.concatenate([g1.reshape(-1), g2.reshape(-1)]))
    assert np.concatenate([gm1.reshape(-1), gm2.reshape(-1)]).sum() == 6
    np.testing.assert_array_equal(np.concatenate([gm1.reshape(-1), gm2.reshape(-1)]) == 0,
                                  allw < np.sort(allw)[4])
    assert out["custom"][1] == 0 and out["custom"][0] != 0
    assert out["identity"] == 24.0


@needs_torch
def test_prune_same_as_torch():
    ours, theirs = scenario(cddp), scenario(torch)
    assert ours.keys() == theirs.keys()
    for k in ours:
        a, b = ours[k], theirs[k]
        if isinstance(a, tuple):
            for u, v in zip(a, b):
                if isinstance(u, np.ndarray):
                    np.testing.assert_allclose(u, v, rtol=1e-6, err_msg=k)
                else:
                    assert u == v, k
        elif isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=k)
        else:
            assert a == b, k


def test_prune_gradient_flows_to_orig():
    lin = nn.Linear(3, 2)
    mask = cddp.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    prune.custom_from_mask(lin, "weight", mask)
    x = cddp.ones(4, 3)
    lin(x).sum().backward()
    np.testing.assert_array_equal(lin.weight_orig.grad.numpy(), 4 * mask.numpy())
    assert not lin.weight_mask.requires_grad
    # the pruned tensor is a plain attribute, recomputed from orig on each call
    assert "weight" not in dict(lin.named_parameters())


def test_prune_errors():
    with pytest.raises(TypeError, match="Invalid type for amount"):
        prune.RandomUnstructured(amount="a")
    with pytest.raises(ValueError, match=r"amount=1.5 should either be a float in the range"):
        prune.L1Unstructured(amount=1.5)
    lin = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="amount=5 should be smaller than the number of "
                                         "parameters to prune=4"):
        prune.l1_unstructured(lin, "weight", amount=5)
    assert "weight" in dict(lin.named_parameters())      # left as it was
    with pytest.raises(ValueError, match="Structured pruning can only be applied to "
                                         "multidimensional tensors"):
        prune.ln_structured(lin, "bias", amount=1, n=1, dim=0)
    with pytest.raises(ValueError, match="Parameter 'weight' of module"):
        prune.remove(lin, "weight")
    with pytest.raises(TypeError, match='Only "unstructured" PRUNING_TYPE'):
        prune.global_unstructured([(lin, "weight")], pruning_method=prune.LnStructured,
                                  amount=1, n=1, dim=0)
    # prune() on a bare tensor leaves it alone and returns the pruned copy
    t = cddp.tensor([3.0, -1.0, 2.0])
    np.testing.assert_array_equal(prune.L1Unstructured(amount=1).prune(t).numpy(),
                                  [3.0, 0.0, 2.0])
    np.testing.assert_array_equal(t.numpy(), [3.0, -1.0, 2.0])
