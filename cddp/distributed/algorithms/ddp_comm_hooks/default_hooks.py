"""Built-in DDP comm hooks (torch.distributed.algorithms.ddp_comm_hooks.default_hooks).

allreduce_hook: divide the bucket by the group size, all_reduce it (what DDP does without a
hook). fp16_compress_hook / bf16_compress_hook: the bucket cast to float16 / bfloat16 and
divided by the group size, all_reduced in that dtype (each step rounded, as gloo's float16
sum), copied back into the bucket — torch's hooks, op for op.
"""
from .... import _C


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


def _compress_hook(dtype, process_group, bucket):
    dist = _dist()
    group = _group(process_group)
    buf = bucket.buffer()
    compressed = buf.to(dtype).div_(dist.get_world_size(group))
    work = dist.all_reduce(compressed, group=group, async_op=True)

    def decompress(fut):
        buf.copy_(fut.value()[0])         # in place: no second full-size buffer
        return buf
    return work.get_future().then(decompress)


def fp16_compress_hook(process_group, bucket):
    return _compress_hook(_C.float16, process_group, bucket)


def bf16_compress_hook(process_group, bucket):
    return _compress_hook(_C.bfloat16, process_group, bucket)
