"""The agent behind `python -m cddp.run` (torchrun) and `python -m cddp.launch` (the legacy
torch.distributed.launch): argument parsing, the worker environment, output prefixing, failure
handling and restarts. Pure Python; of the rest of cddp it uses only the store (multi-node
jobs: launcher_rdzv.py) and spawn's PR_SET_PDEATHSIG helper.

Mirrors torch/distributed/run.py + torch/distributed/launch.py (same options, spellings with
'-' and '_', PET_* environment defaults) with a simpler agent than torchelastic's: one node
runs its `nproc_per_node` workers, every node is told its --node-rank and the master address
(torch's "static" backend), and the worker group is restarted as a whole on failure up to
--max-restarts times. With several nodes the launchers meet first in a store that node 0's
launcher hosts on the master port (launcher_rdzv.py: the shared secret, joining, heartbeats,
failure records): a node that fails, never comes, or goes silent stops every node's workers
within seconds, and every launcher exits non-zero naming it. The workers of a multi-node job
use that store too (TORCHELASTIC_USE_AGENT_STORE=True, keys under /worker/attempt_<restart>).
Each worker gets TORCHELASTIC_ERROR_FILE (a private directory named after the launcher's pid,
removed when the launcher exits, or by the next launcher when this one was SIGKILLed): what a
worker's `@record` writes there is printed as the root cause of its failure. With --log-dir,
--redirects or --tee the error files and the redirected or teed streams go to the user's log
directory instead (launcher_logs.py), which stays.

    launcher (this process)
      ├── worker rank R  (own session = own process group; stdout/stderr are pipes)
      │     └── its children (DataLoader workers, ...) share the worker's process group
      ├── pump threads: one per worker stream; each line becomes "[rankR]: line" on the
      │     console and/or goes as it is to the rank's log file (a line still being written
      │     shows when it redraws with "\r", or after HOLD_S of quiet)
      └── waiter threads: one per worker; Popen.wait() -> event queue (exit order)

Exit status of the launcher: 0 when every worker exits 0; otherwise the exit code of the first
worker seen failing (128 + N when it died of signal N, as shells report it; torchrun itself
exits 1); 1 when another node failed or was lost; 128 + N when the launcher is stopped by
signal N (130 for Ctrl-C, 143 for SIGTERM).

Shutdown of a worker group (a worker failed, or the launcher got a signal): the signal (SIGTERM
on failure, the received signal otherwise) goes to every worker's process group, the agent
waits up to the grace period (--shutdown-timeout, else $CDDP_LAUNCH_GRACE, else 5 s), then
SIGKILLs every group. Groups are SIGKILLed after a clean exit too, so no grandchild outlives
the launcher; workers also get PR_SET_PDEATHSIG(SIGKILL) so they die if the launcher is killed.
With several nodes a failed worker's peers first get SETTLE (1 s) to end by themselves: they
are most likely failing too (a host or a link is gone) and each then reports what it saw.
"""
import argparse
import collections
import json
import os
import queue
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from cddp.distributed import launcher_logs as _logs
from cddp.distributed import launcher_rdzv as _rdzv
from cddp.distributed._slurm import first_host as _slurm_first_host
from cddp.multiprocessing.spawn import _set_pdeathsig

DEFAULT_MASTER_PORT = 29500
DEFAULT_RDZV_PORT = 29400      # torch's c10d rendezvous port, for --rdzv-endpoint=HOST
DEFAULT_GRACE = 5.0
SETTLE = 1.0              # several nodes: seconds the other workers get to fail by themselves
TAIL_LINES = 20           # lines kept per rank for the failure report


# ----------------------------------------------------------------------------------------------
# argument parsing (torch's names, defaults and PET_* environment fallbacks)
# ----------------------------------------------------------------------------------------------

class _Env(argparse.Action):
    """An option whose default comes from $PET_<DEST> when set (torch's `env` action)."""

    def __init__(self, dest, default=None, required=False, **kwargs):
        default = os.environ.get(f"PET_{dest.upper()}", default)
        if default:
            required = False
        super().__init__(dest=dest, default=default, required=required, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


class _CheckEnv(argparse.Action):
    """A flag that is also on when $PET_<DEST> is a non-zero integer (torch's `check_env`)."""

    def __init__(self, dest, default=False, **kwargs):
        default = bool(int(os.environ.get(f"PET_{dest.upper()}", "1" if default else "0")))
        super().__init__(dest=dest, const=True, default=default, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const)


def get_args_parser(prog="cddp.run", legacy=False):
    """torchrun's parser; `legacy` adds torch.distributed.launch's --use-env/--use_env."""
    p = argparse.ArgumentParser(
        prog=f"python -m {prog}",
        description="cddp distributed launcher (torchrun-compatible)" if not legacy else
        "cddp legacy launcher (torch.distributed.launch-compatible): passes --local_rank=N "
        "to the script unless --use_env is given")
    a = p.add_argument
    a("--nnodes", action=_Env, type=str, default="1:1",
      help="Number of nodes, or MIN:MAX (cddp needs MIN == MAX).")
    a("--nproc-per-node", "--nproc_per_node", action=_Env, type=str, default="1",
      help="Workers per node: an integer, or auto/cpu (= os.cpu_count()).")
    a("--rdzv-backend", "--rdzv_backend", action=_Env, type=str, default="static",
      help="static (every node gives --node-rank) or c10d (the same command on every node: "
           "without --node-rank, the launcher on the endpoint's host hosts the agents' "
           "store and is node 0; the others take 1, 2, ... in the order they join).")
    a("--rdzv-endpoint", "--rdzv_endpoint", action=_Env, type=str, default="",
      help="HOST:PORT; used as MASTER_ADDR:MASTER_PORT when --master-port is not given.")
    a("--rdzv-id", "--rdzv_id", action=_Env, type=str, default="none",
      help="Job id, given to workers as TORCHELASTIC_RUN_ID.")
    a("--rdzv-conf", "--rdzv_conf", action=_Env, type=str, default="",
      help="KEY=VALUE,...: join_timeout=SECONDS or timeout=SECONDS (how long the nodes wait "
           "for each other, default 600); other keys are accepted and ignored.")
    a("--token-file", "--token_file", action=_Env, type=str, default=None,
      help="Multi-node jobs without $CDDP_TOKEN: the file holding the job's shared secret, "
           "created (0600) by the first node when missing. Default: $CDDP_TOKEN_FILE, else "
           "~/.cddp/token. Nodes that do not share the path need `export CDDP_TOKEN=...` "
           "(node 0 prints the line).")
    a("--standalone", action=_CheckEnv,
      help="Single-node job on a free port with a fresh run id.")
    a("--max-restarts", "--max_restarts", action=_Env, type=int, default=0,
      help="Restart the whole worker group up to this many times when a worker fails.")
    a("--monitor-interval", "--monitor_interval", action=_Env, type=float, default=0.1,
      help="Seconds between checks of the workers' state.")
    a("--start-method", "--start_method", action=_Env, type=str, default="spawn",
      choices=["spawn", "fork", "forkserver"],
      help="Accepted for compatibility; workers are always fresh processes.")
    a("--role", action=_Env, type=str, default="default", help="Workers' ROLE_NAME.")
    a("-m", "--module", action=_CheckEnv,
      help="Run the script argument as a module, like 'python -m'.")
    a("--no-python", "--no_python", action=_CheckEnv,
      help="Execute the script directly instead of through the Python interpreter.")
    a("--run-path", "--run_path", action=_CheckEnv,
      help="Accepted for compatibility; the script runs as 'python -u SCRIPT'.")
    a("--log-dir", "--log_dir", action=_Env, type=str, default=None,
      help="Base directory for the workers' log files; each job gets its own sub-directory "
           "named after its run id (RUN_<random>/attempt_<restart>/<local rank>/).")
    a("-r", "--redirects", action=_Env, type=str, default="0",
      help="Send std streams to the log files only: 0 none, 1 stdout, 2 stderr, 3 both, for "
           "every local rank, or per local rank as 0:1,1:2.")
    a("-t", "--tee", action=_Env, type=str, default="0",
      help="Write std streams to the log files and to the console (format of --redirects).")
    a("--local-ranks-filter", "--local_ranks_filter", action=_Env, type=str, default="",
      help="Only show the output of these local ranks on the console (e.g. 0,1).")
    a("--node-rank", "--node_rank", action=_Env, type=int, default=None,
      help="Rank of this node among --nnodes (default 0; under SLURM, $SLURM_NODEID).")
    a("--master-addr", "--master_addr", action=_Env, type=str, default=None,
      help="Address of the node hosting rank 0 (default 127.0.0.1; for several nodes under "
           "SLURM, the first host of $SLURM_JOB_NODELIST).")
    a("--master-port", "--master_port", action=_Env, type=int, default=None,
      help="Port on the master node. Default: a free port for a single-node job (as torchrun "
           "2.x), 29500 otherwise.")
    a("--local-addr", "--local_addr", action=_Env, type=str, default=None,
      help="Accepted for compatibility; ignored.")
    a("--signals-to-handle", "--signals_to_handle", action=_Env, type=str,
      default="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
      help="Signals forwarded to the workers' process groups.")
    a("--shutdown-timeout", "--shutdown_timeout", action=_Env, type=float, default=None,
      help="Seconds between SIGTERM and SIGKILL when stopping workers "
           "(default: $CDDP_LAUNCH_GRACE or 5).")
    a("--virtual-local-rank", "--virtual_local_rank", action=_CheckEnv,
      help="Give every worker LOCAL_RANK=0.")
    if legacy:
        a("--use-env", "--use_env", default=False, action="store_true",
          help="Pass the local rank only through $LOCAL_RANK instead of --local_rank=N.")
    a("training_script", type=str, help="The script (or module with -m) to run on each rank.")
    a("training_script_args", nargs=argparse.REMAINDER)
    return p


class LaunchConfig:
    """What one node's agent runs; built by `config_from_args`."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _parse_nnodes(text):
    parts = text.split(":")
    try:
        lo, hi = (int(parts[0]), int(parts[0])) if len(parts) == 1 else (int(parts[0]),
                                                                         int(parts[1]))
    except (ValueError, IndexError):
        raise ValueError(f'--nnodes={text} is neither N nor "MIN:MAX"') from None
    if len(parts) > 2 or not 0 < lo <= hi:
        raise ValueError(f'--nnodes={text} is neither N nor "MIN:MAX" with 0 < MIN <= MAX')
    if lo != hi:
        raise ValueError(f"--nnodes={text}: elastic node ranges are not supported by cddp; "
                         "give a fixed number of nodes")
    return lo


def _parse_nproc(text):
    try:
        n = int(text)
    except ValueError:
        if text in ("auto", "cpu"):
            return os.cpu_count() or 1
        if text == "gpu":
            raise ValueError("--nproc-per-node=gpu: Cuda is not available.") from None
        raise ValueError(f"Unsupported nproc_per_node value: {text}") from None
    if n < 1:
        raise ValueError(f"--nproc-per-node must be >= 1, got {n}")
    return n


def free_port(host=""):
    """A TCP port free right now (bound then released: another process may take it, as with
    torch's own free-port pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _parse_signals(text):
    sigs = []
    for name in filter(None, (s.strip() for s in text.split(","))):
        try:
            sigs.append(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
        except KeyError:
            raise ValueError(f"--signals-to-handle: unknown signal {name!r}") from None
    return sigs


def _node_defaults(args, nnodes):
    """--node-rank and --master-addr, with SLURM's values for several nodes when not given
    (one launcher per node: srun --ntasks-per-node=1 python -m cddp.run --nnodes=N ...)."""
    node_rank, master_addr = args.node_rank, args.master_addr
    slurm = nnodes > 1 and "SLURM_JOB_ID" in os.environ
    if node_rank is None:
        node_rank = int(os.environ["SLURM_NODEID"]) if slurm and os.environ.get(
            "SLURM_NODEID", "").isdigit() else 0
    if master_addr is None:
        first = _slurm_first_host(os.environ.get("SLURM_JOB_NODELIST", "")) if slurm else None
        master_addr = first or "127.0.0.1"
    return node_rank, master_addr


def config_from_args(args, prog, legacy):
    """Validate the parsed arguments and decide ports, sizes and the worker command line."""
    nnodes = _parse_nnodes(args.nnodes)
    nproc = _parse_nproc(args.nproc_per_node)
    node_rank, master_addr = _node_defaults(args, nnodes)
    if nnodes > 1 and args.node_rank is None and args.rdzv_backend != "static" and \
            "SLURM_NODEID" not in os.environ:
        node_rank = None                 # assigned when the launchers meet (launcher_rdzv.py)
    elif not 0 <= node_rank < nnodes:
        raise ValueError(f"--node-rank={node_rank} is outside [0, {nnodes}) for "
                         f"--nnodes={args.nnodes}")
    if args.max_restarts < 0:
        raise ValueError("--max-restarts must be >= 0")
    use_env = (not legacy) or args.use_env
    if args.no_python and args.module:
        raise ValueError("Don't use both the '--no-python' flag and the '--module' flag "
                         "at the same time.")
    if legacy and args.no_python and not use_env:
        raise ValueError("When using the '--no-python' flag, you must also set the "
                         "'--use-env' flag.")

    run_id = args.rdzv_id
    master_port = args.master_port
    if args.standalone:
        if nnodes != 1:
            raise ValueError("--standalone is for single-node jobs (--nnodes=1)")
        run_id, master_port = str(uuid.uuid4()), None
    elif master_port is None and args.rdzv_endpoint:
        host, _, port = args.rdzv_endpoint.rpartition(":")
        if not host and not port.isdigit():        # HOST alone: torch's default port
            host, port = args.rdzv_endpoint, str(DEFAULT_RDZV_PORT)
        if not host or not port.isdigit():
            raise ValueError(f"--rdzv-endpoint={args.rdzv_endpoint} is not HOST[:PORT]")
        master_addr = "127.0.0.1" if host == "localhost" else host
        master_port = int(port) or None
    # torchrun 2.x: a single-node job without an explicit port gets a free one; a multi-node
    # job must agree on one without talking first, hence torch's fixed default.
    fixed_port = master_port is not None
    if master_port is None and nnodes > 1:
        master_port, fixed_port = DEFAULT_MASTER_PORT, True

    filt = None
    if args.local_ranks_filter:
        try:
            filt = {int(x) for x in args.local_ranks_filter.split(",")}
        except ValueError:
            raise ValueError("--local_ranks_filter must be a comma-separated list of integers "
                             "e.g. --local_ranks_filter=0,1,2") from None
    logs = _logs.LogSpecs(args.log_dir, args.redirects, args.tee, filt)

    if args.no_python:
        cmd = [args.training_script]
    else:
        cmd = [os.environ.get("PYTHON_EXEC", sys.executable), "-u"]
        cmd += ["-m", args.training_script] if args.module else [args.training_script]

    if args.shutdown_timeout is not None:
        grace = float(args.shutdown_timeout)
    else:
        try:
            grace = float(os.environ.get("CDDP_LAUNCH_GRACE", DEFAULT_GRACE))
        except ValueError:
            raise ValueError("CDDP_LAUNCH_GRACE must be a number of seconds") from None

    if nnodes > 1:
        _rdzv.join_timeout(args.rdzv_conf)          # checks the value now
    if nproc > 1 and "OMP_NUM_THREADS" not in os.environ:
        print("*****************************************\n"
              "Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
              "default, to avoid your system being overloaded, please further tune the "
              "variable for optimal performance in your application as needed. \n"
              "*****************************************", file=sys.stderr, flush=True)

    return LaunchConfig(
        prog=prog, nnodes=nnodes, nproc=nproc, node_rank=node_rank,
        master_addr=master_addr, master_port=master_port, fixed_port=fixed_port,
        run_id=run_id, role=args.role, max_restarts=args.max_restarts,
        monitor_interval=max(0.01, float(args.monitor_interval)), grace=max(0.0, grace),
        cmd=cmd, script_args=list(args.training_script_args), use_env=use_env,
        logs=logs, virtual_local_rank=args.virtual_local_rank,
        signals=_parse_signals(args.signals_to_handle),
        rdzv_conf=args.rdzv_conf, token_file=args.token_file)


# ----------------------------------------------------------------------------------------------
# output pumps
# ----------------------------------------------------------------------------------------------

class _Sink:
    """One of the launcher's output streams, shared by the pumps: whole lines are written under
    a lock so ranks never interleave inside a line; a closed stream (EPIPE) is dropped quietly
    while the pumps keep draining the workers' pipes so they never block."""

    def __init__(self, stream):
        self.buf = getattr(stream, "buffer", None)
        self.text = stream
        self.lock = threading.Lock()
        self.broken = False

    def write(self, data: bytes):
        with self.lock:
            if self.broken:
                return
            try:
                if self.buf is not None:
                    self.buf.write(data)
                    self.buf.flush()
                else:
                    self.text.write(data.decode("utf-8", "replace"))
                    self.text.flush()
            except (OSError, ValueError):
                self.broken = True


HOLD_S = 0.5       # a line without its newline yet is shown once its writer is quiet this long
TAIL_CHARS = 4096  # of a line still open, what is kept for the failure report


def _prefixed(data: bytes, prefix: bytes, at_start: bool) -> bytes:
    """data with prefix at the start of every line it begins, and after every carriage return
    that redraws a line (a progress bar's "\r 40%|####"), so the redrawn line keeps it."""
    out = (prefix if at_start else b"") + data.replace(b"\n", b"\n" + prefix)
    if data.endswith(b"\n"):
        out = out[:-len(prefix)]
    if b"\r" in data:
        out = out.replace(b"\r" + prefix, b"\r").replace(b"\r", b"\r" + prefix)
        out = out.replace(b"\r" + prefix + b"\n", b"\r\n")
    return out


def _pump(pipe, prefix: bytes, sink, tail, show, log):
    """Copy `pipe` to `sink` with `prefix` on every line when `show`, and as it is to the open
    file `log` (or None); remember the last lines in `tail`. Whole lines go out at once (one
    locked write each batch, so ranks never interleave inside a line); the start of a line
    whose newline has not come yet goes out when it redraws itself with a carriage return (a
    progress bar) or when its writer has been quiet for HOLD_S (a prompt before a long step).
    A log file that fails (disk full) is dropped with one line on the console; the pipe is
    always drained."""
    fd = pipe.fileno()
    pending, at_start, line = b"", True, b""      # pending: read, not yet shown

    def emit(data):
        nonlocal at_start, line
        if show and data:
            sink.write(_prefixed(data, prefix, at_start))
        if data:
            at_start = data.endswith(b"\n")
        *done, line = (line + data).split(b"\n")
        line = line[-TAIL_CHARS:]                    # a bar redrawn for hours stays bounded
        for ln in done:                              # the text a redrawn line ended with
            shown = [seg for seg in ln.split(b"\r") if seg] or [b""]
            tail.append(prefix.decode() + shown[-1].decode("utf-8", "replace"))

    try:
        while True:
            if pending and not select.select([fd], [], [], HOLD_S)[0]:
                emit(pending)                            # quiet: show the partial line
                pending = b""
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            if log is not None:
                try:
                    log.write(chunk)
                except OSError as e:
                    sink.write(prefix + f"(log file {log.name} stopped: {e})\n".encode())
                    log.close()
                    log = None
            pending += chunk
            cut = len(pending) if b"\r" in pending[pending.rfind(b"\n") + 1:] \
                else pending.rfind(b"\n") + 1
            emit(pending[:cut])
            pending = pending[cut:]
        if pending or not at_start:
            emit(pending + b"\n")
    except (OSError, ValueError):
        pass
    finally:
        for f in (pipe, log):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


# ----------------------------------------------------------------------------------------------
# the agent
# ----------------------------------------------------------------------------------------------

class _Worker:
    def __init__(self, local_rank, rank, logs):
        self.local_rank, self.rank = local_rank, rank
        self.logs = logs                    # launcher_logs.RankLogs
        self.proc = None
        self.pumps = []
        self.tail = collections.deque(maxlen=TAIL_LINES)
        self.returncode = None


def _describe(code):
    """(launcher exit status, human text) for a Popen returncode."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return 128 - code, f"signal {name}"
    return code, f"exit code {code}"


ERROR_DIR_PREFIX = "cddp-run-errors-"      # + the launcher's pid + "-" + mkdtemp's suffix


def _sweep_error_dirs():
    """Remove the error-file directories of launchers that are gone (a launcher killed with
    SIGKILL cannot remove its own; the next one on this machine does)."""
    from cddp.serialization import _pid_alive
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        pid = name[len(ERROR_DIR_PREFIX):].split("-", 1)[0]
        if name.startswith(ERROR_DIR_PREFIX) and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _killpg(pid, sig):
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class Agent:
    """Runs one node's worker group until success, failure or a signal; `run()` returns the
    launcher's exit status."""

    def __init__(self, cfg: LaunchConfig):
        self.cfg = cfg
        # one node: a fresh secret per job; several: the shared one (run() resolves it)
        self.token = os.environ.get("CDDP_TOKEN") or secrets.token_hex(16)
        self.rdzv = None                    # launcher_rdzv.NodeRendezvous (several nodes)
        self.signalled = None
        self.events = queue.SimpleQueue()   # put() is reentrant: signal handlers use it
        self.gen = 0                        # worker-group generation (restarts)
        self.out = _Sink(sys.stdout)
        self.err = _Sink(sys.stderr)
        self.workers = []
        self.error_dir = None               # the workers' TORCHELASTIC_ERROR_FILEs (@record)

    # -- messages ------------------------------------------------------------------------------
    def say(self, msg):
        self.err.write(f"{self.cfg.prog}: {msg}\n".encode("utf-8", "replace"))

    # -- starting ------------------------------------------------------------------------------
    def _env(self, w, restart_count, master_port):
        c = self.cfg
        world = c.nnodes * c.nproc
        env = dict(os.environ)
        env.update({
            "RANK": str(w.rank), "LOCAL_RANK": "0" if c.virtual_local_rank else str(w.local_rank),
            "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(c.nproc),
            "GROUP_RANK": str(c.node_rank), "GROUP_WORLD_SIZE": str(c.nnodes),
            "ROLE_RANK": str(w.rank), "ROLE_NAME": c.role, "ROLE_WORLD_SIZE": str(world),
            "MASTER_ADDR": c.master_addr, "MASTER_PORT": str(master_port),
            "TORCHELASTIC_RESTART_COUNT": str(restart_count),
            "TORCHELASTIC_MAX_RESTARTS": str(c.max_restarts),
            "TORCHELASTIC_RUN_ID": c.run_id,
            # one node: rank 0 hosts the store; several: node 0's launcher does
            "TORCHELASTIC_USE_AGENT_STORE": "True" if self.rdzv is not None else "False",
            "CDDP_TOKEN": self.token, "PYTHONUNBUFFERED": "1",
            "TORCHELASTIC_ERROR_FILE": self._error_file(w),
        })
        if c.nproc > 1:        # torchrun's rule: several workers on one node share its cores
            env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def _start(self, restart_count):
        c = self.cfg
        self.gen += 1
        gen = self.gen
        port = c.master_port if c.fixed_port else free_port()
        parent = os.getpid()

        def preexec():  # in the child between fork and exec: die with the launcher
            _set_pdeathsig(signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(1)

        self.workers = []
        try:
            logs, run_dir = c.logs.attempt(c.run_id, restart_count, c.nproc)
        except OSError as e:
            self.say(f"cannot create the log directory: {e}")
            return False
        if run_dir is not None:
            self.say(f"log directory set to: {run_dir}")
        for lr in range(c.nproc):
            w = _Worker(lr, c.node_rank * c.nproc + lr, logs[lr])
            argv = c.cmd + ([] if c.use_env else [f"--local_rank={lr}"]) + c.script_args
            try:
                w.proc = subprocess.Popen(
                    argv, env=self._env(w, restart_count, port), stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec)
            except OSError as e:
                self.say(f"cannot start rank {w.rank}: {e}")
                self._stop(signal.SIGTERM)
                return False
            self.workers.append(w)
            prefix = f"[rank{w.rank}]: ".encode()
            for pipe, sink, path, show in zip((w.proc.stdout, w.proc.stderr),
                                              (self.out, self.err), w.logs.files, w.logs.show):
                try:
                    log = open(path, "wb", buffering=0) if path else None
                except OSError as e:
                    self.say(f"rank {w.rank}: cannot open {path}: {e}; its lines go to the "
                             f"console")
                    log, show = None, True
                t = threading.Thread(target=_pump, args=(pipe, prefix, sink, w.tail, show, log),
                                     daemon=True, name=f"cddp-pump-{w.rank}")
                t.start()
                w.pumps.append(t)
            threading.Thread(target=self._waiter, args=(gen, lr, w.proc), daemon=True,
                             name=f"cddp-wait-{w.rank}").start()
        return True

    def _waiter(self, gen, idx, proc):
        self.events.put(("exit", gen, idx, proc.wait()))

    def _on_signal(self, signum, frame):
        self.signalled = self.signalled or signum
        self.events.put(("signal", signum))

    # -- stopping ------------------------------------------------------------------------------
    def _next_event(self, timeout):
        try:
            return self.events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def _record(self, ev):
        """Apply an exit event of the current generation; returns the worker or None."""
        if ev[0] == "exit" and ev[1] == self.gen:
            w = self.workers[ev[2]]
            w.returncode = ev[3]
            return w
        return None

    def _stop(self, sig):
        """Signal every worker group, wait up to the grace period for the workers, then SIGKILL
        every group (grandchildren included). A second signal to the launcher skips the wait.
        Returns the signal number received meanwhile, if any."""
        got = None
        for w in self.workers:
            _killpg(w.proc.pid, sig)
            if sig != signal.SIGKILL:       # a stopped worker acts on it only once resumed
                _killpg(w.proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + self.cfg.grace
        while any(w.returncode is None for w in self.workers):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ev = self._next_event(min(left, self.cfg.monitor_interval))
            if ev is None:
                continue
            if ev[0] == "signal":
                got = got or ev[1]
                break
            self._record(ev)
        for w in self.workers:
            _killpg(w.proc.pid, signal.SIGKILL)
        for w in self.workers:
            try:
                w.returncode = w.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # unkillable (D state): nothing more to do
                self.say(f"rank {w.rank} (pid {w.proc.pid}) did not die after SIGKILL")
        self._join_pumps(self.workers, 2.0)
        return got

    def _join_pumps(self, workers, timeout):
        deadline = time.monotonic() + timeout
        for w in workers:
            for t in w.pumps:
                t.join(max(0.0, deadline - time.monotonic()))

    def _error_file(self, w):
        if w.logs.error_file is not None:   # --log-dir: the user's, kept after the job
            return w.logs.error_file
        if self.error_dir is None:
            _sweep_error_dirs()
            self.error_dir = tempfile.mkdtemp(prefix=f"{ERROR_DIR_PREFIX}{os.getpid()}-")
        return os.path.join(self.error_dir, f"attempt{self.gen}_rank{w.rank}.json")

    def _root_cause(self, w):
        """The exception a worker's @record wrote (torch's error file), or None."""
        try:
            with open(self._error_file(w), "rb") as f:
                data = json.loads(f.read(1 << 20).decode("utf-8", "replace"))
            msg = data["message"]
            return msg if isinstance(msg, str) else str(msg["message"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _report(self, w):
        code, what = _describe(w.returncode)
        self._join_pumps([w], 1.0)   # its last lines, unless a grandchild holds the pipe
        lines = [f"{self.cfg.prog}: rank {w.rank} (local_rank {w.local_rank}, pid {w.proc.pid}) "
                 f"failed with {what}"]
        cause = self._root_cause(w)
        if cause is not None:
            lines.append(f"{self.cfg.prog}: root cause (first observed failure, rank {w.rank}): "
                         f"{cause}")
        if w.tail:
            lines.append(f"{self.cfg.prog}: last {len(w.tail)} lines of rank {w.rank}:")
            lines += ["    " + t for t in w.tail]
        self.err.write(("\n".join(lines) + "\n").encode("utf-8", "replace"))
        return code

    # -- main loop -----------------------------------------------------------------------------
    def _run_group(self, restart_count):
        """One attempt. Returns ("ok", 0), ("failed", code), ("remote", 1) (another node
        failed), ("lost", 1) (another node is gone) or ("signal", signum)."""
        if not self._start(restart_count):
            return "failed", 1
        if self.rdzv is not None:
            self.rdzv.start_watch()
        while any(w.returncode is None for w in self.workers):
            ev = self._next_event(max(self.cfg.monitor_interval, 0.5))
            if ev is None:
                continue
            if ev[0] == "signal":
                return "signal", self._shutdown_on_signal(ev[1])
            if ev[0] == "remote":
                if ev[1] != restart_count:
                    continue                     # a report about an earlier attempt
                self.say(f"{ev[2]}; stopping this node's workers")
                got = self._stop(signal.SIGTERM)
                return ("signal", got) if got is not None else ("lost" if ev[3] else "remote", 1)
            w = self._record(ev)
            if w is not None and w.returncode != 0:
                code = self._report(w)
                if self.rdzv is not None:
                    self.rdzv.publish_failure(f"rank {w.rank} failed with "
                                              f"{_describe(w.returncode)[1]}")
                    got = self._settle()
                    if got is not None:
                        return "signal", self._shutdown_on_signal(got)
                self.say(f"stopping the other workers (SIGTERM, SIGKILL after "
                         f"{self.cfg.grace:g} s)")
                got = self._stop(signal.SIGTERM)
                if got is not None:
                    return "signal", got
                return "failed", code
        # all exited 0: kill whatever they left behind in their process groups
        got = self._stop(signal.SIGTERM)
        if got is not None:
            return "signal", got
        return "ok", 0

    def _settle(self):
        """Several nodes: a failed worker usually means its peers are failing too (a host or
        link is gone); give them up to SETTLE s to end on their own, so that each reports
        what it saw (the host it lost) before SIGTERM cuts it short. A signal that comes
        meanwhile is returned."""
        end = time.monotonic() + min(SETTLE, self.cfg.grace)
        while any(w.returncode is None for w in self.workers):
            left = end - time.monotonic()
            if left <= 0:
                return None
            ev = self._next_event(min(left, self.cfg.monitor_interval))
            if ev is not None and ev[0] == "signal":
                return ev[1]
            if ev is not None:
                self._record(ev)
        return None

    def _shutdown_on_signal(self, signum):
        self.say(f"received {signal.Signals(signum).name}, stopping the workers")
        self._stop(signum)
        return signum

    def _open_nodes(self):
        """Several nodes: the shared secret, then the agents' store (launcher_rdzv.py)."""
        c = self.cfg
        try:
            self.token, src = _rdzv.resolve_token(c.token_file)
        except OSError as e:
            raise _rdzv.NodeFailure(f"cannot read or create the token file: {e}; set "
                                    f"CDDP_TOKEN or --token-file") from None
        self.rdzv = _rdzv.NodeRendezvous(c, self.token, src, self.say, self.events.put,
                                         lambda: self.signalled is not None)
        self.rdzv.open()
        self.rdzv.token_hint()

    def _attempts(self):
        """Run worker groups until one succeeds or no restart is left; the exit status."""
        c = self.cfg
        restart = 0
        while True:
            if self.rdzv is not None:
                self.rdzv.join(restart)
            kind, val = self._run_group(restart)
            if self.rdzv is not None and kind != "ok":
                self.rdzv.stop_watch()
            if kind == "ok":
                if self.rdzv is not None:
                    try:
                        got = self.rdzv.finish(self._next_event)
                    except _rdzv.NodeFailure as e:
                        # another node's workers failed while ours were done: with restarts
                        # left, every node (this one too) runs the next round, as torch's
                        # agents re-rendezvous
                        if e.lost or restart >= c.max_restarts:
                            raise
                        restart += 1
                        self.say(f"{e}; restarting the worker group (restart {restart} of "
                                 f"{c.max_restarts})")
                        continue
                    if got is not None:
                        return 128 + got
                return 0
            if kind == "signal":
                return 128 + val
            if kind == "lost" or restart >= c.max_restarts:
                return val
            restart += 1
            self.say(f"restarting the worker group (restart {restart} of "
                     f"{c.max_restarts})")

    def run(self):
        c = self.cfg
        installed = {}
        if threading.current_thread() is threading.main_thread():
            for s in c.signals:
                try:
                    installed[s] = signal.signal(s, self._on_signal)
                except (OSError, ValueError):
                    pass
        try:
            if c.nnodes > 1:
                self._open_nodes()
            return self._attempts()
        except _rdzv.NodeFailure as e:
            if self.signalled is not None:
                self.say(f"received {signal.Signals(self.signalled).name}, stopping")
                return 128 + self.signalled
            self.say(str(e))
            return 1
        finally:
            for w in self.workers:        # never leave anything behind, whatever happened
                if w.proc is not None and w.proc.poll() is None:
                    _killpg(w.proc.pid, signal.SIGKILL)
            if self.rdzv is not None:
                self.rdzv.close()
            if self.error_dir is not None:
                shutil.rmtree(self.error_dir, ignore_errors=True)
            for s, h in installed.items():
                signal.signal(s, h)


def main(argv=None, prog="cddp.run", legacy=False):
    """Parse `argv` (default sys.argv[1:]), run the agent, return the exit status."""
    parser = get_args_parser(prog, legacy)
    args = parser.parse_args(argv)
    try:
        cfg = config_from_args(args, prog, legacy)
    except ValueError as e:
        parser.error(str(e))
    return Agent(cfg).run()
