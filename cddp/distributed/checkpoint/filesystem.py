"""cddp.distributed.checkpoint.filesystem — FileSystemWriter / FileSystemReader: where a
checkpoint goes (a directory on a filesystem every rank sees, as torch's) and how.

Torch's writer options are accepted. overwrite=False refuses a directory that already holds
a checkpoint; the others change nothing here: each rank writes one file, always fsynced
(sync_files=False included) and renamed into place."""
import os

from . import storage as _storage

__all__ = ["FileSystemWriter", "FileSystemReader"]


class _Directory:
    """A checkpoint directory's path; checkpoint_id resets it (torch's storage API)."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    @property
    def checkpoint_id(self):
        return self.path


class FileSystemWriter(_Directory):
    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1,
                 per_thread_copy_ahead=10_000_000, cache_staged_state_dict=False,
                 overwrite=True, _extensions=None, serialization_format=None):
        super().__init__(path)
        self.overwrite = bool(overwrite)
        if thread_count < 1:
            raise ValueError(f"thread_count must be >= 1, got {thread_count}")

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return isinstance(checkpoint_id, (str, os.PathLike))


class FileSystemReader(_Directory):
    def __init__(self, path, _extension_registry=None):
        super().__init__(path)

    def read_metadata(self):
        from ._layout import read_metadata
        from .metadata import Metadata
        return Metadata.from_document(read_metadata(self.path))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return os.path.isdir(os.fspath(checkpoint_id)) if isinstance(
            checkpoint_id, (str, os.PathLike)) else False


def resolve(checkpoint_id, storage, cls, what):
    """The directory a save/load uses: checkpoint_id, else the storage's path (torch's rule:
    checkpoint_id resets the storage)."""
    if storage is None:
        if checkpoint_id is None:
            raise RuntimeError(f"{what}: give checkpoint_id (a directory) or a "
                               f"storage_{'writer' if cls is FileSystemWriter else 'reader'}")
        storage = cls(checkpoint_id)
    elif not isinstance(storage, cls):
        raise TypeError(f"{what}: cddp's checkpoints go through {cls.__name__}; got "
                        f"{type(storage).__name__}")
    else:
        storage.reset(checkpoint_id)
    return storage


# cddp's implementations of torch's storage interfaces (storage.py): isinstance holds
_storage.StorageWriter.register(FileSystemWriter)
_storage.StorageReader.register(FileSystemReader)
