"""cddp.backends — torch.backends flags that scripts set (cudnn.benchmark,
cuda.matmul.allow_tf32, ...) and availability checks (mps, mkldnn, opt_einsum)."""
from . import cuda, cudnn, mha, mkldnn, mps, opt_einsum  # noqa: F401
