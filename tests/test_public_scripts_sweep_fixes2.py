"""Differences from torch found by porting public scripts (bentrevett's seq2seq notebooks,
DINO / MoCo, pygcn / pyGAT, labml_nn, PyTorch-GAN, DLRM): each case runs on cddp and, when
installed, on torch (the `lib` fixture), asserting values derived by hand or by NumPy, so both
libraries must give them; the interop cases load cddp's files with torch itself."""
import io
import math

import numpy as np
import pytest


# ---- scalar arguments given as 0-dim tensors (labml_nn's hand-written optimizers) ------------

def test_alpha_and_value_take_a_0_dim_tensor(lib):
    a, b, s = lib.zeros(3), lib.ones(3), lib.tensor(0.5)
    assert a.clone().add_(b, alpha=s).tolist() == [0.5] * 3
    assert lib.add(a, b, alpha=s).tolist() == [0.5] * 3
    assert a.clone().sub_(b, alpha=s).tolist() == [-0.5] * 3
    assert a.clone().addcdiv_(b, b * 2, value=s).tolist() == [0.25] * 3
    assert a.clone().addcmul_(b, b * 3, value=s).tolist() == [1.5] * 3
    assert lib.add(lib.zeros(2, dtype=lib.int64), lib.ones(2, dtype=lib.int64),
                   alpha=lib.tensor(3)).tolist() == [3, 3]
    with pytest.raises((TypeError, RuntimeError)):
        a.add(b, alpha=lib.ones(2))                       # not a scalar


# ---- Optimizer.load_state_dict (labml_nn: resuming a torch.optim.Optimizer subclass) --------

def _custom_optimizer(lib):
    class Plain(lib.optim.Optimizer):
        def __init__(self, params, lr=0.1):
            super().__init__(params, dict(lr=lr))

        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    st = self.state[p]
                    if not st:
                        st["step"] = 0
                        st["buf"] = lib.zeros_like(p)
                    st["step"] += 1
                    st["buf"].mul_(0.5).add_(p.grad)
                    p.data.add_(st["buf"], alpha=-group["lr"] / st["step"])
    return Plain


def test_a_subclass_keeps_its_integer_step_across_load_state_dict(lib):
    Plain = _custom_optimizer(lib)
    p = lib.nn.Parameter(lib.ones(3))
    opt = Plain([p])
    for _ in range(3):
        p.grad = lib.ones(3)
        opt.step()
    opt2 = Plain([p])
    opt2.load_state_dict(opt.state_dict())
    assert type(opt2.state[p]["step"]) is int and opt2.state[p]["step"] == 3
    # the loaded tensors are the state dict's own (torch shares them in one process)
    assert opt2.state[p]["buf"] is opt.state[p]["buf"]
    p.grad = lib.ones(3)
    opt2.step()
    assert opt2.state[p]["step"] == 4


def _adam_steps(p, opt, n):
    for _ in range(n):
        opt.zero_grad()
        (p ** 2).sum().backward()
        opt.step()
    return opt


def test_builtin_adam_resumes_to_the_same_weights(lib):
    w0 = np.random.default_rng(0).standard_normal(4)
    ref = lib.nn.Parameter(lib.tensor(w0))
    _adam_steps(ref, lib.optim.Adam([ref], lr=0.1), 4)
    p = lib.nn.Parameter(lib.tensor(w0))
    o1 = _adam_steps(p, lib.optim.Adam([p], lr=0.1), 2)
    buf = io.BytesIO()
    lib.save(o1.state_dict(), buf)
    o2 = lib.optim.Adam([p], lr=0.1)
    o2.load_state_dict(lib.load(io.BytesIO(buf.getvalue())))
    _adam_steps(p, o2, 2)
    np.testing.assert_array_equal(p.detach().numpy(), ref.detach().numpy())


# ---- x.type(torch.Tensor) (PyTorch-GAN's `Tensor = torch.Tensor; imgs.type(Tensor)`) --------

def test_type_with_the_tensor_class_gives_the_default_dtype(lib):
    assert lib.arange(3).type(lib.Tensor).dtype == lib.float32
    assert lib.ones(2, dtype=lib.float64).type(lib.Tensor).dtype == lib.float32
    assert lib.arange(3).type(lib.Tensor).tolist() == [0.0, 1.0, 2.0]


# ---- scatter(reduce=...) (older GNN aggregation code) ----------------------------------------

def test_scatter_with_reduce_add_and_multiply(lib):
    idx = lib.tensor([[0, 1], [2, 0], [0, 1]])
    src = lib.tensor([[1.0, 2], [3, 4], [5, 6]])
    assert lib.zeros(3, 2).scatter_(0, idx, src, reduce="add").tolist() == \
        [[6, 4], [0, 8], [3, 0]]
    assert lib.ones(3, 2).scatter(0, idx, src, reduce="multiply").tolist() == \
        [[5, 4], [1, 12], [3, 1]]
    assert lib.zeros(3, 2).scatter(0, idx, 2.0, reduce="add").tolist() == \
        [[4, 2], [0, 4], [2, 0]]
    assert lib.ones(5, dtype=lib.int64).scatter(0, lib.tensor([0, 0, 2]), lib.tensor([2, 3, 4]),
                                                reduce="add").tolist() == [6, 1, 5, 1, 1]
    with pytest.raises(RuntimeError, match="add or multiply"):
        lib.zeros(3).scatter(0, lib.tensor([0]), 1.0, reduce="mean")


# ---- segment_reduce (plain-torch GNN pooling) ------------------------------------------------

@pytest.mark.parametrize("reduce,want,with_initial", [
    ("sum", [3, 0, 12], [10, 7, 19]), ("mean", [1.5, math.nan, 4], [5, 7, 19 / 3]),
    ("max", [2, -math.inf, 5], [7, 7, 7]), ("min", [1, math.inf, 3], [1, 7, 3]),
    ("prod", [2, 1, 60], [14, 7, 420])])
def test_segment_reduce(lib, reduce, want, with_initial):
    x = lib.tensor([1.0, 2, 3, 4, 5], dtype=lib.float64)
    lengths = lib.tensor([2, 0, 3])
    np.testing.assert_allclose(lib.segment_reduce(x, reduce, lengths=lengths).numpy(), want)
    np.testing.assert_allclose(lib.segment_reduce(x, reduce, lengths=lengths,
                                                  initial=7.0).numpy(), with_initial)
    np.testing.assert_allclose(
        lib.segment_reduce(x, reduce, offsets=lib.tensor([0, 2, 2, 5])).numpy(), want)


def test_segment_reduce_gradient_and_rows(lib):
    x = lib.tensor([1.0, 2, 3, 4, 5], requires_grad=True)
    y = lib.segment_reduce(x, "max", lengths=lib.tensor([2, 3]))
    y.sum().backward()
    assert y.tolist() == [2, 5] and x.grad.tolist() == [0, 1, 0, 0, 1]
    rows = lib.arange(12.0).reshape(6, 2)
    assert lib.segment_reduce(rows, "sum", lengths=lib.tensor([2, 4])).tolist() == \
        [[2, 4], [28, 32]]
    with pytest.raises(RuntimeError):
        lib.segment_reduce(x, "sum", lengths=lib.tensor([2, 2]))


# ---- the sparse stand-ins (pygcn / pyGAT / plain-torch GraphSAGE) -----------------------------

def test_a_sparse_leaf_gradient_stays_on_its_entries(lib):
    i = lib.tensor([[0, 1, 1, 2], [2, 0, 2, 1]])
    adj = lib.sparse_coo_tensor(i, lib.tensor([1.0, 2, 3, 4]), (3, 3), requires_grad=True)
    lib.sparse.sum(adj).backward()
    held = np.zeros((3, 3))
    held[[0, 1, 1, 2], [2, 0, 2, 1]] = 1
    np.testing.assert_array_equal(adj.grad.to_dense().numpy(), held)


def test_csr_accessors_and_dims(lib):
    dense = lib.tensor([[0.0, 1, 2], [0, 0, 3], [4, 5, 0]])
    csr = dense.to_sparse_csr()
    assert csr.crow_indices().tolist() == [0, 2, 3, 5]
    assert csr.col_indices().tolist() == [1, 2, 2, 0, 1]
    made = lib.sparse_csr_tensor(lib.tensor([0, 2, 3, 5]), lib.tensor([1, 2, 2, 0, 1]),
                                 lib.tensor([1.0, 2, 3, 4, 5]), (3, 3))
    assert made.crow_indices().tolist() == [0, 2, 3, 5]
    coo = dense.to_sparse()
    assert (coo.sparse_dim(), coo.dense_dim()) == (2, 0)
    c = lib.sparse_coo_tensor(lib.tensor([[0, 1]]), lib.tensor([1.0, 2]), (3,), is_coalesced=True)
    assert c.is_coalesced()


def test_sparse_softmax_over_the_specified_entries(lib):
    i = lib.tensor([[0, 0, 1, 2, 2], [1, 2, 2, 0, 1]])
    v = lib.tensor([1.0, 2.0, 0.0, -1.0, 3.0], requires_grad=True)
    s = lib.sparse.softmax(lib.sparse_coo_tensor(i, v, (3, 3)).coalesce(), 1)
    d = s.to_dense()
    e = np.exp
    want = np.array([[0, e(1) / (e(1) + e(2)), e(2) / (e(1) + e(2))],
                     [0, 0, 1.0],                       # a stored zero is an entry
                     [e(-1) / (e(-1) + e(3)), e(3) / (e(-1) + e(3)), 0]])
    np.testing.assert_allclose(d.detach().numpy(), want, rtol=1e-6)
    (d * lib.tensor([[0.0, 1, 0], [0, 0, 0], [0, 0, 0]])).sum().backward()
    p1, p2 = want[0, 1], want[0, 2]
    np.testing.assert_allclose(v.grad.numpy(), [p1 * (1 - p1), -p1 * p2, 0, 0, 0], atol=1e-6)
    ls = lib.sparse.log_softmax(lib.sparse_coo_tensor(i, v, (3, 3)).coalesce(), 1).to_dense()
    np.testing.assert_allclose(ls.detach().numpy()[0], [0, math.log(want[0, 1]),
                                                        math.log(want[0, 2])], rtol=1e-6)


# ---- EmbeddingBag index errors (DLRM) ---------------------------------------------------------

def test_embedding_bag_out_of_range_is_a_runtime_error(lib):
    bag = lib.nn.EmbeddingBag(6, 3)
    for bad in ([1, 7], [-1, 2]):
        with pytest.raises(RuntimeError, match="valid range"):
            bag(lib.tensor(bad), lib.tensor([0]))


# ---- TransformerEncoder's inference fast path (bentrevett's transformer notebooks) ----------

@pytest.mark.parametrize("case", ["eval_no_grad", "final_norm", "train", "grad", "unaligned",
                                  "with_mask"])
def test_transformer_encoder_padded_positions_equal_torchs(case):
    torch = pytest.importorskip("torch")
    import cddp
    outs = []
    for lib in (torch, cddp):
        lib.manual_seed(0)
        layer = lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        enc = lib.nn.TransformerEncoder(layer, 2, norm=lib.nn.LayerNorm(8)
                                        if case == "final_norm" else None,
                                        enable_nested_tensor=True)
        enc.train(case == "train")
        pad = lib.tensor([[False, False, True], [False, True, True]])
        if case == "unaligned":
            pad = lib.tensor([[False, True, False], [False, True, True]])
        kw = {"src_key_padding_mask": pad}
        if case == "with_mask":
            kw["mask"] = lib.zeros(3, 3, dtype=lib.bool)
        x = lib.randn(2, 3, 8)
        if case in ("grad", "train"):
            y = enc(x, **kw).detach()
        else:
            with lib.no_grad():
                y = enc(x, **kw)
        outs.append(y.numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    if case in ("eval_no_grad",):
        assert not outs[1][0, 2].any() and not outs[1][1, 1:].any()


# ---- cddp.save(format="torch") of NumPy scalars (DINO's cosine schedule in param_groups) ----

def test_torch_format_writes_numpy_scalars_as_numbers(tmp_path):
    import cddp
    f = tmp_path / "ck.pt"
    cddp.save({"lr": np.float64(0.25), "n": np.int64(3), "ok": np.bool_(True),
               "w": cddp.ones(2)}, f, format="torch")
    back = cddp.load(f)
    assert back["lr"] == 0.25 and back["n"] == 3 and back["ok"] is True
    torch = pytest.importorskip("torch")
    got = torch.load(f)                                  # weights_only: plain numbers
    assert got["lr"] == 0.25 and type(got["lr"]) is float and got["n"] == 3
    assert got["w"].tolist() == [1.0, 1.0]


# ---- a state dict's _metadata survives cddp.save (junyanz's CycleGAN load_networks) ---------

@pytest.mark.parametrize("fmt", ["cddp", "torch"])
def test_state_dict_metadata_survives_save(tmp_path, fmt):
    import cddp
    model = cddp.nn.Sequential(cddp.nn.Linear(2, 3), cddp.nn.BatchNorm1d(3))
    sd = model.state_dict()
    assert sd._metadata[""] == {"version": 1} and sd._metadata["1"] == {"version": 2}
    f = tmp_path / "sd.pt"
    cddp.save(sd, f, format=fmt)
    back = cddp.load(f)
    assert back._metadata == sd._metadata and list(back) == list(sd)
    if fmt == "torch":
        torch = pytest.importorskip("torch")
        got = torch.load(f)
        assert got._metadata == sd._metadata and list(got) == list(sd)


# ---- deprecated overloads old optimizer code still calls (HashNeRF's RAdam) ----------------

def test_addcmul_addcdiv_and_add_take_the_value_first_forms(lib):
    import warnings
    mk = lambda: (lib.ones(3), lib.tensor([1.0, 2, 3]), lib.tensor([2.0, 2, 4]))   # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b, c = mk()
        assert a.addcmul_(0.5, b, c).tolist() == [2.0, 3.0, 7.0]
        a, b, c = mk()
        assert a.addcdiv(0.5, b, c).tolist() == [1.25, 1.5, 1.375] and a.tolist() == [1.0] * 3
        a, b, c = mk()
        assert lib.addcmul(a, 0.5, b, c).tolist() == [2.0, 3.0, 7.0]
        a, b, c = mk()
        assert lib.add(a, 0.5, b).tolist() == [1.5, 2.0, 2.5]
        assert lib.sub(a, 0.5, b).tolist() == [0.5, 0.0, -0.5]
        assert a.addcdiv_(lib.tensor(0.5), b, c).tolist() == [1.25, 1.5, 1.375]
    if lib.__name__ == "cddp":                      # torch warns once per process
        with pytest.warns(UserWarning, match="deprecated"):
            mk()[0].addcmul_(0.5, mk()[1], mk()[2])


# ---- torch.Tensor(tensor) is an alias (nerf-pytorch: torch.Tensor(pose)) ---------------------

def test_tensor_of_a_tensor_is_a_view(lib):
    d = lib.arange(3, dtype=lib.float64)
    assert lib.Tensor(d).dtype == lib.float64 and lib.Tensor(lib.arange(3)).dtype == lib.int64
    f = lib.zeros(3)
    y = lib.Tensor(f)
    y[0] = 7.0
    assert f[0].item() == 7.0
    x = lib.ones(2, requires_grad=True)
    (lib.Tensor(x) * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


# ---- byte storages (DETR's util.misc.all_gather) ----------------------------------------------

def test_all_gather_style_pickling_through_a_byte_storage(lib):
    import pickle
    data = {"boxes": [1.5, 2.5], "id": 7}
    buf = pickle.dumps(data)
    t = lib.ByteTensor(lib.ByteStorage.from_buffer(buf))
    assert t.dtype == lib.uint8 and t.numel() == len(buf)
    padded = lib.cat([t, lib.zeros(5, dtype=lib.uint8)])
    assert pickle.loads(padded[:len(buf)].numpy().tobytes()) == data
    u = lib.UntypedStorage.from_buffer(buf, dtype=lib.uint8)
    assert len(u) == len(buf)
    f = lib.FloatStorage.from_buffer(np.array([1.5, -2.0], dtype=np.float32).tobytes(),
                                     "native")
    assert f.tolist() == [1.5, -2.0] and f.dtype == lib.float32


# ---- Variable._execution_engine.queue_callback (NVIDIA's apply_gradient_allreduce) ----------

def test_queued_callbacks_run_once_the_backward_is_done(lib):
    Variable = lib.autograd.Variable
    w = lib.nn.Parameter(lib.ones(3))
    seen = []

    def last():
        seen.append("last")

    def cb():
        seen.append(w.grad.tolist())             # the final gradient, after accumulation
        Variable._execution_engine.queue_callback(last)

    w.register_hook(lambda g: Variable._execution_engine.queue_callback(cb))
    (w * 2).sum().backward()
    assert seen == [[2.0, 2.0, 2.0], "last"]
    with pytest.raises(RuntimeError, match="during backward pass"):
        Variable._execution_engine.queue_callback(cb)


# ---- a conv's saved input is the caller's tensor (Tacotron2's .data masking) ----------------

def test_conv_backward_reads_its_input_as_it_is_at_backward():
    torch = pytest.importorskip("torch")
    import cddp
    rng = np.random.default_rng(1)
    xa = rng.standard_normal((2, 5, 4))
    wa = rng.standard_normal((3, 4, 3))
    got = []
    for lib in (torch, cddp):
        x = lib.tensor(xa).transpose(1, 2)                  # (2, 4, 5), not contiguous
        w = lib.tensor(wa, requires_grad=True)
        y = lib.nn.functional.conv1d(x, w)
        x.data.masked_fill_(x.data > 0.5, 0.0)              # after the forward, as Tacotron2
        y.pow(2).sum().backward()
        got.append(w.grad.numpy())
    np.testing.assert_allclose(got[1], got[0], rtol=1e-10)


# ---- embedding(sparse=True) gradients answer by rows (DLRM's hand-written sparse updates) ----

def test_sparse_embedding_gradient_indices_and_values_by_row(lib):
    emb = lib.nn.EmbeddingBag(6, 3, mode="sum", sparse=True)
    with lib.no_grad():
        emb.weight.copy_(lib.arange(18.0).reshape(6, 3) / 10)
    emb(lib.tensor([1, 1, 4, 2]), lib.tensor([0, 2])).pow(2).sum().backward()
    g = emb.weight.grad.coalesce()
    assert g._indices().tolist() == [[1, 2, 4]] and tuple(g._values().shape) == (3, 3)
    dense = g.to_dense().numpy()
    np.testing.assert_allclose(g._values().numpy(), dense[[1, 2, 4]])
    emb.weight.data.index_add_(0, g._indices()[0], -0.1 * g._values())
    want = np.arange(18.0).reshape(6, 3) / 10 - 0.1 * dense
    np.testing.assert_allclose(emb.weight.detach().numpy(), want, rtol=1e-6)
