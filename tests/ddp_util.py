"""Helpers for multi-process DDP tests: run a script on N ranks under `python -m cddp.run`
on a free loopback port, with a hard timeout, and collect what each rank saved."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import numpy as np

from conftest import subprocess_env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(tmp_path, body, nprocs=2, timeout=120, extra_env=None, launcher="cddp.run",
              args=()):
    """Write `body` (a script; it may use OUT, the output directory) and launch it.
    Returns the CompletedProcess; kills the whole process group on timeout."""
    script = tmp_path / f"job_{abs(hash(body)) % 10 ** 8}.py"
    script.write_text("OUT = %r\n" % str(tmp_path) + textwrap.dedent(body))
    if launcher == "cddp.run":
        cmd = [sys.executable, "-m", "cddp.run", f"--nproc-per-node={nprocs}",
               f"--master-port={free_port()}", str(script), *args]
    else:
        cmd = [sys.executable, str(script), *args]
    env = subprocess_env(**(extra_env or {}))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"job timed out after {timeout}s\nstdout:\n{out[-3000:]}\n"
                             f"stderr:\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def load(tmp_path, name):
    return np.load(os.path.join(tmp_path, name))


def run_torch_or_cddp(tmp_path, script, lib, nprocs=2, timeout=120):
    """Run `script` on nprocs ranks under torch's launcher (lib "torch") or cddp.run (lib
    "cddp"), with $LIB set to lib and the output folder as argv[1]; the script writes
    <folder>/<lib><rank>.json, returned as one record per rank. cddp's run must exit 0. torch is
    only the oracle: a torch rank that aborts in its teardown after every rank wrote its
    record ("terminate called without an active exception" from gloo's threads, seen in CI)
    still yields the records."""
    path = tmp_path / f"script_{lib}.py"
    path.write_text(script)
    launcher = ["-m", "torch.distributed.run"] if lib == "torch" else ["-m", "cddp.run"]
    outs = [tmp_path / f"{lib}{k}.json" for k in range(nprocs)]
    r = subprocess.run([sys.executable, *launcher, f"--nproc-per-node={nprocs}",
                        f"--master-port={free_port()}", str(path), str(tmp_path)],
                       env=subprocess_env(LIB=lib), capture_output=True, text=True,
                       timeout=timeout)
    if not (r.returncode == 0 or (lib == "torch" and all(o.exists() for o in outs))):
        raise AssertionError(r.stderr[-3000:])
    return [json.loads(o.read_text()) for o in outs]
