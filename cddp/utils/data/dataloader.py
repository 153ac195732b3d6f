"""DataLoader (torch.utils.data.DataLoader) and default_collate.

Batches come out in sampler order whether or not workers are used: with num_workers > 0 each
batch's indices go to worker processes round-robin and results are put back in order, so a
run with workers yields exactly the batches of a run without them. Collation of N tensors is
one C stack (one copy into one buffer); a TensorDataset batch is gathered with one index op
per tensor instead of N single-sample views.

An IterableDataset with num_workers > 0 runs as torch runs it: every worker iterates its own
copy of the dataset (get_worker_info() tells it which share to produce), batches what it
yields, and the main process takes one batch from each worker that still has some in turn
(round-robin), skipping a worker once its iterator is exhausted.

persistent_workers=True keeps the worker processes (and their dataset copies and RNG state)
from one epoch to the next, as torch does: the loader holds its one iterator and starts each
epoch on the same workers; they stop when the loader is garbage-collected or the interpreter
exits, and on their own within _WATCHDOG_S of the main process dying.

Worker seeding, as torch's: worker w of an iterator with base seed b seeds cddp and Python's
`random` with b + w, and NumPy's global RNG with _generate_state(b, w).

Worker failures, as torch has them: an exception in a worker is raised in the main process
with its own type and the worker's traceback in the message, when its batch's turn comes
(the batches before it are delivered first); a worker that dies (SIGKILL, the
OOM killer) fails the loop when it dies — the main process waits on the result queue and on
every worker's sentinel at once; leaving the loop early terminates the workers that still owe
a batch instead of waiting for them.
"""
import atexit
import collections
from typing import Generic, TypeVar
import itertools
import multiprocessing
from multiprocessing import connection as mp_connection
import os
import pickle
import queue
import random
import signal
import sys
import time
import traceback
import warnings
import weakref

import numpy as np

from ... import _C
from ._utils.collate import default_collate, default_convert  # noqa: F401  (torch's path)
from .dataset import Dataset, IterableDataset, TensorDataset  # noqa: F401  (Dataset: torch's path)
from .sampler import BatchSampler, RandomSampler, SequentialSampler

Tensor = _C.Tensor


def _fetch(dataset, indices, collate_fn, auto_collation):
    if not auto_collation:
        return collate_fn(dataset[indices])
    if collate_fn is default_collate and type(dataset) is TensorDataset:
        idx = _C.tensor(indices, dtype=_C.int64)
        return [t[idx] for t in dataset.tensors]
    getitems = getattr(dataset, "__getitems__", None)
    data = getitems(indices) if getitems is not None else [dataset[i] for i in indices]
    return collate_fn(data)


class _DatasetKind:
    """torch's tag for how a loader reads its dataset (loader._dataset_kind)."""
    Map = 0
    Iterable = 1


class _InfiniteConstantSampler:
    """torch's placeholder sampler of IterableDataset loaders: None, forever."""

    def __iter__(self):
        while True:
            yield None


class _WorkerInfo:
    def __init__(self, id, num_workers, seed, dataset):  # noqa: A002
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset


_worker_info = None


def get_worker_info():
    """In a worker process: its id, num_workers, seed and dataset copy; None in the main one."""
    return _worker_info


class _KeyErrorMessage(str):
    """str(KeyError(msg)) is repr(msg): this keeps the traceback's newlines (torch's)."""

    def __repr__(self):
        return self


class _ExceptionWrapper:
    """An exception from a worker, carried to the main process and raised there with its own
    type and the worker's traceback in the message (torch's ExceptionWrapper)."""

    def __init__(self, where):
        exc_type = sys.exc_info()[0]
        try:                       # the type travels by reference: it must import over there
            pickle.loads(pickle.dumps(exc_type))
        except Exception:  # noqa: BLE001 — any failure: report as RuntimeError
            exc_type = RuntimeError
        self.exc_type = exc_type
        self.where = where
        self.exc_msg = traceback.format_exc()

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)
        try:
            exception = self.exc_type(msg)
        except Exception:  # noqa: BLE001 — a type whose constructor wants other arguments
            raise RuntimeError(msg) from None
        raise exception


class _Exhausted:
    """A worker's answer once its IterableDataset iterator has ended."""


_RESUME = -2            # task / answer id of a persistent worker's "new epoch" message
_WATCHDOG_S = 2.0       # how often an idle worker checks that its parent is still alive


def _iterable_batches(dataset, batch_size, drop_last, collate_fn):
    """The batches of an IterableDataset's iterator (batch_size None: each sample converted)."""
    it = iter(dataset)
    if batch_size is None:
        for sample in it:
            yield collate_fn(sample)
        return
    while True:
        batch = list(itertools.islice(it, batch_size))
        if not batch or (drop_last and len(batch) < batch_size):
            return
        yield collate_fn(batch)


def _generate_state(base_seed, worker_id):
    """NumPy's seed for a worker, four uint32 words (torch's _generate_state, a SeedSequence-
    like hash of (worker_id, base_seed)), so NumPy and `random` streams do not collide."""
    INIT_A, MULT_A = 0x43B0D7E5, 0x931E8875
    INIT_B, MULT_B = 0x8B51F9DD, 0x58F38DED
    MIX_MULT_L, MIX_MULT_R = 0xCA01F9DD, 0x4973F715
    XSHIFT, MASK32 = 16, 0xFFFFFFFF
    entropy = [worker_id, base_seed & MASK32, base_seed >> 32, 0]
    hash_const_a = INIT_A

    def hash_(value):
        nonlocal hash_const_a
        value = (value ^ hash_const_a) & MASK32
        hash_const_a = (hash_const_a * MULT_A) & MASK32
        value = (value * hash_const_a) & MASK32
        return (value ^ (value >> XSHIFT)) & MASK32

    def mix(x, y):
        result = ((MIX_MULT_L * x) - (MIX_MULT_R * y)) & MASK32
        return (result ^ (result >> XSHIFT)) & MASK32

    pool = [hash_(e) for e in entropy]
    for i_src in range(4):              # every word affects every other
        for i_dst in range(4):
            if i_src != i_dst:
                pool[i_dst] = mix(pool[i_dst], hash_(pool[i_src]))
    hash_const_b = INIT_B
    state = []
    for value in pool:
        value = (value ^ hash_const_b) & MASK32
        hash_const_b = (hash_const_b * MULT_B) & MASK32
        value = (value * hash_const_b) & MASK32
        state.append((value ^ (value >> XSHIFT)) & MASK32)
    return state


def _worker_loop(dataset, index_q, result_q, collate_fn, auto_collation, worker_init_fn,
                 worker_id, num_workers, seed, iterable=None):
    """A worker: answers each task from index_q with (task, data, error). Map-style tasks
    carry indices; with `iterable` = (batch_size, drop_last) each task takes the next batch
    of this worker's own iterator (_Exhausted once it has ended)."""
    global _worker_info
    parent = os.getppid()
    # torch's seeding: random and cddp from base_seed + worker_id, NumPy from a hash of both
    random.seed(seed)
    _C.manual_seed(seed)
    np.random.seed(_generate_state(seed - worker_id, worker_id))
    _worker_info = _WorkerInfo(worker_id, num_workers, seed, dataset)
    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
    except Exception:  # noqa: BLE001 (re-raised in the main process)
        result_q.put((-1, None, _ExceptionWrapper(f"in DataLoader worker process {worker_id}")))
        return
    batches = None if iterable is None else _iterable_batches(dataset, *iterable, collate_fn)
    while True:
        try:
            task = index_q.get(timeout=_WATCHDOG_S)
        except queue.Empty:
            if os.getppid() != parent:  # the main process died (we were re-parented)
                return
            continue
        if task is None:
            return
        batch_idx, indices = task
        if batch_idx == _RESUME:        # persistent workers: the next epoch starts
            if iterable is not None:
                batches = _iterable_batches(dataset, *iterable, collate_fn)
            result_q.put((_RESUME, worker_id, None))
            continue
        try:
            if batches is None:
                data = _fetch(dataset, indices, collate_fn, auto_collation)
            else:
                data = next(batches, _Exhausted)
            result_q.put((batch_idx, data, None))
        except Exception:  # noqa: BLE001 (re-raised in the main process)
            result_q.put((batch_idx, None,
                          _ExceptionWrapper(f"in DataLoader worker process {worker_id}")))


def _exit_status(w):
    code = w.exitcode
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _SingleProcessIter:
    """num_workers=0: fetches each batch in the calling process. len() is the index
    sampler's, as torch's iterators have it (an IterableDataset's has none: TypeError)."""

    def __init__(self, loader, batches):
        self._index_sampler = loader._index_sampler
        if batches is None:
            self._it = _iterable_batches(loader.dataset, loader.batch_size, loader.drop_last,
                                         loader.collate_fn)
        else:
            self._it = (_fetch(loader.dataset, b, loader.collate_fn, loader._auto_collation)
                        for b in batches)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def __len__(self):
        return len(self._index_sampler)


class _MultiProcessIter:
    """Feeds index batches to workers round-robin, returns results in sampler order (an
    IterableDataset: "next batch" tasks to the workers not yet exhausted, in turn). Waits
    on the result queue and on every worker's sentinel at once, so a worker that dies is
    noticed when it dies, not at the next poll.

    persistent_workers=True: the loader keeps this iterator and calls _reset() for each new
    epoch (torch's design): every worker gets a resume message, answers it once it has
    finished what the previous epoch left it (those results are dropped), and keeps its
    process, dataset copy and RNG state. It holds no reference to the loader, so when the
    loader is garbage-collected this iterator goes with it and __del__ stops the workers; an
    atexit hook stops those still alive when the interpreter exits."""

    SHUTDOWN_GRACE_S = 5.0       # idle workers: time to read their stop message and exit
    TERMINATE_GRACE_S = 1.0      # busy workers after SIGTERM, before SIGKILL

    def __init__(self, loader, batches, base_seed):
        self._timeout = loader.timeout
        self._prefetch = loader.prefetch_factor
        self._persistent = loader.persistent_workers
        ctx = loader.multiprocessing_context or multiprocessing.get_context()
        if isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx)
        self._nw = loader.num_workers
        self._index_sampler = loader._index_sampler     # for len(), as torch's iterator
        self._index_qs = [ctx.Queue() for _ in range(self._nw)]
        self._result_q = ctx.Queue()
        self._workers = []
        iterable = (loader.batch_size, loader.drop_last) if batches is None else None
        for wid in range(self._nw):
            p = ctx.Process(target=_worker_loop, daemon=True,
                            args=(loader.dataset, self._index_qs[wid], self._result_q,
                                  loader.collate_fn, loader._auto_collation,
                                  loader.worker_init_fn, wid, self._nw, base_seed + wid,
                                  iterable))
            p.start()
            self._workers.append(p)
        self._iterable = iterable is not None
        if self._persistent:
            _register_persistent(self)
        self._start_epoch(batches)

    def _start_epoch(self, batches):
        self._batches = batches
        self._send_idx = 0
        self._rcv_idx = 0
        self._cache = {}
        self._owner = {}                    # task -> the worker it went to
        # IterableDataset: the workers not yet exhausted, the next one's turn first
        self._active = collections.deque(range(self._nw)) if self._iterable else None
        self._exhausted = False
        for _ in range(self._prefetch * self._nw):
            self._put()

    def _reset(self, batches):
        """A new epoch on the same workers (persistent_workers): each worker acknowledges a
        resume message after its last task of the previous epoch; results until then are
        from that epoch (an early exit from its loop) and are dropped."""
        for q in self._index_qs:
            q.put((_RESUME, None))
        pending = self._nw
        while pending:
            idx, _, _ = self._get_result()
            if idx == _RESUME:
                pending -= 1
        self._start_epoch(batches)

    @property
    def _alive(self):
        return bool(self._workers)

    def _put(self):
        if self._exhausted:
            return
        if self._active is not None:        # IterableDataset: the next live worker's turn
            if not self._active:
                self._exhausted = True
                return
            wid, indices = self._active[0], None
            self._active.rotate(-1)
        else:
            try:
                indices = next(self._batches)
            except StopIteration:
                self._exhausted = True
                return
            wid = self._send_idx % self._nw
        self._index_qs[wid].put((self._send_idx, indices))
        self._owner[self._send_idx] = wid
        self._send_idx += 1

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._index_sampler)

    def __next__(self):
        while True:
            if self._rcv_idx >= self._send_idx:
                if not self._persistent:
                    self.shutdown()
                raise StopIteration
            while self._rcv_idx not in self._cache:
                idx, data, err = self._get_result()
                if err is not None and idx < 0:     # worker_init_fn failed: no batch of its own
                    self.shutdown()
                    err.reraise()
                if data is _Exhausted and self._owner.get(idx) in self._active:
                    self._active.remove(self._owner[idx])   # no more tasks for it
                # a failed batch waits for its turn: the batches before it come out first
                self._cache[idx] = data if err is None else err
            data = self._cache.pop(self._rcv_idx)
            self._owner.pop(self._rcv_idx, None)
            self._rcv_idx += 1
            if isinstance(data, _ExceptionWrapper):
                self.shutdown()
                data.reraise()
            self._put()
            if data is not _Exhausted:
                return data

    def _get_result(self):
        """The next (batch index, data, error) from any worker: RuntimeError when a worker
        died or the loader's timeout passed first."""
        timeout = self._timeout if self._timeout > 0 else None
        end = None if timeout is None else time.monotonic() + timeout
        reader = getattr(self._result_q, "_reader", None)
        while True:
            try:
                return self._result_q.get_nowait()
            except queue.Empty:
                pass
            dead = [(wid, w) for wid, w in enumerate(self._workers) if not w.is_alive()]
            if dead:
                self.shutdown()
                pids = ", ".join(str(w.pid) for _, w in dead)
                how = "; ".join(f"worker {wid} (pid {w.pid}): {_exit_status(w)}"
                                for wid, w in dead)
                raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly "
                                   f"({how})") from None
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                self.shutdown()
                raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None
            if reader is None:          # not the stdlib queue: poll
                time.sleep(0.05 if left is None else min(0.05, left))
                continue
            mp_connection.wait([reader] + [w.sentinel for w in self._workers], left)

    def _busy(self):
        """Worker ids that still owe a batch (their results would be thrown away)."""
        owed = (i for i in range(self._rcv_idx, self._send_idx) if i not in self._cache)
        return {self._owner[i] for i in owed}

    def shutdown(self):
        """Stop every worker: idle ones read their stop message and exit; busy ones (a batch
        still owed: an early exit from the loop, an error) are terminated at once instead of
        being waited for."""
        workers, self._workers = self._workers, []
        if not workers:
            return
        busy = self._busy()
        for q in self._index_qs:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        for wid, w in enumerate(workers):
            if wid in busy and w.is_alive():
                w.terminate()
        end = time.monotonic() + self.SHUTDOWN_GRACE_S
        for wid, w in enumerate(workers):
            grace = self.TERMINATE_GRACE_S if wid in busy else end - time.monotonic()
            w.join(timeout=max(0.0, grace))
            if w.is_alive():
                w.kill()
                w.join(timeout=self.TERMINATE_GRACE_S)
        for q in self._index_qs + [self._result_q]:
            q.cancel_join_thread()
            q.close()

    def __del__(self):
        if getattr(self, "_workers", None):
            try:
                self.shutdown()
            except Exception:  # noqa: BLE001 — at interpreter exit modules may be gone
                pass


_persistent_iters = weakref.WeakSet()
_atexit_registered = False


def _register_persistent(it):
    """Stop persistent workers still alive when the interpreter exits (before
    multiprocessing's own exit handler, which atexit runs after ours: it was registered
    first)."""
    global _atexit_registered
    _persistent_iters.add(it)
    if not _atexit_registered:
        atexit.register(_shutdown_persistent)
        _atexit_registered = True


def _shutdown_persistent():
    for it in list(_persistent_iters):
        it.shutdown()


_T_co = TypeVar("_T_co", covariant=True)


class DataLoader(Generic[_T_co]):
    """torch.utils.data.DataLoader: batching, shuffling, samplers, collation, workers.
    Generic, as torch's (DataLoader[Tensor] in annotations)."""

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
        # torch's attribute: None without workers, 2 by default with them
        self.prefetch_factor = (None if num_workers == 0 else
                                2 if prefetch_factor is None else prefetch_factor)
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
        self._iterator = None       # persistent_workers: the iterator whose workers live on
        self._initialized = True

    _FROZEN = frozenset(("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                         "persistent_workers"))

    def __setattr__(self, attr, val):
        # the batch sampler is built from these in __init__: a later assignment would change
        # nothing (torch refuses it the same way)
        if attr in self._FROZEN and self.__dict__.get("_initialized"):
            raise ValueError(f"{attr} attribute should not be set after "
                             f"{type(self).__name__} is initialized")
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None or (self._is_iterable and self.batch_size is not None)

    @property
    def _dataset_kind(self):
        return _DatasetKind.Iterable if self._is_iterable else _DatasetKind.Map

    @property
    def _index_sampler(self):
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def __iter__(self):
        if self.persistent_workers and self.num_workers > 0:
            # one iterator for the loader's life: workers (and their seeds) are reused, and
            # no new base seed is drawn (as torch); a fresh one only after a failure
            # stopped them
            it = self._iterator
            if it is not None and it._alive:
                it._reset(None if self._is_iterable else iter(self._index_sampler))
                return it
            it = self._iterator = self._get_iterator()
            return it
        return self._get_iterator()

    def check_worker_number_rationality(self):
        """torch's warning when more workers than this process's CPUs are asked for."""
        if not self.num_workers:
            return
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        if cpus is None or self.num_workers > cpus:
            suggest = (f"Our suggested max number of worker in current system is {cpus}"
                       f"{'' if hasattr(os, 'sched_getaffinity') else ' (`cpuset` is not taken into account)'}"
                       ", which is smaller than what this DataLoader is going to create."
                       if cpus is not None else "DataLoader is not able to compute a suggested "
                       "max number of worker in current system.")
            warnings.warn(f"This DataLoader will create {self.num_workers} worker processes in "
                          f"total. {suggest} Please be aware that excessive worker creation "
                          "might get DataLoader running slow or even freeze, lower the worker "
                          "number to avoid potential slowness/freeze if necessary.")

    def _get_iterator(self):
        # torch's warnings: more workers than CPUs, pin_memory without an accelerator; both
        # located in this file, as torch's are in its own, so Python's default filter shows
        # each once per process however many loaders a script makes
        self.check_worker_number_rationality()
        if self.pin_memory:
            from ...accelerator import is_available
            if not is_available():
                warnings.warn("'pin_memory' argument is set as true but no accelerator is found, "
                              "then device pinned memory won't be used.")
        # torch draws a base seed from the global generator for every iterator
        base_seed = int(_C.empty((), dtype=_C.int64).random_(generator=self.generator).item())
        if self._is_iterable:
            if self.num_workers == 0:
                return _SingleProcessIter(self, None)
            return _MultiProcessIter(self, None, base_seed)
        batches = iter(self._index_sampler)
        if self.num_workers == 0:
            return _SingleProcessIter(self, batches)
        return _MultiProcessIter(self, batches, base_seed)

    def __len__(self):
        if self._is_iterable:
            n = len(self.dataset)
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)
