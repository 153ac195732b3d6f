"""cddp.Size — torch.Size: a tuple of ints that prints as `cddp.Size([2, 3])`."""


import operator


class Size(tuple):
    """Built from ints or objects with __index__ (0-d integer tensors); anything else is
    torch's TypeError. Concatenation and repetition stay Sizes, as torch's."""
    __slots__ = ()

    def __new__(cls, sizes=()):
        items = []
        for i, s in enumerate(sizes):
            try:
                items.append(operator.index(s))
            except TypeError:
                raise TypeError(f"torch.Size() takes an iterable of 'int' (item {i} is "
                                f"'{type(s).__name__}')") from None
        return tuple.__new__(cls, items)

    def __repr__(self):
        return f"cddp.Size({list(self)!r})"

    __str__ = __repr__

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, key):
        r = tuple.__getitem__(self, key)
        return Size(r) if isinstance(key, slice) else r

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple(self) + tuple(other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple(other) + tuple(self))

    def __mul__(self, n):
        return Size(tuple(self) * n) if isinstance(n, int) else NotImplemented

    __rmul__ = __mul__

    def __reduce__(self):
        return (Size, (tuple(self),))
