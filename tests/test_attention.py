"""F.scaled_dot_product_attention and nn.MultiheadAttention (csrc/nn/sdpa.c, cddp/nn/_mha.py).

Oracles: a NumPy reference of the math (values), central finite differences in float64
(gradients of query, key, value and a float mask), and torch when installed: values and
every gradient over shapes, dtypes, strided inputs, each kind of mask, causal, GQA, and
seeded dropout (cddp draws its dropout noise as torch does, so the runs agree exactly)."""
import math

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t


def np_sdpa(q, k, v, mask=None, causal=False, scale=None, safe=True):
    """The math on NumPy arrays: softmax(q k^T * scale + mask) v (bool mask: True attends)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    L, S = s.shape[-2:]
    if causal:
        s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    m = s.max(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - m)
        p = e / e.sum(-1, keepdims=True)
    if safe:
        p = np.where(np.isneginf(m), 0.0, p)
    return p @ v, p


def rand(rng, *shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


# ---- scaled_dot_product_attention without torch -------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shapes", [((4, 8), (6, 8), (6, 5)),
                                    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 3)),
                                    ((2, 1, 5, 4), (3, 7, 4), (1, 7, 6))])
def test_sdpa_forward_against_numpy(shapes, causal):
    rng = np.random.default_rng(0)
    q, k, v = (rand(rng, *s) for s in shapes)
    want, _ = np_sdpa(q, k, v, causal=causal)
    got = F.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=causal)
    np.testing.assert_allclose(n(got), want, rtol=1e-12, atol=1e-12)
    got32 = F.scaled_dot_product_attention(*(t(a.astype(np.float32)) for a in (q, k, v)),
                                           is_causal=causal)
    assert got32.dtype == cddp.float32
    np.testing.assert_allclose(n(got32), want, rtol=1e-5, atol=1e-5)


def test_sdpa_masks_against_numpy():
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 2, 4, 6), rand(rng, 2, 5, 6), rand(rng, 2, 5, 3)
    bmask = rng.random((2, 4, 5)) > 0.3
    bmask[:, :, 0] = True
    fmask = rand(rng, 4, 5)
    for mask in (bmask, fmask, bmask[0, 0], fmask[:1]):        # full, (L,S), (S,), (1,S)
        want, _ = np_sdpa(q, k, v, mask=mask)
        got = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(mask))
        np.testing.assert_allclose(n(got), want, rtol=1e-12, atol=1e-12)
    want, _ = np_sdpa(q, k, v, mask=fmask, scale=0.3)
    got = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(fmask), scale=0.3)
    np.testing.assert_allclose(n(got), want, rtol=1e-12, atol=1e-12)


def test_sdpa_fully_masked_rows_are_zero_with_zero_grads():
    rng = np.random.default_rng(2)
    q, k, v = rand(rng, 3, 4), rand(rng, 5, 4), rand(rng, 5, 2)
    mask = np.ones((3, 5), bool)
    mask[1] = False
    fmask = np.where(mask, 0.0, -np.inf)
    for m in (mask, fmask):
        qq, kk, vv = (t(a, requires_grad=True) for a in (q, k, v))
        out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=t(m))
        assert not n(out)[1].any() and np.isfinite(n(out)).all()
        out.sum().backward()
        assert not n(qq.grad)[1].any() and np.isfinite(n(kk.grad)).all()


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gradcheck_float64(causal):
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, 2, 3, 4), rand(rng, 2, 5, 4), rand(rng, 2, 5, 3)
    gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal),
              q, k, v)


def test_sdpa_gradcheck_float_mask_broadcast_and_gqa():
    rng = np.random.default_rng(4)
    q, k, v = rand(rng, 1, 4, 3, 2), rand(rng, 2, 2, 4, 2), rand(rng, 2, 2, 4, 3)
    m = rand(rng, 3, 4)
    gradcheck(lambda a, b, c, mm: F.scaled_dot_product_attention(a, b, c, attn_mask=mm,
                                                                 enable_gqa=True), q, k, v, m)


def test_sdpa_strided_inputs_read_in_place():
    rng = np.random.default_rng(5)
    x = rand(rng, 2, 6, 3, 4)                         # (B, L, H, E) -> (B, H, L, E) by strides
    q = t(x).transpose(1, 2)
    kt = t(rand(rng, 2, 3, 4, 6)).transpose(-1, -2)   # column-major matrices
    v = t(rand(rng, 2, 3, 6, 5))[:, :, ::1, :]
    assert not q.is_contiguous() and not kt.is_contiguous()
    want, _ = np_sdpa(n(q), n(kt), n(v))
    np.testing.assert_allclose(n(F.scaled_dot_product_attention(q, kt, v)), want, rtol=1e-12)
    gradcheck(lambda a: F.scaled_dot_product_attention(a.transpose(1, 2), kt, v), x[:1, :3])


def test_sdpa_dropout_statistics_and_determinism():
    rng = np.random.default_rng(6)
    L, S, p = 64, 64, 0.25
    q, k = rand(rng, L, 8), rand(rng, S, 8)
    v = np.eye(S)                                     # out = the dropped-out weights themselves
    _, P = np_sdpa(q, k, v)
    cddp.manual_seed(0)
    out = n(F.scaled_dot_product_attention(t(q), t(k), t(v), dropout_p=p))
    kept = out != 0
    assert abs(1 - kept.mean() - p) < 0.02            # 4096 draws: 4 sigma is about 0.027
    np.testing.assert_allclose(out[kept], P[kept] / (1 - p), rtol=1e-12)
    cddp.manual_seed(0)
    again = n(F.scaled_dot_product_attention(t(q), t(k), t(v), dropout_p=p))
    np.testing.assert_array_equal(out, again)
    assert not n(F.scaled_dot_product_attention(t(q), t(k), t(v), dropout_p=1.0)).any()


def test_sdpa_errors():
    q = cddp.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="all be  at least 2 dimensional"):
        F.scaled_dot_product_attention(cddp.randn(4), cddp.randn(5, 4), cddp.randn(5, 4))
    with pytest.raises(RuntimeError, match="to have the same dtype"):
        F.scaled_dot_product_attention(q, cddp.randn(2, 5, 4, dtype=cddp.float64),
                                       cddp.randn(2, 5, 4))
    # torch 2.13 (CPU) combines an explicit mask with is_causal instead of refusing it
    keep = cddp.tensor([[True, True, False], [True, True, True], [False, True, True]])
    tril = cddp.ones(3, 3, dtype=cddp.bool).tril()
    both = F.scaled_dot_product_attention(q, q, q, attn_mask=keep, is_causal=True)
    np.testing.assert_array_equal(
        both.numpy(), F.scaled_dot_product_attention(q, q, q, attn_mask=keep & tril).numpy())
    fmask = cddp.randn(3, 3)
    both = F.scaled_dot_product_attention(q, q, q, attn_mask=fmask, is_causal=True)
    np.testing.assert_array_equal(both.numpy(), F.scaled_dot_product_attention(
        q, q, q, attn_mask=fmask.masked_fill(~tril, float("-inf"))).numpy())
    with pytest.raises(RuntimeError, match="attn_mask dtype to be bool or float"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=cddp.ones(3, 3, dtype=cddp.int64))
    with pytest.raises(RuntimeError, match="must match|expanded size"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=cddp.ones(4, 3))
    with pytest.raises(RuntimeError, match="must match"):
        F.scaled_dot_product_attention(q, cddp.randn(3, 5, 4), cddp.randn(3, 5, 4))
    with pytest.raises(RuntimeError, match="expected key"):
        F.scaled_dot_product_attention(q, cddp.randn(2, 5, 3), cddp.randn(2, 5, 4))
    with pytest.raises(RuntimeError, match="expected key"):
        F.scaled_dot_product_attention(q, cddp.randn(2, 5, 4), cddp.randn(2, 6, 4))
    with pytest.raises(RuntimeError, match="Number of heads in key and value must divide"):
        F.scaled_dot_product_attention(cddp.randn(1, 4, 3, 2), cddp.randn(1, 3, 3, 2),
                                       cddp.randn(1, 3, 3, 2), enable_gqa=True)
    with pytest.raises(RuntimeError, match="dropout probability has to be between 0 and 1"):
        F.scaled_dot_product_attention(q, q, q, dropout_p=1.5)
    with pytest.raises(RuntimeError, match="float32 or float64"):
        F.scaled_dot_product_attention(*(cddp.ones(2, 2, dtype=cddp.int64),) * 3)


def test_sdpa_empty_and_backward_twice():
    out = F.scaled_dot_product_attention(cddp.randn(2, 0, 4), cddp.randn(2, 3, 4),
                                         cddp.randn(2, 3, 5))
    assert tuple(out.shape) == (2, 0, 5)
    q = cddp.randn(3, 4, requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q)
    out.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()


# ---- scaled_dot_product_attention against torch -------------------------------------------

def _torch_case(torch, arrays, dtype):
    return ([t(a.astype(dtype), requires_grad=True) for a in arrays],
            [torch.tensor(a.astype(dtype), requires_grad=True) for a in arrays])


def _compare(c, tt, tol, what=""):
    np.testing.assert_allclose(n(c), tt.detach().numpy(), rtol=tol, atol=tol, err_msg=what)


CASES = [
    # q shape, k shape, v shape, mask kind, causal, extra kwargs
    ((5, 8), (7, 8), (7, 3), None, False, {}),
    ((2, 5, 8), (2, 7, 8), (2, 7, 8), "bool", False, {}),
    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), "float", False, {"scale": 0.2}),
    ((2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 6, 4), None, True, {}),
    ((2, 3, 7, 4), (2, 3, 4, 4), (2, 3, 4, 4), None, True, {}),       # L > S
    ((2, 3, 4, 4), (2, 3, 7, 4), (2, 3, 7, 4), None, True, {}),       # L < S
    ((2, 4, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3), "bool4", False, {"enable_gqa": True}),
    ((2, 1, 5, 4), (3, 6, 4), (1, 6, 2), "float_grad", False, {}),   # broadcast batch dims
    ((2, 5, 4), (2, 6, 4), (2, 6, 4), "masked_rows", False, {}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_sdpa_against_torch(torch, case, dtype):
    qs, ks, vs, mkind, causal, kw = CASES[case]
    rng = np.random.default_rng(10 + case)
    arrays = [rand(rng, *qs), rand(rng, *ks), rand(rng, *vs)]
    L, S = qs[-2], ks[-2]
    mask_c = mask_t = None
    if mkind in ("bool", "bool4", "masked_rows"):
        m = rng.random((L, S) if mkind != "bool4" else (2, 1, L, S)) > 0.4
        m[..., 0] = mkind != "masked_rows"
        if mkind == "masked_rows":
            m[0] = True
        mask_c, mask_t = t(m), torch.tensor(m)
    elif mkind in ("float", "float_grad"):
        arrays.append(rand(rng, L, S))
    (cs, ts) = _torch_case(torch, arrays, dtype)
    if mkind in ("float", "float_grad"):
        mask_c, mask_t = cs.pop(), ts.pop()
        if mkind == "float":
            mask_c.requires_grad_(False)
            mask_t.requires_grad_(False)
    cout = F.scaled_dot_product_attention(*cs, attn_mask=mask_c, is_causal=causal, **kw)
    tout = torch.nn.functional.scaled_dot_product_attention(*ts, attn_mask=mask_t,
                                                            is_causal=causal, **kw)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    _compare(cout, tout, tol, "output")
    g = rand(rng, *tout.shape, dtype=dtype)
    cout.backward(t(g))
    tout.backward(torch.tensor(g))
    for name, c, tt in zip("qkv", cs, ts):
        _compare(c.grad, tt.grad, tol, f"grad {name}")
    if mkind == "float_grad":
        _compare(mask_c.grad, mask_t.grad, tol, "grad mask")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_seeded_dropout_matches_torch(torch, dtype):
    rng = np.random.default_rng(20)
    arrays = [rand(rng, 2, 3, 5, 4), rand(rng, 2, 3, 6, 4), rand(rng, 2, 3, 6, 4)]
    cs, ts = _torch_case(torch, arrays, dtype)
    cddp.manual_seed(11)
    torch.manual_seed(11)
    cout = F.scaled_dot_product_attention(*cs, dropout_p=0.3)
    tout = torch.nn.functional.scaled_dot_product_attention(*ts, dropout_p=0.3)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    _compare(cout, tout, tol)
    cout.sum().backward()
    tout.sum().backward()
    for c, tt in zip(cs, ts):
        _compare(c.grad, tt.grad, tol)


# ---- nn.MultiheadAttention against torch --------------------------------------------------

def copy_state(tmod, cmod):
    """Load torch module tmod's state_dict into cddp module cmod through NumPy arrays."""
    cmod.load_state_dict({k: cddp.from_numpy(v.detach().numpy().copy())
                          for k, v in tmod.state_dict().items()})


def compare_grads(tmod, cmod, tol):
    tp = dict(tmod.named_parameters())
    cp = dict(cmod.named_parameters())
    assert list(tp) == list(cp)
    for name, p in cp.items():
        if tp[name].grad is None:
            assert p.grad is None or not n(p.grad).any(), name
            continue
        np.testing.assert_allclose(n(p.grad), tp[name].grad.numpy(), rtol=tol, atol=tol,
                                   err_msg=f"grad of {name}")


MHA_CASES = [
    # ctor kwargs, forward kwargs (masks as names), query/key shapes
    ({}, {}, "self"),
    ({"batch_first": True}, {"need_weights": False}, "self"),
    ({"batch_first": True}, {"average_attn_weights": False, "attn_mask": "bool2"}, "self"),
    ({}, {"key_padding_mask": "kpm_bool", "attn_mask": "bool2"}, "cross"),
    ({"batch_first": True}, {"key_padding_mask": "kpm_float", "attn_mask": "float3",
                             "need_weights": False}, "cross"),
    ({"kdim": 5, "vdim": 3}, {"attn_mask": "float2"}, "kvdim"),
    ({"add_bias_kv": True, "add_zero_attn": True}, {"key_padding_mask": "kpm_bool",
                                                    "attn_mask": "bool3"}, "cross"),
    ({"bias": False, "batch_first": True}, {"attn_mask": "causal", "is_causal": True,
                                            "need_weights": False}, "self"),
    ({}, {"attn_mask": "causal", "is_causal": True}, "self"),
    ({}, {"key_padding_mask": "kpm_bool"}, "unbatched"),
]


def _mha_inputs(rng, case, bf, L=5, S=6, N=3, E=8, H=2):
    kind = case
    if kind == "unbatched":
        q = rand(rng, L, E)
        return q, q, q, L, L, None
    if kind == "self":
        S = L
    kdim, vdim = (5, 3) if kind == "kvdim" else (E, E)
    shp = (lambda T, D: (N, T, D)) if bf else (lambda T, D: (T, N, D))
    q = rand(rng, *shp(L, E))
    if kind == "self":
        return q, q, q, L, L, N
    k = rand(rng, *shp(S, kdim))
    v = k if kind == "cross" else rand(rng, *shp(S, vdim))
    return q, k, v, L, S, N


def _mha_mask(rng, name, L, S, N, H):
    if name == "bool2":
        m = rng.random((L, S)) > 0.6
        m[:, 0] = False
        return m
    if name == "bool3":
        m = rng.random((N * H, L, S)) > 0.6
        m[..., 0] = False
        return m
    if name == "float2":
        return rand(rng, L, S)
    if name == "float3":
        return rand(rng, N * H, L, S)
    if name == "causal":
        return np.triu(np.full((L, S), -np.inf), 1)
    if name == "kpm_bool":
        m = rng.random((N, S) if N else (S,)) > 0.6
        m[..., 0] = False
        return m
    if name == "kpm_float":
        return rand(rng, N, S)
    raise AssertionError(name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", range(len(MHA_CASES)))
def test_multihead_attention_against_torch(torch, case, dtype):
    ctor, fwd, kind = MHA_CASES[case]
    rng = np.random.default_rng(30 + case)
    E, H = 8, 2
    tdt, cdt = getattr(torch, dtype), getattr(cddp, dtype)
    tm = torch.nn.MultiheadAttention(E, H, dtype=tdt, **ctor)
    cm = nn.MultiheadAttention(E, H, dtype=cdt, **ctor)
    assert list(tm.state_dict()) == list(cm.state_dict())
    copy_state(tm, cm)
    q, k, v, L, S, N = _mha_inputs(rng, kind, ctor.get("batch_first", False))
    fwd = dict(fwd)
    for key in ("attn_mask", "key_padding_mask"):
        if key in fwd:
            m = _mha_mask(rng, fwd[key], L, S, N, H)
            fwd[key] = (t(m if m.dtype == bool else m.astype(dtype)),
                        torch.tensor(m if m.dtype == bool else m.astype(dtype)))
    cf = {k_: (v_[0] if isinstance(v_, tuple) else v_) for k_, v_ in fwd.items()}
    tf = {k_: (v_[1] if isinstance(v_, tuple) else v_) for k_, v_ in fwd.items()}
    arrays = [q] if kind in ("self", "unbatched") else ([q, k] if kind == "cross" else [q, k, v])
    cs, ts = _torch_case(torch, arrays, dtype)
    cargs = cs * 3 if len(cs) == 1 else (cs + [cs[1]] if len(cs) == 2 else cs)
    targs = ts * 3 if len(ts) == 1 else (ts + [ts[1]] if len(ts) == 2 else ts)
    cout, cw = cm(*cargs, **cf)
    tout, tw = tm(*targs, **tf)
    tol = 3e-5 if dtype == "float32" else 1e-11
    _compare(cout, tout, tol, "output")
    assert (cw is None) == (tw is None)
    if tw is not None:
        assert tuple(cw.shape) == tuple(tw.shape)
        _compare(cw, tw, tol, "weights")
    g = rand(rng, *tout.shape, dtype=dtype)
    loss_c = (cout * t(g)).sum() + (0 if cw is None else (cw * cw).sum())
    loss_t = (tout * torch.tensor(g)).sum() + (0 if tw is None else (tw * tw).sum())
    loss_c.backward()
    loss_t.backward()
    compare_grads(tm, cm, tol)
    for c, tt in zip(cs, ts):
        _compare(c.grad, tt.grad, tol, "input grad")


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_seeded_dropout_train_and_eval(torch, need_weights):
    rng = np.random.default_rng(40)
    tm = torch.nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True, dtype=torch.float64)
    cm = nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True, dtype=cddp.float64)
    copy_state(tm, cm)
    x = rand(rng, 3, 5, 8)
    (cx,), (tx,) = _torch_case(torch, [x], np.float64)
    torch.manual_seed(3)
    cddp.manual_seed(3)
    cout, _ = cm(cx, cx, cx, need_weights=need_weights)
    tout, _ = tm(tx, tx, tx, need_weights=need_weights)
    _compare(cout, tout, 1e-11)
    cout.sum().backward()
    tout.sum().backward()
    compare_grads(tm, cm, 1e-11)
    cm.eval()
    tm.eval()
    with cddp.no_grad():
        e1 = cm(cx, cx, cx, need_weights=need_weights)[0]
        e2 = cm(cx, cx, cx, need_weights=need_weights)[0]
    np.testing.assert_array_equal(n(e1), n(e2))           # eval: no dropout
    with torch.no_grad():
        _compare(e1, tm(tx, tx, tx, need_weights=need_weights)[0], 1e-11)


def test_multihead_attention_fully_masked_rows_like_torch(torch):
    tm = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64)
    cm = nn.MultiheadAttention(4, 2, dtype=cddp.float64)
    copy_state(tm, cm)
    x = np.random.default_rng(41).standard_normal((3, 1, 4))
    m = np.zeros((3, 3), bool)
    m[1] = True                                            # row 1 may attend to nothing
    for nw in (True, False):
        c = cm(t(x), t(x), t(x), attn_mask=t(m), need_weights=nw)
        tt = tm(torch.tensor(x), torch.tensor(x), torch.tensor(x), attn_mask=torch.tensor(m),
                need_weights=nw)
        np.testing.assert_array_equal(np.isnan(n(c[0])), np.isnan(tt[0].detach().numpy()))
        np.testing.assert_allclose(n(c[0]), tt[0].detach().numpy(), rtol=1e-12, atol=1e-12)


def test_multihead_attention_init_names_and_errors():
    cddp.manual_seed(0)
    m = nn.MultiheadAttention(8, 2)
    assert list(m.state_dict()) == ["in_proj_weight", "in_proj_bias", "out_proj.weight",
                                    "out_proj.bias"]
    assert not n(m.in_proj_bias).any() and not n(m.out_proj.bias).any()
    bound = math.sqrt(6 / (8 + 24))                        # xavier_uniform_ on (24, 8)
    assert np.abs(n(m.in_proj_weight)).max() <= bound
    m2 = nn.MultiheadAttention(8, 2, kdim=5, vdim=3, add_bias_kv=True, bias=False)
    assert list(m2.state_dict()) == ["q_proj_weight", "k_proj_weight", "v_proj_weight",
                                     "bias_k", "bias_v", "out_proj.weight"]
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        nn.MultiheadAttention(7, 2)
    with pytest.raises(ValueError, match="must be greater than 0"):
        nn.MultiheadAttention(0, 2)
    x = cddp.randn(4, 2, 8)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(x, x, x, is_causal=True)
    with pytest.raises(RuntimeError, match="The shape of the 2D attn_mask is"):
        m(x, x, x, attn_mask=cddp.zeros(3, 4))
    with pytest.raises(AssertionError, match="only bool and floating types of attn_mask"):
        m(x, x, x, attn_mask=cddp.zeros((4, 4), dtype=cddp.int64))
    with pytest.raises(AssertionError, match="expected `key` and `value` to be 3-D"):
        m(x, cddp.randn(4, 8), x)
    with pytest.raises(AssertionError, match="Expected key_padded_mask.shape\\[1\\] to be 4"):
        m(x, x, x, key_padding_mask=cddp.zeros((2, 3), dtype=cddp.bool))
    with pytest.warns(UserWarning, match="Support for mismatched key_padding_mask and attn_mask"):
        m(x, x, x, key_padding_mask=cddp.zeros((2, 4), dtype=cddp.bool),
          attn_mask=cddp.zeros(4, 4))


def test_merge_masks_like_torch(torch):
    rng = np.random.default_rng(42)
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    cm = nn.MultiheadAttention(8, 2, batch_first=True)
    q = rng.standard_normal((3, 4, 8)).astype(np.float32)
    am, kpm = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((3, 4))
    kpm = kpm.astype(np.float32)
    for a, k in ((am, None), (None, kpm), (am, kpm), (rng.standard_normal((6, 4, 4))
                                                     .astype(np.float32), kpm)):
        cmask, ctype = cm.merge_masks(None if a is None else t(a), None if k is None else t(k),
                                      t(q))
        tmask, ttype = tm.merge_masks(None if a is None else torch.tensor(a),
                                      None if k is None else torch.tensor(k), torch.tensor(q))
        assert ctype == ttype
        np.testing.assert_array_equal(n(cmask), tmask.numpy())


def test_sdpa_kernel_sets_the_backend_flags_for_the_block():
    from cddp.nn.attention import SDPBackend, sdpa_kernel
    flags = cddp.backends.cuda
    q = cddp.randn(2, 3, 5, 8)
    k, v = cddp.randn(2, 3, 6, 8), cddp.randn(2, 3, 6, 8)
    want = n(F.scaled_dot_product_attention(q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        assert flags.math_sdp_enabled() and not flags.flash_sdp_enabled()
        assert not flags.mem_efficient_sdp_enabled() and not flags.cudnn_sdp_enabled()
        np.testing.assert_array_equal(n(F.scaled_dot_product_attention(q, k, v)), want)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        assert flags.flash_sdp_enabled() and flags.mem_efficient_sdp_enabled()
        assert not flags.math_sdp_enabled()
    assert flags.flash_sdp_enabled() and flags.math_sdp_enabled()      # restored
    with pytest.raises(AssertionError, match="SDPBackend"):
        with sdpa_kernel("math"):
            pass
    assert int(SDPBackend.CUDNN_ATTENTION) == 3 and int(SDPBackend.ERROR) == -1
