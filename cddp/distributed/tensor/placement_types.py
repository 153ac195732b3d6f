"""cddp.distributed.tensor.placement_types — torch's placements: how a DTensor's global value
is laid out over one dimension of its DeviceMesh.

    Shard(dim)          each rank of the mesh dimension holds one chunk of tensor dim `dim`
                        (torch.chunk layout: ceil(n / W) per rank, trailing ranks fewer or none)
    Replicate()         each rank holds the whole value
    Partial(reduce_op)  each rank holds a term; the value is their sum (or avg / max / min)

Contract: immutable values with torch's ==, hash, repr ("Shard(dim=0)", "Replicate()",
"Partial(sum)") and str ("S(0)", "R", "P(sum)"), and is_shard / is_replicate / is_partial.

Differences from torch: no _StridedShard / MaskPartial; Partial's reduce_op is a string as
torch's ("sum", "avg", "max", "min").
"""

__all__ = ["Placement", "Shard", "Replicate", "Partial"]


class Placement:
    """Base of the placements (torch.distributed.tensor.Placement)."""
    __slots__ = ()

    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return False

    def is_partial(self, reduce_op=None):
        return False


class Shard(Placement):
    """Shard(dim): the tensor is chunked along `dim` over the mesh dimension."""
    __slots__ = ("dim",)

    def __init__(self, dim=0):
        if not isinstance(dim, int):
            raise TypeError(f"Shard(dim): dim must be an int, got {type(dim).__name__}")
        object.__setattr__(self, "dim", dim)

    def __setattr__(self, name, value):
        raise AttributeError("Shard is immutable (a frozen dataclass in torch)")

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("Shard", self.dim))

    def __repr__(self):
        return f"Shard(dim={self.dim})"

    def __str__(self):
        return f"S({self.dim})"


class Replicate(Placement):
    """Replicate(): every rank of the mesh dimension holds the whole tensor."""
    __slots__ = ()

    def is_replicate(self):
        return True

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("Replicate")

    def __repr__(self):
        return "Replicate()"

    def __str__(self):
        return "R"


_REDUCE_OPS = ("sum", "avg", "max", "min")


class Partial(Placement):
    """Partial(reduce_op="sum"): the value is the reduction of every rank's local tensor."""
    __slots__ = ("reduce_op",)

    def __init__(self, reduce_op="sum"):
        if reduce_op not in _REDUCE_OPS:
            raise ValueError(f"Partial: reduce_op must be one of {_REDUCE_OPS}, got "
                             f"{reduce_op!r}")
        object.__setattr__(self, "reduce_op", reduce_op)

    def __setattr__(self, name, value):
        raise AttributeError("Partial is immutable (a frozen dataclass in torch)")

    def is_partial(self, reduce_op=None):
        return reduce_op is None or reduce_op == self.reduce_op

    def __eq__(self, other):
        return isinstance(other, Partial) and other.reduce_op == self.reduce_op

    def __hash__(self):
        return hash(("Partial", self.reduce_op))

    def __repr__(self):
        return f"Partial({self.reduce_op})"

    def __str__(self):
        return f"P({self.reduce_op})"
