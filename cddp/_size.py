"""cddp.Size — torch.Size: a tuple of ints that prints as `cddp.Size([2, 3])`."""


class Size(tuple):
    __slots__ = ()

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
        return Size(tuple(self) + tuple(other))

    def __reduce__(self):
        return (Size, (tuple(self),))
