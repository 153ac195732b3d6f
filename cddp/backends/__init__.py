"""cddp.backends — torch.backends flags that scripts set (cudnn.benchmark,
cuda.matmul.allow_tf32, ...) and availability checks (mps, mkldnn)."""
from . import cuda, cudnn, mkldnn, mps  # noqa: F401
