"""cddp.multiprocessing.spawn / start_processes — torch.multiprocessing.spawn's API.

    spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn")
        runs fn(i, *args) in nprocs fresh processes (i = 0..nprocs-1); with join=True waits
        for all of them, else returns a ProcessContext.
    ProcessContext.join(timeout=None, grace_period=None) -> bool
        True once every process exited 0; on the first failure terminates the others
        (SIGTERM, then SIGKILL after grace_period or 30 s, as torch) and raises
          ProcessRaisedException  fn raised: the message carries the child's traceback text
          ProcessExitedException  the child exited non-zero without an exception (os._exit(7),
                                  sys.exit(3)) or was killed by a signal (exit_code = -signum,
                                  signal_name = "SIGKILL")

The child's traceback travels as UTF-8 text in a per-process temporary file (torch uses a
pickled string in the same kind of file; a file avoids the deadlocks a Queue can cause when a
child dies mid-write). Children get PR_SET_PDEATHSIG(SIGINT) as in torch so they stop when the
parent dies. Unlike torch, an exception (Ctrl-C, and SIGTERM, made SystemExit(143) for the
wait) raised in the parent while it waits in spawn(join=True) terminates the children and
removes their error files before propagating, so none is orphaned or left in /tmp; a child
whose parent was killed outright prints its traceback instead of writing a file; terminate()
resumes a stopped child (SIGCONT) so its SIGTERM takes effect without the grace period.
"""
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import time
import warnings

__all__ = ["ProcessContext", "ProcessException", "ProcessExitedException",
           "ProcessRaisedException", "spawn", "SpawnContext", "start_processes"]

_PR_SET_PDEATHSIG = 1
_prctl = None


def _load_prctl():
    """Resolve prctl(2) once, in the parent (ctypes' first call is not something to run
    between fork and exec). Never calls it: importing this module must not change the
    process's own death signal (a launched worker keeps the one its launcher set)."""
    global _prctl
    if sys.platform.startswith("linux") and _prctl is None:
        try:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = False
    return _prctl


def _set_pdeathsig(sig):
    """Ask Linux to send `sig` to this process when its parent thread exits; no-op elsewhere.
    Safe between fork and exec once _load_prctl() ran in the parent."""
    prctl = _load_prctl()
    if prctl:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


_load_prctl()


class _SigintRecorder:
    """SIGINT handler used while children are being started: a Ctrl-C landing between a
    fork and the bookkeeping that follows it would otherwise leave that child untracked (and
    orphaned). The signal is re-delivered, to the previous handler, once all are started."""

    def __init__(self, previous):
        self.previous = previous
        self.pending = False

    def __call__(self, signum, frame):
        self.pending = True


class _deferred_sigint:
    """Context manager: hold SIGINT back (main thread only; elsewhere a no-op)."""

    def __enter__(self):
        self.rec = None
        try:
            self.rec = _SigintRecorder(signal.getsignal(signal.SIGINT))
            signal.signal(signal.SIGINT, self.rec)
        except (ValueError, OSError, TypeError):   # not the main thread, or no signals
            self.rec = None
        return self

    def __exit__(self, *exc):
        if self.rec is not None:
            prev = self.rec.previous
            signal.signal(signal.SIGINT, signal.default_int_handler if prev is None else prev)
            if self.rec.pending:
                signal.raise_signal(signal.SIGINT)   # the previous handler runs now
        return False


class _sigterm_as_exit:
    """Context manager for the parent's wait in spawn(join=True): SIGTERM raises SystemExit
    (143) instead of killing the parent on the spot, so the children are stopped and their
    error files removed on the way out. Only when SIGTERM has its default action and this is
    the main thread; else a no-op."""

    def __enter__(self):
        self.prev = None
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                self.prev = signal.signal(signal.SIGTERM, self._raise)
        except (ValueError, OSError, TypeError):
            self.prev = None
        return self

    @staticmethod
    def _raise(signum, frame):
        raise SystemExit(128 + signum)

    def __exit__(self, *exc):
        if self.prev is not None:
            signal.signal(signal.SIGTERM, self.prev)
        return False


def _restore_sigint_in_child():
    """A forked child inherits the recorder: give it back the parent's previous handler."""
    h = signal.getsignal(signal.SIGINT)
    if isinstance(h, _SigintRecorder):
        signal.signal(signal.SIGINT,
                      signal.default_int_handler if h.previous is None else h.previous)


class ProcessException(Exception):
    __slots__ = ["error_index", "error_pid"]

    def __init__(self, msg: str, error_index: int, error_pid: int):
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index
        self.error_pid = error_pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.error_pid)


class ProcessRaisedException(ProcessException):
    """A process failed because its code raised an exception."""


class ProcessExitedException(ProcessException):
    """A process exited with a non-zero code or was killed by a signal."""

    __slots__ = ["exit_code"]

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code = exit_code
        self.signal_name = signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.error_pid, self.exit_code,
                            self.signal_name)


def _parent_alive(pid):
    """Whether the spawning process is still there to read an error file. getppid() alone is
    not enough: when a multi-threaded parent is killed its main thread exits first, which
    sends the death signal, and the children still see its pid as their parent until the
    other threads are gone too; /proc then shows the exiting leader as a zombie."""
    if os.getppid() != pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True                          # no /proc: getppid is all there is
    return state not in (b"Z", b"X")


def _wrap(fn, i, args, error_file):
    """Child entry point: run fn(i, *args); on an exception write its traceback to
    `error_file` and exit 1 (Ctrl-C from the parent ends the child quietly). A child whose
    parent is gone (killed: nobody will read the file) prints the traceback instead."""
    parent = os.getppid()
    _set_pdeathsig(signal.SIGINT)
    _restore_sigint_in_child()
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:
        import traceback
        text = traceback.format_exc()
        if _parent_alive(parent):
            tmp = error_file + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, error_file)      # the parent never sees half a traceback
        if not _parent_alive(parent):        # gone before or while writing: remove it
            for name in (error_file, error_file + ".tmp"):
                try:
                    os.unlink(name)
                except OSError:
                    pass
            sys.stderr.write(text)
        sys.exit(1)


def _exit_message(index, code):
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"<Unknown signal {-code}>"
        return f"process {index:d} terminated with signal {name}", name
    return f"process {index:d} terminated with exit code {code:d}", None


class ProcessContext:
    def __init__(self, processes, error_files):
        self.error_files = error_files
        self.processes = processes
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self):
        return [int(p.pid) for p in self.processes]

    def _join_procs_with_timeout(self, timeout):
        end = time.monotonic() + timeout
        for p in self.processes:
            p.join(max(0.0, end - time.monotonic()))

    def _cleanup_files(self):
        for f in self.error_files:
            for path in (f, f + ".tmp"):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def terminate(self, grace_period=5.0, _keep_files=False):
        """SIGTERM every live process, SIGKILL after `grace_period` s, join them all."""
        for p in self.processes:
            if p.is_alive():
                p.terminate()
                try:                     # a stopped child acts on the SIGTERM only if resumed
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
        self._join_procs_with_timeout(grace_period)
        for p in self.processes:
            if p.is_alive():
                p.kill()
            p.join()
        if not _keep_files:
            self._cleanup_files()

    def join(self, timeout=None, grace_period=None):
        """Wait up to `timeout` s for a process to exit. Returns True when all have exited 0,
        False when some still run; raises (after stopping the others) when one failed."""
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(self.sentinels.keys(), timeout=timeout)
        error_index = None
        for sentinel in ready:
            index = self.sentinels.pop(sentinel)
            p = self.processes[index]
            p.join()
            if p.exitcode != 0:
                error_index = index
                break
        if error_index is None:
            if not self.sentinels:
                self._cleanup_files()
                return True
            return False

        if grace_period is not None:          # let the others stop by themselves first
            self._join_procs_with_timeout(grace_period)
        self.terminate(30 if grace_period is None else grace_period, _keep_files=True)

        failed = self.processes[error_index]
        try:
            with open(self.error_files[error_index], encoding="utf-8") as fh:
                trace = fh.read()
        except OSError:
            trace = None
        finally:
            self._cleanup_files()
        if trace is None:
            msg, name = _exit_message(error_index, failed.exitcode)
            raise ProcessExitedException(msg, error_index=error_index, error_pid=failed.pid,
                                         exit_code=failed.exitcode, signal_name=name)
        msg = f"\n\n-- Process {error_index:d} terminated with the following error:\n" + trace
        raise ProcessRaisedException(msg, error_index, failed.pid)


class SpawnContext(ProcessContext):
    def __init__(self, processes, error_files):
        warnings.warn("SpawnContext is renamed to ProcessContext since 1.4 release.",
                      stacklevel=2)
        super().__init__(processes, error_files)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Start nprocs processes running fn(i, *args) with the given multiprocessing start
    method ('spawn', 'fork', 'forkserver'); see spawn()."""
    # torch returns at once for nprocs=0, having run nothing: a script whose world size is
    # cuda.device_count() on a machine without GPUs would "finish" without training
    if not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive integer, got {nprocs!r}" +
                         (" (nothing would run; torch returns silently here — is it "
                          "cuda.device_count() on a machine without GPUs?)"
                          if nprocs == 0 else ""))
    mp = multiprocessing.get_context(start_method)
    processes, error_files = [], []
    ctx = ProcessContext(processes, error_files)
    try:
        with _deferred_sigint():
            for i in range(nprocs):
                fd, name = tempfile.mkstemp(prefix="cddp-errorfile-", suffix=".txt")
                os.close(fd)
                os.unlink(name)     # the child creates it only when fn raised
                error_files.append(name)
                p = mp.Process(target=_wrap, args=(fn, i, args, name), daemon=daemon)
                p.start()
                processes.append(p)
        ctx.sentinels = {p.sentinel: i for i, p in enumerate(processes)}
        if not join:
            return ctx
        with _sigterm_as_exit():
            while not ctx.join():
                pass
    except BaseException:
        ctx.terminate()
        raise


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Spawn nprocs processes running fn(i, *args) (torch.multiprocessing.spawn).

    fn must be importable by the children (defined at the top level of a module or of the
    script's __main__); for a function defined in a notebook use
    cddp.distributed.notebook_launch. Returns None when join=True, else a ProcessContext.
    """
    if start_method != "spawn":
        warnings.warn(f"This method only supports start_method=spawn (got: {start_method}).\n"
                      "To use a different start_method use:\n\t\t"
                      " cddp.multiprocessing.start_processes(...)", FutureWarning,
                      stacklevel=2)
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
