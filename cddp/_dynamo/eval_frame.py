"""torch._dynamo.eval_frame's OptimizedModule: the class torch.compile wraps a module in. cddp's
compile hands the module itself back, so no object is ever one (isinstance checks are False,
as libraries that unwrap compiled models expect of an uncompiled one)."""
from ..nn.modules.module import Module

__all__ = ["OptimizedModule"]


class OptimizedModule(Module):
    """Never made by cddp; constructing one wraps `mod` as torch's does (_orig_mod)."""

    def __init__(self, mod, dynamo_ctx=None):
        super().__init__()
        self._orig_mod = mod

    def forward(self, *args, **kwargs):
        return self._orig_mod(*args, **kwargs)
