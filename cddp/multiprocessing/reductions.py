"""cddp.multiprocessing.reductions — torch.multiprocessing.reductions, file_descriptor
strategy: a tensor in shared memory (Tensor.share_memory_, Module.share_memory) crosses a
multiprocessing boundary as a duplicate of its memfd, so the receiving process maps the very
same pages (Hogwild training, a Queue of shared buffers).

Registered with multiprocessing's ForkingPickler (what Queue, Pipe and spawn/forkserver
Process arguments use) when cddp.multiprocessing is imported or a tensor is first shared.
Unlike torch, a tensor that is NOT in shared memory is still sent by value (copied): moving
every tensor that crosses a Queue into shared memory (torch's rule) would change what
DataLoader workers cost; call share_memory_() to share. Plain pickle.dumps is unaffected.
"""
import os
from multiprocessing.reduction import DupFd, ForkingPickler

from .. import _C

__all__ = ["init_reductions", "reduce_tensor", "rebuild_shared_tensor"]

_registered = False


def rebuild_shared_tensor(df, nbytes, dtype, shape, strides, offset, requires_grad, cls,
                          state):
    """The receiving side: map the memfd `df` carries and view it as the sent tensor."""
    fd = df.detach()
    try:
        t = _C._from_shared_fd(fd, nbytes, dtype, shape, strides, offset)
    except BaseException:
        os.close(fd)
        raise
    if cls is not _C.Tensor:
        t = _C.Tensor._make_subclass(cls, t, requires_grad)
    elif requires_grad:
        t.requires_grad_(True)
    if state:
        t.__dict__.update(state)
    return t


def reduce_tensor(t):
    """ForkingPickler's reducer for cddp tensors: shared ones by file descriptor, others by
    value (Tensor.__reduce_ex__)."""
    shared = _C._shared_fd(t)
    if shared is None:
        return t.__reduce_ex__(4)
    if t.requires_grad and not t.is_leaf:
        raise RuntimeError("Cowardly refusing to serialize non-leaf tensor which requires_grad, "
                           "since autograd does not support crossing process boundaries.  If "
                           "you just want to transfer the data, call detach() on the tensor "
                           "before serializing (e.g., putting it on the queue).")
    fd, nbytes = shared
    state = t.__dict__ if type(t) is not _C.Tensor and t.__dict__ else None
    return (rebuild_shared_tensor,
            (DupFd(fd), nbytes, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset(),
             t.requires_grad, type(t), state))


def init_reductions():
    """Register reduce_tensor for cddp.Tensor and its nn subclasses (once)."""
    global _registered
    if _registered:
        return
    from ..nn import parameter
    classes = {_C.Tensor, parameter.Parameter}
    classes.update(c for c in vars(parameter).values()
                   if isinstance(c, type) and issubclass(c, _C.Tensor))
    for cls in classes:
        ForkingPickler.register(cls, reduce_tensor)
    _registered = True
