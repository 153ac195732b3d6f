"""cddp.nn.DataParallel — torch.nn.DataParallel's signature. Without GPUs (or with one device)
torch calls the wrapped module directly and reduces nothing; so does cddp. The multi-GPU
scatter/replicate/gather path comes with the CUDA backend."""
from ..modules.module import Module


class DataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module = module
        self.device_ids = [] if device_ids is None else list(device_ids)
        self.output_device = output_device
        self.dim = dim
        if self.device_ids:
            from ... import empty
            empty(0).to(self.device_ids[0])     # no GPU: the one-warning CPU fallback

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            module = self.__dict__.get("_modules", {}).get("module")
            if module is not None:
                return getattr(module, name)
            raise
