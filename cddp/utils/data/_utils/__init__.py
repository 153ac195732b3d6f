"""cddp.utils.data._utils — torch.utils.data._utils' public-by-habit modules (collate,
pin_memory, worker), which libraries import by path; the implementations live in
cddp/utils/data/dataloader.py."""
from . import collate, pin_memory, worker  # noqa: F401
