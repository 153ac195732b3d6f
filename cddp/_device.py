"""cddp.device — torch.device: ("cpu" | "cuda" | "meta", index); `with cddp.device(d):` sets
the default device for the factory calls inside it and restores the previous one after, as
torch's (through set_default_device, so a CUDA device meets the device policy there: cddp's
factories make CPU tensors; "meta" makes tensors without values)."""

# the devices of the `with device(...)` blocks being run, innermost last, and the default
# devices they replaced (restored on exit)
_context_stack = []
_replaced_defaults = []


def _is_meta(spec):
    """Whether a device spec (str, cddp.device, torch.device, None) names the meta device."""
    return spec is not None and str(spec).split(":")[0] == "meta"


class device:
    __slots__ = ("type", "index")

    def __init__(self, type, index=None):  # noqa: A002 (torch's parameter name)
        if isinstance(type, device):
            type, index = type.type, type.index
        elif isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        elif isinstance(type, str) and ":" in type:
            if index is not None:
                raise RuntimeError(f"type (string) must not include an index because index was passed explicitly: {type}")
            type, idx = type.split(":", 1)
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}:{idx}'")
            index = int(idx)
        if type not in ("cpu", "cuda", "meta"):
            raise RuntimeError(f"Expected one of cpu, cuda, meta device type at start of device "
                               f"string: {type}")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "index", index)

    def __setattr__(self, k, v):
        raise AttributeError("cddp.device is immutable")

    def __repr__(self):
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other):
        # a device never equals a string, as torch's (device("cpu") == "cpu" is False there;
        # accelerate compares against "npu" on every batch)
        if not isinstance(other, device):
            return NotImplemented
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __enter__(self):
        from ._compat import get_default_device, set_default_device
        previous = get_default_device()
        set_default_device(self)
        _context_stack.append(self)
        _replaced_defaults.append(previous)
        return self

    def __exit__(self, *exc):
        from ._compat import set_default_device
        _context_stack.pop()
        set_default_device(_replaced_defaults.pop())
        return False

    def __reduce__(self):
        return (device, (self.type, self.index))
