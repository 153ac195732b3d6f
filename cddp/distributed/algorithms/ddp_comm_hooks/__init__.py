from . import default_hooks  # noqa: F401
from .default_hooks import allreduce_hook, bf16_compress_hook, fp16_compress_hook  # noqa: F401
