"""cddp.utils.data: datasets, samplers, DataLoader (with and without workers), collation —
against plain slicing and, when installed, torch's DataLoader on the same data."""
import os
import subprocess
import sys

import numpy as np
import pytest

import cddp
from cddp.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset,
                             RandomSampler, SequentialSampler, Subset, TensorDataset,
                             default_collate, random_split)
from conftest import CDDP_PATH, ROOT, n, subprocess_env


def _ds(N=23):
    X = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
    Y = np.arange(N) % 4
    return TensorDataset(cddp.tensor(X), cddp.tensor(Y)), X, Y


def test_sequential_batches_equal_slices():
    ds, X, Y = _ds()
    batches = list(DataLoader(ds, batch_size=5))
    assert len(batches) == 5 == len(DataLoader(ds, batch_size=5))
    for i, (x, y) in enumerate(batches):
        np.testing.assert_array_equal(n(x), X[i * 5:(i + 1) * 5])
        np.testing.assert_array_equal(n(y), Y[i * 5:(i + 1) * 5])
    assert len(list(DataLoader(ds, batch_size=5, drop_last=True))) == 4


def test_batching_attributes_are_fixed_after_init():
    ds, X, _ = _ds()
    dl = DataLoader(ds, batch_size=5)
    for attr, val in (("batch_size", 7), ("drop_last", True), ("dataset", ds),
                      ("sampler", None), ("batch_sampler", None), ("persistent_workers", True)):
        with pytest.raises(ValueError, match=f"{attr} attribute should not be set after "
                                             "DataLoader is initialized"):
            setattr(dl, attr, val)
    dl.num_workers = 0                    # the others stay assignable, as in torch
    dl.collate_fn = lambda b: len(b)
    assert [b for b in dl] == [5, 5, 5, 5, 3]


def test_shuffle_is_a_permutation_and_seeded():
    ds, X, _ = _ds()
    g1 = cddp.Generator().manual_seed(3)
    g2 = cddp.Generator().manual_seed(3)
    a = np.concatenate([n(x) for x, _ in DataLoader(ds, batch_size=4, shuffle=True, generator=g1)])
    b = np.concatenate([n(x) for x, _ in DataLoader(ds, batch_size=4, shuffle=True, generator=g2)])
    np.testing.assert_array_equal(a, b)
    assert sorted(a[:, 0].tolist()) == sorted(X[:, 0].tolist())
    assert not np.array_equal(a, X)


def test_shuffle_order_matches_torch():
    torch = pytest.importorskip("torch")
    N = 37
    ours = list(RandomSampler(range(N), generator=cddp.Generator().manual_seed(11)))
    theirs = list(torch.utils.data.RandomSampler(range(N), generator=torch.Generator().manual_seed(11)))
    assert ours == theirs
    a, b = random_split(range(N), [30, 7], generator=cddp.Generator().manual_seed(5))
    ta, tb = torch.utils.data.random_split(range(N), [30, 7], generator=torch.Generator().manual_seed(5))
    assert list(a.indices) == list(ta.indices) and list(b.indices) == list(tb.indices)


class Squares(Dataset):
    def __len__(self):
        return 17

    def __getitem__(self, i):
        return {"x": cddp.tensor([float(i), float(i * i)]), "i": i, "name": f"s{i}",
                "arr": np.full(2, i, dtype=np.int64)}


def test_workers_yield_the_same_batches():
    ds = Squares()
    plain = list(DataLoader(ds, batch_size=4))
    workers = list(DataLoader(ds, batch_size=4, num_workers=2, worker_init_fn=lambda w: None,
                              persistent_workers=True, pin_memory=True))
    assert len(plain) == len(workers) == 5
    for a, b in zip(plain, workers):
        np.testing.assert_array_equal(n(a["x"]), n(b["x"]))
        np.testing.assert_array_equal(n(a["i"]), n(b["i"]))
        np.testing.assert_array_equal(n(a["arr"]), n(b["arr"]))
        assert a["name"] == b["name"]


class Boom(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise ValueError("bad sample 5")
        return cddp.tensor([float(i)])


class KeyBoom(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            return {}["missing-key"]
        return cddp.tensor([float(i)])


def test_worker_exception_keeps_its_type_and_the_worker_traceback():
    """torch's rule: the worker's exception comes back as its own type, the message naming the
    worker and holding its traceback (a KeyError's message is shown as is, not repr'ed)."""
    with pytest.raises(ValueError) as e:
        list(DataLoader(Boom(), batch_size=2, num_workers=2))
    msg = str(e.value)
    assert msg.startswith("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback")
    assert "bad sample 5" in msg and "__getitem__" in msg
    with pytest.raises(KeyError) as e:
        list(DataLoader(KeyBoom(), batch_size=2, num_workers=2))
    msg = str(e.value)
    assert msg.startswith("Caught KeyError in DataLoader worker process 0.\nOriginal Traceback")
    assert "'missing-key'" in msg and "\\n" not in msg
    torch = pytest.importorskip("torch")
    with pytest.raises(KeyError) as te:
        list(torch.utils.data.DataLoader(KeyBoom(), batch_size=2, num_workers=2,
                                         collate_fn=lambda b: b))
    assert str(te.value).splitlines()[0] == msg.splitlines()[0]


class Suicidal(Dataset):
    """Index `at` SIGKILLs its worker after noting the time; index `hang` never returns."""

    def __init__(self, d, at=None, hang=None):
        self.d, self.at, self.hang = d, at, hang

    def __len__(self):
        return 16

    def __getitem__(self, i):
        import signal
        import time
        if i == self.at:
            with open(os.path.join(self.d, "died"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        if i == self.hang:
            time.sleep(60)
        return cddp.tensor([float(i)])


def test_killed_worker_is_noticed_when_it_dies(tmp_path):
    """The main process waits on the workers' sentinels with the result queue: a SIGKILLed
    worker fails the loop at once, naming its pid and signal (it used to take up to the 5-s
    poll interval)."""
    import time
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) \d+\) exited "
                                           r"unexpectedly \(worker 1 \(pid \d+\): killed by "
                                           r"signal SIGKILL\)"):
        list(DataLoader(Suicidal(str(tmp_path), at=3), batch_size=2, num_workers=2))
    latency = time.time() - float((tmp_path / "died").read_text())
    assert latency < 2.5, latency        # the old poll: ~5 s


def test_shutdown_terminates_a_hung_worker_at_once(tmp_path):
    """Leaving the loop while a worker is stuck in __getitem__: that worker owes a batch that
    nobody will read, so shutdown terminates it instead of waiting 5 s for it first."""
    import time
    loader = DataLoader(Suicidal(str(tmp_path), hang=4), batch_size=2, num_workers=2)
    it = iter(loader)
    assert [n(next(it)).ravel().tolist() for _ in range(2)] == [[0.0, 1.0], [2.0, 3.0]]
    workers = list(it._workers)
    t0 = time.monotonic()
    it.shutdown()
    took = time.monotonic() - t0
    assert not any(w.is_alive() for w in workers)
    assert workers[0].exitcode < 0       # the hung one was terminated, not waited for
    assert took < 2.5, took              # the old shutdown: 5 s join first


def test_default_collate_rules_match_torch():
    torch = pytest.importorskip("torch")
    batch = [{"a": (1, 2.5), "b": np.array([1.0, 2.0]), "c": "s", "d": True}
             for _ in range(3)]
    ours = default_collate(batch)
    theirs = torch.utils.data.default_collate(batch)
    assert ours["c"] == theirs["c"]
    for k in ("b", "d"):
        assert str(ours[k].dtype).split(".")[-1] == str(theirs[k].dtype).split(".")[-1]
        np.testing.assert_array_equal(n(ours[k]), theirs[k].numpy())
    for x, y in zip(ours["a"], theirs["a"]):
        assert str(x.dtype).split(".")[-1] == str(y.dtype).split(".")[-1]
        np.testing.assert_array_equal(n(x), y.numpy())


def test_samplers_and_datasets():
    ds, X, _ = _ds(10)
    assert list(SequentialSampler(ds)) == list(range(10))
    assert list(BatchSampler(range(7), 3, False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(BatchSampler(range(7), 3, True)) == 2
    sub = Subset(ds, [2, 4])
    assert len(sub) == 2 and n(sub[1][0]).tolist() == X[4].tolist()
    cat = ConcatDataset([sub, sub])
    assert len(cat) == 4 and n(cat[3][0]).tolist() == X[4].tolist()
    parts = random_split(ds, [0.5, 0.5], generator=cddp.Generator().manual_seed(0))
    assert sorted(parts[0].indices + parts[1].indices) == list(range(10))
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, sampler=SequentialSampler(ds), shuffle=True)
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(range(3), 0, False)


def test_seed002_dp_runs_ported(tmp_path):
    shared = os.path.join(os.path.dirname(ROOT), "shared", "seed_scripts")
    src = os.path.join(shared, "seed002_dp.py")
    if not os.path.exists(src):
        pytest.skip("../shared/seed_scripts not present")
    ported = subprocess.run([sys.executable, os.path.join(shared, "port.py"), src],
                            capture_output=True, text=True, check=True).stdout
    script = tmp_path / "seed002_dp.py"
    script.write_text(ported)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120, env=subprocess_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Outside: input size cddp.Size([30, 5]) output_size cddp.Size([30, 2])" in r.stdout
    assert r.stdout.count("In Model") == 4


# ---- IterableDataset with workers: each worker iterates its own copy, round-robin ------------

class _Shards(IterableDataset):
    """Worker w yields per[w] numbers from its own share of range(n) (all of it in-process)."""

    def __init__(self, n, per, fail_at=None):
        self.n, self.per, self.fail_at = n, per, fail_at

    def __iter__(self):
        from cddp.utils.data import get_worker_info
        w = get_worker_info()
        if w is None:
            return iter(range(self.n))
        lo = w.id * self.n // w.num_workers
        return self._gen(lo, lo + self.per[w.id])

    def _gen(self, lo, hi):
        for i in range(lo, hi):
            if i == self.fail_at:
                raise ValueError(f"bad sample {i}")
            yield i


@pytest.mark.parametrize("nw,per,bs,drop,want", [
    # torch 2.13 gives these same lists (tests/test_data.py::test_iterable_workers_match_torch)
    (2, (5, 5), 2, False, [[0, 1], [10, 11], [2, 3], [12, 13], [4], [14]]),
    (3, (2, 7, 4), 2, False, [[0, 1], [7, 8], [14, 15], [9, 10], [16, 17], [11, 12], [13]]),
    (2, (5, 3), 2, True, [[0, 1], [10, 11], [2, 3]]),
    (2, (3, 1), None, False, [0, 10, 1, 2]),
])
def test_iterable_dataset_workers_take_turns(nw, per, bs, drop, want):
    out = [b.tolist() if bs else b for b in DataLoader(_Shards(21, per), batch_size=bs,
                                                       num_workers=nw, drop_last=drop)]
    assert out == want


def test_iterable_workers_match_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader as TDL, IterableDataset as TIDS, get_worker_info

    class T(TIDS):
        def __iter__(self):
            w = get_worker_info()
            return iter(range(w.id * 10, w.id * 10 + (3, 6)[w.id]))

    class C(IterableDataset):
        def __iter__(self):
            from cddp.utils.data import get_worker_info as gwi
            w = gwi()
            return iter(range(w.id * 10, w.id * 10 + (3, 6)[w.id]))
    want = [b.tolist() for b in TDL(T(), batch_size=2, num_workers=2)]
    assert [b.tolist() for b in DataLoader(C(), batch_size=2, num_workers=2)] == want


def test_iterable_worker_error_is_raised_with_its_type():
    with pytest.raises(ValueError, match="bad sample 12"):
        list(DataLoader(_Shards(20, (5, 5), fail_at=12), batch_size=2, num_workers=2))
