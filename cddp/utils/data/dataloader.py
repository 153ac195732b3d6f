"""DataLoader (torch.utils.data.DataLoader) and default_collate.

Batches come out in sampler order whether or not workers are used: with num_workers > 0 each
batch's indices go to worker processes round-robin and results are put back in order, so a
run with workers yields exactly the batches of a run without them. Collation of N tensors is
one C stack (one copy into one buffer); a TensorDataset batch is gathered with one index op
per tensor instead of N single-sample views.
"""
import collections.abc
import itertools
import multiprocessing
import os
import queue
import traceback

import numpy as np

from ... import _C
from .dataset import IterableDataset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler

Tensor = _C.Tensor
_NUMPY_KINDS = {"f", "i", "u", "b"}


def default_collate(batch):
    """torch's rules: tensors are stacked on a new dim 0, Python numbers become 1-D tensors
    (float64 for floats, int64 for ints), NumPy arrays are stacked as tensors, strings stay a
    list, and tuples/lists/dicts are collated field by field."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return _C.stack(list(batch), 0)
    if isinstance(elem, np.ndarray) and elem.dtype.kind in _NUMPY_KINDS:
        return _C.stack([_C.as_tensor(b) for b in batch], 0)
    if isinstance(elem, np.generic) and elem.dtype.kind in _NUMPY_KINDS:
        return _C.as_tensor(np.array(batch))
    if isinstance(elem, bool):
        return _C.tensor(batch, dtype=_C.bool)
    if isinstance(elem, int):
        return _C.tensor(batch, dtype=_C.int64)
    if isinstance(elem, float):
        return _C.tensor(batch, dtype=_C.float64)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        collated = {key: default_collate([d[key] for d in batch]) for key in elem}
        try:
            return collated if type(elem) is dict else type(elem)(collated)
        except TypeError:
            return collated
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        return [default_collate(samples) for samples in transposed]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts "
                    f"or lists; found {type(elem)}")


def default_convert(data):
    if isinstance(data, np.ndarray) and data.dtype.kind in _NUMPY_KINDS:
        return _C.as_tensor(data)
    return data


def _fetch(dataset, indices, collate_fn, auto_collation):
    if not auto_collation:
        return collate_fn(dataset[indices])
    if collate_fn is default_collate and type(dataset) is TensorDataset:
        idx = _C.tensor(indices, dtype=_C.int64)
        return [t[idx] for t in dataset.tensors]
    getitems = getattr(dataset, "__getitems__", None)
    data = getitems(indices) if getitems is not None else [dataset[i] for i in indices]
    return collate_fn(data)


class _WorkerInfo:
    def __init__(self, id, num_workers, seed, dataset):  # noqa: A002
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset


_worker_info = None


def get_worker_info():
    """In a worker process: its id, num_workers, seed and dataset copy; None in the main one."""
    return _worker_info


def _worker_loop(dataset, index_q, result_q, collate_fn, auto_collation, worker_init_fn,
                 worker_id, num_workers, seed):
    global _worker_info
    _C.manual_seed(seed)
    np.random.seed(seed % (2 ** 32))
    _worker_info = _WorkerInfo(worker_id, num_workers, seed, dataset)
    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
    except Exception:  # noqa: BLE001 (reported to the main process)
        result_q.put((-1, None, f"worker_init_fn failed in worker {worker_id}:\n"
                      + traceback.format_exc()))
        return
    while True:
        try:
            task = index_q.get(timeout=5.0)
        except queue.Empty:
            if os.getppid() == 1:       # the main process died: do not linger
                return
            continue
        if task is None:
            return
        batch_idx, indices = task
        try:
            result_q.put((batch_idx, _fetch(dataset, indices, collate_fn, auto_collation), None))
        except Exception:  # noqa: BLE001 (re-raised in the main process)
            result_q.put((batch_idx, None, f"Caught exception in DataLoader worker process "
                          f"{worker_id}.\nOriginal " + traceback.format_exc()))


class _MultiProcessIter:
    """Feeds index batches to workers round-robin, returns results in sampler order."""

    def __init__(self, loader, batches, base_seed):
        self._loader = loader
        self._batches = batches
        ctx = loader.multiprocessing_context or multiprocessing.get_context()
        if isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx)
        self._nw = loader.num_workers
        self._index_qs = [ctx.Queue() for _ in range(self._nw)]
        self._result_q = ctx.Queue()
        self._workers = []
        for wid in range(self._nw):
            p = ctx.Process(target=_worker_loop, daemon=True,
                            args=(loader.dataset, self._index_qs[wid], self._result_q,
                                  loader.collate_fn, loader._auto_collation,
                                  loader.worker_init_fn, wid, self._nw, base_seed + wid))
            p.start()
            self._workers.append(p)
        self._send_idx = 0
        self._rcv_idx = 0
        self._cache = {}
        self._exhausted = False
        for _ in range(loader.prefetch_factor * self._nw):
            self._put()

    def _put(self):
        if self._exhausted:
            return
        try:
            indices = next(self._batches)
        except StopIteration:
            self._exhausted = True
            return
        self._index_qs[self._send_idx % self._nw].put((self._send_idx, indices))
        self._send_idx += 1

    def __iter__(self):
        return self

    def __next__(self):
        if self._rcv_idx >= self._send_idx:
            self.shutdown()
            raise StopIteration
        timeout = self._loader.timeout if self._loader.timeout > 0 else None
        while self._rcv_idx not in self._cache:
            try:
                idx, data, err = self._result_q.get(timeout=timeout if timeout else 5.0)
            except queue.Empty:
                dead = [w.pid for w in self._workers if not w.is_alive()]
                if dead:
                    self.shutdown()
                    raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(map(str, dead))}) "
                                       "exited unexpectedly") from None
                if timeout:
                    self.shutdown()
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None
                continue
            if err is not None:
                self.shutdown()
                raise RuntimeError(err)
            self._cache[idx] = data
        data = self._cache.pop(self._rcv_idx)
        self._rcv_idx += 1
        self._put()
        return data

    def shutdown(self):
        for q in self._index_qs:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        for w in self._workers:
            w.join(timeout=5)
            if w.is_alive():
                w.terminate()
        self._workers = []

    def __del__(self):
        if getattr(self, "_workers", None):
            self.shutdown()


class DataLoader:
    """torch.utils.data.DataLoader: batching, shuffling, samplers, collation, workers."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing, otherwise set "
                             "prefetch_factor to None.")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = 2 if prefetch_factor is None else prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.generator = generator
        is_iterable = isinstance(dataset, IterableDataset)
        if is_iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle "
                                 f"option, but got shuffle={shuffle}")
            if sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler "
                                 "and batch_sampler options")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None and not is_iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle \
                else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not is_iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self._is_iterable = is_iterable
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None or (self._is_iterable and self.batch_size is not None)

    @property
    def _index_sampler(self):
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def _iter_iterable(self):
        it = iter(self.dataset)
        if self.batch_size is None:
            for sample in it:
                yield self.collate_fn(sample)
            return
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield self.collate_fn(batch)

    def __iter__(self):
        # torch draws a base seed from the global generator for every iterator
        base_seed = int(_C.empty((), dtype=_C.int64).random_(generator=self.generator).item())
        if self._is_iterable:
            return self._iter_iterable()
        batches = iter(self._index_sampler)
        if self.num_workers == 0:
            return (_fetch(self.dataset, b, self.collate_fn, self._auto_collation)
                    for b in batches)
        return _MultiProcessIter(self, batches, base_seed)

    def __len__(self):
        if self._is_iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)
