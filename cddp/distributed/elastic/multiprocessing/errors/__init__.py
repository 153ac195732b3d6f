"""cddp.distributed.elastic.multiprocessing.errors — torch's `@record` and its error file.

    from cddp.distributed.elastic.multiprocessing.errors import record   # torch's path, cddp's name

    @record
    def main(): ...

A worker's uncaught exception is written, as torch's is, to the JSON file the launcher names
in TORCHELASTIC_ERROR_FILE ({"message": {"message": "<Type>: <text>", "extraInfo":
{"py_callstack": <traceback>, "timestamp": "<unix seconds>"}}}) and then re-raised; cddp.run
reads it when the worker fails and prints it as the root cause, naming the rank. Outside a
launcher (no TORCHELASTIC_ERROR_FILE) record only re-raises. SystemExit(0) returns None;
other SystemExits pass through unrecorded, as torch's. The file is written atomically.
"""
import functools
import json
import os
import time
import traceback
from dataclasses import dataclass, field

__all__ = ["record", "ChildFailedError", "ProcessFailure", "ErrorHandler", "get_error_handler"]

ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"


class ErrorHandler:
    """Writes the error file of one worker (torch's ErrorHandler surface)."""

    def _get_error_file_path(self):
        return os.environ.get(ERROR_FILE_ENV)

    def initialize(self):
        pass

    def record_exception(self, e):
        path = self._get_error_file_path()
        if not path:
            return
        data = {"message": {"message": f"{type(e).__name__}: {e}",
                            "extraInfo": {"py_callstack": traceback.format_exc(),
                                          "timestamp": str(int(time.time()))}}}
        from .....serialization import _atomic_write
        try:
            _atomic_write(path, [json.dumps(data).encode()])
        except OSError:
            pass                     # the exception itself still propagates

    def dump_error_file(self, rootcause_error_file, error_code=0):
        pass


def get_error_handler():
    return ErrorHandler()


@dataclass
class ProcessFailure:
    """A failed worker as the launcher saw it."""
    local_rank: int
    pid: int
    exitcode: int
    error_file: str
    message: str = field(default="")
    timestamp: int = field(default=0)


class ChildFailedError(Exception):
    """A worker group failed (torch's agent raises it); failures: {global rank: ProcessFailure}."""

    def __init__(self, name, failures):
        self.name, self.failures = name, failures
        super().__init__(f"{name} FAILED: ranks {sorted(failures)}")

    def get_first_failure(self):
        rank = min(self.failures, key=lambda r: self.failures[r].timestamp)
        return rank, self.failures[rank]


def record(fn=None, error_handler=None):
    """Decorator: an exception escaping fn is written to the worker's error file, then
    re-raised (module docstring)."""
    handler = error_handler or get_error_handler()

    def wrap(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            handler.initialize()
            try:
                return f(*args, **kwargs)
            except SystemExit as se:
                if se.code == 0:
                    return None
                raise
            except Exception as e:
                handler.record_exception(e)
                raise
        return wrapper
    return wrap(fn) if fn is not None else wrap
