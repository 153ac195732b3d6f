"""cddp.distributed.algorithms — DDP communication hooks and the join context (torch's module
paths)."""
from . import ddp_comm_hooks, join, model_averaging  # noqa: F401
