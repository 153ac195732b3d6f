"""DistributedDataParallel end to end: real ranks on loopback under cddp.run.

Equivalence is the core promise: 2 ranks x batch B for K steps end with the same weights as
1 process x batch 2B over the same samples (SGD with momentum and weight decay, several
buckets forced by a tiny bucket_cap_mb)."""
import numpy as np
import pytest

from ddp_util import load, run_ranks

COMMON = """
import os, sys
import numpy as np
import cddp
import cddp.distributed as dist
import cddp.nn as nn
from cddp.nn.parallel import DistributedDataParallel as DDP

def make_model(kind, seed):
    cddp.manual_seed(seed)
    if kind == "linear":
        return nn.Linear(6, 3)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))

def data(steps, batch):
    rng = np.random.default_rng(123)
    X = rng.standard_normal((steps, batch, 6)).astype(np.float32)
    Y = rng.integers(0, 3, (steps, batch))
    return X, Y
"""


def _single_process_reference(kind, steps, B):
    import cddp
    import cddp.nn as nn
    cddp.manual_seed(0)
    model = nn.Linear(6, 3) if kind == "linear" else nn.Sequential(
        nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = cddp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    rng = np.random.default_rng(123)
    X = rng.standard_normal((steps, 2 * B, 6)).astype(np.float32)
    Y = rng.integers(0, 3, (steps, 2 * B))
    for s in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(cddp.tensor(X[s])), cddp.tensor(Y[s])).backward()
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


# how the reducer runs: the defaults (these small models: flat buckets only), every gradient
# reduced in place (the large-gradient path), and mixed units launched on the group's worker
# thread or inline on the thread that completes them (whichever the machine's default is not)
MODES = {"flat": "", "inplace": "_ddp_mod._INPLACE_MIN_BYTES = 0\n",
         "inline": "_ddp_mod._INPLACE_MIN_BYTES = 200\nos.environ['CDDP_DDP_LAUNCH'] = 'inline'\n",
         "worker": "_ddp_mod._INPLACE_MIN_BYTES = 200\nos.environ['CDDP_DDP_LAUNCH'] = 'worker'\n",
         # gradients as separate tensors copied into (and out of) the buckets, as torch's default
         "noview": "KW = {'gradient_as_bucket_view': False}\n",
         "noview_inplace": "KW = {'gradient_as_bucket_view': False}\n"
                           "_ddp_mod._INPLACE_MIN_BYTES = 200\n"}
SET_MODE = "import cddp.nn.parallel.distributed as _ddp_mod\nKW = {}\n"


@pytest.mark.parametrize("kind,mode", [("linear", "flat"), ("mlp", "flat"), ("linear", "inplace"),
                                       ("mlp", "inplace"), ("mlp", "inline"),
                                       ("mlp", "worker"), ("mlp", "noview"),
                                       ("mlp", "noview_inplace")])
def test_two_ranks_equal_one_process_with_double_batch(tmp_path, kind, mode):
    steps, B = 5, 8
    body = COMMON + SET_MODE + MODES[mode] + f"""
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = DDP(make_model({kind!r}, seed=rank), bucket_cap_mb=0.00005, **KW)   # ranks differ
assert len(model.reducer.units()) > 1 or {kind!r} == "linear"
opt = cddp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
X, Y = data({steps}, {2 * B})
for s in range({steps}):
    opt.zero_grad()
    x = cddp.tensor(X[s, rank * {B}:(rank + 1) * {B}])
    y = cddp.tensor(Y[s, rank * {B}:(rank + 1) * {B}])
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
for i, p in enumerate(model.module.parameters()):
    np.save(os.path.join(OUT, f"r{{rank}}_p{{i}}.npy"), p.detach().numpy())
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = _single_process_reference(kind, steps, B)
    for i, want in enumerate(ref):
        for rank in (0, 1):
            got = load(tmp_path, f"r{rank}_p{i}.npy")
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"rank {rank} parameter {i}")


def test_gradients_live_in_buckets_across_steps(tmp_path):
    """Two ranks, mixed units (the larger weights reduced in place, the rest as views of flat
    buckets): four SGD steps alternating zero_grad(set_to_none=True / False), one with a
    no_sync micro-step first, equal one process on the same samples; the small grads are
    views of their buckets, and a step after zero_grad(set_to_none=False) copies nothing."""
    body = COMMON + SET_MODE + "_ddp_mod._INPLACE_MIN_BYTES = 200\n" + """
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(make_model("mlp", 0))
opt = cddp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
X, Y = data(5, 8)
sl = slice(rank * 4, (rank + 1) * 4)
copies = []
for s in range(4):
    opt.zero_grad(set_to_none=(s % 2 == 0))
    if s == 2:
        with model.no_sync():
            nn.functional.cross_entropy(model(cddp.tensor(X[4, sl])), cddp.tensor(Y[4, sl])).backward()
    model.reducer.reset_stats()
    nn.functional.cross_entropy(model(cddp.tensor(X[s, sl])), cddp.tensor(Y[s, sl])).backward()
    copies.append(model.reducer.stats()["copy_bytes"])
    opt.step()
bufs = model.reducer.buckets
views = [any(b.data_ptr() <= p.grad.data_ptr() < b.data_ptr() + 4 * b.numel() for b in bufs)
         for p in model.module.parameters()]
np.save(os.path.join(OUT, f"c{rank}.npy"), np.array(copies))
np.save(os.path.join(OUT, f"v{rank}.npy"), np.array(views))
for i, p in enumerate(model.module.parameters()):
    np.save(os.path.join(OUT, f"r{rank}_p{i}.npy"), p.detach().numpy())
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body)
    assert r.returncode == 0, r.stderr[-3000:]
    import cddp
    import cddp.nn as nn
    cddp.manual_seed(0)
    ref = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = cddp.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(123)
    X = rng.standard_normal((5, 8, 6)).astype(np.float32)
    Y = rng.integers(0, 3, (5, 8))

    def half_loss(s, rk):
        return nn.functional.cross_entropy(ref(cddp.tensor(X[s, rk * 4:(rk + 1) * 4])),
                                           cddp.tensor(Y[s, rk * 4:(rk + 1) * 4])) / 2
    for s in range(4):
        opt.zero_grad()
        for rk in (0, 1):
            (half_loss(s, rk) + (half_loss(4, rk) if s == 2 else 0)).backward()
        opt.step()
    small = 4 * (16 + 16 + 48 + 3)        # biases and the 3x16 weight: below 200 bytes
    for rank in (0, 1):
        assert load(tmp_path, f"c{rank}.npy").tolist() == [small, 0, small, 0]
        assert load(tmp_path, f"v{rank}.npy").tolist() == [False, True, False, True, True, True]
        for i, p in enumerate(ref.parameters()):
            np.testing.assert_allclose(load(tmp_path, f"r{rank}_p{i}.npy"), p.detach().numpy(),
                                       rtol=1e-5, atol=1e-6, err_msg=f"rank {rank} param {i}")


def test_no_sync_accumulation_equals_large_batch(tmp_path):
    body = COMMON + """
dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(make_model("mlp", 0))
X, Y = data(2, 8)
with model.no_sync():
    nn.functional.cross_entropy(model(cddp.tensor(X[0, rank*4:(rank+1)*4])), cddp.tensor(Y[0, rank*4:(rank+1)*4])).backward()
nn.functional.cross_entropy(model(cddp.tensor(X[1, rank*4:(rank+1)*4])), cddp.tensor(Y[1, rank*4:(rank+1)*4])).backward()
for i, p in enumerate(model.module.parameters()):
    np.save(os.path.join(OUT, f"g{rank}_{i}.npy"), p.grad.numpy())
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body)
    assert r.returncode == 0, r.stderr[-3000:]
    import cddp
    import cddp.nn as nn
    cddp.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))
    rng = np.random.default_rng(123)
    X = rng.standard_normal((2, 8, 6)).astype(np.float32)
    Y = rng.integers(0, 3, (2, 8))
    # ranks sum grads of two micro-batches of 4 locally, then average over 2 ranks:
    # = sum over micro-batch means of the 4-sample halves / 2
    for s in range(2):
        for rk in range(2):
            loss = nn.functional.cross_entropy(model(cddp.tensor(X[s, rk * 4:(rk + 1) * 4])),
                                               cddp.tensor(Y[s, rk * 4:(rk + 1) * 4])) / 2
            loss.backward()
    for i, p in enumerate(model.parameters()):
        for rank in (0, 1):
            np.testing.assert_allclose(load(tmp_path, f"g{rank}_{i}.npy"), p.grad.numpy(),
                                       rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["flat", "inplace"])
def test_find_unused_parameters_and_unused_error(tmp_path, mode):
    body = COMMON + SET_MODE + MODES[mode] + """
class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 3)
        self.b = nn.Linear(6, 3)
    def forward(self, x, use_b=False):
        return self.b(x) if use_b else self.a(x)

dist.init_process_group("gloo")
rank = dist.get_rank()
cddp.manual_seed(0)
m = DDP(Branchy(), find_unused_parameters=True)
X, Y = data(3, 4)
for s in range(3):
    m.zero_grad()
    nn.functional.cross_entropy(m(cddp.tensor(X[s]), use_b=False), cddp.tensor(Y[s])).backward()
assert m.module.a.weight.grad is not None
assert m.module.b.weight.grad is None            # unused on every rank: left alone, as torch
m.zero_grad()
# rank 0 takes branch b, rank 1 branch a: both branches get grads on both ranks
nn.functional.cross_entropy(m(cddp.tensor(X[0]), use_b=(rank == 0)), cddp.tensor(Y[0])).backward()
assert m.module.a.weight.grad is not None and m.module.b.weight.grad is not None
np.save(os.path.join(OUT, f"bgrad{rank}.npy"), m.module.b.weight.grad.numpy())
np.save(os.path.join(OUT, f"ok{rank}.npy"), np.array(1))
cddp.manual_seed(0)
m2 = DDP(Branchy())
nn.functional.cross_entropy(m2(cddp.tensor(X[0])), cddp.tensor(Y[0])).backward()
try:
    m2(cddp.tensor(X[1]))
except RuntimeError as e:
    assert "Expected to have finished reduction" in str(e) and "b.weight" in str(e), str(e)
    np.save(os.path.join(OUT, f"err{rank}.npy"), np.array(1))
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        assert load(tmp_path, f"ok{rank}.npy") == 1
        assert load(tmp_path, f"err{rank}.npy") == 1
    np.testing.assert_array_equal(load(tmp_path, "bgrad0.npy"), load(tmp_path, "bgrad1.npy"))
    assert np.abs(load(tmp_path, "bgrad0.npy")).sum() > 0


def test_construction_broadcasts_and_checks_shapes(tmp_path):
    body = COMMON + """
dist.init_process_group("gloo")
rank = dist.get_rank()
m = DDP(make_model("mlp", seed=100 + rank))
np.save(os.path.join(OUT, f"w{rank}.npy"), m.module[0].weight.detach().numpy())
assert list(m.state_dict())[0].startswith("module.")
assert DDP(make_model("linear", 0)).in_features == 6      # falls through to the module
try:
    DDP(nn.Linear(6, 3 + rank))
except RuntimeError as e:
    assert "weight" in str(e) and "rank 1" in str(e), str(e)
    np.save(os.path.join(OUT, f"mismatch{rank}.npy"), np.array(1))

class Named(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

try:                               # same shapes, other names: the names are what it reports
    DDP(nn.Sequential(nn.Linear(6, 3)) if rank == 0 else Named())
except RuntimeError as e:
    assert "parameter #0 differs between rank 0 and rank 1: name '0.weight' vs 'fc.weight' " \
           "(shape [3, 6] and dtype cddp.float32 agree)" in str(e), str(e)
    np.save(os.path.join(OUT, f"names{rank}.npy"), np.array(1))
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body)
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_array_equal(load(tmp_path, "w0.npy"), load(tmp_path, "w1.npy"))
    assert load(tmp_path, "mismatch0.npy") == 1 and load(tmp_path, "mismatch1.npy") == 1
    assert load(tmp_path, "names0.npy") == 1 and load(tmp_path, "names1.npy") == 1


def test_parameter_difference_names_what_differs():
    from cddp.nn.parallel.distributed import _param_difference
    a = ["l.weight", [10, 512], "cddp.float32"]
    assert _param_difference(a, ["m.weight", [10, 512], "cddp.float32"]) == \
        "name 'l.weight' vs 'm.weight' (shape [10, 512] and dtype cddp.float32 agree)"
    assert _param_difference(a, ["l.weight", [10, 256], "cddp.float64"]) == \
        "shape [10, 512] vs [10, 256], dtype cddp.float32 vs cddp.float64 (name 'l.weight' agrees)"
    assert _param_difference(a, ["x", [1], "cddp.int64"]) == \
        "name 'l.weight' vs 'x', shape [10, 512] vs [1], dtype cddp.float32 vs cddp.int64"


# the head of a job script run with "cddp" or "torch" as its argument (torch: the oracle)
LIB_SWITCH = """
import os, sys
import numpy as np
LIB = sys.argv[1]
if LIB == "torch":
    import torch as lib
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
else:
    import cddp as lib
    import cddp.distributed as dist
    from cddp.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
"""


def test_same_losses_as_torch_ddp(tmp_path):
    torch = pytest.importorskip("torch")  # noqa: F841 (the oracle runs in subprocesses)
    steps, B = 6, 8
    body = LIB_SWITCH + """
rng = np.random.default_rng(7)
W1 = rng.standard_normal((16, 6)).astype(np.float32) * 0.3
W2 = rng.standard_normal((3, 16)).astype(np.float32) * 0.3
model = lib.nn.Sequential(lib.nn.Linear(6, 16), lib.nn.ReLU(), lib.nn.Linear(16, 3))
with lib.no_grad():
    model[0].weight.copy_(lib.tensor(W1)); model[0].bias.zero_()
    model[2].weight.copy_(lib.tensor(W2)); model[2].bias.zero_()
m = DDP(model)
opt = lib.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
X = rng.standard_normal((%d, %d, 6)).astype(np.float32)
Y = rng.integers(0, 3, (%d, %d))
losses = []
for s in range(%d):
    opt.zero_grad()
    sl = slice(rank * %d, (rank + 1) * %d)
    loss = lib.nn.functional.cross_entropy(m(lib.tensor(X[s, sl])), lib.tensor(Y[s, sl]))
    loss.backward()
    opt.step()
    losses.append(loss.item())
np.save(os.path.join(OUT, f"{LIB}{rank}.npy"), np.array(losses))
dist.destroy_process_group()
""" % (steps, 2 * B, steps, 2 * B, steps, B, B)
    r = run_ranks(tmp_path, body, args=("cddp",))
    assert r.returncode == 0, r.stderr[-3000:]
    # torch's gloo sometimes aborts at process exit ("terminate called without an active
    # exception") after the work is done: judge the oracle run by the losses it saved
    r = run_ranks(tmp_path, body, args=("torch",))
    import os
    assert all(os.path.exists(tmp_path / f"torch{k}.npy") for k in (0, 1)), r.stdout[-3000:]
    for rank in (0, 1):
        np.testing.assert_allclose(load(tmp_path, f"cddp{rank}.npy"),
                                   load(tmp_path, f"torch{rank}.npy"), rtol=1e-4)


def test_comm_hooks_bucket_view_and_buffers(tmp_path):
    body = COMMON + """
from cddp.distributed.algorithms.ddp_comm_hooks import default_hooks
dist.init_process_group("gloo")
rank = dist.get_rank()
X, Y = data(1, 8)
x, y = cddp.tensor(X[0, rank*4:(rank+1)*4]), cddp.tensor(Y[0, rank*4:(rank+1)*4])
grads = {}
for name, kw, hook in [("plain", {}, None), ("view", {"gradient_as_bucket_view": True}, None),
                       ("allreduce", {}, default_hooks.allreduce_hook),
                       ("fp16", {}, default_hooks.fp16_compress_hook)]:
    m = DDP(make_model("mlp", 0), bucket_cap_mb=0.00005, **kw)
    if hook is not None:
        m.register_comm_hook(None, hook)
    nn.functional.cross_entropy(m(x), y).backward()
    grads[name] = [p.grad.numpy().copy() for p in m.module.parameters()]
for name in ("view", "allreduce"):
    for a, b in zip(grads["plain"], grads[name]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=name)
for a, b in zip(grads["plain"], grads["fp16"]):
    np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3)       # float16 on the wire
# broadcast_buffers: rank 0's buffer wins before every forward
class WithBuf(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 3)
        self.register_buffer("count", cddp.zeros(1))
    def forward(self, x):
        return self.lin(x) + self.count
wb = DDP(WithBuf())
wb.module.count.fill_(float(rank + 5))
wb(x)
np.save(os.path.join(OUT, f"buf{rank}.npy"), wb.module.count.numpy())
np.save(os.path.join(OUT, f"ok{rank}.npy"), np.array(1))
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        assert load(tmp_path, f"ok{rank}.npy") == 1
        assert load(tmp_path, f"buf{rank}.npy")[0] == 5.0


@pytest.mark.parametrize("mode,hook", [("flat", None), ("inplace", None),
                                       ("flat", "allreduce_hook")])
def test_join_with_uneven_inputs(tmp_path, mode, hook):
    """The joined rank shadows the others' collectives unit by unit (ReduceOp.AVG, or the comm
    hook itself), so in-place units and hooks join too."""
    body = COMMON + SET_MODE + MODES[mode] + f"""
from cddp.distributed.algorithms.ddp_comm_hooks import default_hooks
dist.init_process_group("gloo")
rank = dist.get_rank()
m = DDP(make_model("linear", 0))
if {hook!r}:
    m.register_comm_hook(None, getattr(default_hooks, {hook!r}))
opt = cddp.optim.SGD(m.parameters(), lr=0.1)
X, Y = data(5, 4)
steps = 5 if rank == 0 else 2                  # rank 1 runs out of data early
with m.join():
    for s in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(m(cddp.tensor(X[s])), cddp.tensor(Y[s])).backward()
        opt.step()
np.save(os.path.join(OUT, f"w{{rank}}.npy"), m.module.weight.detach().numpy())
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    # after the join both ranks hold the model of the rank that ran longest
    np.testing.assert_allclose(load(tmp_path, "w0.npy"), load(tmp_path, "w1.npy"), rtol=1e-6)
    # and that model saw: 2 steps averaged over two identical batches, then 3 steps in which
    # the joined rank contributed zeros (divided by the initial world size, as torch)
    import cddp
    import cddp.nn as nn
    cddp.manual_seed(0)
    ref = nn.Linear(6, 3)
    opt = cddp.optim.SGD(ref.parameters(), lr=0.1)
    rng = np.random.default_rng(123)
    X = rng.standard_normal((5, 4, 6)).astype(np.float32)
    Y = rng.integers(0, 3, (5, 4))
    for s in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ref(cddp.tensor(X[s])), cddp.tensor(Y[s]))
        (loss if s < 2 else loss * 0.5).backward()
        opt.step()
    np.testing.assert_allclose(load(tmp_path, "w0.npy"), ref.weight.detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_killed_rank_stops_the_job_with_a_clear_error(tmp_path):
    import time
    body = COMMON + """
import signal
dist.init_process_group("gloo")
rank = dist.get_rank()
m = DDP(make_model("mlp", 0))
opt = cddp.optim.SGD(m.parameters(), lr=0.1)
X, Y = data(1, 8)
for s in range(100000):
    if rank == 1 and s == 20:
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    nn.functional.cross_entropy(m(cddp.tensor(X[0])), cddp.tensor(Y[0])).backward()
    opt.step()
"""
    t0 = time.monotonic()
    r = run_ranks(tmp_path, body, timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0
    assert elapsed < 30, f"job took {elapsed:.1f}s to stop after a rank died"
    text = r.stdout + r.stderr
    assert "rank 1" in text and ("exited" in text or "died" in text or "failed" in text), text[-3000:]


def test_all_to_all_list_form(tmp_path):
    body = COMMON + """
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
inputs = [cddp.tensor([float(10 * rank + j)] * (j + 1)) for j in range(world)]
outputs = [cddp.zeros(rank + 1) for _ in range(world)]
dist.all_to_all(outputs, inputs)
np.save(os.path.join(OUT, f"a2a{rank}.npy"), np.concatenate([o.numpy() for o in outputs]))
dist.destroy_process_group()
"""
    r = run_ranks(tmp_path, body)
    assert r.returncode == 0, r.stderr[-3000:]
    # rank r receives from rank s the piece s sent to r: value 10*s + r, r+1 copies
    for rank in (0, 1):
        want = np.concatenate([[10.0 * s + rank] * (rank + 1) for s in (0, 1)])
        np.testing.assert_array_equal(load(tmp_path, f"a2a{rank}.npy"), want)



BUFFER_SCHEDULE_BODY = LIB_SWITCH + """

class M(lib.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = lib.nn.Linear(3, 2)
        self.register_buffer("b", lib.zeros(2))
        self.register_buffer("c", lib.zeros(2))
    def forward(self, x):
        return self.lin(x) + self.b + self.c

model = M()
with lib.no_grad():
    model.lin.bias.fill_(float(rank))
    model.c.fill_(float(10 + rank))
    model.b.fill_(float(20 + rank))
DDP._set_params_and_buffers_to_ignore_for_model(model, ["c", "lin.bias"])
m = DDP(model)
x = lib.ones(4, 3)
rec = [float(model.lin.bias[0]), float(model.c[0]), float(model.b[0])]
def mark(v):
    with lib.no_grad():
        model.b.fill_(float(v))
def train():
    (m(x) * (rank + 1)).sum().backward()
mark(30 + rank)
if rank == 0:                     # an evaluation on rank 0 only
    with lib.no_grad():
        m(x)
        m(x)
rec.append(float(model.b[0]))
mark(40 + rank)
train()
rec.append(float(model.b[0]))
mark(50 + rank)
train()
rec.append(float(model.b[0]))
with m.no_sync():
    train()
mark(60 + rank)
train()
rec.append(float(model.b[0]))
rec.append(float(model.lin.bias.grad[0]))
np.save(os.path.join(OUT, f"{LIB}{rank}.npy"), np.array(rec))
dist.destroy_process_group()
"""


def test_buffer_broadcast_schedule_and_ignored_names(tmp_path):
    """torch's schedule: buffers go out from rank 0 before the first forward and before any
    forward that follows a synced training forward, so an evaluation under no_grad on one rank
    misses no collective (its first forward's broadcast pairs with the other rank's next
    training forward); names in _ddp_params_and_buffers_to_ignore are neither broadcast nor
    reduced."""
    r = run_ranks(tmp_path, BUFFER_SCHEDULE_BODY, args=("cddp",))
    assert r.returncode == 0, r.stderr[-3000:]
    got = {k: load(tmp_path, f"cddp{k}.npy") for k in (0, 1)}
    # columns: ignored bias, ignored buffer c, b after construction, after rank 0's eval,
    # after the next training forward, after a synced one, after a no_sync one, and the
    # ignored bias's gradient (4 backward passes of 4 rows times (rank + 1), never averaged)
    np.testing.assert_array_equal(got[0], [0, 10, 20, 30, 40, 50, 60, 16])
    np.testing.assert_array_equal(got[1], [1, 11, 20, 31, 30, 50, 61, 32])
    torch = pytest.importorskip("torch")  # noqa: F841 (the oracle runs in subprocesses)
    run_ranks(tmp_path, BUFFER_SCHEDULE_BODY, args=("torch",))
    for rank in (0, 1):
        np.testing.assert_array_equal(got[rank], load(tmp_path, f"torch{rank}.npy"))
