"""torch.utils.data._utils.collate: default_collate / default_convert (dataloader.py's)."""
from ..dataloader import default_collate, default_convert  # noqa: F401

__all__ = ["default_collate", "default_convert"]
