"""torch.utils.data additions: WeightedRandomSampler (torch's multinomial stream for a seed),
StackDataset, ChainDataset, batch_size=None's default_convert (a tuple becomes a list),
persistent_workers (the same worker processes every epoch, stopped when the loader is
collected or the process exits: no orphans), and the memory_format objects. Every
multi-process run is bounded by a timeout."""
import gc
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import cddp
from cddp.utils.data import (ChainDataset, DataLoader, Dataset, IterableDataset, StackDataset,
                             TensorDataset, WeightedRandomSampler, get_worker_info)

from conftest import subprocess_env

TIMEOUT_S = 60

WEIGHTS = [0.1, 0.9, 0.4, 0.7, 3.0, 0.6, 0.0, 2.5]


# ---- WeightedRandomSampler ---------------------------------------------------------------

@pytest.mark.parametrize("replacement,n", [(True, 5), (True, 100), (False, 5), (False, 7)])
def test_weighted_sampler_matches_torch(replacement, n):
    torch = pytest.importorskip("torch")
    from torch.utils.data import WeightedRandomSampler as TW
    g, tg = cddp.Generator(), torch.Generator()
    g.manual_seed(7)
    tg.manual_seed(7)
    ours = WeightedRandomSampler(WEIGHTS, n, replacement, generator=g)
    theirs = TW(WEIGHTS, n, replacement, generator=tg)
    for _ in range(2):                  # the generator advances the same way across epochs
        assert list(ours) == list(theirs)
    cddp.manual_seed(3)
    torch.manual_seed(3)
    assert list(WeightedRandomSampler(WEIGHTS, n, replacement)) == list(TW(WEIGHTS, n,
                                                                            replacement))


def test_weighted_sampler_without_torch():
    g = cddp.Generator()
    g.manual_seed(0)
    draws = list(WeightedRandomSampler(WEIGHTS, 20000, generator=g))
    freq = np.bincount(draws, minlength=len(WEIGHTS)) / len(draws)
    p = np.array(WEIGHTS) / sum(WEIGHTS)
    assert np.abs(freq - p).max() < 0.02 and freq[6] == 0
    s = WeightedRandomSampler(WEIGHTS, 7, replacement=False, generator=g)
    idx = list(s)
    assert len(s) == 7 and sorted(idx) == sorted(set(idx)) and 6 not in idx
    assert s.weights.dtype == cddp.float64
    with pytest.raises(ValueError, match="num_samples should be a positive integer value"):
        WeightedRandomSampler(WEIGHTS, 0)
    with pytest.raises(ValueError, match="replacement should be a boolean value"):
        WeightedRandomSampler(WEIGHTS, 3, replacement=1)
    with pytest.raises(ValueError, match=r"weights should be a 1d sequence but given weights "
                                         r"have shape \(2, 2\)"):
        WeightedRandomSampler([[1.0, 2.0], [3.0, 4.0]], 3)


# ---- StackDataset, ChainDataset ----------------------------------------------------------

class Squares(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return i * i


class Range(IterableDataset):
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __iter__(self):
        return iter(range(self.a, self.b))

    def __len__(self):
        return self.b - self.a


def test_stack_dataset():
    x = cddp.arange(10).reshape(5, 2)
    tup = StackDataset(TensorDataset(x), Squares())
    assert len(tup) == 5
    (xi,), sq = tup[3]
    assert xi.tolist() == [6, 7] and sq == 9
    d = StackDataset(feat=Squares(), lab=list("abcde"))
    assert d[2] == {"feat": 4, "lab": "c"}
    assert d.__getitems__([0, 4]) == [{"feat": 0, "lab": "a"}, {"feat": 16, "lab": "e"}]
    batch = next(iter(DataLoader(d, batch_size=3)))
    assert batch["feat"].tolist() == [0, 1, 4] and batch["lab"] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="Size mismatch between datasets"):
        StackDataset(Squares(), [1, 2])
    with pytest.raises(ValueError, match="At least one dataset should be passed"):
        StackDataset()
    with pytest.raises(ValueError, match="but both types are given"):
        StackDataset(Squares(), a=Squares())


def test_chain_dataset():
    c = ChainDataset([Range(0, 3), Range(10, 12)])
    assert list(c) == [0, 1, 2, 10, 11] and len(c) == 5
    assert list(Range(0, 2) + Range(5, 6)) == [0, 1, 5]
    assert [b.tolist() for b in DataLoader(c, batch_size=2)] == [[0, 1], [2, 10], [11]]
    with pytest.raises(AssertionError, match="ChainDataset only supports IterableDataset"):
        list(ChainDataset([Squares()]))


# ---- batch_size=None ---------------------------------------------------------------------

def test_batch_size_none_converts_tuple_to_list():
    ds = TensorDataset(cddp.zeros(3, 2), cddp.arange(3))
    first = next(iter(DataLoader(ds, batch_size=None)))
    assert isinstance(first, list) and len(first) == 2
    assert first[0].tolist() == [0.0, 0.0] and first[1].item() == 0
    conv = cddp.utils.data.default_convert
    out = conv((np.arange(3), {"a": np.float64(2.0), "b": (1, "s")}, np.array(["x"])))
    assert isinstance(out, list) and isinstance(out[0], cddp.Tensor)
    assert isinstance(out[1]["a"], cddp.Tensor) and out[1]["b"] == [1, "s"]
    assert isinstance(out[2], np.ndarray)


def test_batch_size_none_matches_torch():
    torch = pytest.importorskip("torch")
    tfirst = next(iter(torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.zeros(3, 2), torch.arange(3)), batch_size=None)))
    first = next(iter(DataLoader(TensorDataset(cddp.zeros(3, 2), cddp.arange(3)),
                                 batch_size=None)))
    assert type(first) is type(tfirst) is list
    assert [t.tolist() for t in first] == [t.tolist() for t in tfirst]


# ---- persistent workers ------------------------------------------------------------------

class PidDataset(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return cddp.tensor([i, os.getpid()])


class WorkerShards(IterableDataset):
    def __iter__(self):
        w = get_worker_info()
        return iter(range(w.id, 6, w.num_workers))


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pids, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_persistent_workers_reused_across_epochs():
    cddp.manual_seed(0)
    dl = DataLoader(PidDataset(), batch_size=2, num_workers=2, persistent_workers=True,
                    timeout=TIMEOUT_S)
    pids = []
    state = None
    for epoch in range(3):
        batches = list(dl)
        assert [b[:, 0].tolist() for b in batches] == [[0, 1], [2, 3], [4, 5], [6, 7]]
        pids.append({p for b in batches for p in b[:, 1].tolist()})
        if epoch == 0:
            state = cddp.get_rng_state()
    assert pids[0] == pids[1] == pids[2] and len(pids[0]) == 2
    # later epochs draw no new base seed from the global generator (torch's behaviour)
    assert cddp.equal(cddp.get_rng_state(), state)
    # leaving an epoch early: the next epoch drops the stale results and starts afresh
    for _ in dl:
        break
    assert [b[:, 0].tolist() for b in dl] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    workers = [w.pid for w in dl._iterator._workers]
    assert set(workers) == pids[0]
    del dl
    gc.collect()
    assert _wait_dead(workers) == []


def test_persistent_workers_iterable_dataset():
    dl = DataLoader(WorkerShards(), batch_size=2, num_workers=2, persistent_workers=True,
                    timeout=TIMEOUT_S)
    first = [b.tolist() for b in dl]
    assert first == [[0, 2], [1, 3], [4], [5]]
    assert [b.tolist() for b in dl] == first
    workers = [w.pid for w in dl._iterator._workers]
    del dl
    gc.collect()
    assert _wait_dead(workers) == []


def test_non_persistent_workers_restart_each_epoch():
    dl = DataLoader(PidDataset(), batch_size=4, num_workers=2, timeout=TIMEOUT_S)
    a = {p for b in dl for p in b[:, 1].tolist()}
    b = {p for b in dl for p in b[:, 1].tolist()}
    assert not (a & b)


_EXIT_SCRIPT = textwrap.dedent("""
    import os, sys, cddp
    from cddp.utils.data import DataLoader, Dataset

    class D(Dataset):
        def __len__(self):
            return 4
        def __getitem__(self, i):
            return cddp.tensor([os.getpid()])

    dl = DataLoader(D(), batch_size=1, num_workers=2, persistent_workers=True, timeout=30)
    pids = {int(b.item()) for b in dl} | {int(b.item()) for b in dl}
    print(" ".join(map(str, sorted(pids))), flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), 9)     # no atexit: the workers must notice on their own
""")


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_no_orphans_when_process_ends(how):
    r = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, how], capture_output=True,
                       text=True, timeout=TIMEOUT_S, env=subprocess_env())
    assert r.returncode == (0 if how == "exit" else -9), r.stderr
    pids = [int(p) for p in r.stdout.split()]
    assert len(pids) == 2
    # exit: stopped by the atexit hook before the process ends; kill: each worker sees
    # its parent gone within its watchdog period
    assert _wait_dead(pids, timeout=0.5 if how == "exit" else 15.0) == []


# ---- memory formats -----------------------------------------------------------------------

def _cl_strides(shape):
    """Strides of a channels-last layout of `shape` (N, C, H, W), written out by hand."""
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def test_memory_format_objects_and_is_contiguous():
    x = cddp.zeros(2, 3, 4, 5)
    assert repr(cddp.channels_last) == "cddp.channels_last"
    assert isinstance(cddp.contiguous_format, cddp.memory_format)
    assert x.is_contiguous(memory_format=cddp.contiguous_format)
    assert not x.is_contiguous(memory_format=cddp.channels_last)
    y = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    assert y.stride() == _cl_strides((2, 3, 4, 5))
    assert y.is_contiguous(memory_format=cddp.channels_last) and not y.is_contiguous()
    assert cddp.zeros(2, 3, 1, 1).is_contiguous(memory_format=cddp.channels_last)
    assert not cddp.zeros(2, 3, 4).is_contiguous(memory_format=cddp.channels_last)
    z = cddp.zeros(2, 3, 4, 5, 6).permute(0, 2, 3, 4, 1).contiguous().permute(0, 4, 1, 2, 3)
    assert z.is_contiguous(memory_format=cddp.channels_last_3d)
    with pytest.raises(TypeError, match="memory_format"):
        x.is_contiguous(memory_format=1)
    # accepted everywhere torch takes it; cddp keeps the values (and its one layout)
    for out in (x.to(memory_format=cddp.channels_last),
                x.contiguous(memory_format=cddp.channels_last),
                x.to(cddp.float64, memory_format=cddp.preserve_format)):
        assert out.shape == x.shape and cddp.equal(out.float(), x)
    m = cddp.nn.Conv2d(3, 4, 3).to(memory_format=cddp.channels_last)
    assert m.weight.shape == (4, 3, 3, 3)
    import pickle
    assert pickle.loads(pickle.dumps(cddp.channels_last)) is cddp.channels_last


def test_is_contiguous_matches_torch():
    torch = pytest.importorskip("torch")
    perms = [(0, 1, 2, 3), (0, 2, 3, 1), (0, 3, 1, 2), (1, 0, 2, 3), (3, 2, 1, 0)]
    for shape in [(2, 3, 4, 5), (0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 1, 1), (1, 1, 1, 1),
                  (2, 1, 4, 5), (1, 3, 1, 5)]:
        for p in perms:
            inv = [p.index(i) for i in range(4)]
            src = tuple(shape[i] for i in p)
            ours = cddp.zeros(*src).permute(*inv)
            theirs = torch.zeros(*src).permute(*inv)
            for ofmt, tfmt in ((cddp.channels_last, torch.channels_last),
                               (cddp.contiguous_format, torch.contiguous_format)):
                assert ours.is_contiguous(memory_format=ofmt) == \
                    theirs.is_contiguous(memory_format=tfmt), (shape, p, ofmt)
