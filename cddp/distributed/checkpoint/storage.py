"""cddp.distributed.checkpoint.storage — torch's storage-layer interfaces StorageWriter /
StorageReader and WriteResult. cddp's save and load write and read through FileSystemWriter /
FileSystemReader (registered as implementations of these, so isinstance holds); another
storage class handed to save / load is refused by name (filesystem.resolve)."""
import abc
from dataclasses import dataclass
from typing import Any

from .metadata import MetadataIndex

__all__ = ["WriteResult", "StorageWriter", "StorageReader"]


@dataclass(frozen=True)
class WriteResult:
    index: MetadataIndex
    size_in_bytes: int
    storage_data: Any


class StorageWriter(abc.ABC):
    """torch's storage-writer interface (see the module docstring)."""

    @abc.abstractmethod
    def reset(self, checkpoint_id=None) -> None:
        ...

    @abc.abstractmethod
    def set_up_storage_writer(self, is_coordinator, *args, **kwargs) -> None:
        ...

    @abc.abstractmethod
    def prepare_local_plan(self, plan):
        ...

    @abc.abstractmethod
    def prepare_global_plan(self, plans):
        ...

    @abc.abstractmethod
    def write_data(self, plan, planner):
        ...

    @abc.abstractmethod
    def finish(self, metadata, results) -> None:
        ...

    @classmethod
    @abc.abstractmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        ...

    def storage_meta(self):
        return None


class StorageReader(abc.ABC):
    """torch's storage-reader interface (see the module docstring)."""

    @abc.abstractmethod
    def reset(self, checkpoint_id=None) -> None:
        ...

    @abc.abstractmethod
    def read_metadata(self):
        ...

    @abc.abstractmethod
    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs) -> None:
        ...

    @abc.abstractmethod
    def prepare_local_plan(self, plan):
        ...

    @abc.abstractmethod
    def prepare_global_plan(self, plans):
        ...

    @abc.abstractmethod
    def read_data(self, plan, planner):
        ...

    @classmethod
    @abc.abstractmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        ...
