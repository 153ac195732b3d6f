"""cddp.distributed.checkpoint — torch.distributed.checkpoint (DCP) for cddp: one checkpoint
written by all ranks together (save, async_save), read back by any number of ranks (load),
with the get_/set_ state dict helpers of .state_dict for DDP and FSDP models.

    import cddp.distributed.checkpoint as dcp
    dcp.save({"model": model, "optim": optim}, checkpoint_id="ckpt/step100")
    dcp.load({"model": model, "optim": optim}, checkpoint_id="ckpt/step100")

Differences from torch (each told where it applies): the directory holds cddp's format
(JSON .metadata, safetensors data files: no pickle unless an object needs one, read with
weights_only), which torch's DCP does not read; cddp reads both its own and torch's
directories (a torch run resumes under cddp); tensors are whole (no DTensor / ShardedTensor), so FSDP's state dicts are
gathered full and a key held by several ranks must be one replicated value; custom planners
and storage layers are not taken (DefaultSavePlanner / DefaultLoadPlanner options are; the
interfaces StorageWriter / StorageReader / SavePlanner / LoadPlanner and their records exist,
for code that imports or subclasses them). No HuggingFace storage layer.
What cddp adds: a save killed at any point leaves the previous checkpoint whole (data files
are per save, .metadata is committed last and atomically), and a load checks every file
before it writes anything, on every rank.
"""
from . import state_dict, stateful, format_utils  # noqa: F401
from .api import CheckpointException
from .default_planner import DefaultLoadPlanner, DefaultSavePlanner
from .filesystem import FileSystemReader, FileSystemWriter
from .metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,  # noqa: F401
                       MetadataIndex, TensorStorageMetadata)
from .planner import LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner, WriteItem
from .storage import StorageReader, StorageWriter
from .optimizer import load_sharded_optimizer_state_dict
from .state_dict_loader import load, load_state_dict
from .state_dict_saver import AsyncCheckpointerType, async_save, save, save_state_dict
from .stateful import Stateful

__all__ = ["CheckpointException", "DefaultLoadPlanner", "DefaultSavePlanner",
           "FileSystemReader", "FileSystemWriter", "BytesStorageMetadata",
           "ChunkStorageMetadata", "Metadata", "TensorStorageMetadata", "load",
           "load_state_dict", "async_save", "save", "save_state_dict", "AsyncCheckpointerType",
           "Stateful", "load_sharded_optimizer_state_dict", "LoadPlan", "LoadPlanner",
           "ReadItem", "SavePlan", "SavePlanner", "WriteItem", "StorageReader", "StorageWriter"]
