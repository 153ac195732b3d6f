"""torch.nn.attention.flex_attention on cddp: outputs and log-sum-exp against cddp's own
scaled_dot_product_attention and NumPy (causal, sliding window with a score_mod, document
masks, GQA, rows with nothing kept), gradients by finite differences (query, key, value and a
bias tensor score_mod closes over — torch has no CPU backward here), the block tables of
create_block_mask in closed form; value for value against torch's eager flex_attention and its
BlockMask (tables, str/repr, sparsity, slicing) where torch is installed."""
import math
import warnings

import numpy as np
import pytest

import cddp
import cddp.nn.functional as F
from cddp.nn.attention.flex_attention import (AuxRequest, and_masks, create_block_mask,
                                              create_mask, flex_attention, noop_mask, or_masks)

rng = np.random.default_rng(0)
QN = rng.standard_normal((2, 4, 19, 8)).astype(np.float32)
KN = rng.standard_normal((2, 2, 19, 8)).astype(np.float32)
VN = rng.standard_normal((2, 2, 19, 6)).astype(np.float32)


def causal(b, h, q, kv):
    return q >= kv


def window(b, h, q, kv):
    return abs(q - kv) <= 3


def docs(b, h, q, kv):
    return (q // 5 == kv // 5) | (b == 1)


def rel(score, b, h, q, kv):
    return score + (q - kv) * 0.1 + h * 0.05


def nothing(b, h, q, kv):
    return q < 0


def _reference(q, k, v, keep, bias):
    """NumPy attention: q (B,H,L,E), k/v with H heads already; keep (.., L, S) bool."""
    s = np.einsum("bhle,bhse->bhls", q, k) / math.sqrt(q.shape[-1]) + bias
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)
    p = np.exp(s - m)
    d = p.sum(-1, keepdims=True)
    out = np.einsum("bhls,bhsv->bhlv", p, v) / np.where(d == 0, 1, d)
    lse = np.where(d == 0, -np.inf, np.log(np.where(d == 0, 1, d)) + m)[..., 0]
    return out, lse


def test_causal_equals_sdpa_and_gqa_equals_repeated_heads():
    q, k, v = cddp.tensor(QN), cddp.tensor(KN), cddp.tensor(VN)
    bm = create_block_mask(causal, None, None, 19, 19, BLOCK_SIZE=4)
    out = flex_attention(q, k, v, block_mask=bm, enable_gqa=True)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    want = F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="enable_gqa"):
        flex_attention(q, k, v)


@pytest.mark.parametrize("mask,score_mod,B,H", [(window, rel, None, 4), (docs, None, 2, None),
                                                (nothing, None, 1, 1), (None, rel, None, None)])
def test_against_numpy(mask, score_mod, B, H):
    q, k, v = cddp.tensor(QN), cddp.tensor(KN), cddp.tensor(VN)
    bm = create_block_mask(mask, B, H, 19, 19, BLOCK_SIZE=4) if mask else None
    out, aux = flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, enable_gqa=True,
                              return_aux=AuxRequest(lse=True))
    b, h, qi, ki = np.ogrid[:2, :4, :19, :19]
    keep = np.broadcast_to(mask(b, h, qi, ki), (2, 4, 19, 19)) if mask else True
    bias = (qi - ki) * 0.1 + h * 0.05 if score_mod else 0.0
    want, lse = _reference(QN, np.repeat(KN, 2, 1), np.repeat(VN, 2, 1), keep, bias)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
    got = aux.lse.numpy()
    assert (np.isneginf(got) == np.isneginf(lse)).all()
    fin = np.isfinite(lse)
    np.testing.assert_allclose(got[fin], lse[fin], rtol=1e-5, atol=1e-5)
    if mask is nothing:
        assert out.abs().max().item() == 0


def test_gradients_by_finite_differences():
    g = np.random.default_rng(1)
    q = cddp.tensor(g.standard_normal((1, 2, 5, 3)), requires_grad=True)
    k = cddp.tensor(g.standard_normal((1, 2, 6, 3)), requires_grad=True)
    v = cddp.tensor(g.standard_normal((1, 2, 6, 2)), requires_grad=True)
    table = cddp.tensor(g.standard_normal(11), requires_grad=True)     # relative-position bias

    def mod(score, b, h, qi, ki):
        return score + table[qi - ki + 5]

    bm = create_block_mask(lambda b, h, qi, ki: qi + 1 >= ki, 1, 1, 5, 6, BLOCK_SIZE=2)
    assert cddp.autograd.gradcheck(
        lambda q, k, v, t: flex_attention(q, k, v, score_mod=lambda s, b, h, i, j:
                                          s + t[i - j + 5], block_mask=bm),
        (q, k, v, table), eps=1e-6, atol=1e-5)
    flex_attention(q, k, v, score_mod=mod, block_mask=bm).sum().backward()
    assert table.grad is not None and float(table.grad.abs().sum()) > 0


def test_block_tables_in_closed_form():
    bm = create_block_mask(causal, None, None, 16, 16, BLOCK_SIZE=4)
    assert bm.shape == (1, 1, 16, 16) and bm.BLOCK_SIZE == (4, 4)
    assert bm.kv_num_blocks.tolist() == [[[1, 1, 1, 1]]]                 # the diagonal
    assert bm.kv_indices.tolist() == [[[[0, 1, 2, 3], [1, 0, 2, 3], [2, 0, 1, 3], [3, 0, 1, 2]]]]
    assert bm.full_kv_num_blocks.tolist() == [[[0, 1, 2, 3]]]            # below it
    assert bm.to_dense().tolist() == [[[[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]]]
    assert bm.sparsity() == pytest.approx(37.5)
    assert create_mask(causal, 1, 1, 3, 3).tolist() == [[[[True, False, False],
                                                         [True, True, False],
                                                         [True, True, True]]]]
    both = create_mask(and_masks(causal, window), 1, 1, 8, 8)
    either = create_mask(or_masks(nothing, noop_mask), 1, 1, 8, 8)
    i, j = np.ogrid[:8, :8]
    assert (both.numpy()[0, 0] == ((i >= j) & (abs(i - j) <= 3))).all() and either.all()
    with pytest.raises(RuntimeError, match="sliced BlockMask"):
        bm[0].mask_mod(None, None, None, None)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    from torch.nn.attention import flex_attention as T
    for mask, mod, B, H in [(causal, None, None, None), (window, rel, None, 4),
                            (docs, None, 2, 4), (nothing, None, 1, 1), (None, rel, None, None)]:
        res = []
        for lib, fa in ((torch, T), (cddp, None)):
            q, k, v = lib.tensor(QN), lib.tensor(KN), lib.tensor(VN)
            mk = T.create_block_mask if lib is torch else create_block_mask
            bm = mk(mask, B, H, 19, 19, BLOCK_SIZE=4) if mask else None
            fn = T.flex_attention if lib is torch else flex_attention
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                o, aux = fn(q, k, v, score_mod=mod, block_mask=bm, enable_gqa=True,
                            return_aux=(T.AuxRequest if lib is torch else AuxRequest)(lse=True))
            res.append((o.numpy(), aux.lse.numpy(), bm))
        (a, la, ba), (b, lb, bb) = res
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        assert (np.isneginf(la) == np.isneginf(lb)).all()
        np.testing.assert_allclose(lb[np.isfinite(la)], la[np.isfinite(la)], rtol=1e-5,
                                   atol=1e-5)
        if ba is None:
            continue
        for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                     "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices"):
            assert getattr(ba, name).tolist() == getattr(bb, name).tolist(), name
        assert str(ba) == str(bb) and ba.sparsity() == pytest.approx(bb.sparsity())
        assert repr(ba).replace("torch.", "") == repr(bb).replace("cddp.", "")
        if (B or 1) > 1:
            assert str(ba[1, 2]) == str(bb[1, 2]) and str(ba[:, 1:]) == str(bb[:, 1:])
