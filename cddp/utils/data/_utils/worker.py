"""torch.utils.data._utils.worker: get_worker_info and the WorkerInfo it returns (dataloader.py's,
looked up on first use: dataloader.py imports this package for collate while it loads)."""

__all__ = ["get_worker_info", "WorkerInfo"]


def __getattr__(name):
    if name in __all__:
        from .. import dataloader
        return {"WorkerInfo": dataloader._WorkerInfo,
                "get_worker_info": dataloader.get_worker_info}[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
