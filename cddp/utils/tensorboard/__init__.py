"""cddp.utils.tensorboard — torch.utils.tensorboard: SummaryWriter over the tensorboard package.

The event files are written by TensorBoard's own maintained writer (tensorboard.summary.writer),
so TensorBoard and its event readers read them as they read torch's. tensorboard is an optional
dependency: `pip install 'cddp[tensorboard]'` (or `pip install tensorboard`).
"""
try:
    import tensorboard  # noqa: F401
except ImportError as e:  # torch raises ImportError here too, naming the package
    raise ImportError("cddp.utils.tensorboard needs the tensorboard package, which is not "
                      "installed: pip install 'cddp[tensorboard]' (or pip install tensorboard)"
                      ) from e

from .writer import SummaryWriter, FileWriter  # noqa: E402

__all__ = ["SummaryWriter", "FileWriter"]
