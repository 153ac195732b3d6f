"""torch.distributed.algorithms.ddp_comm_hooks: default_hooks (allreduce, fp16/bf16
compression) and powerSGD_hook (PowerSGD low-rank compression)."""
from . import default_hooks  # noqa: F401
from . import powerSGD_hook as powerSGD  # noqa: F401
from . import post_localSGD_hook as post_localSGD  # noqa: F401
from .default_hooks import allreduce_hook, bf16_compress_hook, fp16_compress_hook  # noqa: F401
