"""seed000_arcface.py (insightface's arcface_torch: IResNet-18 with fp16 autocast inside its
forward, PartialFC over the ranks, CombinedMarginLoss, GradScaler(growth_interval=100),
PolyScheduler, SummaryWriter, per-rank checkpoints and --resume) runs on cddp with its import
lines changed, under `python -m cddp.launch --nproc_per_node=2`, resumed, and as a world of
one; torch 2.13 runs the same script on the CPU through tests/torch_cpu_shim.py as the oracle.

What cddp does without a GPU: the script's CUDA requests run on the CPU after one warning,
`torch.cuda.amp.autocast(True)` is CPU autocast with float16 (torch's CPU op lists: conv and
linear in float16, the rest as their inputs say), and the cuda GradScaler scales, unscales
and skips steps on the CPU. The shim maps torch's run the same way, so both libraries run the
same float16 computation and their losses agree to float16's rounding (tolerance below).

Small run: 128 random images, batch 32, 2 epochs of 2 steps at 2 ranks; every step is logged
(--frequent 1)."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, subprocess_env
from ddp_util import free_port
from test_seeds import SHARED
from test_seeds import run as _run

SCRIPT = "seed000_arcface.py"
ARGS = ["--num_image", "128", "--batch_size", "32", "--frequent", "1"]
SHIM = os.path.join(ROOT, "tests", "torch_cpu_shim.py")
LOG = re.compile(r"rank(\d) Speed \S+ samples/sec Loss ([\d.]+) LearningRate ([\d.]+) "
                 r"Epoch: (\d+) Global Step: (\d+) Fp16 Grad Scale: (\d+)")
# float16 conv/linear under autocast: the two libraries round sums of 27..4608 products in
# different orders (cddp's im2col GEMM in float32, rounded once, vs oneDNN), so float16
# activations differ in their last bit here and there; measured: losses agree to 3.4e-5
# relative after 2 steps (40.2392 vs 40.2385, 40.8059 vs 40.8073). 1e-3 leaves room for the
# later steps' growth while a wrong op (a margin, a softmax, a missed scale) moves them by far more
LOSS_RTOL = 1e-3


def run(cmd, cwd, env=None):
    return _run(cmd, cwd, timeout=300, env=env)


def logged(out, rank=0):
    """[(global_step, loss, lr, scale)] from one rank's log lines."""
    rows = [(int(m[4]), float(m[1]), float(m[2]), float(m[5]))
            for m in LOG.findall(out) if int(m[0]) == rank]
    return sorted(rows)


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    if not os.path.isdir(SHARED):
        pytest.skip("../shared/seed_scripts not present")
    # the script imports SummaryWriter at its top: the optional extra is needed to run it at all
    pytest.importorskip("tensorboard", reason="seed000_arcface.py logs through SummaryWriter, "
                        "which needs pip install 'cddp[tensorboard]'")
    d = tmp_path_factory.mktemp("seed000")
    text = subprocess.run([sys.executable, os.path.join(SHARED, "port.py"),
                           os.path.join(SHARED, SCRIPT)], capture_output=True, text=True,
                          check=True).stdout
    path = d / SCRIPT
    path.write_text(text)
    r = subprocess.run([sys.executable, os.path.join(SHARED, "port.py"), "--check",
                        os.path.join(SHARED, SCRIPT), str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    return str(path)


def launch(module, script, out_dir, cwd, extra=(), nproc=2, shim=False):
    cmd = [sys.executable, "-m", module, f"--nproc_per_node={nproc}",
           f"--master_port={free_port()}"]
    cmd += [SHIM, script] if shim else [script]
    return run(cmd + [out_dir] + ARGS + list(extra), cwd, env=torch_env(cwd) if shim else None)


def torch_env(cwd):
    """torch's launcher leaves a torchelastic_* folder in $TMPDIR per run: keep it in the
    test's own folder, which pytest removes."""
    return subprocess_env(TMPDIR=str(cwd))


@pytest.fixture(scope="module")
def cddp_runs(ported, tmp_path_factory):
    """2 ranks for one epoch, then --resume to the second, then a world of one."""
    d = tmp_path_factory.mktemp("cddp_runs")
    first = launch("cddp.launch", ported, "out", d, ["--num_epoch", "1"])
    resumed = launch("cddp.launch", ported, "out", d, ["--num_epoch", "2", "--resume"])
    solo = run([sys.executable, ported, "solo", "--num_epoch", "1"] + ARGS, d)
    return d, first, resumed, solo


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory):
    pytest.importorskip("torch")
    if not os.path.isdir(SHARED):
        pytest.skip("../shared/seed_scripts not present")
    script = os.path.join(SHARED, SCRIPT)
    d = tmp_path_factory.mktemp("torch_runs")
    first = launch("torch.distributed.run", script, "out", d, ["--num_epoch", "1"], shim=True)
    resumed = launch("torch.distributed.run", script, "out", d,
                     ["--num_epoch", "2", "--resume"], shim=True)
    solo = run([sys.executable, SHIM, script, "solo", "--num_epoch", "1"] + ARGS, d,
               env=torch_env(d))
    return d, first, resumed, solo


def test_two_ranks_resume_and_world_of_one_run(cddp_runs):
    d, first, resumed, solo = cddp_runs
    a, b = logged(first), logged(resumed)
    assert [r[0] for r in a] == [1, 2] and [r[0] for r in b] == [3, 4], (a, b)  # resumed at step 3
    assert logged(first, 1) == a and logged(resumed, 1) == b    # PartialFC's loss is global
    assert [r[0] for r in logged(solo)] == [1, 2, 3, 4]
    for r in (0, 1):
        assert os.path.exists(d / "out" / f"checkpoint_gpu_{r}.pt")
    assert os.path.exists(d / "out" / "model.pt") and os.path.exists(d / "solo" / "model.pt")
    assert "final loss" in resumed and "final loss" in solo
    assert all(np.isfinite(r[1]) for r in a + b)
    leftovers = [f for f in os.listdir(d / "out") if ".tmp" in f or f.startswith(".")]
    assert not leftovers, leftovers                             # atomic saves leave nothing


def test_losses_lr_and_grad_scale_track_torch(cddp_runs, torch_runs):
    _, c1, c2, cs = cddp_runs
    _, t1, t2, ts = torch_runs
    for name, c, t in (("2 ranks", c1, t1), ("resumed", c2, t2), ("world of one", cs, ts)):
        cl, tl = logged(c), logged(t)
        assert [r[0] for r in cl] == [r[0] for r in tl], (name, cl, tl)
        np.testing.assert_allclose([r[1] for r in cl], [r[1] for r in tl], rtol=LOSS_RTOL,
                                   err_msg=f"{name}: losses")
        np.testing.assert_allclose([r[2] for r in cl], [r[2] for r in tl], rtol=1e-6,
                                   err_msg=f"{name}: PolyScheduler's learning rates")
        # the scale backs off on the same overflowing steps: float16 gradients overflow (or
        # not) in both libraries at the same points
        assert [r[3] for r in cl] == [r[3] for r in tl], (name, cl, tl)


def test_tensorboard_reads_the_loss_curve(cddp_runs):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    d, first, resumed, _ = cddp_runs
    acc = EventAccumulator(str(d / "out" / "tensorboard"))
    acc.Reload()
    events = {e.step: e.value for e in acc.Scalars("loss")}
    want = {r[0]: r[1] for r in logged(first) + logged(resumed)}
    assert sorted(events) == sorted(want)
    np.testing.assert_allclose([events[s] for s in sorted(want)], [want[s] for s in sorted(want)],
                               rtol=1e-4)                       # the log prints 4 decimals
    lrs = {e.step: e.value for e in acc.Scalars("learning_rate")}
    assert sorted(lrs) == sorted(want)
