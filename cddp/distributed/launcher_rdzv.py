"""How the launchers of a multi-node job (`--nnodes` > 1) meet and watch each other: the shared
secret, the agents' store on node 0, joining, heartbeats, failure records and the exit barrier.
Used by launcher_core.Agent; a single-node job never comes here.

Mirrors what torchrun's elastic agents do through their rendezvous store (torch's "static"
rendezvous with the agent store on node 0, TORCHELASTIC_USE_AGENT_STORE=True, workers' keys
under /worker/attempt_<restart>), plus the liveness torch leaves to its rendezvous timeouts.

    node 0's launcher              node k's launcher (k > 0)
      token (below)                  token (below)
      store server on MASTER_PORT    connect (retrying while node 0 comes up; a refused
      join round r ───────────────── token ends this node at once, saying how to fix it)
      (a refused client ends the       join round r
       wait too, naming its address)
      ...  all nnodes joined: every node starts its workers (they are clients of this store)
      watcher thread, every beat:    watcher thread, every beat:
        add hb/0; a node whose hb      add hb/k; any store error = node 0 is gone;
        stood still for the heart-     r<r>/nfail > 0 = some node failed
        beat = lost; r<r>/nfail > 0
      workers fail: r<r>/fail/<i> = what failed, nfail += 1; the others stop theirs
      success: r<r>/done/<i>; node 0 waits for every node's done (it hosts the store)

Node ranks: --node-rank (or SLURM's); with --rdzv-backend=c10d and none given (one command
for every node, torchrun's recipe) the launcher on the endpoint's host that binds its port
hosts the store and is node 0, and the others number themselves 1, 2, ... from a store counter
in the order they connect.

Token (the store refuses clients without it): $CDDP_TOKEN when set; otherwise the token file
(--token-file, $CDDP_TOKEN_FILE, default ~/.cddp/token): read when it exists, else created by
whichever node comes first (0600, written aside and linked into place, so readers never see
half of it). Nodes that share the path (a shared home) agree without anything more; node 0
prints the `export CDDP_TOKEN=...` line for nodes that do not.

Heartbeat: a beat every min(1, H/4) s, H = $CDDP_HEARTBEAT_S (10); a node whose launcher is
silent for H + max(3, H/2) s is lost (15 s by default). The margin over H lets the workers'
own heartbeat (the TCP transport's, after H s) raise first and name the silent host in their
exceptions; the launchers' watch is for nodes whose workers are not in a collective. Joining
waits up to --rdzv-conf join_timeout=S (or timeout=S; default 600 s, torch's) for the nodes to come.
"""
import json
import os
import secrets
import socket
import threading
import time

DEFAULT_JOIN_TIMEOUT = 600.0
KEY = "cddp/agent/"


class NodeFailure(Exception):
    """The job cannot go on on this node: the message says why; `lost` when a node is gone (no
    restart can help)."""

    def __init__(self, msg, lost=False):
        super().__init__(msg)
        self.lost = lost


def heartbeat_s():
    try:
        v = float(os.environ.get("CDDP_HEARTBEAT_S", "10"))
    except ValueError:
        return 10.0
    return 10.0 if v <= 0 or v != v else max(1.0, v)


def join_timeout(rdzv_conf):
    """--rdzv-conf "join_timeout=600,..." (c10d's key) or "timeout=600" (the static
    rendezvous's), else $CDDP_JOIN_TIMEOUT, else 600 s (torch's default for both)."""
    for part in filter(None, (p.strip() for p in (rdzv_conf or "").split(","))):
        k, _, v = part.partition("=")
        if k.strip() in ("join_timeout", "timeout"):
            try:
                return max(1.0, float(v))
            except ValueError:
                raise ValueError(f"--rdzv-conf: {k.strip()}={v!r} is not a number of "
                                 f"seconds") from None
    try:
        return max(1.0, float(os.environ.get("CDDP_JOIN_TIMEOUT", DEFAULT_JOIN_TIMEOUT)))
    except ValueError:
        raise ValueError("CDDP_JOIN_TIMEOUT must be a number of seconds") from None


# ---- the shared secret ----------------------------------------------------------------------

def default_token_file():
    return os.path.join(os.path.expanduser("~"), ".cddp", "token")


def _read_token(path):
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise NodeFailure(f"the token file {path} must belong to you and be readable by you "
                          f"only (chmod 600 {path}), since it holds the job's secret")
    with open(path) as f:
        tok = f.read().strip()
    if not tok or len(tok) > 1024 or any(c.isspace() for c in tok):
        raise NodeFailure(f"the token file {path} does not hold a token (one word of at most "
                          f"1024 characters); delete it and start again")
    return tok


def token_from_file(path):
    """The token in `path`, created (0600) when missing. Creation is atomic: the token is
    written to a private temporary file, then linked to `path`; when another node's launcher
    linked first, its token is the one used."""
    try:
        return _read_token(path)
    except FileNotFoundError:
        pass
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16) + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass                        # another launcher won: use its token
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    return _read_token(path)


def resolve_token(token_file):
    """(token, where it came from) for a multi-node job."""
    tok = os.environ.get("CDDP_TOKEN")
    if tok:
        return tok, "$CDDP_TOKEN"
    path = token_file or os.environ.get("CDDP_TOKEN_FILE") or default_token_file()
    return token_from_file(path), f"the token file {path}"


def route_addr(master):
    """This host's address on the route to `master` (a UDP connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, 9))
            return s.getsockname()[0]
    except OSError:
        return "?"


# ---- the meeting ----------------------------------------------------------------------------

def _is_local_address(host):
    """Whether `host` names an address of this machine (a socket can bind to it)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, addr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((addr[0], 0))
            return True
        except OSError:
            continue
    return False


class NodeRendezvous:
    """One node's side of the agents' meeting; node 0's also hosts the store. Every blocking
    call ends at a deadline; the watcher thread reports to the agent through `post`."""

    def __init__(self, cfg, token, token_src, say, post, interrupted):
        self.cfg = cfg
        self.me = cfg.node_rank
        self.n = cfg.nnodes
        self.token, self.token_src = token, token_src
        self.say, self.post, self.interrupted = say, post, interrupted
        self.hb = heartbeat_s()
        self.beat = min(1.0, self.hb / 4)
        self.lost_after = self.hb + max(3.0, self.hb / 2)
        self.join_timeout = join_timeout(getattr(cfg, "rdzv_conf", ""))
        self.server = None
        self.client = None
        self.names = {}                  # node -> "hostname (addr)"
        self.round = 0
        self._stop = threading.Event()
        self._thread = None
        self.where = f"{cfg.master_addr}:{cfg.master_port}"

    def _who(self):
        return "this node" if self.me is None else f"node {self.me}"

    # -- opening ----------------------------------------------------------------------------
    def open(self):
        from . import store as _store     # noqa: F401 — sets the store's exception classes
        from .. import _C
        host, port = self.cfg.master_addr, self.cfg.master_port
        # c10d without --node-rank (me None): the first launcher on the endpoint's host to bind
        # its port hosts the store and is node 0; another one there joins as a client
        if self.me == 0 or (self.me is None and _is_local_address(host)):
            try:
                self.server = _C._store_server_start(host, port, self.token, -1)
                self.me = 0
            except (OSError, RuntimeError) as e:         # the store's DistNetworkError too
                if self.me == 0:
                    raise NodeFailure(f"node 0 cannot host the agents' store on {self.where}: "
                                      f"{e} (is another job using --master-port={port}?)"
                                      ) from None
        if self.me == 0:
            self.client = _C._store_client_connect("127.0.0.1" if host != "::1" else host,
                                                   self.server.port, self.token, 30.0)
            self.cfg.node_rank = 0
            return
        deadline = time.monotonic() + self.join_timeout
        while True:
            if self.interrupted():
                raise NodeFailure("interrupted while waiting for node 0")
            try:
                self.client = _C._store_client_connect(host, port, self.token, 1.0)
                break
            except PermissionError:
                raise NodeFailure(
                    f"{self._who()}: node 0's store at {self.where} refused this node's "
                    f"CDDP_TOKEN (taken from {self.token_src}): every node must use the same "
                    f"secret. Run on every node the `export CDDP_TOKEN=...` line node 0 "
                    f"printed, or give every node one token file on a path they all share "
                    f"(--token-file or CDDP_TOKEN_FILE)") from None
            except (TimeoutError, RuntimeError, OSError) as e:
                if time.monotonic() > deadline:
                    raise NodeFailure(f"{self._who()}: node 0's store at {self.where} did not "
                                      f"answer within {self.join_timeout:g} s ({e}); is node 0 "
                                      f"started, and is {self.where} its address?") from None
        if self.me is None:              # c10d: 1, 2, ... in the order the nodes connect
            self.me = self.client.add(f"{KEY}next_node", 1)
            if self.me >= self.n:
                raise NodeFailure(f"node {self.me + 1} of --nnodes={self.n} joined the store at "
                                  f"{self.where}: more launchers run this job than --nnodes "
                                  "says")
            self.cfg.node_rank = self.me

    def token_hint(self):
        """Node 0 tells the other nodes how to share the secret (token from a file only)."""
        if self.me == 0 and self.token_src.startswith("the token file"):
            self.say(f"nodes read the job's CDDP_TOKEN from {self.token_src[15:]}; on nodes "
                     f"that do not share that path, run first: export CDDP_TOKEN={self.token}")

    # -- joining ----------------------------------------------------------------------------
    def _refused(self):
        if self.server is None:
            return None
        n, addr = self.server.refused()
        return addr if n else None

    def join(self, rnd):
        """Count this node in for round `rnd` and wait for every node (join_timeout). Losing
        node 0's store on the way is a NodeFailure naming it, not the store's own error."""
        try:
            return self._join(rnd)
        except (OSError, RuntimeError) as e:         # the store's DistNetworkError included
            raise NodeFailure(f"{self._who()}: lost node 0's store at {self.where} while "
                              f"joining round {rnd}: {e}", lost=True) from None

    def _join(self, rnd):
        self.round = rnd
        c, p = self.client, f"{KEY}r{rnd}/"
        name = f"{socket.gethostname()} ({route_addr(self.cfg.master_addr)})"
        c.set(f"{p}node/{self.me}", json.dumps({"name": name, "pid": os.getpid()}))
        c.add(f"{p}joined", 1)
        start = time.monotonic()
        said = start
        while True:
            joined = c.add(f"{p}joined", 0)
            if joined >= self.n:
                break
            bad = self._refused()
            if bad:
                raise NodeFailure(
                    f"the node at {bad} came with a different CDDP_TOKEN and node 0's store "
                    f"refused it; stopping. Every node must use the same secret: run on every "
                    f"node the `export CDDP_TOKEN=...` line printed above, or give every node "
                    f"one token file on a shared path (--token-file or CDDP_TOKEN_FILE)")
            if c.add(f"{p}nfail", 0) > 0:
                raise NodeFailure(self.first_failure(rnd))
            now = time.monotonic()
            missing = [k for k in range(self.n) if not c.check([f"{p}node/{k}"])]
            if now - start > self.join_timeout:
                raise NodeFailure(f"node(s) {', '.join(map(str, missing))} did not join within "
                                  f"{self.join_timeout:g} s (--rdzv-conf join_timeout=...); "
                                  f"stopping", lost=True)
            if now - said > 10:
                said = now
                self.say(f"node {self.me}: waiting for node(s) {', '.join(map(str, missing))} "
                         f"({joined} of {self.n} joined at {self.where})")
            if self.interrupted():
                raise NodeFailure("interrupted while waiting for the other nodes")
            time.sleep(0.05)
        for k in range(self.n):
            try:
                self.names[k] = json.loads(c.get(f"{p}node/{k}"))["name"]
            except (ValueError, KeyError):
                self.names[k] = "?"

    def node(self, k):
        return f"node {k} ({self.names.get(k, '?')})"

    # -- failures ---------------------------------------------------------------------------
    def publish_failure(self, what):
        """Record that this node's workers failed (best effort: the store may be gone)."""
        p = f"{KEY}r{self.round}/"
        try:
            self.client.set(f"{p}fail/{self.me}", f"{self.node(self.me)}: {what}")
            self.client.add(f"{p}nfail", 1)
        except Exception:       # noqa: BLE001 — node 0 gone: the others learn it themselves
            pass

    def first_failure(self, rnd):
        p = f"{KEY}r{rnd}/"
        for k in range(self.n):
            if self.client.check([f"{p}fail/{k}"]):
                return self.client.get(f"{p}fail/{k}").decode("utf-8", "replace")
        return "another node failed"

    # -- watching ---------------------------------------------------------------------------
    def start_watch(self):
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, args=(self.round,), daemon=True,
                                        name="cddp-node-watch")
        self._thread.start()

    def stop_watch(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.lost_after + 5)
            self._thread = None

    def _watch(self, rnd):
        """Beat; watch for failures of other nodes and, on node 0, for nodes gone silent.
        Posts ("remote", rnd, message, lost) at most once."""
        c, p = self.client, f"{KEY}r{rnd}/"
        last = {k: (None, time.monotonic()) for k in range(self.n) if k != self.me}
        if self.me:
            c.timeout = self.lost_after  # a cut link ends each call within that
        while not self._stop.wait(self.beat):
            try:
                c.add(f"{KEY}hb/{self.me}", 1)
                if c.add(f"{p}nfail", 0) > 0:
                    msg = self.first_failure(rnd)
                    if not msg.startswith(f"node {self.me} "):
                        self.post(("remote", rnd, msg, False))
                        return
                if self.me == 0:
                    now = time.monotonic()
                    for k, (v0, t0) in last.items():
                        v = c.add(f"{KEY}hb/{k}", 0)
                        if v != v0:
                            last[k] = (v, now)
                        elif now - t0 > self.lost_after and not c.check([f"{p}done/{k}"]):
                            msg = (f"{self.node(k)} stopped answering: no heartbeat from its "
                                   f"launcher for {self.lost_after:g} s (CDDP_HEARTBEAT_S="
                                   f"{self.hb:g}); the node died or its network link is down")
                            self.publish_failure_of(k, msg)
                            self.post(("remote", rnd, msg, True))
                            return
            except Exception as e:      # noqa: BLE001 — node 0 (the store) is gone
                if self._stop.is_set():
                    return
                self.post(("remote", rnd, f"lost contact with node 0 ({self.names.get(0, '?')}), "
                           f"whose launcher hosts the agents' store at {self.where}: {e}", True))
                return

    def publish_failure_of(self, k, msg):
        p = f"{KEY}r{self.round}/"
        try:
            self.client.set(f"{p}fail/{k}", msg)
            self.client.add(f"{p}nfail", 1)
        except Exception:       # noqa: BLE001
            pass

    # -- the end ----------------------------------------------------------------------------
    def finish(self, next_event):
        """This node's workers all succeeded. Node 0 waits for every node's (it hosts the
        store); the others leave at once. Returns None, or the number of a signal that came
        meanwhile; raises NodeFailure when another node failed."""
        p = f"{KEY}r{self.round}/"
        try:
            self.client.set(f"{p}done/{self.me}", "1")
        except Exception as e:  # noqa: BLE001
            self.stop_watch()
            raise NodeFailure(f"lost contact with node 0's store at {self.where}: {e}",
                              lost=True) from None
        if self.me != 0:
            self.stop_watch()
            return None
        try:
            while not all(self.client.check([f"{p}done/{k}"]) for k in range(self.n)):
                ev = next_event(0.1)
                if ev is not None and ev[0] == "remote" and ev[1] == self.round:
                    raise NodeFailure(ev[2], lost=ev[3])
                if ev is not None and ev[0] == "signal":
                    return ev[1]
            return None
        finally:
            self.stop_watch()

    def close(self):
        self.stop_watch()
        if self.client is not None:
            try:
                self.client.close()
            except Exception:   # noqa: BLE001
                pass
        if self.server is not None:
            self.server.close()
