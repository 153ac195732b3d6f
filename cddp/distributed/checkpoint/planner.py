"""cddp.distributed.checkpoint.planner — torch's planning vocabulary: the item and plan records
(WriteItem, ReadItem, SavePlan, LoadPlan) and the SavePlanner / LoadPlanner interfaces.

cddp's save and load plan a checkpoint themselves (every tensor whole, written once by a rank
holding it) and take DefaultSavePlanner / DefaultLoadPlanner as option holders only; these
names exist so code written against torch's interfaces imports, subclasses and type-checks.
A planner of another class handed to save / load is refused by name (default_planner.py)."""
import abc
import enum
from dataclasses import dataclass
from typing import Any, List, Optional

from .metadata import MetadataIndex

__all__ = ["WriteItemType", "LoadItemType", "WriteItem", "ReadItem", "SavePlan", "LoadPlan",
           "SavePlanner", "LoadPlanner"]


class WriteItemType(enum.Enum):
    TENSOR = enum.auto()
    SHARD = enum.auto()
    BYTE_IO = enum.auto()


class LoadItemType(enum.Enum):
    TENSOR = enum.auto()
    BYTE_IO = enum.auto()


@dataclass(frozen=True)
class WriteItem:
    index: MetadataIndex
    type: WriteItemType
    bytes_io_data: Any = None
    tensor_data: Any = None


@dataclass(frozen=True)
class ReadItem:
    type: LoadItemType
    dest_index: MetadataIndex
    dest_offsets: tuple
    storage_index: MetadataIndex
    storage_offsets: tuple
    lengths: tuple


@dataclass(frozen=True)
class SavePlan:
    items: List[WriteItem]
    storage_data: Any = None
    planner_data: Any = None
    usable: bool = True


@dataclass
class LoadPlan:
    items: List[ReadItem]
    storage_data: Any = None
    planner_data: Any = None


class SavePlanner(abc.ABC):
    """torch's save-planning interface (see the module docstring)."""

    @abc.abstractmethod
    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        ...

    @abc.abstractmethod
    def create_local_plan(self) -> SavePlan:
        ...

    @abc.abstractmethod
    def create_global_plan(self, all_plans):
        ...

    @abc.abstractmethod
    def finish_plan(self, new_plan: SavePlan) -> SavePlan:
        ...

    @abc.abstractmethod
    def resolve_data(self, write_item: WriteItem):
        ...


class LoadPlanner(abc.ABC):
    """torch's load-planning interface (see the module docstring)."""

    @abc.abstractmethod
    def set_up_planner(self, state_dict, metadata: Optional[Any] = None,
                       is_coordinator=False):
        ...

    @abc.abstractmethod
    def create_local_plan(self) -> LoadPlan:
        ...

    @abc.abstractmethod
    def create_global_plan(self, global_plan):
        ...

    @abc.abstractmethod
    def finish_plan(self, central_plan: LoadPlan) -> LoadPlan:
        ...

    @abc.abstractmethod
    def load_bytes(self, read_item: ReadItem, value) -> None:
        ...

    @abc.abstractmethod
    def resolve_tensor(self, read_item: ReadItem):
        ...

    @abc.abstractmethod
    def commit_tensor(self, read_item: ReadItem, tensor) -> None:
        ...
