"""cddp.distributed.fsdp._fsdp_api — FSDP2's option types (torch's _fully_shard/_fsdp_api.py):
MixedPrecisionPolicy, OffloadPolicy, CPUOffloadPolicy.

Contract: frozen dataclasses with torch's fields and defaults. MixedPrecisionPolicy:
param_dtype (the gathered parameters' dtype in forward/backward), reduce_dtype (the gradient
reduction's dtype; None: param_dtype's), output_dtype (floating outputs cast to it),
cast_forward_inputs (floating inputs cast to param_dtype).

Differences from torch: CPUOffloadPolicy is accepted without effect (cddp's parameters live
in host memory already; pin_memory has nothing to pin).
"""
from dataclasses import dataclass

__all__ = ["MixedPrecisionPolicy", "OffloadPolicy", "CPUOffloadPolicy"]


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True


@dataclass
class OffloadPolicy:
    """No offloading (the default)."""


@dataclass
class CPUOffloadPolicy(OffloadPolicy):
    pin_memory: bool = True
