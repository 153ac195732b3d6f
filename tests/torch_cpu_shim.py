"""Run a seed script with torch on a machine without a GPU: the oracle side of the seed tests.

    python torch_cpu_shim.py SCRIPT [ARGS...]          (also as torchrun's / launch's script)

The seed scripts ask for CUDA ("nccl", .cuda(), set_device, torch.cuda.amp). torch has no
fallback for that, so this prelude maps each request to the CPU the way cddp's fallback does
(DESIGN.md, "Devices"), then runs SCRIPT as __main__:
- init_process_group("nccl") -> "gloo"; DistributedDataParallel(device_ids=...) on a CPU
  module drops device_ids (torch refuses them for CPU modules);
- Tensor.cuda / Module.cuda / torch.cuda.set_device -> no-ops on the CPU;
- torch.cuda.amp.autocast(enabled, dtype=float16) -> torch.autocast("cpu", float16): the
  same op lists cddp applies when its CUDA autocast falls back to the CPU;
- torch.cuda.amp(.grad_scaler).GradScaler(...) -> torch.amp.GradScaler("cpu", ...).
Nothing else changes, so a loss that differs between torch and cddp is the libraries'
difference, not the harness's."""
import runpy
import sys

import torch
import torch.distributed as dist
import torch.nn.parallel as parallel


def _init(backend=None, *args, **kwargs):
    if backend == "nccl":
        backend = "gloo"
    return _real_init(backend, *args, **kwargs)


class _DDP(parallel.DistributedDataParallel):
    def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
        super().__init__(module, None, None, *args, **kwargs)


class _Autocast(torch.autocast):
    def __init__(self, enabled=True, dtype=torch.float16, cache_enabled=True):
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class _GradScaler(torch.amp.GradScaler):
    def __init__(self, *args, **kwargs):
        kwargs.pop("device", None)
        super().__init__("cpu", *args, **kwargs)


_real_init = dist.init_process_group
dist.init_process_group = _init
torch.nn.parallel.DistributedDataParallel = _DDP
torch.nn.parallel.distributed.DistributedDataParallel = _DDP
torch.Tensor.cuda = lambda self, *a, **k: self
torch.nn.Module.cuda = lambda self, *a, **k: self
torch.cuda.set_device = lambda *a, **k: None
torch.cuda.amp.autocast = _Autocast
torch.cuda.amp.GradScaler = _GradScaler
torch.cuda.amp.grad_scaler.GradScaler = _GradScaler

if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
