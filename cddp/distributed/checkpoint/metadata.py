"""cddp.distributed.checkpoint.metadata — what save() returns and a reader's read_metadata()
gives: torch's Metadata shape (state_dict_metadata: {fqn: TensorStorageMetadata |
BytesStorageMetadata}) over the .metadata document (_layout.py)."""
from dataclasses import dataclass, field
from typing import Any, Dict, List


__all__ = ["Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
           "MetadataIndex"]


@dataclass(frozen=True)
class MetadataIndex:
    """Where an item lives: its flat key, and (for a chunk of a sharded tensor) its offset."""
    fqn: str
    offset: tuple = None
    index: int = None


@dataclass
class ChunkStorageMetadata:
    offsets: Any
    sizes: Any


@dataclass
class TensorProperties:
    dtype: Any


@dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: Any
    chunks: List[ChunkStorageMetadata]


@dataclass
class BytesStorageMetadata:
    pass


@dataclass
class Metadata:
    state_dict_metadata: Dict[str, Any]
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: Any = None
    version: Any = None
    files: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_document(cls, doc):
        import cddp
        md, files = {}, {}
        for name, it in doc["items"].items():
            files[name] = it["file"]
            if it["kind"] == "tensor":
                size = cddp.Size(it["shape"])
                md[name] = TensorStorageMetadata(TensorProperties(getattr(cddp, it["dtype"])), size,
                                                 [ChunkStorageMetadata(cddp.Size([0] * len(size)), size)])
            else:
                md[name] = BytesStorageMetadata()
        return cls(md, version=str(doc["version"]), files=files)
