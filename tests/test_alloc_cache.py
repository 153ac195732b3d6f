"""The block cache behind large tensors (csrc/core/storage.c): freed blocks of a size class
are reused, the counters account for every byte, the limit and LRU eviction hold, reused
memory is re-zeroed for zeros(), and only blocks from 2 MiB on are advised to huge pages.

Oracles: data pointers (reuse is the same address), the counters' own arithmetic against the
class sizes computed here, NumPy for values, and /proc/self/smaps (the kernel's view of which
mappings may use transparent huge pages)."""
import os

import numpy as np
import pytest

import cddp
from cddp import _C

MIN = _C._alloc_stats()["cache_min"]          # 64 KiB: smaller blocks bypass the cache
THP = _C._alloc_stats()["thp_min"]            # 2 MiB


def class_bytes(nbytes):
    """The size class of a request (8 steps per power of two), as storage.c computes it."""
    n = (nbytes + 63) // 64 * 64
    k = (n - 1).bit_length() - 1
    step = (1 << k) // 8
    return (n + step - 1) // step * step


@pytest.fixture
def cache():
    """A clean cache with a generous limit; restored afterwards."""
    old = _C._alloc_cache_limit(1 << 30)
    _C._alloc_empty_cache()
    yield _C._alloc_stats
    _C._alloc_empty_cache()
    _C._alloc_cache_limit(old)


def test_freed_block_is_reused_and_accounted(cache):
    s0 = cache()
    a = cddp.empty(100_000)                       # 400 000 bytes
    cb = class_bytes(400_000)
    assert cb == 425_984 and class_bytes(420_000) == cb and class_bytes(440_000) > cb
    s1 = cache()
    assert s1["misses"] == s0["misses"] + 1 and s1["live_bytes"] == s0["live_bytes"] + cb
    ptr = a.data_ptr()
    del a
    s2 = cache()
    assert s2["cached_bytes"] == s0["cached_bytes"] + cb and s2["cached_blocks"] == 1
    assert s2["live_bytes"] == s0["live_bytes"]
    b = cddp.empty(105_000)                       # 420 000 bytes: the same class
    s3 = cache()
    assert b.data_ptr() == ptr and s3["hits"] == s2["hits"] + 1
    assert s3["cached_bytes"] == 0 and s3["live_bytes"] == s1["live_bytes"]
    c = cddp.empty(110_000)                       # 440 000 bytes: the next class, a miss
    assert c.data_ptr() != ptr and cache()["misses"] == s3["misses"] + 1
    del b, c
    assert cache()["cached_blocks"] == 2


def test_small_tensors_bypass_the_cache(cache):
    s0 = cache()
    for n in (1, 100, 1000, MIN // 4 - 16):
        x = cddp.ones(n)
        del x
    s1 = cache()
    assert (s1["hits"], s1["misses"], s1["cached_bytes"]) == (s0["hits"], s0["misses"], 0)


def test_reused_memory_is_zeroed_for_zeros_and_values_survive(cache):
    a = cddp.full((300, 1000), 7.5)
    ptr = a.data_ptr()
    del a
    z = cddp.zeros(300, 1000)
    assert z.data_ptr() == ptr                    # the dirty block came back ...
    np.testing.assert_array_equal(z.numpy(), np.zeros((300, 1000), np.float32))  # ... zeroed
    ref = np.random.default_rng(0).standard_normal((700, 1000)).astype(np.float32)
    x = cddp.tensor(ref) * 2 + 1                  # results in cache-backed blocks
    np.testing.assert_allclose(x.numpy(), ref * 2 + 1, rtol=1e-6)


def test_limit_and_lru_eviction(cache):
    sizes = [100_000, 200_000, 400_000]           # floats: three different classes
    blocks = [class_bytes(4 * n) for n in sizes]
    _C._alloc_cache_limit(blocks[1] + blocks[2])  # room for the two newest only
    ts = [cddp.empty(n) for n in sizes]
    ptrs = [t.data_ptr() for t in ts]
    s0 = cache()
    for i in range(3):                             # freed in order: sizes[0] is the LRU
        ts[i] = None
    s1 = cache()
    assert s1["cached_bytes"] == blocks[1] + blocks[2] <= s1["limit"]
    assert s1["evictions"] == s0["evictions"] + 1
    assert cddp.empty(sizes[2]).data_ptr() == ptrs[2]      # cached: reused
    assert cache()["hits"] == s1["hits"] + 1
    cddp.empty(sizes[0])                                   # evicted: a fresh block
    assert cache()["misses"] == s1["misses"] + 1
    _C._alloc_cache_limit(0)                               # trims everything at once
    assert cache()["cached_bytes"] == 0
    x = cddp.empty(sizes[1])
    del x
    assert cache()["cached_bytes"] == 0                    # a zero limit caches nothing
    with pytest.raises(ValueError):
        _C._alloc_cache_limit(-1)


def test_empty_cache_gives_everything_back(cache):
    xs = [cddp.empty(n) for n in (50_000, 80_000, 1_000_000)]
    del xs
    assert cache()["cached_blocks"] == 3
    _C._alloc_empty_cache()
    s = cache()
    assert s["cached_blocks"] == 0 and s["cached_bytes"] == 0


def _smaps_record(ptr):
    """The /proc/self/smaps fields of the mapping holding address ptr."""
    rec, inside = {}, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if not head.endswith(":"):             # a mapping's first line: "lo-hi perms ..."
                if inside:
                    break
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= ptr < hi
            elif inside:
                rec[head[:-1]] = line.split()[1]
    return rec


def test_huge_pages_only_from_the_threshold(cache):
    s0 = cache()
    small = cddp.ones(THP * 3 // 16)             # 1.5 MiB: its class stays below 2 MiB
    assert class_bytes(THP * 3 // 4) < THP
    s1 = cache()
    assert s1["thp_blocks"] == s0["thp_blocks"]
    big = cddp.ones(THP // 4 * 3)                # 6 MiB
    s2 = cache()
    assert s2["thp_blocks"] == s1["thp_blocks"] + 1
    assert s2["thp_bytes"] == s1["thp_bytes"] + class_bytes(3 * THP)
    assert big.data_ptr() % THP == 0             # 2 MiB aligned: whole huge pages
    np.testing.assert_array_equal(big.numpy()[::4096], 1.0)
    np.testing.assert_array_equal(small.numpy()[::4096], 1.0)
    mode = "/sys/kernel/mm/transparent_hugepage/enabled"
    rec = _smaps_record(big.data_ptr())
    if os.path.exists(mode) and "[never]" not in open(mode).read() and "THPeligible" in rec:
        assert rec["THPeligible"] == "1"          # the kernel agrees: advised for huge pages
    del big
    assert cache()["thp_blocks"] == s2["thp_blocks"]         # cached, still mapped
    _C._alloc_empty_cache()
    assert cache()["thp_blocks"] == s1["thp_blocks"]


def test_evicted_huge_block_is_unmapped(cache):
    """Memory really goes back: once the cache is emptied, the block's mapping is gone."""
    big = cddp.ones(THP // 4 * 3)
    ptr = big.data_ptr()
    assert _smaps_record(ptr)                    # mapped while live
    del big
    assert _smaps_record(ptr)                    # and while cached
    _C._alloc_empty_cache()
    assert _smaps_record(ptr) == {}


def test_shared_storage_returns_its_block_to_the_cache(cache):
    """share_memory_ moves the bytes into a memfd; the cached block it leaves comes back to
    the cache when the storage dies (not freed by the wrong allocator, not leaked)."""
    x = cddp.arange(200_000, dtype=cddp.float32)
    ptr, s0 = x.data_ptr(), cache()
    x.share_memory_()
    assert x.is_shared() and x.data_ptr() != ptr
    np.testing.assert_array_equal(x.numpy(), np.arange(200_000, dtype=np.float32))
    del x
    s1 = cache()
    assert s1["live_blocks"] == s0["live_blocks"] - 1
    assert s1["cached_blocks"] == s0["cached_blocks"] + 1
    assert cddp.empty(200_000).data_ptr() == ptr
