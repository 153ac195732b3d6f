"""cddp.nn.utils.rnn — torch.nn.utils.rnn: PackedSequence, pack_padded_sequence,
pad_packed_sequence, pad_sequence, unpad_sequence, pack_sequence, unpack_sequence,
invert_permutation.

A PackedSequence holds the time steps of a batch of sequences back to back:
data (R, *) with the rows of step t being the first batch_sizes[t] sequences (sorted longest
first), R = sum(batch_sizes). The recurrent layers run on it directly (csrc/nn/rnn/: step t
works on its first batch_sizes[t] rows).

Every conversion here is ONE gather in C (index_select, whose backward scatters the gradient
back): the row indices are built by NumPy from the lengths (O(T*N) integers, vectorised), and
padding comes from one extra row appended to the source. So gradients flow through packing and
padding as in torch.
"""
from collections import namedtuple
from collections.abc import Iterable

import numpy as np

from ... import _C

Tensor = _C.Tensor

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence", "pad_packed_sequence",
           "pad_sequence", "unpad_sequence", "pack_sequence", "unpack_sequence"]

PackedSequence_ = namedtuple("PackedSequence_",
                             ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])


def _index(rows):
    return _C.from_numpy(np.ascontiguousarray(rows, dtype=np.int64))


class PackedSequence(PackedSequence_):
    """torch.nn.utils.rnn.PackedSequence: (data, batch_sizes, sorted_indices,
    unsorted_indices). Build it with pack_padded_sequence / pack_sequence."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:      # PackedSequence((data, batch_sizes), sorted_indices)
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def cuda(self, *args, **kwargs):
        return self.to("cuda", *args, **kwargs)

    def cpu(self, *args, **kwargs):
        return self.to("cpu", *args, **kwargs)

    def double(self):
        return self.to(dtype=_C.float64)

    def float(self):
        return self.to(dtype=_C.float32)

    def long(self):
        return self.to(dtype=_C.int64)

    def int(self):
        return self.to(dtype=_C.int32)

    def pin_memory(self):
        return self

    @property
    def is_cuda(self):
        return self.data.is_cuda

    def is_pinned(self):
        return False


def invert_permutation(permutation):
    """The inverse of a permutation (None for None)."""
    if permutation is None:
        return None
    output = _C.empty_like(permutation)
    output.scatter_(0, permutation, _C.arange(0, permutation.numel()))
    return output


def _lengths_array(lengths):
    if isinstance(lengths, Tensor):
        return np.asarray(lengths.to(_C.int64).numpy(), dtype=np.int64).reshape(-1)
    return np.asarray(lengths, dtype=np.int64).reshape(-1)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):  # noqa: A002
    """Pack a padded batch (T, N, *) (or (N, T, *) with batch_first) of sequences of the
    given lengths. enforce_sorted=False sorts them longest first (stable, as torch)."""
    lens = _lengths_array(lengths)
    sorted_indices = None
    batch_dim = 0 if batch_first else 1
    if not enforce_sorted:
        order = np.argsort(-lens, kind="stable")
        lens = lens[order]
        sorted_indices = _index(order)
        input = input.index_select(batch_dim, sorted_indices)
    if input.dim() < 2:
        raise RuntimeError(f"pack_padded_sequence: expected input of at least 2 dimensions, got "
                           f"{input.dim()}")
    N, T = input.size(batch_dim), input.size(1 - batch_dim)
    if lens.size != N:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{lens.size} (batch_size={N})")
    if N and lens.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element "
                           "in 'lengths' that is <= 0")
    if np.any(lens[1:] > lens[:-1]):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                           "`enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                           "pack_padded_sequence and/or pack_sequence to sidestep this "
                           "requirement if you do not need ONNX exportability.")
    if N and lens[0] > T:
        raise RuntimeError(f"pack_padded_sequence: a length of {lens[0]} exceeds the padded "
                           f"sequence length {T}")
    steps = int(lens[0]) if N else 0
    t = np.arange(steps)[:, None]
    b = np.arange(N)[None, :]
    live = lens[None, :] > t                              # (steps, N): row b runs at step t
    flat = (b * T + t) if batch_first else (t * N + b)    # its row in input viewed (T*N, *)
    rows = input.reshape((N * T,) + tuple(input.shape[2:]))
    data = rows.index_select(0, _index(flat[live]))
    batch_sizes = _index(live.sum(1))
    return PackedSequence(data, batch_sizes, sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Inverse of pack_padded_sequence: (padded (T, N, *) or (N, T, *), lengths int64)."""
    bs = _lengths_array(sequence.batch_sizes)
    max_seq_length = bs.size
    if total_length is not None:
        if total_length < max_seq_length:
            raise ValueError("Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {max_seq_length}")
        max_seq_length = total_length
    data = sequence.data
    N, R = (int(bs[0]) if bs.size else 0), data.size(0)
    off = np.concatenate([[0], np.cumsum(bs)[:-1]]) if bs.size else np.zeros(0, np.int64)
    b = np.arange(N)[None, :]
    bs_t = np.concatenate([bs, np.zeros(max_seq_length - bs.size, np.int64)])[:, None]
    off_t = np.concatenate([off, np.zeros(max_seq_length - bs.size, np.int64)])[:, None]
    src = np.where(b < bs_t, off_t + b, R)                # (T, N): packed row, or the pad row
    if batch_first:
        src = src.T
    rest = tuple(data.shape[1:])
    pad = _C.full((1,) + rest, padding_value, dtype=data.dtype)
    padded = _C.cat([data, pad]).index_select(0, _index(src.reshape(-1)))
    padded = padded.view(src.shape + rest)
    lengths = _index((bs[None, :] > np.arange(N)[:, None]).sum(1))
    if sequence.unsorted_indices is not None:
        batch_dim = 0 if batch_first else 1
        return (padded.index_select(batch_dim, sequence.unsorted_indices),
                lengths[sequence.unsorted_indices])
    return padded, lengths


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack sequences (L_i, *) into (max L, B, *) (or (B, max L, *)), padding with
    padding_value on the right (or left)."""
    if not isinstance(sequences, Iterable):
        raise RuntimeError("pad_sequence: Expected iterable for input sequences, but got arg of "
                           f"type: {type(sequences)}")
    sequences = tuple(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got "
                           f"{padding_side}.")
    first = sequences[0]
    rest = tuple(first.shape[1:])
    for s in sequences[1:]:
        if tuple(s.shape[1:]) != rest or s.dim() != first.dim():
            d = next((i for i, (x, y) in enumerate(zip(s.shape[1:], rest)) if x != y), 0) + 1
            a = s.shape[d] if d < s.dim() else 1
            raise RuntimeError(f"The size of tensor a ({a}) must match the size of tensor b "
                               f"({first.shape[d] if d < first.dim() else 1}) at non-singleton "
                               f"dimension {d}")
    lens = np.array([s.size(0) for s in sequences], dtype=np.int64)
    L, total = int(lens.max()), int(lens.sum())
    start = np.concatenate([[0], np.cumsum(lens)[:-1]])[:, None]
    t = np.arange(L)[None, :]
    shift = (L - lens)[:, None] if padding_side == "left" else 0
    k = t - shift                                        # (B, L): position in sequence b
    src = np.where((k >= 0) & (k < lens[:, None]), start + k, total)
    if not batch_first:
        src = src.T
    parts = [s.to(first.dtype) for s in sequences]
    parts.append(_C.full((1,) + rest, padding_value, dtype=first.dtype))
    out = _C.cat(parts).index_select(0, _index(src.reshape(-1)))
    return out.view(src.shape + rest)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences (L_i, *) of a padded batch (torch's inverse of pad_sequence)."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    lens = _lengths_array(lengths)
    return [padded_sequences[i, :int(n)] for i, n in enumerate(lens)]


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of sequences (L_i, *) (longest first unless enforce_sorted=False)."""
    lengths = [v.size(0) for v in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of sequences a PackedSequence holds, in their original order."""
    padded_sequences, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded_sequences, lengths, batch_first=True)
