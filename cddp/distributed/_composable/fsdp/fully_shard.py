"""cddp.distributed._composable.fsdp.fully_shard — torch's module path of the same names."""
from ...fsdp._fully_shard import (FSDPModule, UnshardHandle, fully_shard,  # noqa: F401
                                  register_fsdp_forward_method)
