"""cddp.distributed.store — rendezvous key-value stores.

Mirrors torch.distributed.{Store, TCPStore, FileStore, PrefixStore, HashStore} (same
constructor signatures and methods). The TCP store is C (csrc/distributed/store/server.c, client.c,
distributed/python/py_store.c): rank 0's process hosts the server on a background thread; every store object
holds one client connection whose blocking calls release the GIL and end at a deadline.

    store.set(key, value)                 value: str or bytes-like
    store.get(key) -> bytes               waits up to store.timeout for the key
    store.add(key, amount) -> int         atomic counter (decimal text, as torch stores it)
    store.wait(keys, timeout=None)        until every key exists
    store.check(keys) -> bool
    store.compare_set(key, expected, desired) -> bytes     torch's semantics (see below)
    store.delete_key(key) -> bool
    store.num_keys() -> int
    store.timeout / store.set_timeout(timedelta)

Unlike torch's, the TCP store is closed to strangers when CDDP_TOKEN is set (the launchers set
a random one): a client must present the same token or its constructor raises PermissionError.

Errors: a wait that runs out raises StoreTimeoutError (both torch's DistStoreError, a
RuntimeError, and TimeoutError), naming the keys and the seconds waited; a server that went
away raises DistNetworkError (a RuntimeError).
"""
import datetime
import errno
import fcntl
import operator
import os
import struct
import threading
import time
import weakref

from .. import _C

__all__ = ["Store", "TCPStore", "FileStore", "PrefixStore", "HashStore", "DistError",
           "DistStoreError", "DistNetworkError", "StoreTimeoutError"]


class DistError(RuntimeError):
    """torch.distributed.DistError: base of the distributed errors."""


class DistStoreError(DistError):
    """torch.distributed.DistStoreError: a store operation failed."""


class DistNetworkError(DistError):
    """torch.distributed.DistNetworkError: the store connection failed or was closed."""


class StoreTimeoutError(DistStoreError, TimeoutError):
    """A store wait ran out (torch raises DistStoreError; this is also a TimeoutError)."""


_C._store_set_exceptions(StoreTimeoutError, DistNetworkError, DistStoreError)

_DEFAULT_TIMEOUT = datetime.timedelta(seconds=300)
_INIT_KEY = "init/"          # torch's worker counter key (it shows in num_keys, as in torch)


def _as_timedelta(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return datetime.timedelta(seconds=timeout)
    raise TypeError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__}")


def _seconds(timeout):
    return _as_timedelta(timeout).total_seconds()


def _key_bytes(key):
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    raise TypeError(f"store keys must be str or bytes, not {type(key).__name__}")


def _value_bytes(value):
    if isinstance(value, str):
        return value.encode()
    try:
        return bytes(memoryview(value))
    except TypeError:
        raise TypeError(f"store values must be str or bytes-like, not {type(value).__name__}") from None


class Store:
    """torch.distributed.Store: the interface; subclass it for a custom store."""

    def __init__(self):
        self._timeout = _DEFAULT_TIMEOUT

    @property
    def timeout(self):
        return self._timeout

    def set_timeout(self, timeout):
        self._timeout = _as_timedelta(timeout)

    def set(self, key, value):
        raise NotImplementedError

    def get(self, key):
        raise NotImplementedError

    def add(self, key, amount):
        raise NotImplementedError

    def compare_set(self, key, expected_value, desired_value):
        raise NotImplementedError

    def delete_key(self, key):
        raise NotImplementedError

    def num_keys(self):
        raise NotImplementedError

    def check(self, keys):
        raise NotImplementedError

    def wait(self, keys, timeout=None):
        raise NotImplementedError

    def append(self, key, value):
        """Not atomic here; subclasses with a server do it in one step."""
        old = self.get(key) if self.check([key]) else b""
        self.set(key, old + _value_bytes(value))

    def multi_get(self, keys):
        return [self.get(k) for k in keys]

    def multi_set(self, keys, values):
        if len(keys) != len(values):
            raise ValueError(f"multi_set: {len(keys)} keys but {len(values)} values")
        for k, v in zip(keys, values):
            self.set(k, v)

    def has_extended_api(self):
        return True


# ---- TCPStore ---------------------------------------------------------------------------

class _ServerRef:
    """Holds one C server; several multi_tenant TCPStores in a process share it."""
    __slots__ = ("server", "__weakref__")

    def __init__(self, server):
        self.server = server


_tenants = weakref.WeakValueDictionary()    # port -> _ServerRef, for multi_tenant=True
_tenants_lock = threading.Lock()


def _start_server(host, port, token, multi_tenant, listen_fd):
    with _tenants_lock:
        if multi_tenant and port:
            ref = _tenants.get(port)
            if ref is not None and not ref.server.closed:
                return ref
        fd = -1 if listen_fd is None else operator.index(listen_fd)
        ref = _ServerRef(_C._store_server_start(host, port, token, fd))
        if multi_tenant:
            _tenants[ref.server.port] = ref
        return ref


class TCPStore(Store):
    """torch.distributed.TCPStore: a store served over TCP by the master (rank 0's process).

    is_master=True starts the server here (port 0: an ephemeral port, see .port) and connects
    a client to it. With world_size and wait_for_workers every client counts itself in, and
    the master's constructor waits (up to timeout) until world_size clients have joined.
    Clients retry connecting until timeout, since the master may come up later.
    """

    def __init__(self, host_name, port, world_size=None, is_master=False,
                 timeout=_DEFAULT_TIMEOUT, wait_for_workers=True, multi_tenant=False,
                 master_listen_fd=None, use_libuv=True):
        super().__init__()
        if not isinstance(host_name, str):
            raise TypeError(f"host_name must be a str, got {type(host_name).__name__}")
        port = operator.index(port)
        self._timeout = _as_timedelta(timeout)
        self._host = host_name
        self._client = None
        self._server = None
        token = os.environ.get("CDDP_TOKEN") or None
        if is_master:
            self._server = _start_server(host_name, port, token, multi_tenant, master_listen_fd)
            port = self._server.server.port
        self._port = port
        start = time.monotonic()
        try:
            self._client = _C._store_client_connect(host_name, port, token,
                                                    self._timeout.total_seconds())
            if world_size is not None and world_size > 0 and wait_for_workers:
                self._client.add(_INIT_KEY, 1)
                if is_master:
                    self._wait_for_workers(world_size, start)
        except BaseException:
            self.close()
            raise

    def _wait_for_workers(self, world_size, start):
        limit = self._timeout.total_seconds()
        delay = 0.0005
        while True:
            joined = self._client.add(_INIT_KEY, 0)
            if joined >= world_size:
                return
            left = start + limit - time.monotonic()
            if left <= 0:
                raise StoreTimeoutError(
                    f"cddp store at {self._host}:{self._port}: timed out after {limit:g} s "
                    f"waiting for workers: {joined} of {world_size} joined")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.05)

    # -- torch's properties
    @property
    def host(self):
        return self._host

    @property
    def port(self):
        return self._port

    @property
    def libuvBackend(self):  # noqa: N802  (torch's name)
        return False

    def set_timeout(self, timeout):
        self._timeout = _as_timedelta(timeout)
        if self._client is not None:
            self._client.timeout = self._timeout.total_seconds()

    # -- operations (the C client does the work)
    def set(self, key, value):
        self._client.set(key, value)

    def get(self, key):
        return self._client.get(key)

    def add(self, key, amount):
        return self._client.add(key, amount)

    def append(self, key, value):
        self._client.append(key, value)

    def compare_set(self, key, expected_value, desired_value):
        return self._client.compare_set(key, expected_value, desired_value)

    def delete_key(self, key):
        return self._client.delete_key(key)

    def num_keys(self):
        return self._client.num_keys()

    def check(self, keys):
        return self._client.check(keys)

    def wait(self, keys, timeout=None):
        self._client.wait(keys, None if timeout is None else _seconds(timeout))

    def clone(self):
        """A new connection to the same server (torch's clone)."""
        return TCPStore(self._host, self._port, timeout=self._timeout, wait_for_workers=False)

    def close(self):
        """Closes the connection and, on the master, drops this store's hold on the server:
        it stops (thread joined, port released) once no multi_tenant store shares it.
        Deleting the store does the same."""
        if self._client is not None:
            self._client.close()
        self._server = None

    def __repr__(self):
        role = "master" if self._server is not None else "client"
        return f"TCPStore({self._host}:{self._port}, {role})"


# ---- FileStore --------------------------------------------------------------------------

class FileStore(Store):
    """torch.distributed.FileStore: a store in a file shared by processes (same host or a
    shared filesystem), using torch's on-disk format: an append-only log of records
    (u32 length | key, u32 length | value), keys "/"+key, deletions "-/"+key, plus the
    "refcount/" and "cleanup/" counters; the last of world_size stores to close removes the file.
    Every access holds an flock (shared to read, exclusive to write), taken with a deadline.
    """

    _REG, _DEL = b"/", b"-"
    _REFCOUNT, _CLEANUP = b"refcount/", b"cleanup/"

    def __init__(self, file_name, world_size=-1):
        super().__init__()
        self.path = os.fspath(file_name)
        self._world_size = world_size
        self._pos = 0
        self._cache = {}
        self._mu = threading.Lock()
        self._closed = False
        self._add_raw(self._REFCOUNT, 1)

    # -- the file
    def _locked(self, fd, op):
        deadline = time.monotonic() + self._timeout.total_seconds()
        delay = 0.0005
        while True:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
                return
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR):
                    raise
            if time.monotonic() >= deadline:
                raise StoreTimeoutError(f"cddp FileStore {self.path}: timed out after "
                                        f"{self._timeout.total_seconds():g} s waiting for the file lock")
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def _refresh(self, fd):
        size = os.fstat(fd).st_size
        if size < self._pos:                  # the file was removed and made again
            self._pos, self._cache = 0, {}
        if size == self._pos:
            return
        data = os.pread(fd, size - self._pos, self._pos)
        off = 0
        while True:
            rec = self._record(data, off)
            if rec is None:                   # a partial record: a writer died mid-write
                break
            key, value, off = rec
            if key.startswith(self._DEL):
                self._cache.pop(key[1:], None)
            else:
                self._cache[key] = value
        self._pos += off

    @staticmethod
    def _record(data, off):
        if off + 4 > len(data):
            return None
        (kn,) = struct.unpack_from("<I", data, off)
        if off + 8 + kn > len(data):
            return None
        key = data[off + 4:off + 4 + kn]
        (vn,) = struct.unpack_from("<I", data, off + 4 + kn)
        end = off + 8 + kn + vn
        if end > len(data):
            return None
        return key, data[off + 8 + kn:end], end

    def _op(self, write, fn):
        """fn(fd) under the in-process lock and the file lock, after a refresh."""
        with self._mu:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                self._locked(fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
                self._refresh(fd)
                return fn(fd)
            finally:
                os.close(fd)              # also drops the flock

    @staticmethod
    def _append(fd, key, value):
        rec = struct.pack("<I", len(key)) + key + struct.pack("<I", len(value)) + value
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, rec)

    def _add_raw(self, key, amount):
        def add(fd):
            old = self._cache.get(key, b"")
            try:
                value = (int(old) if old else 0) + amount
            except ValueError:
                raise DistStoreError(f"cddp FileStore {self.path}: add({key[1:]!r}): the value "
                                     f"{old!r} is not an integer") from None
            self._append(fd, key, str(value).encode())
            self._cache[key] = str(value).encode()
            return value
        return self._op(True, add)

    # -- operations
    def set(self, key, value):
        k, v = self._REG + _key_bytes(key), _value_bytes(value)
        self._op(True, lambda fd: self._append(fd, k, v))

    def get(self, key):
        k = self._REG + _key_bytes(key)
        self._wait_for([k], self._timeout, f"key {key!r}")
        return self._op(False, lambda fd: self._cache.get(k, b""))

    def add(self, key, amount):
        return self._add_raw(self._REG + _key_bytes(key), operator.index(amount))

    def compare_set(self, key, expected_value, desired_value):
        k = self._REG + _key_bytes(key)
        x, d = _value_bytes(expected_value), _value_bytes(desired_value)

        def cas(fd):
            cur = self._cache.get(k)
            if (cur is None and x == b"") or cur == x:
                self._append(fd, k, d)
                return d
            return x if cur is None else cur
        return self._op(True, cas)

    def delete_key(self, key):
        k = self._REG + _key_bytes(key)

        def delete(fd):
            existed = k in self._cache
            self._append(fd, self._DEL + k, b"")
            return existed
        return self._op(True, delete)

    def num_keys(self):
        return self._op(False, lambda fd: len(self._cache))

    def check(self, keys):
        ks = [self._REG + _key_bytes(k) for k in keys]
        return self._op(False, lambda fd: all(k in self._cache for k in ks))

    def wait(self, keys, timeout=None):
        ks = [self._REG + _key_bytes(k) for k in keys]
        self._wait_for(ks, self._timeout if timeout is None else _as_timedelta(timeout),
                       f"keys {list(keys)!r}")

    def _wait_for(self, ks, timeout, what):
        """Polls the file (1 ms growing to 10 ms: no inotify, it fails on shared filesystems)."""
        limit = timeout.total_seconds()
        deadline = time.monotonic() + limit
        delay = 0.001
        while not self._op(False, lambda fd: all(k in self._cache for k in ks)):
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreTimeoutError(f"cddp FileStore {self.path}: timed out after "
                                        f"{limit:g} s waiting for {what}")
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.01)

    def close(self):
        """torch's destructor: count this store out; the last one removes the file."""
        if self._closed:
            return
        self._closed = True
        if not os.path.exists(self.path):
            return
        finished = self._add_raw(self._CLEANUP, 1)
        refs = self._add_raw(self._REFCOUNT, -1)
        if self._world_size >= 0 and refs <= 0 and finished >= self._world_size:
            try:
                os.remove(self.path)
            except OSError:
                pass

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- PrefixStore, HashStore --------------------------------------------------------------

class PrefixStore(Store):
    """torch.distributed.PrefixStore: every key becomes "prefix/key" in the wrapped store."""

    def __init__(self, prefix, store):
        super().__init__()
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
        if not isinstance(store, Store):
            raise TypeError(f"store must be a Store, got {type(store).__name__}")
        self._prefix = prefix
        self._store = store

    def _k(self, key):
        if isinstance(key, (bytes, bytearray)):
            return self._prefix.encode() + b"/" + bytes(key)
        if not isinstance(key, str):
            raise TypeError(f"store keys must be str or bytes, not {type(key).__name__}")
        return f"{self._prefix}/{key}"

    @property
    def underlying_store(self):
        return self._store

    @property
    def _underlying_non_prefix_store(self):
        s = self._store
        while isinstance(s, PrefixStore):
            s = s._store
        return s

    @property
    def timeout(self):
        return self._store.timeout

    def set_timeout(self, timeout):
        self._store.set_timeout(timeout)

    def set(self, key, value):
        self._store.set(self._k(key), value)

    def get(self, key):
        return self._store.get(self._k(key))

    def add(self, key, amount):
        return self._store.add(self._k(key), amount)

    def append(self, key, value):
        self._store.append(self._k(key), value)

    def compare_set(self, key, expected_value, desired_value):
        return self._store.compare_set(self._k(key), expected_value, desired_value)

    def delete_key(self, key):
        return self._store.delete_key(self._k(key))

    def num_keys(self):
        return self._store.num_keys()

    def check(self, keys):
        return self._store.check([self._k(k) for k in keys])

    def wait(self, keys, timeout=None):
        keys = [self._k(k) for k in keys]
        if timeout is None:
            self._store.wait(keys)
        else:
            self._store.wait(keys, timeout)


class HashStore(Store):
    """torch.distributed.HashStore: an in-process store (threads), a dict + a condition."""

    def __init__(self):
        super().__init__()
        self._d = {}
        self._cv = threading.Condition()

    def _wait_for(self, ks, timeout, what):
        limit = _seconds(timeout)
        with self._cv:
            if not self._cv.wait_for(lambda: all(k in self._d for k in ks), timeout=limit):
                raise StoreTimeoutError(f"cddp HashStore: timed out after {limit:g} s "
                                        f"waiting for {what}")

    def set(self, key, value):
        with self._cv:
            self._d[_key_bytes(key)] = _value_bytes(value)
            self._cv.notify_all()

    def get(self, key):
        k = _key_bytes(key)
        self._wait_for([k], self._timeout, f"key {key!r}")
        with self._cv:
            return self._d[k]

    def add(self, key, amount):
        k, amount = _key_bytes(key), operator.index(amount)
        with self._cv:
            old = self._d.get(k, b"0")
            try:
                value = int(old) + amount
            except ValueError:
                raise DistStoreError(f"cddp HashStore: add({key!r}): the value {old!r} is not "
                                     f"an integer") from None
            self._d[k] = str(value).encode()
            self._cv.notify_all()
            return value

    def append(self, key, value):
        k = _key_bytes(key)
        with self._cv:
            self._d[k] = self._d.get(k, b"") + _value_bytes(value)
            self._cv.notify_all()

    def compare_set(self, key, expected_value, desired_value):
        k, x, d = _key_bytes(key), _value_bytes(expected_value), _value_bytes(desired_value)
        with self._cv:
            cur = self._d.get(k)
            if (cur is None and x == b"") or cur == x:
                self._d[k] = d
                self._cv.notify_all()
                return d
            return x if cur is None else cur

    def delete_key(self, key):
        with self._cv:
            return self._d.pop(_key_bytes(key), None) is not None

    def num_keys(self):
        with self._cv:
            return len(self._d)

    def check(self, keys):
        ks = [_key_bytes(k) for k in keys]
        with self._cv:
            return all(k in self._d for k in ks)

    def wait(self, keys, timeout=None):
        self._wait_for([_key_bytes(k) for k in keys],
                       self._timeout if timeout is None else timeout, f"keys {list(keys)!r}")
