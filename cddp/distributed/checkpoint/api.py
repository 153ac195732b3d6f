"""cddp.distributed.checkpoint.api — CheckpointException, torch's error for a failed save/load.

Like torch's, it derives from BaseException (so `except Exception` does not swallow a failed
checkpoint) and carries `failures`: {rank: exception} for every rank that failed. Each rank
raises the same exception, so a rank whose own part succeeded still learns that the
checkpoint did not (and which rank, and why)."""

__all__ = ["CheckpointException"]


class CheckpointException(BaseException):
    def __init__(self, msg, failures):
        super().__init__(msg, failures)
        self._failures = failures

    @property
    def failures(self):
        """{rank: the exception that rank raised}."""
        return self._failures

    def __str__(self):
        lines = [f"CheckpointException ranks:{self._failures.keys()}", str(self.args[0])]
        lines += [f"rank {r}: {type(e).__name__}: {e}" for r, e in sorted(self._failures.items())]
        return "\n".join(lines)
