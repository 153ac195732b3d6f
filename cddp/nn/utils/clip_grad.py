"""torch.nn.utils.clip_grad: the gradient-clipping functions, by their module path (defined in
cddp/nn/utils/__init__.py)."""
from . import (clip_grad_norm, clip_grad_norm_, clip_grad_value_,  # noqa: F401
               clip_grads_with_norm_, get_total_norm)

__all__ = ["clip_grad_norm", "clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_",
           "get_total_norm"]
