"""Tests of the rendezvous stores (cddp/distributed/store.py, csrc/store_*.c, distributed/python/py_store.c).

Multi-process parts start real Python processes on 127.0.0.1 against a server in this
process; every wait is bounded (store timeouts, subprocess timeouts) and every process is
killed by process group in a finally block, so a broken build fails instead of hanging.
torch, when installed, is the oracle for compare_set/add/num_keys and the FileStore format.
"""
import contextlib
import datetime
import gc
import json
import os
import random
import signal
import socket
import statistics
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from cddp.distributed import FileStore, HashStore, PrefixStore, Store, TCPStore
from cddp.distributed.store import DistNetworkError, DistStoreError, StoreTimeoutError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TD = datetime.timedelta
HOST = "127.0.0.1"

# wire constants (csrc/store_proto.h)
MAGIC, VERSION = 0x54534443, 1
OP_HELLO, OP_SET, OP_GET, OP_ADD, OP_WAIT, OP_CHECK, OP_CAS, OP_DELETE, OP_NUM_KEYS, OP_APPEND = range(1, 11)
MAX_FRAME = 2 * (64 << 20) + 4096 + 64
MAX_HELLO = 1024 + 16


@pytest.fixture(autouse=True)
def _no_token(monkeypatch):
    monkeypatch.delenv("CDDP_TOKEN", raising=False)


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def master(**kw):
    kw.setdefault("timeout", TD(seconds=10))
    return TCPStore(HOST, kw.pop("port", 0), kw.pop("world_size", None), True, **kw)


def client(port, **kw):
    kw.setdefault("timeout", TD(seconds=10))
    return TCPStore(HOST, port, **kw)


def stats(store):
    """(clients connected, clients dropped for bad frames)"""
    return store._server.server.stats()[:2]


def wait_until(pred, timeout=3.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


# ---- subprocess workers ------------------------------------------------------------------

PRELUDE = """\
import sys, os, time, json, datetime, threading
from cddp.distributed import TCPStore
TD = datetime.timedelta
port = int(sys.argv[1]); rank = int(sys.argv[2])
"""


def env(**extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("CDDP_TOKEN", None)
    e.update(extra)
    return e


@contextlib.contextmanager
def workers():
    """Yields spawn(code, port, rank, env=None) -> Popen; kills every process group at exit."""
    procs = []

    def spawn(code, port=0, rank=0, environ=None, stdin=None):
        p = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(code), str(port),
                              str(rank)], cwd=ROOT, env=environ or env(), text=True, stdin=stdin,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        procs.append(p)
        return p

    try:
        yield spawn
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                p.communicate(timeout=5)


def finish(p, timeout=30):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"worker failed ({p.returncode}):\n{err}"
    return out


# ---- single-process semantics ------------------------------------------------------------

def test_basic_ops_and_values():
    s = master(world_size=1)
    assert isinstance(s, Store) and s.libuvBackend is False and s.host == HOST and s.port > 0
    assert s.timeout == TD(seconds=10)
    assert s.num_keys() == 1                         # torch counts its "init/" worker key too
    s.set("a", "hello")
    s.set("b", b"\x00\xff\x00")
    s.set("empty", b"")
    s.set(b"bytes-key", bytearray(b"ba"))
    assert s.get("a") == b"hello" and isinstance(s.get("a"), bytes)
    assert s.get(b"a") == b"hello"                   # str and bytes keys are the same key
    assert s.get("b") == b"\x00\xff\x00" and s.get("empty") == b"" and s.get("bytes-key") == b"ba"
    assert s.add("n", 5) == 5 and s.add("n", -7) == -2 and s.get("n") == b"-2"
    s.set("ctr", "41")
    assert s.add("ctr", 1) == 42 and s.add("ctr", 0) == 42
    assert s.check(["a", "b"]) and not s.check(["a", "missing"]) and s.check([])
    assert s.num_keys() == 7
    assert s.delete_key("a") is True and s.delete_key("a") is False and not s.check(["a"])
    assert s.num_keys() == 6
    s.append("log", "x")
    s.append("log", b"yz")
    assert s.get("log") == b"xyz"
    s.multi_set(["m1", "m2"], ["1", b"2"])
    assert s.multi_get(["m1", "m2"]) == [b"1", b"2"]
    s.wait(["b", "n"])                               # present: returns at once
    s.wait([], TD(seconds=1))
    big = os.urandom(8 << 20)
    s.set("big", big)
    assert s.get("big") == big
    s.close()


def test_bad_arguments_and_server_errors():
    s = master()
    with pytest.raises(TypeError, match="keys must be str or bytes"):
        s.set(3, "x")
    with pytest.raises(TypeError, match="values must be str or bytes-like"):
        s.set("k", 3.5)
    with pytest.raises(ValueError, match="4096-byte limit"):
        s.set("k" * 4097, "x")
    with pytest.raises(ValueError, match="limit"):
        s.set("k", b"\0" * ((64 << 20) + 1))
    with pytest.raises(TypeError):
        s.add("k", 1.5)
    with pytest.raises(TypeError):
        s.check([1])
    s.set("text", "abc")
    with pytest.raises(DistStoreError, match="not an integer") as ei:
        s.add("text", 1)
    assert isinstance(ei.value, RuntimeError)
    s.set("max", str(2**63 - 1))
    with pytest.raises(RuntimeError, match="overflow"):
        s.add("max", 1)
    assert s.get("text") == b"abc" and s.get("max") == str(2**63 - 1).encode()   # still usable
    with pytest.raises(TypeError, match="timedelta"):
        s.set_timeout("1s")


def test_compare_set_semantics():
    s = master()
    assert s.compare_set("k", "", "v1") == b"v1" and s.get("k") == b"v1"   # missing + "" sets
    assert s.compare_set("k", "x", "v2") == b"v1" and s.get("k") == b"v1"  # mismatch: current
    assert s.compare_set("k", "v1", "v2") == b"v2" and s.get("k") == b"v2"  # match: sets
    assert s.compare_set("m", "x", "v") == b"x" and not s.check(["m"])     # missing: expected back
    s.set("e", b"")
    assert s.compare_set("e", b"", b"full") == b"full"                      # empty value matches ""


def _torch_store_ops(s):
    out = [s.compare_set("k", "", "v1"), s.compare_set("k", "x", "v2"), s.compare_set("k", "v1", "v2"),
           s.compare_set("m", "x", "v"), s.check(["m"]), s.add("c", 3), s.add("c", -5), s.get("c"),
           s.num_keys(), s.delete_key("c"), s.delete_key("c"), s.check(["k", "c"]), s.num_keys()]
    s.set("s", "12")
    out += [s.add("s", 30), s.get("s")]
    return out


def test_semantics_match_torch(torch):
    import torch.distributed as dist
    ref = dist.TCPStore(HOST, 0, 1, True, timeout=TD(seconds=10))
    ours = master(world_size=1)
    assert _torch_store_ops(ours) == _torch_store_ops(ref)
    href, hours = dist.HashStore(), HashStore()
    assert _torch_store_ops(hours) == _torch_store_ops(href)


def test_wait_and_get_time_out_on_time():
    s = master()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"timed out after 0\.3 s waiting for keys \['never', 'x'\]"):
        s.wait(["never", "x"], TD(seconds=0.3))
    assert 0.29 <= time.monotonic() - t0 < 0.8
    s.set_timeout(TD(seconds=0.2))
    assert s.timeout == TD(seconds=0.2)
    t0 = time.monotonic()
    with pytest.raises(StoreTimeoutError, match=r"after 0\.2 s waiting for key 'nope'") as ei:
        s.get("nope")
    assert 0.19 <= time.monotonic() - t0 < 0.7
    assert isinstance(ei.value, RuntimeError)        # torch raises DistStoreError (RuntimeError)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        s.wait(["nope"])                             # default: the store timeout
    assert time.monotonic() - t0 < 0.7
    s.set("after", "ok")                             # the connection is still in step
    assert s.get("after") == b"ok"


def test_parked_get_keeps_its_deadline_while_other_keys_change():
    s = master()
    stop = threading.Event()

    def churn():
        w = client(s.port)
        i = 0
        while not stop.is_set():
            w.set(f"other{i % 5}", str(i))       # every change reruns the parked get
            i += 1
            time.sleep(0.005)
    th = threading.Thread(target=churn)
    th.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            s.wait(["never"], TD(seconds=0.3))
        assert time.monotonic() - t0 < 0.8
    finally:
        stop.set()
        th.join(5)


def test_threads_sharing_one_store():
    s = master()
    got = []
    th = threading.Thread(target=lambda: got.append(s.get("k")))
    th.start()
    time.sleep(0.05)
    s.set("k", "v")                                  # not held up by the blocked get
    th.join(5)
    assert got == [b"v"]
    vals = []

    def adder():
        for _ in range(100):
            vals.append(s.add("c", 1))
    ts = [threading.Thread(target=adder) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert sorted(vals) == list(range(1, 401))


def test_world_size_wait_times_out():
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="1 of 2 joined"):
        TCPStore(HOST, 0, 2, True, timeout=TD(seconds=0.4))
    assert time.monotonic() - t0 < 2


def test_connect_times_out_when_nothing_listens():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=f"{HOST}:{port}: timed out after 0.4 s connecting"):
        TCPStore(HOST, port, timeout=TD(seconds=0.4))
    assert time.monotonic() - t0 < 2


def test_client_before_server_retries():
    port = free_port()
    box = {}

    def connect():
        try:
            box["c"] = client(port)
        except Exception as e:  # pragma: no cover - reported below
            box["e"] = e
    th = threading.Thread(target=connect)
    th.start()
    time.sleep(0.3)
    m = master(port=port)
    th.join(10)
    assert "e" not in box, box.get("e")
    box["c"].set("x", "1")
    assert m.get("x") == b"1"


def test_multi_tenant_and_listen_fd():
    a = master(multi_tenant=True)
    b = TCPStore(HOST, a.port, None, True, timeout=TD(seconds=5), multi_tenant=True)
    assert b._server is a._server
    a.set("k", "v")
    a.close()
    assert b.get("k") == b"v"                         # b still holds the shared server
    with socket.socket() as ls:
        ls.bind((HOST, 0))
        ls.listen()
        m = TCPStore(HOST, ls.getsockname()[1], None, True, timeout=TD(seconds=5),
                     master_listen_fd=ls.fileno())
        assert m.port == ls.getsockname()[1]
        m.set("x", "y")
        assert client(m.port).get("x") == b"y"


# ---- token ----------------------------------------------------------------------------------

def test_token_refusal(monkeypatch):
    monkeypatch.setenv("CDDP_TOKEN", "abc")
    m = master()
    m.set("secret", "s")
    monkeypatch.delenv("CDDP_TOKEN")
    t0 = time.monotonic()
    with pytest.raises(PermissionError, match=rf"cddp store at {HOST}:{m.port} refused the connection: "
                                              "bad or missing CDDP_TOKEN"):
        client(m.port, timeout=TD(seconds=30))
    assert time.monotonic() - t0 < 2                 # refused at once, not retried
    monkeypatch.setenv("CDDP_TOKEN", "abd")
    with pytest.raises(PermissionError):
        client(m.port)
    monkeypatch.setenv("CDDP_TOKEN", "abcd")
    with pytest.raises(PermissionError):
        client(m.port)
    monkeypatch.setenv("CDDP_TOKEN", "abc")
    assert client(m.port).get("secret") == b"s"
    # a raw peer skipping the handshake is dropped and changes nothing
    with socket.create_connection((HOST, m.port), timeout=2) as raw:
        raw.sendall(frame(OP_SET, sstr(b"secret") + b"pwned"))
        assert read_to_eof(raw) == b""
    assert m.get("secret") == b"s"
    # another process without the token, and with it
    with workers() as spawn:
        code = """
        try:
            TCPStore("127.0.0.1", port, timeout=TD(seconds=10)).get("secret")
            print("accepted")
        except PermissionError as e:
            print("refused")
        """
        p1 = spawn(code, m.port, 0, env())
        p2 = spawn(code, m.port, 0, env(CDDP_TOKEN="abc"))
        assert finish(p1).strip() == "refused"
        assert finish(p2).strip() == "accepted"


# ---- raw frames: fuzzing --------------------------------------------------------------------

def frame(op, payload=b"", length=None):
    n = 1 + len(payload) if length is None else length
    return struct.pack("<IB", n, op) + payload if n else struct.pack("<I", n)


def sstr(b):
    return struct.pack("<I", len(b)) + b


def hello(token=b"", magic=MAGIC, version=VERSION):
    return frame(OP_HELLO, struct.pack("<II", magic, version) + token)


def read_to_eof(sock, timeout=2.0):
    """Everything the server sends until it closes the connection; fails on a timeout."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    except ConnectionResetError:
        return data
    except socket.timeout:
        raise AssertionError(f"server did not close the connection (got {data!r})")


def ok_reply(n=0):
    return struct.pack("<IB", 1 + n, 0)


@pytest.mark.parametrize("token", [None, b"tok"])
def test_fuzz_garbage_frames_close_only_that_client(monkeypatch, token):
    if token:
        monkeypatch.setenv("CDDP_TOKEN", token.decode())
    m = master()
    m.set("keep", "value")
    m.add("count", 7)
    base_clients, base_dropped = stats(m)
    rng = random.Random(1234)
    hi = hello(token or b"")
    closed_checks = 0
    total = 0
    open_socks = []

    def conn():
        return socket.create_connection((HOST, m.port), timeout=2)

    def must_close(data, pre=b""):
        nonlocal closed_checks, total
        with conn() as s:
            s.sendall(pre + data)
            got = read_to_eof(s)
            if pre:
                assert got.startswith(ok_reply()), got    # the hello was answered first
        closed_checks += 1
        total += 1

    def fire_and_forget(data, pre=b"", keep=False):
        nonlocal total
        s = conn()
        s.sendall(pre + data)
        total += 1
        if keep:
            open_socks.append(s)
        else:
            s.close()

    for _ in range(60):            # garbage op codes after a valid hello
        op = rng.choice([0] + list(range(11, 256)))
        must_close(frame(op, rng.randbytes(rng.randrange(0, 40))), hi)
    for _ in range(10):            # length 2^32-1, with and without hello
        must_close(struct.pack("<I", 0xFFFFFFFF) + rng.randbytes(8), hi)
        must_close(struct.pack("<I", 0xFFFFFFFF) + rng.randbytes(8))
    for _ in range(10):            # just over the caps
        must_close(struct.pack("<IB", MAX_FRAME + 1, OP_SET), hi)
        must_close(struct.pack("<IB", MAX_HELLO + 1, OP_HELLO))
    must_close(struct.pack("<I", 0), hi)                    # empty frame
    truncated = [frame(OP_SET, struct.pack("<I", 100) + b"short"), frame(OP_GET, b"\1\2\3"),
                 frame(OP_GET, struct.pack("<Q", 5) + struct.pack("<I", 10) + b"abc"),
                 frame(OP_ADD, b"\0" * 7), frame(OP_ADD, struct.pack("<q", 1) + sstr(b"k") + b"extra"),
                 frame(OP_WAIT, struct.pack("<QI", 1, 3) + sstr(b"a")),
                 frame(OP_WAIT, struct.pack("<QI", 1, 10**6)),
                 frame(OP_CHECK, struct.pack("<I", 2) + sstr(b"a") + b"\xff"),
                 frame(OP_CAS, sstr(b"k") + struct.pack("<I", 50) + b"x"),
                 frame(OP_DELETE, sstr(b"k") + b"x"), frame(OP_NUM_KEYS, b"x"),
                 frame(OP_SET, struct.pack("<I", 5000) + b"k" * 5000),   # key over 4 KiB
                 frame(OP_HELLO, struct.pack("<II", MAGIC, VERSION))]    # hello twice
    for _ in range(5):
        for f in truncated:
            must_close(f, hi)
    for _ in range(20):            # not HELLO first; bad magic
        must_close(frame(rng.choice(range(2, 11)), sstr(b"keep") + b"garbage"))
        must_close(hello(token or b"", magic=rng.getrandbits(32) | 1))
    for _ in range(5):             # a valid request pipelined with garbage: served, then closed
        with conn() as s:
            s.sendall(hi + frame(OP_SET, sstr(b"pipelined") + b"yes") + frame(200, b"zz"))
            assert read_to_eof(s) == ok_reply() * 2
        total += 1
    for _ in range(60):            # random bytes, no hello
        fire_and_forget(rng.randbytes(rng.randrange(1, 64)))
    for _ in range(40):            # half a frame, then close
        fire_and_forget(struct.pack("<IB", 1000, OP_SET) + rng.randbytes(500), hi)
    for _ in range(60):            # valid ops with random payloads; some park (GET/WAIT)
        op = rng.choice([OP_SET, OP_GET, OP_ADD, OP_WAIT, OP_CHECK, OP_CAS, OP_DELETE, OP_APPEND])
        fire_and_forget(frame(op, rng.randbytes(rng.randrange(0, 64))), hi, keep=rng.random() < 0.3)
    for _ in range(10):            # a big frame announced, a little sent, peer stays
        fire_and_forget(struct.pack("<IB", 64 << 20, OP_SET) + b"\0" * 100, hi, keep=True)
    assert total >= 300

    # the server is intact: same data, same answers, new clients welcome
    c = client(m.port)
    assert c.get("keep") == b"value" and m.get("keep") == b"value"
    assert c.add("count", 1) == 8
    assert c.get("pipelined") == b"yes"
    c.set("new", "v")
    assert m.get("new") == b"v"
    clients, dropped = stats(m)
    assert dropped - base_dropped >= closed_checks
    for s in open_socks:
        s.close()
    assert wait_until(lambda: stats(m)[0] == base_clients + 1), stats(m)


def test_bare_connections_cannot_starve_the_store_or_its_process():
    """The server's process limited to 128 descriptors, 200 TCP connections that never say
    HELLO: the store keeps at most 128 / 4 of them (the oldest are closed), so the process can
    still open files and a legitimate client is served at once (it used to wait ~9 s, and the
    process's own open() failed with EMFILE, until the HELLO deadline freed descriptors)."""
    with workers() as spawn:
        srv = spawn("""
            import resource
            resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
            m = TCPStore("127.0.0.1", 0, None, True, timeout=TD(seconds=10))
            print(m.port, flush=True)
            sys.stdin.readline()                  # the parent holds 200 bare connections
            st = m._server.server.stats
            end = time.monotonic() + 20
            while st()[2] < 200 - 32 and time.monotonic() < end:
                time.sleep(0.01)
            fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(40)]
            for fd in fds:
                os.close(fd)
            print(json.dumps(list(st())), flush=True)
            m.wait(["legit"], TD(seconds=20))
            print(json.dumps(list(st())), flush=True)
        """, stdin=subprocess.PIPE)
        port = int(srv.stdout.readline())
        bare = []
        try:
            for _ in range(200):
                bare.append(socket.create_connection((HOST, port), timeout=5))
            srv.stdin.write("go\n")
            srv.stdin.flush()
            clients, dropped, evicted = json.loads(srv.stdout.readline())
            # 32 bare ones and the master's own client connection
            assert evicted >= 200 - 32 and clients <= 32 + 1, (clients, evicted)
            legit = client(port, timeout=TD(seconds=5))    # under the old 10-s HELLO deadline
            legit.set("legit", "yes")
            assert legit.get("legit") == b"yes"
            clients, dropped, evicted = json.loads(srv.stdout.readline())
            assert dropped == 0
        finally:
            for b in bare:
                b.close()
        finish(srv)


def test_silent_server_timeout_says_the_handshake_got_no_answer():
    """A listener that never answers: the timeout names the unanswered handshake (it used to
    say the server closed the connection)."""
    with socket.socket() as lst:
        lst.bind((HOST, 0))
        lst.listen(8)
        with pytest.raises(StoreTimeoutError, match="no answer to the handshake"):
            client(lst.getsockname()[1], timeout=TD(seconds=0.3))


def test_killed_clients_do_not_affect_others():
    m = master()
    base = stats(m)[0]
    other = client(m.port)
    with workers() as spawn:
        blocked = spawn("""
            s = TCPStore("127.0.0.1", port, timeout=TD(seconds=60))
            s.set("blocked-ready", "1")
            s.get("never")
        """, m.port)
        half = spawn("""
            import socket, struct
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(struct.pack("<IBII", 9, 1, 0x54534443, 1))
            s.recv(5)
            s.sendall(struct.pack("<IB", 1 << 20, 2) + b"x" * 300000)
            print("sent", flush=True)
            time.sleep(60)
        """, m.port)
        m.wait(["blocked-ready"], TD(seconds=20))
        assert half.stdout.readline().strip() == "sent"
        assert wait_until(lambda: stats(m)[0] == base + 3)
        got = []
        th = threading.Thread(target=lambda: got.append(other.get("after-kill")))
        th.start()
        os.killpg(blocked.pid, signal.SIGKILL)
        os.killpg(half.pid, signal.SIGKILL)
        blocked.wait(5)
        half.wait(5)
        m.set("after-kill", "fine")
        th.join(5)
        assert got == [b"fine"]
        assert other.add("x", 2) == 2 and m.get("x") == b"2"
        assert wait_until(lambda: stats(m)[0] == base + 1), stats(m)   # m and other


# ---- processes ------------------------------------------------------------------------------

def test_all_ops_across_processes_with_worker_wait():
    port = free_port()
    world = 4
    with workers() as spawn:
        procs = [spawn("""
            s = TCPStore("127.0.0.1", port, 4, False, timeout=TD(seconds=20))
            s.set(f"rank{rank}", str(rank * 10))
            s.wait([f"rank{r}" for r in range(4)])
            vals = [s.get(f"rank{r}").decode() for r in range(4)]
            leader = s.compare_set("leader", "", str(rank)).decode()
            n = s.add("arrived", 1)
            s.wait(["leader"])
            ok = s.check([f"rank{r}" for r in range(4)]) and not s.check(["nope"])
            s.append("log", str(rank))
            s.add("done", 1)
            print(json.dumps({"vals": vals, "leader": leader, "final": s.get("leader").decode(),
                              "n": n, "ok": ok}))
        """, port, r) for r in range(1, world)]
        time.sleep(0.2)                              # workers are already retrying to connect
        m = TCPStore(HOST, port, world, True, timeout=TD(seconds=20))
        m.set("rank0", "0")
        res = [json.loads(finish(p)) for p in procs]
    for r in res:
        assert r["vals"] == ["0", "10", "20", "30"] and r["ok"]
        assert r["leader"] == r["final"]            # losers get the winner's value back
    leaders = {r["final"] for r in res}
    assert len(leaders) == 1 and leaders.pop() in {"1", "2", "3"}
    assert sorted(r["n"] for r in res) == [1, 2, 3]
    assert sorted(m.get("log").decode()) == ["1", "2", "3"]
    assert m.get("done") == b"3" and m.get("init/") == b"4"


def test_blocking_get_wakes_fast_across_processes():
    m = master()
    rounds = 7
    with workers() as spawn:
        p = spawn("""
            s = TCPStore("127.0.0.1", port, timeout=TD(seconds=20))
            for i in range(%d):
                s.set(f"ready{i}", "1")
                s.get(f"go{i}")
                s.set(f"woke{i}", repr(time.time()))
        """ % rounds, m.port)
        lat = []
        for i in range(rounds):
            m.wait([f"ready{i}"], TD(seconds=20))
            time.sleep(0.03)                        # the worker is parked in get by now
            t0 = time.time()
            m.set(f"go{i}", "x")
            lat.append(float(m.get(f"woke{i}")) - t0)
        finish(p)
    assert statistics.median(lat) < 0.02 and max(lat) < 0.1, lat


def test_add_is_atomic_across_processes():
    m = master()
    with workers() as spawn:
        procs = [spawn("""
            s = TCPStore("127.0.0.1", port, timeout=TD(seconds=20))
            s.set(f"go{rank}", "1"); s.wait(["start"])
            print(json.dumps([s.add("counter", 1) for _ in range(200)]))
        """, m.port, r) for r in range(4)]
        m.wait([f"go{r}" for r in range(4)], TD(seconds=20))
        m.set("start", "1")
        got = sum((json.loads(finish(p)) for p in procs), [])
    assert sorted(got) == list(range(1, 801))
    assert m.get("counter") == b"800"


def test_server_close_stops_thread_and_frees_port():
    def nthreads():
        return len(os.listdir("/proc/self/task"))
    gc.collect()
    before = nthreads()
    m = master()
    port = m.port
    c = client(port)
    c.set("k", "v")
    assert nthreads() == before + 1
    m.close()
    del m
    gc.collect()
    assert nthreads() == before
    t0 = time.monotonic()
    with pytest.raises(DistNetworkError, match=f"cddp store at {HOST}:{port} closed the connection"):
        c.get("k")
    with pytest.raises(RuntimeError, match="closed the connection"):
        c.set("k", "again")                          # fails fast, no reconnect wait
    assert time.monotonic() - t0 < 1
    m2 = master(port=port)                           # the port is free again
    assert m2.port == port
    del m2
    gc.collect()
    assert nthreads() == before


def test_process_exit_is_not_blocked():
    with workers() as spawn:
        p = spawn("""
            s = TCPStore("127.0.0.1", 0, None, True, timeout=TD(seconds=60))
            c = TCPStore("127.0.0.1", s.port, timeout=TD(seconds=60))
            threading.Thread(target=lambda: c.get("never"), daemon=True).start()
            time.sleep(0.1)
            print("exiting", flush=True)
        """)
        t0 = time.monotonic()
        out, err = p.communicate(timeout=20)
        assert "exiting" in out and time.monotonic() - t0 < 10, err


def test_forked_child_releases_server_sockets():
    with workers() as spawn:
        p = spawn("""
            import gc, socket
            s = TCPStore("127.0.0.1", 0, None, True, timeout=TD(seconds=10))
            s.set("before", "1")
            pid = os.fork()
            if pid == 0:
                del s; gc.collect()              # the child's copy must not stop the parent's server
                time.sleep(30)
                os._exit(0)
            time.sleep(0.2)
            s.set("after", "2")
            ok = s.get("before") == b"1" and TCPStore("127.0.0.1", s.port).get("after") == b"2"
            port = s.port
            del s; gc.collect()
            try:                                 # the child must not hold the listening socket
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                free = False
            except ConnectionRefusedError:
                free = True
            os.kill(pid, 9); os.waitpid(pid, 0)
            print(json.dumps([ok, free]))
        """)
        assert json.loads(finish(p)) == [True, True]


def test_ctrl_c_interrupts_a_blocked_get():
    with workers() as spawn:
        p = spawn("""
            s = TCPStore("127.0.0.1", 0, None, True, timeout=TD(seconds=60))
            print("ready", flush=True)
            t0 = time.monotonic()
            try:
                s.get("never")
            except KeyboardInterrupt:
                s.set("still", "works")
                print("interrupted", s.get("still").decode(), round(time.monotonic() - t0, 1))
        """)
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        out = finish(p, timeout=10).split()
        assert out[:2] == ["interrupted", "works"] and float(out[2]) < 5


# ---- PrefixStore, HashStore, FileStore ----------------------------------------------------

def test_prefix_store():
    m = master()
    p = PrefixStore("grp", m)
    assert p.underlying_store is m and p.timeout == m.timeout
    p.set("a", "1")
    assert m.get("grp/a") == b"1" and p.get("a") == b"1"
    assert p.add("n", 2) == 2 and m.get("grp/n") == b"2"
    assert p.check(["a", "n"]) and not p.check(["grp/a"])
    assert p.compare_set("c", "", "x") == b"x" and m.get("grp/c") == b"x"
    assert p.delete_key("c") and not m.check(["grp/c"])
    assert p.num_keys() == m.num_keys()
    nested = PrefixStore("inner", p)
    nested.set("k", "v")
    assert m.get("grp/inner/k") == b"v" and nested._underlying_non_prefix_store is m
    with pytest.raises(TimeoutError, match="grp/missing"):
        p.wait(["missing"], TD(seconds=0.1))
    with pytest.raises(TypeError):
        PrefixStore("x", object())


def test_hash_store():
    h = HashStore()
    h.set("a", "1")
    assert h.get("a") == b"1" and h.add("a", 2) == 3 and h.num_keys() == 1
    got = []
    th = threading.Thread(target=lambda: got.append(h.get("later")))
    th.start()
    time.sleep(0.05)
    h.set("later", b"x")
    th.join(5)
    assert got == [b"x"]
    h.set_timeout(TD(seconds=0.1))
    with pytest.raises(TimeoutError, match="'nope'"):
        h.get("nope")


def test_file_store_semantics(tmp_path):
    path = str(tmp_path / "fs")
    a, b = FileStore(path, 2), FileStore(path, 2)
    assert a.num_keys() == 1                         # torch's "refcount/" key
    a.set("k", "v")
    assert b.get("k") == b"v"
    assert b.add("n", 3) == 3 and a.add("n", 4) == 7
    assert a.compare_set("k", "x", "w") == b"v" and b.compare_set("k", "v", "w") == b"w"
    assert a.compare_set("m", "q", "z") == b"q" and a.compare_set("m", "", "z") == b"z"
    assert b.check(["k", "m"]) and not b.check(["zz"])
    assert a.delete_key("m") and not b.check(["m"])
    got = []
    th = threading.Thread(target=lambda: got.append(b.get("late")))
    th.start()
    time.sleep(0.05)
    a.set("late", "1")
    th.join(5)
    assert got == [b"1"]
    a.set_timeout(TD(seconds=0.2))
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="'never'"):
        a.get("never")
    assert time.monotonic() - t0 < 1
    with pytest.raises(TimeoutError):
        a.wait(["never"], TD(seconds=0.1))
    a.close()
    assert os.path.exists(path)
    b.close()
    assert not os.path.exists(path)                  # the last of world_size removes it
    with workers() as spawn:                         # add across processes
        procs = [spawn(f"""
            from cddp.distributed import FileStore
            s = FileStore({path!r})
            print(json.dumps([s.add("c", 1) for _ in range(100)]))
        """) for _ in range(2)]
        got = sum((json.loads(finish(p)) for p in procs), [])
    assert sorted(got) == list(range(1, 201))


def test_file_store_format_matches_torch(torch, tmp_path):
    import torch.distributed as dist
    path = str(tmp_path / "shared")
    ours = FileStore(path)
    ref = dist.FileStore(path)
    ours.set("from-cddp", b"\x00\x01")
    ref.set("from-torch", "t")
    assert ref.get("from-cddp") == b"\x00\x01" and ours.get("from-torch") == b"t"
    assert ours.add("c", 2) == 2 and ref.add("c", 3) == 5 and ours.add("c", 0) == 5
    ours.delete_key("from-torch")
    assert not ref.check(["from-torch"]) and ours.num_keys() == ref.num_keys()
