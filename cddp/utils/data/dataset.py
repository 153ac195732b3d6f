"""Datasets (torch.utils.data.dataset): Dataset, IterableDataset, TensorDataset, StackDataset,
Subset, ConcatDataset, ChainDataset, random_split."""
import bisect
import math
import warnings

from typing import Generic, TypeVar

from ... import _C

_T_co = TypeVar("_T_co", covariant=True)


class Dataset(Generic[_T_co]):
    """Map-style dataset: __getitem__(index) and usually __len__. Generic, as torch's
    (Dataset[Tensor] in annotations and base-class lists)."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset[_T_co]):
    """Iterable-style dataset: __iter__ yields samples."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are tuples of the given tensors indexed along their first dimension."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = tensors[0].size(0)
        if any(n != t.size(0) for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)


class StackDataset(Dataset):
    """Datasets side by side: StackDataset(a, b)[i] == (a[i], b[i]); StackDataset(x=a, y=b)[i]
    == {"x": a[i], "y": b[i]}."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("Supported either ``tuple``- (via ``args``) or``dict``- (via "
                             "``kwargs``) like input/output, but both types are given.")
        if not (args or kwargs):
            raise ValueError("At least one dataset should be passed")
        # positional members keep the tuple; keyword members keep the dict (and its order)
        members = args if args else kwargs
        pending = iter(args if args else kwargs.values())
        length = len(next(pending))
        for member in pending:
            if len(member) != length:
                raise ValueError("Size mismatch between datasets")
        self._length = length
        self.datasets = members

    def __getitem__(self, index):
        members = self.datasets
        if not isinstance(members, dict):
            return tuple(member[index] for member in members)
        return {key: member[index] for key, member in members.items()}

    def _column(self, dataset, indices):
        """One dataset's samples for `indices`, batched when it can (__getitems__)."""
        if callable(getattr(dataset, "__getitems__", None)):
            items = dataset.__getitems__(indices)
            if len(items) != len(indices):
                raise ValueError("Nested dataset's output size mismatch."
                                 f" Expected {len(indices)}, got {len(items)}")
            return items
        return [dataset[idx] for idx in indices]

    def __getitems__(self, indices):
        if isinstance(self.datasets, dict):
            columns = {k: self._column(d, indices) for k, d in self.datasets.items()}
            return [{k: col[i] for k, col in columns.items()} for i in range(len(indices))]
        columns = [self._column(d, indices) for d in self.datasets]
        return [tuple(col[i] for col in columns) for i in range(len(indices))]

    def __len__(self):
        return self._length


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[idx] for idx in indices])
        return [self.dataset[self.indices[idx]] for idx in indices]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """Concatenation of map-style datasets."""

    @staticmethod
    def cumsum(sequence):
        r, s = [], 0
        for e in sequence:
            s += len(e)
            r.append(s)
        return r

    def __init__(self, datasets):
        parts = list(datasets)
        if not parts:
            raise AssertionError("datasets should not be an empty iterable")
        if any(isinstance(part, IterableDataset) for part in parts):
            raise AssertionError("ConcatDataset does not support IterableDataset")
        self.datasets = parts
        self.cumulative_sizes = self.cumsum(parts)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        sample_idx = idx if dataset_idx == 0 else idx - self.cumulative_sizes[dataset_idx - 1]
        return self.datasets[dataset_idx][sample_idx]


class ChainDataset(IterableDataset):
    """IterableDatasets one after the other, chained on the fly."""

    def __init__(self, datasets):
        super().__init__()
        self.datasets = datasets

    @staticmethod
    def _checked(part):
        # every member must itself be iterable-style; checked lazily, member by member
        if isinstance(part, IterableDataset):
            return part
        raise AssertionError("ChainDataset only supports IterableDataset")

    def __iter__(self):
        for part in self.datasets:
            yield from self._checked(part)

    def __len__(self):
        return sum(len(self._checked(part)) for part in self.datasets)


def random_split(dataset, lengths, generator=None):
    """Split into non-overlapping Subsets of the given lengths (or fractions), by a random
    permutation drawn from `generator` (torch's randperm, so splits match torch's)."""
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        subset_lengths = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            subset_lengths.append(int(math.floor(len(dataset) * frac)))
        remainder = len(dataset) - sum(subset_lengths)
        for i in range(remainder):
            subset_lengths[i % len(subset_lengths)] += 1
        lengths = subset_lengths
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an "
                              "empty dataset.")
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    if generator is None:
        generator = _C.default_generator
    indices = _C.randperm(sum(lengths), generator=generator).tolist()
    out, offset = [], 0
    for length in lengths:
        out.append(Subset(dataset, indices[offset:offset + length]))
        offset += length
    return out
