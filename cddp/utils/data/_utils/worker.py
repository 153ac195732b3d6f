"""torch.utils.data._utils.worker: get_worker_info and the WorkerInfo it returns."""
from ..dataloader import _WorkerInfo as WorkerInfo, get_worker_info  # noqa: F401

__all__ = ["get_worker_info", "WorkerInfo"]
