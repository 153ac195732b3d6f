"""The transformer stack: F.layer_norm / nn.LayerNorm (csrc/nn/layer_norm.c), the
TransformerEncoder/Decoder layers, nn.Transformer, and a small GPT trained with AdamW.

Oracles: NumPy (layer norm's math) and finite differences in float64 without torch; with
torch, the same modules loaded with torch's state_dict (through NumPy arrays) must give the
same outputs and every parameter's gradient, and a small GPT trained 10 steps from torch's
initial weights must give torch's per-step losses: to ~1e-10 relative in float64 (only the
order of floating-point sums differs, and ten AdamW steps amplify that little) and ~1e-5 in
float32 (a few ulps per op through ~40 ops per step). The same GPT under 2-rank DDP must end
with identical weights on both ranks, equal to one process over the same global batch.
"""
import math

import numpy as np
import pytest

import cddp
import cddp.nn as nn
import cddp.nn.functional as F
from conftest import gradcheck, n, t
from ddp_util import load, run_ranks

HAS_GELU = hasattr(F, "gelu")
ACT = "gelu" if HAS_GELU else "relu"     # the GPT's activation; GELU once F.gelu exists


def np_layer_norm(x, nd, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - nd, x.ndim))
    mu = x.mean(axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def copy_state(tmod, cmod):
    """Load torch module tmod's state_dict into cddp module cmod through NumPy arrays."""
    assert list(tmod.state_dict()) == list(cmod.state_dict())
    cmod.load_state_dict({k: cddp.from_numpy(v.detach().numpy().copy())
                          for k, v in tmod.state_dict().items()})


def compare_grads(tmod, cmod, tol):
    tp, cp = dict(tmod.named_parameters()), dict(cmod.named_parameters())
    assert list(tp) == list(cp)
    for name, p in cp.items():
        np.testing.assert_allclose(n(p.grad), tp[name].grad.numpy(), rtol=tol, atol=tol,
                                   err_msg=f"grad of {name}")


# ---- layer_norm ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape,ns", [((4, 6), (6,)), ((2, 3, 4), (3, 4)), ((5,), 5),
                                      ((2, 0, 3), (3,))])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm_against_numpy(shape, ns, affine):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape) * 3 + 1
    nsh = (ns,) if isinstance(ns, int) else ns
    w = rng.standard_normal(nsh) if affine != "none" else None
    b = rng.standard_normal(nsh) if affine == "both" else None
    want = np_layer_norm(x, len(nsh), w, b)
    got = F.layer_norm(t(x), ns, None if w is None else t(w), None if b is None else t(b))
    np.testing.assert_allclose(n(got), want, rtol=1e-12, atol=1e-12)
    got32 = F.layer_norm(t(x.astype(np.float32)), ns,
                         None if w is None else t(w.astype(np.float32)),
                         None if b is None else t(b.astype(np.float32)))
    np.testing.assert_allclose(n(got32), want, rtol=1e-5, atol=1e-5)


def test_layer_norm_gradcheck_and_strided_input():
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s) for s in ((3, 2, 4), (2, 4), (2, 4)))
    gradcheck(lambda a, ww, bb: F.layer_norm(a, (2, 4), ww, bb, eps=1e-3), x, w, b)
    gradcheck(lambda a: F.layer_norm(a, (4,)), x)
    gradcheck(lambda a: F.layer_norm(a.transpose(0, 2), (3,)), x)     # non-contiguous input
    xt = t(x).transpose(0, 2)
    np.testing.assert_allclose(n(F.layer_norm(xt, (3,))), np_layer_norm(n(xt), 1), rtol=1e-12)


def test_layer_norm_errors_match_torch_wording():
    x = cddp.randn(2, 5)
    with pytest.raises(RuntimeError) as e:
        F.layer_norm(x, [4])
    assert str(e.value) == ("Given normalized_shape=[4], expected input with shape [*, 4], but "
                            "got input of size[2, 5]")
    with pytest.raises(RuntimeError, match=r"Expected weight to be of same shape as "
                                           r"normalized_shape, but got weight of shape \[3\] and "
                                           r"normalized_shape = \[5\]"):
        F.layer_norm(x, [5], cddp.ones(3))
    with pytest.raises(RuntimeError, match="Expected bias to be of same shape"):
        F.layer_norm(x, [5], None, cddp.ones(3))
    with pytest.raises(RuntimeError, match="normalized_shape to be at least 1-dimensional"):
        F.layer_norm(x, [])
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 2, 3\]"):
        F.layer_norm(cddp.randn(2, 3, 4), (2, 3))
    with pytest.raises(NotImplementedError,
                       match="\"LayerNormKernelImpl\" not implemented for 'Long'"):
        F.layer_norm(cddp.ones((2, 5), dtype=cddp.int64), [5])
    with pytest.raises(RuntimeError, match="mixed dtype"):
        F.layer_norm(x, [5], cddp.ones(5, dtype=cddp.float64))


def test_layer_norm_module():
    m = nn.LayerNorm([3, 4], eps=1e-6)
    assert m.normalized_shape == (3, 4) and list(m.state_dict()) == ["weight", "bias"]
    np.testing.assert_array_equal(n(m.weight), np.ones((3, 4)))
    np.testing.assert_array_equal(n(m.bias), np.zeros((3, 4)))
    assert repr(m) == "LayerNorm((3, 4), eps=1e-06, elementwise_affine=True, bias=True)"
    assert nn.LayerNorm(4, bias=False).bias is None
    m2 = nn.LayerNorm(4, elementwise_affine=False)
    assert m2.weight is None and list(m2.parameters()) == []
    x = cddp.randn(2, 4, requires_grad=True)
    m2(x).sum().backward()
    np.testing.assert_allclose(n(x.grad), 0, atol=1e-6)   # sum of a normalized row is constant


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,ns", [((4, 16), (16,)), ((2, 3, 5, 6), (5, 6)), ((7, 128), (128,))])
def test_layer_norm_against_torch(torch, dtype, shape, ns):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    tm = torch.nn.LayerNorm(ns, dtype=getattr(torch, dtype))
    cm = nn.LayerNorm(ns, dtype=getattr(cddp, dtype))
    with torch.no_grad():
        tm.weight.normal_()
        tm.bias.normal_()
    copy_state(tm, cm)
    tx, cx = torch.tensor(x, requires_grad=True), t(x, requires_grad=True)
    ty, cy = tm(tx), cm(cx)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(n(cy), ty.detach().numpy(), rtol=tol, atol=tol)
    g = rng.standard_normal(shape).astype(dtype)
    ty.backward(torch.tensor(g))
    cy.backward(t(g))
    np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), rtol=tol, atol=tol)
    compare_grads(tm, cm, tol * 10)     # column sums over rows: float32 rounding adds up


# ---- encoder / decoder layers and nn.Transformer against torch ------------------------------

def _act(torch, name):
    if name == "callable":
        return (lambda x: x.tanh()), torch.tanh
    return name, name


LAYER_CASES = [
    {"batch_first": False, "norm_first": False, "activation": "relu"},
    {"batch_first": True, "norm_first": True, "activation": "relu"},
    {"batch_first": True, "norm_first": False, "activation": "callable", "bias": False},
] + ([{"batch_first": True, "norm_first": True, "activation": "gelu"}] if HAS_GELU else [])


@pytest.mark.parametrize("masks", ["none", "causal", "padding"])
@pytest.mark.parametrize("case", range(len(LAYER_CASES)))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_encoder_against_torch(torch, dtype, case, masks):
    kw = dict(LAYER_CASES[case])
    c_act, t_act = _act(torch, kw.pop("activation"))
    rng = np.random.default_rng(3 + case)
    torch.manual_seed(case)
    d, L, N = 8, 5, 3
    tlayer = torch.nn.TransformerEncoderLayer(d, 2, 16, dropout=0.0, activation=t_act,
                                              dtype=getattr(torch, dtype), **kw)
    clayer = nn.TransformerEncoderLayer(d, 2, 16, dropout=0.0, activation=c_act,
                                        dtype=getattr(cddp, dtype), **kw)
    tdt, cdt = getattr(torch, dtype), getattr(cddp, dtype)
    tm = torch.nn.TransformerEncoder(tlayer, 2, norm=torch.nn.LayerNorm(d, dtype=tdt),
                                     enable_nested_tensor=False)
    cm = nn.TransformerEncoder(clayer, 2, norm=nn.LayerNorm(d, dtype=cdt),
                               enable_nested_tensor=False)
    copy_state(tm, cm)
    x = rng.standard_normal((N, L, d) if kw["batch_first"] else (L, N, d)).astype(dtype)
    targs, cargs = {}, {}
    if masks == "causal":
        targs = {"mask": torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=tdt),
                 "is_causal": True}
        cargs = {"mask": nn.Transformer.generate_square_subsequent_mask(L, dtype=cdt),
                 "is_causal": True}
    elif masks == "padding":
        kpm = np.zeros((N, L), bool)
        kpm[0, 3:] = kpm[2, 1:] = True
        targs = {"src_key_padding_mask": torch.tensor(kpm)}
        cargs = {"src_key_padding_mask": t(kpm)}
    tx, cx = torch.tensor(x, requires_grad=True), t(x, requires_grad=True)
    ty, cy = tm(tx, **targs), cm(cx, **cargs)
    tol = 5e-5 if dtype == "float32" else 1e-11
    np.testing.assert_allclose(n(cy), ty.detach().numpy(), rtol=tol, atol=tol)
    g = rng.standard_normal(ty.shape).astype(dtype)
    ty.backward(torch.tensor(g))
    cy.backward(t(g))
    np.testing.assert_allclose(n(cx.grad), tx.grad.numpy(), rtol=tol, atol=tol)
    compare_grads(tm, cm, tol)


@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_against_torch(torch, batch_first):
    rng = np.random.default_rng(4)
    torch.manual_seed(0)
    tm = torch.nn.Transformer(8, 2, 2, 1, 16, dropout=0.0, batch_first=batch_first,
                              dtype=torch.float64)
    cm = nn.Transformer(8, 2, 2, 1, 16, dropout=0.0, batch_first=batch_first, dtype=cddp.float64)
    copy_state(tm, cm)
    S, T, N = 6, 4, 2
    src = rng.standard_normal((N, S, 8) if batch_first else (S, N, 8))
    tgt = rng.standard_normal((N, T, 8) if batch_first else (T, N, 8))
    mkpm = np.zeros((N, S), bool)
    mkpm[1, 4:] = True
    tmask = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    cmask = nn.Transformer.generate_square_subsequent_mask(T, dtype=cddp.float64)
    np.testing.assert_array_equal(n(cmask), tmask.numpy())
    ts, tt_ = torch.tensor(src, requires_grad=True), torch.tensor(tgt, requires_grad=True)
    cs, ct = t(src, requires_grad=True), t(tgt, requires_grad=True)
    ty = tm(ts, tt_, tgt_mask=tmask, memory_key_padding_mask=torch.tensor(mkpm),
            src_key_padding_mask=torch.tensor(mkpm))
    cy = cm(cs, ct, tgt_mask=cmask, memory_key_padding_mask=t(mkpm),
            src_key_padding_mask=t(mkpm))
    np.testing.assert_allclose(n(cy), ty.detach().numpy(), rtol=1e-11, atol=1e-11)
    g = rng.standard_normal(ty.shape)
    ty.backward(torch.tensor(g))
    cy.backward(t(g))
    compare_grads(tm, cm, 1e-11)
    np.testing.assert_allclose(n(cs.grad), ts.grad.numpy(), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(n(ct.grad), tt_.grad.numpy(), rtol=1e-11, atol=1e-11)


def test_encoder_layer_seeded_dropout_and_eval_match_torch(torch):
    """Dropout > 0 in training: the same seed draws the same masks in the same order as torch
    (attention weights, dropout1, dropout, dropout2); eval turns every dropout off (and torch's
    eval fast path computes the same values)."""
    rng = np.random.default_rng(5)
    torch.manual_seed(1)
    tm = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.2, batch_first=True,
                                          dtype=torch.float64)
    cm = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.2, batch_first=True, dtype=cddp.float64)
    copy_state(tm, cm)
    x = rng.standard_normal((3, 5, 8))
    torch.manual_seed(9)
    cddp.manual_seed(9)
    ty, cy = tm(torch.tensor(x)), cm(t(x))
    np.testing.assert_allclose(n(cy), ty.detach().numpy(), rtol=1e-11, atol=1e-11)
    ty.sum().backward()
    cy.sum().backward()
    compare_grads(tm, cm, 1e-11)
    tm.eval()
    cm.eval()
    with torch.no_grad(), cddp.no_grad():
        np.testing.assert_allclose(n(cm(t(x))), tm(torch.tensor(x)).numpy(), rtol=1e-10,
                                   atol=1e-10)


def test_module_trees_and_state_dict_keys_match_torch(torch):
    assert list(nn.Transformer(8, 2, 1, 1, 16).state_dict()) == \
        list(torch.nn.Transformer(8, 2, 1, 1, 16).state_dict())
    dl = nn.TransformerDecoderLayer(8, 2, 16, bias=False)
    assert list(dl.state_dict()) == list(torch.nn.TransformerDecoderLayer(8, 2, 16, bias=False)
                                         .state_dict())
    assert repr(nn.TransformerEncoderLayer(8, 2, 16)) == \
        repr(torch.nn.TransformerEncoderLayer(8, 2, 16))


def test_transformer_modules_without_torch():
    m = nn.Transformer.generate_square_subsequent_mask(3)
    np.testing.assert_array_equal(n(m), [[0, -np.inf, -np.inf], [0, 0, -np.inf], [0, 0, 0]])
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    with pytest.warns(UserWarning, match="enable_nested_tensor is True, but self.use_nested_tensor "
                                         "is False because encoder_layer.self_attn.batch_first"):
        enc = nn.TransformerEncoder(layer, 3)
    assert [n(p).sum() for p in enc.layers[0].parameters()] == \
        [n(p).sum() for p in enc.layers[2].parameters()]                  # deep copies
    assert enc.layers[0].linear1.weight is not enc.layers[1].linear1.weight
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        nn.Transformer(8, 2, 1, 1, 16)(cddp.randn(3, 2, 8), cddp.randn(3, 4, 8))
    # with a causal src mask the encoder takes the is_causal path: same values as the mask
    x = cddp.randn(5, 2, 8)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    a = enc(x, mask=mask)
    b = enc(x, mask=mask.clone() + 0.0, is_causal=False)
    np.testing.assert_allclose(n(a), n(b), rtol=1e-5, atol=1e-6)


# ---- a small GPT: training steps against torch, then under DDP -----------------------------

GPT_SRC = '''
def make_gpt(lib, vocab=32, d=16, heads=2, layers=2, seq=8, attn="sdpa", act="relu", dropout=0.0):
    """A GPT-2-shaped model for `lib` (torch or cddp): token + position embeddings, pre-norm
    blocks of causal self-attention and an MLP, a final LayerNorm and a linear head."""
    nn, F = lib.nn, lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            if attn == "mha":
                self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
            else:
                self.qkv = nn.Linear(d, 3 * d)
                self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)
            self.drop = nn.Dropout(dropout)

        def forward(self, x, mask):
            B, T, C = x.shape
            h = self.ln1(x)
            if attn == "mha":
                y = self.attn(h, h, h, attn_mask=mask, is_causal=True, need_weights=False)[0]
            else:
                q, k, v = self.qkv(h).split(C, dim=2)
                q, k, v = (z.view(B, T, heads, C // heads).transpose(1, 2) for z in (q, k, v))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                   dropout_p=dropout if self.training else 0.0)
                y = self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            x = x + self.drop(y)
            a = self.fc(self.ln2(x))
            a = F.gelu(a) if act == "gelu" else F.relu(a)
            return x + self.drop(self.fc2(a))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            T = idx.shape[1]
            mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=self.head.weight.dtype)
            x = self.drop(self.tok(idx) + self.pos(lib.arange(T)))
            for b in self.blocks:
                x = b(x, mask)
            return self.head(self.ln_f(x))

    return GPT()


def make_opt(lib, model, lr=1e-2):
    """AdamW with decay on matrices only (no decay on biases, LayerNorm, embeddings)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "tok" not in name and "pos" not in name else no_decay).append(p)
    return lib.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                            {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def train(lib, model, opt, X, Y, steps, vocab=32):
    losses = []
    for s in range(steps):
        opt.zero_grad()
        logits = model(lib.tensor(X[s]))
        loss = lib.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                               lib.tensor(Y[s]).reshape(-1))
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def gpt_data(steps, batch, seq=8, vocab=32, seed=0):
    """Counting sequences (start + step * t) mod vocab: the next token is learnable."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, vocab, (steps, batch, 1))
    step = rng.integers(1, 3, (steps, batch, 1))
    X = (start + step * np.arange(seq + 1)) % vocab
    return X[..., :-1], X[..., 1:]
'''
exec(GPT_SRC)      # noqa: S102 (defines make_gpt, make_opt, train, gpt_data; shared with DDP jobs)


def _torch_gpt_into_cddp(torch, dtype, **kw):
    torch.manual_seed(0)
    tm = make_gpt(torch, **kw).to(getattr(torch, dtype))      # noqa: F821
    cm = make_gpt(cddp, **kw).to(getattr(cddp, dtype))         # noqa: F821
    copy_state(tm, cm)
    return tm, cm


@pytest.mark.parametrize("dtype,attn,dropout", [("float64", "sdpa", 0.0), ("float64", "mha", 0.0),
                                                ("float32", "sdpa", 0.0), ("float64", "mha", 0.1),
                                                ("float64", "sdpa", 0.1)])
def test_gpt_training_matches_torch(torch, dtype, attn, dropout):
    steps = 10
    tm, cm = _torch_gpt_into_cddp(torch, dtype, attn=attn, act=ACT, dropout=dropout)
    X, Y = gpt_data(steps, 4)                                   # noqa: F821
    torch.manual_seed(5)
    cddp.manual_seed(5)
    tl = train(torch, tm, make_opt(torch, tm), X, Y, steps)     # noqa: F821
    cl = train(cddp, cm, make_opt(cddp, cm), X, Y, steps)       # noqa: F821
    assert tl[-1] < tl[0] - 0.1                                 # it learns something
    rtol = 1e-5 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(cl, tl, rtol=rtol, atol=0)
    if dtype == "float32":
        # the key bias's true gradient is 0 (softmax ignores a per-row constant): its float32
        # gradient is rounding noise that AdamW turns into lr-sized steps on either side, so
        # float32 weights are compared through the losses only
        return
    for (name, p), (_, q) in zip(cm.named_parameters(), tm.named_parameters()):
        np.testing.assert_allclose(n(p), q.detach().numpy(), rtol=rtol * 100, atol=rtol * 10,
                                   err_msg=name)


def test_gpt_under_two_rank_ddp_matches_one_process(tmp_path):
    steps, B = 4, 4
    body = "import numpy as np\n" + GPT_SRC + f"""
import os
import cddp
import cddp.distributed as dist
from cddp.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
cddp.manual_seed(100 + rank)                # ranks start different: DDP broadcasts rank 0's
model = DDP(make_gpt(cddp, act={ACT!r}).double(), bucket_cap_mb=0.001)
opt = make_opt(cddp, model.module)
X, Y = gpt_data({steps}, {2 * B})
X, Y = X[:, rank * {B}:(rank + 1) * {B}], Y[:, rank * {B}:(rank + 1) * {B}]
losses = train(cddp, model, opt, X, Y, {steps})
for i, p in enumerate(model.module.parameters()):
    np.save(os.path.join(OUT, f"r{{rank}}_p{{i}}.npy"), p.detach().numpy())
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    cddp.manual_seed(100)
    ref = make_gpt(cddp, act=ACT).double()                       # noqa: F821
    X, Y = gpt_data(steps, 2 * B)                               # noqa: F821
    train(cddp, ref, make_opt(cddp, ref), X, Y, steps)          # noqa: F821
    for i, want in enumerate(ref.parameters()):
        r0, r1 = load(tmp_path, f"r0_p{i}.npy"), load(tmp_path, f"r1_p{i}.npy")
        np.testing.assert_array_equal(r0, r1, err_msg=f"parameter {i} differs between ranks")
        np.testing.assert_allclose(r0, n(want), rtol=1e-10, atol=1e-12,
                                   err_msg=f"parameter {i}: DDP vs one process")
