"""cddp.distributed.algorithms — DDP communication hooks (torch's module path)."""
from . import ddp_comm_hooks  # noqa: F401
