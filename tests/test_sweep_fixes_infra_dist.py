"""What the fifteenth session's sweeps of training infrastructure, distributed error paths and
torchvision's model code found: double backward through non-reentrant checkpoints, unpack
hooks that raise in multi-input backward functions, torch's collate extension point, global
optimizer step hooks, complex tensors in collectives, torch's p2p argument checks and error
types, readable errors for corrupt object payloads and late ranks, and the names torchvision
calls (_C._log_api_usage_once, tensor_split's keywords, ...).

Oracles: single-process references (no checkpoint, NumPy), closed forms, torch 2.13 where
installed (importorskip) for the names and their behaviour."""
import collections
import json
import warnings

import numpy as np
import pytest

import cddp
from cddp.autograd.graph import saved_tensors_hooks
from ddp_util import run_ranks


# ---- checkpoint + double backward ----------------------------------------------------------------

def _gp_grads(ckpt, reentrant_free=True):
    cddp.manual_seed(0)
    net1 = cddp.nn.Sequential(cddp.nn.Linear(5, 8), cddp.nn.Tanh(), cddp.nn.Linear(8, 8),
                              cddp.nn.Softplus())
    net2 = cddp.nn.Sequential(cddp.nn.Linear(8, 4), cddp.nn.SiLU(), cddp.nn.Linear(4, 1))
    x = cddp.tensor(np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5), requires_grad=True)
    run = (lambda f, t: cddp.utils.checkpoint.checkpoint(f, t, use_reentrant=False)) if ckpt \
        else (lambda f, t: f(t))
    out = run(net2, run(net1, x)).sum()
    g, = cddp.autograd.grad(out, x, create_graph=True)
    ((g.norm(2, dim=1) - 1) ** 2).mean().add(out).backward()
    return [p.grad.numpy().copy() for p in [*net1.parameters(), *net2.parameters()]] + \
        [x.grad.numpy().copy()]


def test_gradient_penalty_through_non_reentrant_checkpoints_equals_no_checkpoint():
    for a, b in zip(_gp_grads(True), _gp_grads(False)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_double_backward_through_nested_checkpoints_is_exact():
    x = cddp.tensor([1.0, 2.0], requires_grad=True)
    ck = cddp.utils.checkpoint.checkpoint
    y = ck(lambda t: ck(lambda u: u ** 3, t, use_reentrant=False), x, use_reentrant=False)
    g, = cddp.autograd.grad(y.sum(), x, create_graph=True)
    g.sum().backward()
    np.testing.assert_array_equal(g.detach().numpy(), [3.0, 12.0])       # 3x^2
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 12.0])           # 6x


def test_first_order_checkpoint_still_frees_the_recomputed_graph():
    # without create_graph the recomputation is detached: differentiating it again must fail
    x = cddp.tensor([1.0, 2.0], requires_grad=True)
    y = cddp.utils.checkpoint.checkpoint(lambda t: (t * 2).sin(), x, use_reentrant=False)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos(2 * np.array([1.0, 2.0])), rtol=1e-6)


@pytest.mark.parametrize("name,fn", [
    ("linear", lambda x: cddp.nn.functional.linear(x, x)),
    ("conv", lambda x: cddp.nn.functional.conv2d(x.reshape(1, 1, 2, 2), x.reshape(1, 1, 2, 2))),
    ("layer_norm", lambda x: cddp.nn.functional.layer_norm(x, (2,), x[0], x[1])),
    ("batch_norm", lambda x: cddp.nn.functional.batch_norm(x, None, None, x[0], x[1],
                                                          training=True)),
    ("group_norm", lambda x: cddp.nn.functional.group_norm(x.reshape(1, 2, 2), 1, x[0], x[1])),
    ("prelu", lambda x: cddp.nn.functional.prelu(x, x[0, :1])),
    ("softmax", lambda x: cddp.softmax(x, 1) * x),
    ("sdpa", lambda x: cddp.nn.functional.scaled_dot_product_attention(x[None], x[None],
                                                                        x[None])),
    ("cross_entropy", lambda x: cddp.nn.functional.cross_entropy(x, cddp.tensor([0, 1]),
                                                                  weight=x[0].detach().abs())),
])
def test_an_unpack_hook_that_raises_surfaces_as_its_exception(name, fn):
    def unpack(_):
        raise KeyError("unpack refused")
    x = cddp.tensor([[0.5, -1.0], [2.0, 1.5]], requires_grad=True)
    with saved_tensors_hooks(lambda t: t, unpack):
        y = fn(x)
    with pytest.raises(KeyError, match="unpack refused"):
        y.sum().backward()


def test_selective_checkpoint_contexts_recompute_everything_with_the_same_gradients():
    import functools
    from cddp.utils.checkpoint import (CheckpointPolicy, SelectiveCheckpointContext,
                                       checkpoint, create_selective_checkpoint_contexts)
    assert SelectiveCheckpointContext(is_recompute=True).is_recompute
    x = cddp.tensor([0.3, 1.2], requires_grad=True)
    with pytest.warns(UserWarning, match="policy is not applied"):
        ctx = functools.partial(create_selective_checkpoint_contexts,
                                lambda c, op, *a, **k: CheckpointPolicy.MUST_SAVE)
        y = checkpoint(lambda t: (t * 2).sin() * t, x, use_reentrant=False, context_fn=ctx)
    y.sum().backward()
    v = np.array([0.3, 1.2])
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos(2 * v) * v + np.sin(2 * v),
                               rtol=1e-6)
    with pytest.raises(TypeError):
        create_selective_checkpoint_contexts(3)


# ---- collate, optimizer hooks, small names -------------------------------------------------------

def test_collate_fn_map_extends_default_collate():
    from cddp.utils.data._utils.collate import collate, default_collate_fn_map

    class Pt:
        def __init__(self, v):
            self.v = v
    fmap = {**default_collate_fn_map,
            Pt: lambda batch, *, collate_fn_map=None: [b.v for b in batch]}
    got = collate([(Pt(1), cddp.tensor(1.0)), (Pt(2), cddp.tensor(2.0))], collate_fn_map=fmap)
    assert got[0] == [1, 2] and got[1].tolist() == [1.0, 2.0]
    Row = collections.namedtuple("Row", "a b")
    got = cddp.utils.data.default_collate([Row(np.float32(1), {"k": 2.5}), Row(np.float32(3),
                                                                              {"k": 0.5})])
    assert got.a.dtype == cddp.float32 and got.a.tolist() == [1.0, 3.0]
    assert got.b["k"].dtype == cddp.float64 and got.b["k"].tolist() == [2.5, 0.5]
    with pytest.raises(TypeError, match="found <U1"):
        cddp.utils.data.default_collate([np.array(["a"]), np.array(["b"])])


def test_worker_module_names_resolve():
    from cddp.utils.data._utils.worker import WorkerInfo, get_worker_info
    assert get_worker_info() is None and WorkerInfo.__name__ == "_WorkerInfo"


def test_global_optimizer_step_hooks_run_around_every_optimizer():
    from cddp.optim.optimizer import (register_optimizer_step_post_hook,
                                      register_optimizer_step_pre_hook)
    seen = []
    p = cddp.nn.Parameter(cddp.ones(2))
    opt = cddp.optim.SGD([p], lr=0.5)
    opt.register_step_pre_hook(lambda o, a, k: seen.append("own pre"))
    opt.register_step_post_hook(lambda o, a, k: seen.append("own post"))
    h1 = register_optimizer_step_pre_hook(lambda o, a, k: seen.append(("pre", type(o).__name__)))
    h2 = register_optimizer_step_post_hook(lambda o, a, k: seen.append(("post", p.tolist())))
    try:
        p.grad = cddp.ones(2)
        opt.step()
    finally:
        h1.remove()
        h2.remove()
    assert seen == [("pre", "SGD"), "own pre", "own post", ("post", [0.5, 0.5])]
    opt.step()
    assert len(seen) == 6


def test_duplicate_parameters_in_a_group_warn():
    p = cddp.nn.Parameter(cddp.ones(1))
    with pytest.warns(UserWarning, match="duplicate parameters"):
        cddp.optim.SGD([p, p], lr=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cddp.optim.SGD([p], lr=1.0)


def test_prefetch_factor_attribute():
    ds = cddp.utils.data.TensorDataset(cddp.arange(4))
    assert cddp.utils.data.DataLoader(ds).prefetch_factor is None
    assert cddp.utils.data.DataLoader(ds, num_workers=2).prefetch_factor == 2
    assert cddp.utils.data.DataLoader(ds, num_workers=2, prefetch_factor=3).prefetch_factor == 3


def test_module_paths_and_memory_format_helpers():
    from cddp.nn.utils.clip_grad import clip_grad_norm_
    p = cddp.nn.Parameter(cddp.ones(4))
    p.grad = cddp.full((4,), 3.0)
    assert clip_grad_norm_([p], 1.0).item() == pytest.approx(6.0)
    np.testing.assert_allclose(p.grad.numpy(), np.full(4, 0.5), rtol=1e-5)
    m = cddp.nn.Conv2d(2, 2, 3)
    assert cddp.nn.utils.convert_conv2d_weight_memory_format(m, cddp.channels_last) is m


def test_torchvision_support_names():
    cddp._C._log_api_usage_once("torchvision.models.resnet")          # a no-op, as torch's
    assert cddp._C._get_tracing_state() is None
    assert cddp.jit._script_if_tracing(len) is len
    assert cddp._shape_as_tensor(cddp.zeros(2, 3)).tolist() == [2, 3]
    from cddp.fx.graph_module import _copy_attr, _CodeOnlyModule  # noqa: F401
    src, dst = cddp.nn.Sequential(cddp.nn.Linear(2, 2)), cddp.nn.Module()
    _copy_attr(src, dst, "0.weight")
    assert getattr(dst, "0").weight is src[0].weight


def test_tensor_split_keyword_forms():
    x = cddp.arange(10).reshape(2, 5)
    for kw in ({"indices": (1, 3)}, {"tensor_indices_or_sections": cddp.tensor([1, 3])}):
        parts = cddp.tensor_split(x, dim=1, **kw)
        assert [tuple(t.shape) for t in parts] == [(2, 1), (2, 2), (2, 2)]
        assert [tuple(t.shape) for t in x.tensor_split(dim=1, **kw)] == [(2, 1), (2, 2), (2, 2)]
    assert [t.tolist() for t in cddp.tensor_split(cddp.arange(5), sections=2)] == \
        [[0, 1, 2], [3, 4]]
    with pytest.raises(TypeError):
        cddp.tensor_split(x, 2, sections=2)


# ---- two ranks ---------------------------------------------------------------------------------

BODY = r"""
import datetime, json, os, socket
import cddp
import cddp.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
rec = {}

def err(fn):
    try:
        fn()
    except Exception as e:           # noqa: BLE001
        return [type(e).__name__, isinstance(e, RuntimeError), str(e)]
    return None

# complex tensors: the real view goes through the engine
z = cddp.tensor([1.0 + 2.0j, -3.0j]) * (rank + 1)
dist.all_reduce(z)
rec["ar"] = [[v.real, v.imag] for v in z.tolist()]
zb = cddp.tensor([rank + 0.5j, 2.0 + rank * 1j])
dist.broadcast(zb, src=1)
rec["bc"] = [[v.real, v.imag] for v in zb.tolist()]
outs = [cddp.zeros(2, dtype=cddp.cfloat) for _ in range(2)]
dist.all_gather(outs, cddp.tensor([rank + 1j, 0.5 + 0j]))
rec["ag"] = [[[v.real, v.imag] for v in o.tolist()] for o in outs]
peer = cddp.zeros(2, dtype=cddp.cfloat)
if rank == 0:
    dist.send(cddp.tensor([7.0 - 1j, 1j]), 1)
else:
    dist.recv(peer, 0)
rec["p2p"] = [[v.real, v.imag] for v in peer.tolist()]
rec["complex_max"] = err(lambda: dist.all_reduce(cddp.ones(2, dtype=cddp.cfloat),
                                                 op=dist.ReduceOp.MAX))

# torch's p2p argument checks
rec["neg_tag"] = err(lambda: dist.send(cddp.ones(1), 1 - rank, tag=-3))
rec["p2pop_send"] = err(lambda: dist.P2POp(dist.send, cddp.ones(1), 1 - rank))
# argument errors are RuntimeError too (gloo's type) and keep ValueError / TypeError
rec["bad_src"] = err(lambda: dist.broadcast(cddp.ones(2), src=5))
rec["bad_dst"] = err(lambda: dist.reduce(cddp.ones(2), dst=2))
rec["bad_len"] = err(lambda: dist.all_gather([cddp.zeros(2)] * 3, cddp.ones(2)))
rec["bad_size"] = err(lambda: dist.all_gather([cddp.zeros(3)] * 2, cddp.ones(2)))
rec["bad_dtype"] = err(lambda: dist.all_gather([cddp.zeros(2, dtype=cddp.float64)] * 2,
                                               cddp.ones(2)))
dist.barrier()

# a corrupt object payload: the op and the sender named, nothing decoded
if rank == 0:
    sizes = cddp.tensor([10], dtype=cddp.int64)
    dist.broadcast(sizes, src=0)
    word = int.from_bytes(b"\x80\x04garba", "little")    # a pickle's opening bytes
    dist.broadcast(cddp.tensor([word, 0], dtype=cddp.int64), src=0)
else:
    got = [None]
    rec["garbage"] = err(lambda: dist.broadcast_object_list(got, src=0))
dist.barrier()
with open(os.path.join(OUT, f"r{rank}.json"), "w") as f:
    json.dump(rec, f)
dist.destroy_process_group()
"""


def test_complex_collectives_and_argument_errors_two_ranks(tmp_path):
    r = run_ranks(tmp_path, BODY, nprocs=2, timeout=90)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = [json.loads((tmp_path / f"r{k}.json").read_text()) for k in (0, 1)]
    for k, rec in enumerate(recs):
        assert rec["ar"] == [[3.0, 6.0], [0.0, -9.0]]
        assert rec["bc"] == [[1.0, 0.5], [2.0, 1.0]]
        assert rec["ag"] == [[[0.0, 1.0], [0.5, 0.0]], [[1.0, 1.0], [0.5, 0.0]]]
        assert rec["complex_max"][0] == "ValueError" and "complex" in rec["complex_max"][2]
        assert rec["neg_tag"] == ["RuntimeError", True, "Tag must be nonnegative"]
        assert rec["p2pop_send"][0] == "ValueError" and "isend" in rec["p2pop_send"][2]
        for key in ("bad_src", "bad_dst", "bad_len", "bad_size"):
            assert rec[key][1] and rec[key][0] == "_ArgumentError", (key, rec[key])
        assert rec["bad_dtype"][1] and rec["bad_dtype"][0] == "_ArgumentTypeError"
    assert recs[1]["p2p"] == [[7.0, -1.0], [0.0, 1.0]]
    g = recs[1]["garbage"]
    assert g[0] == "RuntimeError" and "broadcast_object_list" in g[2] and "rank 0" in g[2]


def test_argument_error_classes_are_both_builtin_types():
    from cddp.distributed.distributed_c10d import _ArgumentError, _ArgumentTypeError
    assert issubclass(_ArgumentError, ValueError) and issubclass(_ArgumentError, RuntimeError)
    assert issubclass(_ArgumentTypeError, TypeError) and issubclass(_ArgumentTypeError,
                                                                     RuntimeError)


# ---- what running Hugging Face transformers' model code on cddp found ----------------------------

def test_requires_grad_true_on_a_computed_tensor_is_a_no_op():
    w = cddp.ones(2, requires_grad=True)
    y = w * 2
    assert y.requires_grad_(True) is y and y.grad_fn is not None     # transformers' input hook
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0])
    with pytest.raises(RuntimeError, match="var_no_grad = var.detach"):
        (w * 2).requires_grad_(False)
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        (w * 2).requires_grad = True


def test_device_never_equals_a_string():
    d = cddp.device("cpu")
    assert not (d == "cpu") and d != "npu" and not (d == "xpu") and d == cddp.device("cpu")
    assert cddp.zeros(1).device != "mps"


def test_hf_support_names():
    from cddp.nn.modules.module import _EXTRA_STATE_KEY_SUFFIX
    assert _EXTRA_STATE_KEY_SUFFIX == "_extra_state"

    class WithExtra(cddp.nn.Module):
        def get_extra_state(self):
            return {"v": 3}

        def set_extra_state(self, state):
            self.v = state["v"]
    m = WithExtra()
    sd = m.state_dict()
    assert list(sd) == ["_extra_state"]
    m.load_state_dict(sd)
    assert m.v == 3
    from cddp.backends import cudnn
    with cudnn.flags(enabled=False, deterministic=True):
        assert cudnn.enabled is False and cudnn.deterministic is True
    assert cudnn.enabled is True and cudnn.deterministic is False
    t = cddp.zeros(2)
    assert cddp._dynamo.mark_static_address(t) is None
    from cddp._dynamo.eval_frame import OptimizedModule
    lin = cddp.nn.Linear(2, 2)
    assert not isinstance(cddp.compile(lin), OptimizedModule)
    assert OptimizedModule(lin)._orig_mod is lin
