"""Warnings torch gives that public scripts print (found by porting them): float() of a tensor
that requires grad (once per process), a DataLoader with more workers than CPUs, pin_memory
without an accelerator."""
import os
import subprocess
import sys
import warnings

import pytest

import cddp
from conftest import subprocess_env

CHILD = """
import warnings, sys
LIB = sys.argv[1]
T = __import__(LIB)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    t = T.ones(1, requires_grad=True).mean()
    with T.no_grad():
        float(t)                    # silent under no_grad (LBFGS reads its loss this way)
    quiet = len(w)
    float(t); float(t); int(t); t.item(); float(T.ones(1))
print(quiet, len(w), str(w[0].message) if w else "")
"""


@pytest.mark.parametrize("lib", ["cddp", "torch"])
def test_float_of_requires_grad_warns_once(lib):
    if lib == "torch":
        pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", CHILD, lib], env=subprocess_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    quiet, n, msg = r.stdout.split(" ", 2)
    assert quiet == "0" and n == "1"
    assert msg.startswith("Converting a tensor with requires_grad=True to a scalar")


class _D(cddp.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i


def test_dataloader_worker_and_pin_memory_warnings():
    cpus = len(os.sched_getaffinity(0))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        batches = list(cddp.utils.data.DataLoader(_D(), batch_size=2, num_workers=cpus + 1))
        list(cddp.utils.data.DataLoader(_D(), batch_size=2, pin_memory=True))
        list(cddp.utils.data.DataLoader(_D(), batch_size=2, num_workers=1))
    texts = [str(x.message) for x in w]
    assert [b.tolist() for b in batches] == [[0, 1], [2, 3]]
    assert sum(f"will create {cpus + 1} worker processes" in t and
               f"suggested max number of worker in current system is {cpus}," in t
               for t in texts) == 1
    assert sum("'pin_memory' argument is set as true but no accelerator" in t for t in texts) == 1
    # located in cddp's loader, as torch's are in its own: shown once per process by default
    assert all(x.filename.endswith("dataloader.py") for x in w)
    with warnings.catch_warnings(record=True) as w2:
        warnings.simplefilter("default")          # Python's: once per location
        for _ in range(3):
            list(cddp.utils.data.DataLoader(_D(), batch_size=2, pin_memory=True))
        list(cddp.utils.data.DataLoader(_D(), batch_size=4, pin_memory=True))
    assert sum("'pin_memory'" in str(x.message) for x in w2) == 1
