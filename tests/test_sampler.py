"""DistributedSampler: index lists identical to torch's over a sweep of every argument, and
torch's rules checked without torch (disjoint cover, padding, drop_last, epochs)."""
import itertools

import pytest

from cddp.utils.data.distributed import DistributedSampler


def _ours(n, r, k, shuffle, seed, epoch, drop_last):
    s = DistributedSampler(range(n), num_replicas=r, rank=k, shuffle=shuffle, seed=seed,
                           drop_last=drop_last)
    s.set_epoch(epoch)
    return list(s), len(s)


SWEEP = list(itertools.product([0, 1, 5, 10, 17, 64, 1000], [1, 2, 3, 4, 7], [True, False],
                               [0, 2048], [0, 3], [False, True]))


def test_matches_torch_over_sweep():
    torch = pytest.importorskip("torch")
    from torch.utils.data.distributed import DistributedSampler as TS
    for n, r, shuffle, seed, epoch, drop_last in SWEEP:
        for k in range(r):
            t = TS(range(n), num_replicas=r, rank=k, shuffle=shuffle, seed=seed,
                   drop_last=drop_last)
            t.set_epoch(epoch)
            ours, length = _ours(n, r, k, shuffle, seed, epoch, drop_last)
            assert ours == list(t) and length == len(t), (n, r, k, shuffle, seed, epoch, drop_last)


@pytest.mark.parametrize("n,r", [(10, 3), (12, 4), (5, 7), (1000, 2)])
def test_ranks_cover_dataset(n, r):
    lists = [_ours(n, r, k, True, 7, 1, False)[0] for k in range(r)]
    assert all(len(x) == len(lists[0]) for x in lists)
    flat = [i for x in lists for i in x]
    assert set(flat) == set(range(n)) and len(flat) == -(-n // r) * r
    dropped = [_ours(n, r, k, True, 7, 1, True)[0] for k in range(r)]
    flat = [i for x in dropped for i in x]
    assert len(flat) == len(set(flat)) == (n // r) * r


def test_epoch_changes_order_seed_reproduces():
    a = _ours(100, 2, 0, True, 0, 0, False)[0]
    b = _ours(100, 2, 0, True, 0, 1, False)[0]
    c = _ours(100, 2, 0, True, 0, 1, False)[0]
    assert a != b and b == c
    assert _ours(10, 2, 1, False, 0, 5, False)[0] == [1, 3, 5, 7, 9]


def test_bad_rank():
    with pytest.raises(ValueError, match="Invalid rank 2"):
        DistributedSampler(range(4), num_replicas=2, rank=2)
