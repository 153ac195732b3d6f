"""notebook_launch: run a function defined in a Jupyter cell (or `python -c`) on N ranks.

    def train(lr):                         # defined in a notebook cell
        dist.init_process_group("gloo")    # env:// from the variables below
        ...
        return final_loss
    loss = notebook_launch(train, args=(0.1,), nprocs=2)   # rank 0's return value

Why not mp.spawn: the 'spawn' start method pickles `fn` by reference (module + name) and the
child re-imports it; a function living in a notebook's __main__ cannot be found that way
("Can't get attribute 'train' on <module '__main__'>"). notebook_launch forks instead (as
accelerate's notebook_launcher does): each child is a copy of the kernel and already holds
`fn`, the classes and the data defined in earlier cells; nothing is pickled on the way in.

Each child gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK=0, MASTER_ADDR,
MASTER_PORT (a free port unless given) and CDDP_TOKEN in os.environ, then calls fn(*args).
Rank 0's return value comes back pickled through a pipe (it is our own child's data); other
ranks' results are discarded. When a rank raises, the others are stopped (SIGTERM, SIGKILL
after `grace_period`) and ProcessRaisedException is raised with the child's traceback text
(the child's exception object, when picklable, is its `.exception` attribute); a rank that
dies without raising gives ProcessExitedException. Interrupting the kernel (or `timeout`)
stops every child too; children also get PR_SET_PDEATHSIG(SIGKILL) so a dead kernel leaves
none behind.

Caveats of fork, written down honestly:
- Only the calling thread exists in a child. A lock another kernel thread held at the moment
  of the fork stays held in the child; ipykernel's output threads are fork-aware, but do not
  call notebook_launch while your own threads are running.
- Do not create the process group in the kernel itself: call init_process_group inside `fn`
  (notebook_launch refuses to fork a kernel with an initialized group, whose worker thread
  and sockets a child cannot use).
- Linux/macOS only (fork); on macOS fork is fragile with some system libraries.
"""
import multiprocessing
import multiprocessing.connection
import os
import pickle
import secrets
import signal
import sys
import time
import traceback
import warnings

from cddp.multiprocessing.spawn import (ProcessExitedException, ProcessRaisedException,
                                        _deferred_sigint, _exit_message,
                                        _restore_sigint_in_child, _set_pdeathsig)

__all__ = ["notebook_launch"]


def _child(fn, args, env, conn):
    """Runs in the forked child: set the rank's environment, call fn, send one message:
    ("ok", value-or-None) or ("err", traceback text, pickled exception or None)."""
    _set_pdeathsig(signal.SIGKILL)
    _restore_sigint_in_child()
    os.environ.update(env)
    rank = int(env["RANK"])
    try:
        result = fn(*args)
    except BaseException as e:  # noqa: B902  (SystemExit/KeyboardInterrupt are reported too)
        text = traceback.format_exc()
        try:
            exc = pickle.dumps(e)
        except Exception:
            exc = None
        conn.send_bytes(pickle.dumps(("err", text, exc)))
        conn.close()
        sys.exit(1)
    try:
        msg = pickle.dumps(("ok", result if rank == 0 else None))
    except Exception as e:
        msg = pickle.dumps(("err", f"rank 0's return value could not be pickled: {e!r}\n",
                            None))
    conn.send_bytes(msg)
    conn.close()


def _stop(procs, grace_period):
    """SIGTERM the live children, SIGKILL after grace_period s, reap them all."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + grace_period
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(5)


def _check_no_group():
    dist = sys.modules.get("cddp.distributed")
    is_init = getattr(dist, "is_initialized", None)
    try:
        initialized = bool(is_init()) if callable(is_init) else False
    except Exception:
        initialized = False
    if initialized:
        raise RuntimeError(
            "notebook_launch: a process group is already initialized in this process; the "
            "forked ranks cannot use it. Restart the kernel and call init_process_group "
            "inside the launched function.")


def notebook_launch(fn, args=(), nprocs=2, master_addr="127.0.0.1", master_port=None,
                    timeout=None, grace_period=5.0):
    """Run fn(*args) on `nprocs` forked ranks; return rank 0's return value.

    timeout: seconds to wait for all ranks (None = no limit); past it every rank is stopped
    and TimeoutError is raised. grace_period: seconds between SIGTERM and SIGKILL when ranks
    are stopped early.
    """
    if not callable(fn):
        raise TypeError(f"notebook_launch: fn must be callable, got {type(fn).__name__}")
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"notebook_launch: nprocs must be a positive integer, got {nprocs!r}")
    if "fork" not in multiprocessing.get_all_start_methods():
        raise RuntimeError("notebook_launch needs the 'fork' start method (Linux/macOS)")
    _check_no_group()
    if master_port is None:
        from .launcher_core import free_port
        master_port = free_port()
    token = os.environ.get("CDDP_TOKEN") or secrets.token_hex(16)
    ctx = multiprocessing.get_context("fork")

    procs, conns = [], []
    try:
        with _deferred_sigint():   # a Ctrl-C mid-start must not leave an untracked child
            for rank in range(nprocs):
                env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nprocs),
                       "LOCAL_WORLD_SIZE": str(nprocs), "GROUP_RANK": "0",
                       "MASTER_ADDR": str(master_addr), "MASTER_PORT": str(master_port),
                       "CDDP_TOKEN": token}
                r, w = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_child, args=(fn, args, env, w), daemon=True,
                                name=f"cddp-notebook-rank{rank}")
                # flush so the children do not inherit (and print again) buffered output
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:
                        pass
                with warnings.catch_warnings():   # 3.12+ warns of fork with threads: caveats
                    warnings.filterwarnings("ignore", message=r".*fork\(\)",
                                            category=DeprecationWarning)
                    p.start()
                w.close()   # later children must not inherit this rank's write end
                procs.append(p)
                conns.append(r)
        return _collect(procs, conns, timeout, grace_period)
    finally:
        _stop(procs, grace_period)   # no-op when all exited; Ctrl-C/timeout/errors otherwise
        for c in conns:
            c.close()


def _collect(procs, conns, timeout, grace_period):
    deadline = None if timeout is None else time.monotonic() + timeout
    messages = {}                    # rank -> decoded message
    running = set(range(len(procs)))
    by_conn = {c: i for i, c in enumerate(conns)}
    by_sentinel = {p.sentinel: i for i, p in enumerate(procs)}

    def read(rank):
        try:
            messages[rank] = pickle.loads(conns[rank].recv_bytes())
        except (EOFError, OSError):
            messages.setdefault(rank, None)      # died without a message
        del by_conn[conns[rank]]

    while running:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready = multiprocessing.connection.wait(list(by_conn) + [procs[i].sentinel
                                                                 for i in running], left)
        if not ready and deadline is not None and time.monotonic() >= deadline:
            _stop(procs, grace_period)
            raise TimeoutError(f"notebook_launch: ranks {sorted(running)} still running after "
                               f"{timeout} s; all ranks were stopped")
        failed = None
        for obj in ready:
            if obj in by_conn:
                rank = by_conn[obj]
                read(rank)
                if messages[rank] is not None and messages[rank][0] == "err":
                    failed = rank
            elif obj in by_sentinel and by_sentinel[obj] in running:
                rank = by_sentinel[obj]
                procs[rank].join()
                running.discard(rank)
                if conns[rank] in by_conn and conns[rank].poll():
                    read(rank)
                msg = messages.get(rank)
                if msg is None or msg[0] == "err" or procs[rank].exitcode != 0:
                    failed = rank
            if failed is not None:
                break
        if failed is not None:
            _stop(procs, grace_period)
            _raise_failure(failed, procs[failed], messages.get(failed))
    msg = messages.get(0)
    return msg[1] if msg else None


def _raise_failure(rank, proc, msg):
    if msg is not None and msg[0] == "err":
        err = ProcessRaisedException(
            f"\n\n-- Process {rank:d} terminated with the following error:\n{msg[1]}",
            rank, proc.pid)
        err.exception = None
        if msg[2] is not None:
            try:
                err.exception = pickle.loads(msg[2])
            except Exception:
                pass
        raise err
    code = proc.exitcode
    if code == 0:
        raise ProcessExitedException(f"process {rank:d} exited with code 0 before fn returned",
                                     rank, proc.pid, exit_code=0)
    text, name = _exit_message(rank, code)
    raise ProcessExitedException(text, rank, proc.pid, exit_code=code, signal_name=name)
