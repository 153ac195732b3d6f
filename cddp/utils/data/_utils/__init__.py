"""cddp.utils.data._utils — torch.utils.data._utils' public-by-habit modules (collate,
pin_memory, worker), which libraries import by path. collate.py holds collation (the
DataLoader's default collate_fn); worker's names are dataloader.py's."""
from . import collate, pin_memory, worker  # noqa: F401
