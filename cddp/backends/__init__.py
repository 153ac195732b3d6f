"""cddp.backends — torch.backends flags that scripts set (cudnn.benchmark,
cuda.matmul.allow_tf32, ...) and availability checks (mps)."""
from . import cuda, cudnn, mps  # noqa: F401
