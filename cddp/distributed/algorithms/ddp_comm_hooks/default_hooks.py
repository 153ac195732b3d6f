"""Built-in DDP comm hooks (torch.distributed.algorithms.ddp_comm_hooks.default_hooks).

allreduce_hook: divide the bucket by the group size, all_reduce it (what DDP does without a
hook). fp16_compress_hook: round the bucket to float16 before communication and back after;
cddp tensors have no float16 dtype, so the float16 payload travels as int32 words through
all_gather and is summed in float32 on arrival (for 2 ranks the same bytes on the wire as an
fp16 all_reduce; the sum is at least as precise as torch's fp16 sum).
"""
import numpy as np

from .... import _C
from ....autograd.grad_mode import no_grad


def _dist():
    from .... import distributed
    return distributed


def _group(process_group):
    dist = _dist()
    return process_group if process_group is not None else dist.group.WORLD


def allreduce_hook(process_group, bucket):
    dist = _dist()
    group = _group(process_group)
    tensor = bucket.buffer()
    tensor.div_(dist.get_world_size(group))
    work = dist.all_reduce(tensor, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def fp16_compress_hook(process_group, bucket):
    dist = _dist()
    group = _group(process_group)
    world = dist.get_world_size(group)
    buf = bucket.buffer()
    half = (buf.detach().numpy() / world).astype(np.float16)
    if half.size % 2:
        half = np.concatenate([half, np.zeros(1, np.float16)])
    words = _C.from_numpy(half.view(np.int32).copy())
    gathered = _C.empty(world * words.numel(), dtype=_C.int32)
    work = dist.all_gather_into_tensor(gathered, words, group=group, async_op=True)

    def finish(fut):
        fut.wait()
        parts = gathered.numpy().view(np.float16).reshape(world, -1)[:, :buf.numel()]
        total = parts.astype(np.float32).sum(axis=0)
        with no_grad():
            buf.copy_(_C.from_numpy(total.astype(buf.detach().numpy().dtype)))
        return buf
    return work.get_future().then(finish)
