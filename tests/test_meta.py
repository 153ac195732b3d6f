"""The meta device: tensors with a shape and a dtype and no values (torch's "meta").

What it is for, as scripts use it: build a model without memory (`with device("meta")` or
device="meta"), then give it memory (Module.to_empty) and values (reset_parameters, a
checkpoint, FSDP's param_init_fn); move a copy to meta as a stateless template for
functional_call (torch's model-ensembling tutorial). Checked against torch's behaviour (its
messages, reprs, RNG use) and against the same model built on the CPU."""
import copy
import os
import pickle
import resource

import numpy as np
import pytest

import cddp
import cddp.nn as nn
from cddp.func import functional_call, stack_module_state, vmap

from ddp_util import run_ranks


def _meta(t):
    return t.is_meta and t.device == cddp.device("meta") and str(t.device) == "meta"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.emb = nn.Embedding(7, 5, padding_idx=0)
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.norm = nn.LayerNorm(5)

    def forward(self, x, idx):
        h = self.bn(self.conv(x)).relu().flatten(1)
        return self.norm(self.fc(h) + self.emb(idx))


# ---- factories ------------------------------------------------------------------------------

FACTORIES = {
    "empty": lambda **k: cddp.empty(2, 3, **k),
    "zeros": lambda **k: cddp.zeros(2, 3, **k),
    "ones": lambda **k: cddp.ones(2, 3, **k),
    "full": lambda **k: cddp.full((2, 3), 1.5, **k),
    "rand": lambda **k: cddp.rand(2, 3, **k),
    "randn": lambda **k: cddp.randn(2, 3, **k),
    "randint": lambda **k: cddp.randint(0, 9, (2, 3), **k),
    "normal": lambda **k: cddp.normal(0.0, 1.0, (2, 3), **k),
    "randperm": lambda **k: cddp.randperm(6, **k),
    "arange": lambda **k: cddp.arange(6, **k),
    "linspace": lambda **k: cddp.linspace(0, 1, 6, **k),
    "eye": lambda **k: cddp.eye(3, **k),
    "tensor": lambda **k: cddp.tensor([[1.0, 2.0], [3.0, 4.0]], **k),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_make_meta_tensors_of_the_cpu_shape_and_dtype(name):
    make = FACTORIES[name]
    cpu, meta = make(), make(device="meta")
    assert _meta(meta) and not cpu.is_meta
    assert meta.shape == cpu.shape and meta.dtype == cpu.dtype
    assert meta.data_ptr() == 0 and meta.get_device() == -1
    with cddp.device("meta"):
        assert _meta(make())
        assert not make(device="cpu").is_meta


def test_as_tensor_to_meta_leaves_its_input_alone():
    x = cddp.ones(3)
    arr = np.ones(3, dtype=np.float32)
    assert _meta(cddp.as_tensor(x, device="meta")) and _meta(cddp.as_tensor(arr, device="meta"))
    assert not x.is_meta and x.tolist() == [1.0, 1.0, 1.0] and arr.tolist() == [1.0] * 3
    assert cddp.as_tensor(x) is x


def test_meta_factories_draw_nothing_from_the_generator():
    # torch's meta kernels never touch the generator: the CPU stream goes on unchanged
    cddp.manual_seed(3)
    before = cddp.get_rng_state()
    cddp.randn(100, device="meta")
    cddp.rand(5, device="meta").uniform_()
    cddp.empty(8, device="meta").normal_()
    assert np.array_equal(cddp.get_rng_state().numpy(), before.numpy())


LAYERS = [(nn.Linear, (4, 3)), (nn.Bilinear, (2, 3, 4)), (nn.Conv1d, (3, 4, 3)),
          (nn.Conv2d, (3, 4, 3)), (nn.ConvTranspose2d, (3, 4, 3)), (nn.BatchNorm1d, (4,)),
          (nn.LayerNorm, (4,)), (nn.GroupNorm, (2, 4)), (nn.Embedding, (5, 3)),
          (nn.LSTM, (3, 4)), (nn.GRUCell, (3, 4)), (nn.MultiheadAttention, (8, 2)),
          (nn.PReLU, ()), (nn.TransformerEncoderLayer, (8, 2))]


@pytest.mark.parametrize("cls,args", LAYERS, ids=[c.__name__ for c, _ in LAYERS])
def test_layers_built_on_meta_take_nothing(cls, args):
    cddp.manual_seed(1)
    before = cddp.get_rng_state()
    layer = cls(*args, device="meta")
    # no random numbers drawn: the next draw equals the one right after manual_seed
    assert np.array_equal(cddp.get_rng_state().numpy(), before.numpy())
    sd = layer.state_dict()
    assert sd and all(_meta(t) for t in sd.values())
    cpu = cls(*args).state_dict()
    assert {k: (tuple(v.shape), v.dtype) for k, v in sd.items()} == \
        {k: (tuple(v.shape), v.dtype) for k, v in cpu.items()}


def test_skip_init_builds_on_meta():
    layer = nn.utils.skip_init(nn.Linear, 4, 3, device="cpu")
    assert not layer.weight.is_meta and tuple(layer.weight.shape) == (3, 4)
    assert nn.utils.skip_init(nn.Linear, 4, 3, device="meta").weight.is_meta


def test_like_and_new_factories_follow_their_input():
    m = cddp.empty(2, 3, device="meta", dtype=cddp.float64)
    for t in (cddp.zeros_like(m), cddp.ones_like(m), cddp.empty_like(m), cddp.full_like(m, 2),
              cddp.rand_like(m), cddp.randn_like(m), cddp.randint_like(m, 5), m.new_zeros(4),
              m.new_ones(1), m.new_empty(2), m.new_full((2,), 1.0), m.new_tensor([1.0])):
        assert _meta(t)
    assert cddp.zeros_like(m).dtype == cddp.float64
    assert not cddp.zeros_like(m, device="cpu").is_meta
    assert _meta(cddp.zeros_like(cddp.ones(2), device="meta"))
    assert not cddp.ones(2).new_zeros(3).is_meta


def test_default_device_context_nests_and_restores():
    assert cddp.get_default_device() == cddp.device("cpu")
    with cddp.device("meta"):
        assert cddp.get_default_device() == cddp.device("meta")
        with cddp.device("cpu"):
            assert not cddp.zeros(1).is_meta
        assert cddp.zeros(1).is_meta
    assert not cddp.zeros(1).is_meta
    cddp.set_default_device("meta")
    try:
        assert cddp.ones(2).is_meta
    finally:
        cddp.set_default_device("cpu")
    assert not cddp.ones(2).is_meta


@pytest.mark.skipif("vgpreload" in os.environ.get("LD_PRELOAD", ""),
                    reason="valgrind's address space cannot hold a 64 GiB reservation")
def test_a_huge_meta_tensor_takes_no_memory():
    # 64 GiB of float32: more than the machine has; its initializers must not touch it
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = cddp.empty(1 << 34, device="meta")
    nn.init.normal_(t)
    nn.init.zeros_(t)
    nn.init.trunc_normal_(t, a=0.5, b=2.0)
    t.fill_(1.0)
    t.copy_(cddp.ones(1))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert t.shape == (1 << 34,) and grown_kib < 200 * 1024


# ---- what a meta tensor refuses, with torch's messages ------------------------------------

def test_values_cannot_be_read():
    m = cddp.empty(2, 3, device="meta")
    with pytest.raises(RuntimeError, match="item\\(\\) cannot be called on meta tensors"):
        m[0, 0].item()
    with pytest.raises(RuntimeError, match="cannot be called on meta tensors"):
        bool(m[0, 0])
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!"):
        m.tolist()
    with pytest.raises(TypeError, match="can't convert meta device type tensor to numpy"):
        m.numpy()
    with pytest.raises(BufferError):
        memoryview(m)
    for move in (lambda: m.cpu(), lambda: m.to("cpu"), lambda: m.to(cddp.ones(1)),
                 lambda: cddp.zeros(2, 3).copy_(m)):
        with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
            move()
    with pytest.raises(RuntimeError, match="only CPU storages"):
        m.share_memory_()


def test_module_to_off_meta_points_at_to_empty():
    model = nn.Linear(2, 3, device="meta")
    with pytest.raises(NotImplementedError, match="Please use torch.nn.Module.to_empty\\(\\)"):
        model.to("cpu")


def test_save_refuses_meta(tmp_path):
    with pytest.raises(RuntimeError, match="weight is on the meta device"):
        cddp.save(nn.Linear(2, 3, device="meta").state_dict(), tmp_path / "m.pt")
    assert not list(tmp_path.iterdir())


def test_reprs_and_type_strings():
    assert repr(cddp.empty(2, 3, device="meta")) == "tensor(..., device='meta', size=(2, 3))"
    assert repr(cddp.empty(3, device="meta", requires_grad=True)) == \
        "tensor(..., device='meta', size=(3,), requires_grad=True)"
    assert repr(cddp.empty((), dtype=cddp.int64, device="meta")) == \
        "tensor(..., device='meta', size=(), dtype=cddp.int64)"
    assert cddp.empty(1, device="meta").type() == "torch.meta.FloatTensor"
    torch = pytest.importorskip("torch")
    assert repr(torch.empty(2, 3, device="meta")) == repr(cddp.empty(2, 3, device="meta"))
    assert repr(torch.nn.Linear(2, 3, device="meta").weight) == \
        repr(nn.Linear(2, 3, device="meta").weight)


# ---- moving and copying ---------------------------------------------------------------------

def test_views_casts_and_clones_stay_meta():
    m = cddp.empty(4, 6, device="meta")
    for t in (m[1], m[:, 2:], m.t(), m.view(2, 12), m.reshape(24), m.unsqueeze(0),
              m.to(cddp.float64), m.double(), m.clone(), m.t().contiguous(), m.detach()):
        assert _meta(t)
    assert m.to(cddp.float16).dtype == cddp.float16
    x = cddp.randn(3, requires_grad=True)
    y = x.to("meta")
    assert _meta(y) and y.grad_fn is not None and y.requires_grad


def test_module_to_meta_keeps_parameter_objects():
    model = Net()
    weight = model.fc.weight
    model.to("meta")
    assert model.fc.weight is weight and isinstance(weight, nn.Parameter)
    assert all(_meta(t) for t in model.state_dict().values())


def test_deepcopy_and_pickle_keep_meta():
    model = Net().to("meta")
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        sd = clone.state_dict()
        assert all(_meta(t) for t in sd.values())
        assert isinstance(clone.fc.weight, nn.Parameter) and clone.fc.weight.requires_grad
        assert {k: (tuple(v.shape), v.dtype) for k, v in sd.items()} == \
            {k: (tuple(v.shape), v.dtype) for k, v in Net().state_dict().items()}


# ---- materializing --------------------------------------------------------------------------

def _arrays(model):
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def test_to_empty_then_reset_equals_building_on_the_cpu():
    # building on meta draws nothing, so the same seed before reset_parameters gives the same
    # weights as building directly on the CPU
    cddp.manual_seed(11)
    want = _arrays(Net())
    with cddp.device("meta"):
        model = Net()
    assert all(_meta(t) for t in model.state_dict().values())
    weight = model.conv.weight
    assert model.to_empty(device="cpu") is model
    assert model.conv.weight is weight and not weight.is_meta
    cddp.manual_seed(11)
    for m in model.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    got = _arrays(model)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_to_empty_without_recurse_touches_only_the_module():
    model = Net().to("meta")
    model.fc.to_empty(device="cpu", recurse=False)
    assert not model.fc.weight.is_meta and model.conv.weight.is_meta


def test_load_state_dict_assign_into_a_meta_model():
    src = Net()
    with cddp.device("meta"):
        model = Net()
    model.load_state_dict(src.state_dict(), assign=True)
    x, idx = cddp.randn(2, 3, 8, 8), cddp.tensor([1, 3])
    src.eval()
    model.eval()
    np.testing.assert_array_equal(model(x, idx).detach().numpy(), src(x, idx).detach().numpy())


def test_ensembling_with_a_meta_template():
    # torch's model-ensembling tutorial: stacked weights, a copy moved to meta as template
    models = [Net().eval() for _ in range(3)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    x, idx = cddp.randn(2, 3, 8, 8), cddp.tensor([1, 3])

    def run(p, b):
        return functional_call(base, (p, b), (x, idx))

    out = vmap(run)(params, buffers)
    for i, m in enumerate(models):
        np.testing.assert_allclose(out[i].detach().numpy(), m(x, idx).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_ops_on_meta_inputs_give_the_cpu_shapes():
    # the documented fallback: ops compute on placeholders, so shape probing works
    net = Net().eval()
    x, idx = cddp.randn(2, 3, 8, 8), cddp.tensor([1, 3])
    with cddp.device("meta"):
        probe = Net().eval()
        out = probe(cddp.empty(2, 3, 8, 8), cddp.tensor([1, 3]))
    assert out.shape == net(x, idx).shape


# ---- training refuses what was never materialized -----------------------------------------

def test_optimizer_step_refuses_meta_parameters():
    model = nn.Linear(4, 2, device="meta")
    opt = cddp.optim.SGD(model.parameters(), lr=0.1)
    model(cddp.randn(3, 4)).sum().backward()
    with pytest.raises(RuntimeError, match="parameter 0 of group 0 .* meta device"):
        opt.step()


FSDP_BODY = """
import numpy as np
import cddp, cddp.nn as nn, cddp.distributed as dist
from cddp.distributed.fsdp import FullyShardedDataParallel as FSDP

dist.init_process_group("gloo")
rank = dist.get_rank()

def build():
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))

def full(model):
    with FSDP.summon_full_params(model):
        return {k: v.detach().numpy().copy() for k, v in model.module.state_dict().items()}

cddp.manual_seed(5)
want = full(FSDP(build()))
with cddp.device("meta"):
    lazy = build()
cddp.manual_seed(5)
got = full(FSDP(lazy))                        # to_empty + reset_parameters, as torch
calls = []
def init_fn(module):
    calls.append(type(module).__name__)
    module.to_empty(device="cpu")
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.constant_(m.weight, 0.25)
            nn.init.zeros_(m.bias)
with cddp.device("meta"):
    custom = FSDP(build(), param_init_fn=init_fn)
mine = full(custom)
try:
    nn.parallel.DistributedDataParallel(build().to("meta"))
    ddp_error = ""
except RuntimeError as e:
    ddp_error = str(e)
if rank == 0:
    np.savez(OUT + "/want.npz", **want)
    np.savez(OUT + "/got.npz", **got)
    np.savez(OUT + "/mine.npz", **mine)
    open(OUT + "/calls.txt", "w").write(",".join(calls) + "\\n" + ddp_error)
dist.destroy_process_group()
"""


def test_fsdp_materializes_meta_modules(tmp_path):
    proc = run_ranks(tmp_path, FSDP_BODY, nprocs=2, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want, got = np.load(tmp_path / "want.npz"), np.load(tmp_path / "got.npz")
    assert sorted(want.files) == sorted(got.files)
    for k in want.files:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    mine = np.load(tmp_path / "mine.npz")
    assert np.all(mine["0.weight"] == 0.25) and np.all(mine["2.bias"] == 0)
    calls, ddp_error = (tmp_path / "calls.txt").read_text().split("\n", 1)
    assert calls == "Sequential"
    assert "meta device" in ddp_error and "to_empty" in ddp_error


def test_torch_agrees_on_the_materialized_values():
    torch = pytest.importorskip("torch")
    # same seed, same flow in both libraries: meta build, to_empty, reset_parameters
    for lib in (torch, cddp):
        lib.manual_seed(21)
        with lib.device("meta"):
            m = lib.nn.Linear(5, 4)
        m.to_empty(device="cpu")
        m.reset_parameters()
        if lib is torch:
            want = m.weight.detach().numpy().copy()
        else:
            got = m.weight.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
