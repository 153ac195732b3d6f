"""Every seed script, ported with ../shared/seed_scripts/port.py (imports only), runs on cddp
under the launcher its header names, on the CPU, each bounded by a timeout.

The ported copies live in examples/; the first test checks they differ from the originals in
import lines only, so these runs exercise exactly what the documents teach."""
import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "seed_scripts")
EXAMPLES = os.path.join(ROOT, "examples")
SEEDS = ["seed000_insightface.py", "seed001_train.py", "seed002_dp.py", "seed002_spawn.py",
         "seed002_torchrun.py", "seed003_launch.py", "seed004_spawn.py"]


def run(cmd, cwd, timeout=180, env=None):
    """cmd's combined output; fails the test when it exits non-zero or outlives `timeout`
    (its whole process group is killed)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env or subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{cmd} timed out after {timeout}s:\n{out[-4000:]}")
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{out[-4000:]}"
    return out


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="../shared/seed_scripts not present")
@pytest.mark.parametrize("name", SEEDS)
def test_example_is_the_seed_with_imports_ported(name):
    r = subprocess.run([sys.executable, os.path.join(SHARED, "port.py"), "--check",
                        os.path.join(SHARED, name), os.path.join(EXAMPLES, name)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def ex(name):
    return os.path.join(EXAMPLES, name)


def test_seed004_spawn(tmp_path):
    out = run([sys.executable, ex("seed004_spawn.py")], tmp_path)
    assert "final loss" in out


def test_seed002_spawn(tmp_path):
    out = run([sys.executable, ex("seed002_spawn.py"), "--max_epochs", "2"], tmp_path)
    assert "[GPU: 0] Epoch: 1" in out and "[GPU: 1] Epoch: 1" in out


def test_seed002_torchrun(tmp_path):
    out = run([sys.executable, "-m", "cddp.run", "--nproc-per-node=2", ex("seed002_torchrun.py"),
               "--max_epochs", "5", "--batch_size", "32"], tmp_path)
    assert "[rank0]: [GPU: 0] Epoch: 4" in out and "[rank1]: [GPU: 1] Epoch: 4" in out


def test_seed002_dp(tmp_path):
    out = run([sys.executable, ex("seed002_dp.py")], tmp_path)
    assert out.count("Outside: input size") == 4


def test_seed003_launch(tmp_path):
    out = run([sys.executable, "-m", "cddp.launch", "--nproc_per_node=2", "--nnodes=1",
               ex("seed003_launch.py")], tmp_path)
    assert "[rank0]: loss" in out


def test_seed001_world_of_one_and_bare_model_load(tmp_path):
    out = run([sys.executable, ex("seed001_train.py"), "--max_epochs", "2", "--outf",
               str(tmp_path / "o")], tmp_path)
    assert "single-device accuracy" in out
    assert os.path.exists(tmp_path / "o" / "checkpoint.pth")


def test_seed000_launch_resume_and_world_of_one(tmp_path):
    launch = [sys.executable, "-m", "cddp.launch", "--nproc_per_node=2", ex("seed000_insightface.py")]
    out = run(launch + ["out", "--epochs", "2"], tmp_path)
    assert "epoch 1 step 32" in out and "saved ['0.bias', '0.weight', '2.bias', '2.weight']" in out
    out = run(launch + ["out", "--epochs", "3", "--resume"], tmp_path)
    assert "epoch 2 step 48" in out and "epoch 0 " not in out    # resumed at epoch 2
    for r in (0, 1):
        assert os.path.exists(tmp_path / "out" / f"checkpoint_gpu_{r}.pt")
    out = run([sys.executable, ex("seed000_insightface.py"), "solo", "--epochs", "2"], tmp_path)
    assert "epoch 1 step 64" in out
