"""cddp.distributed.fsdp._unshard — making FSDP units' full parameters visible as the
original nn.Parameters for a while (summon_full_params, state dicts, FSDP.apply).

Contract: unshard_units(units, writeback, with_grads) gathers each unit's full parameters
(collective: every rank passes the same units in the same order), registers the originals
as Parameter views of them, and on exit re-registers the FlatParameters, copying this rank's
slice of the originals back into the shards when writeback is set. A unit already unsharded
by an enclosing context is left to that context. full_precision_buffers(unit) shows buffers
that MixedPrecision.buffer_dtype cast in their original dtype for a while (state dicts save
them that way, as torch).

Differences from torch: the originals are Parameter views of a full-precision gathered copy
even under MixedPrecision (as torch), and every rank gathers (torch's rank0_only lets the
others skip materialising)."""
from contextlib import contextmanager


@contextmanager
def unshard_units(units, writeback, with_grads=False):
    done = []
    try:
        for u in units:
            h = u._handle
            if h is not None and not h.unflattened:
                h.unflatten_as_params(with_grads)
                done.append(u)
            u._summon_depth += 1
        yield
    finally:
        for u in units:
            u._summon_depth -= 1
        for u in reversed(done):
            u._handle.reflatten(writeback)


@contextmanager
def full_precision_buffers(unit):
    swapped = []
    for module, name, dtype in unit._cast_buffers:
        b = module._buffers.get(name)
        if b is not None and b.dtype != dtype:
            swapped.append((module, name, b))
            module._buffers[name] = b.to(dtype)
    try:
        yield
    finally:
        for module, name, b in swapped:
            module._buffers[name] = b
