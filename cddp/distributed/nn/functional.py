"""cddp.distributed.nn.functional — torch.distributed.nn.functional: collectives that autograd
differentiates, for losses that look across ranks (contrastive learning gathers every rank's
embeddings with all_gather and back-propagates into the local ones).

Each call returns new tensors (the input is not written) and its backward is the adjoint
collective, as torch's:

    all_gather      -> the gradient of each rank's slot, summed over ranks (reduce_scatter)
    all_reduce(op)  -> all_reduce(op) of the gradient (torch's rule, for SUM the exact adjoint)
    broadcast(src)  -> the gradients summed onto src (reduce); zeros on the other ranks
    reduce(dst)     -> broadcast of dst's gradient
    reduce_scatter  -> all_gather of the gradient
    gather(dst)     -> scatter of dst's gradients; scatter(src) -> gather onto src
    all_to_all[_single] -> all_to_all of the gradients back (splits swapped)

src / dst are global ranks, as in cddp.distributed. Every rank must call the backward too
(it runs collectives), which holds whenever every rank back-propagates through the same loss.
"""
from ... import _C
from ...autograd import Function
from .. import distributed_c10d as dist

__all__ = ["all_gather", "all_reduce", "broadcast", "reduce", "reduce_scatter", "gather",
           "scatter", "all_to_all", "all_to_all_single"]

ReduceOp = dist.ReduceOp


def _world(group):
    return dist.group.WORLD if group is None else group


class _AllGather(Function):
    @staticmethod
    def forward(ctx, group, tensor):
        ctx.group = group
        tensor = tensor.contiguous()
        out = [_C.empty_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, tensor, group=group)
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        grads = [g.contiguous() for g in grads]
        out = _C.empty_like(grads[0])
        dist.reduce_scatter(out, grads, op=ReduceOp.SUM, group=ctx.group)
        return None, out


class _AllReduce(Function):
    @staticmethod
    def forward(ctx, op, group, tensor):
        ctx.op, ctx.group = op, group
        out = tensor.clone().contiguous()
        dist.all_reduce(out, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, None, _AllReduce.apply(ctx.op, ctx.group, grad)


class _Broadcast(Function):
    @staticmethod
    def forward(ctx, src, group, tensor):
        ctx.src, ctx.group = src, group
        out = tensor.clone().contiguous()
        dist.broadcast(out, src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        g = _Reduce.apply(ctx.src, ReduceOp.SUM, ctx.group, grad)
        if dist.get_rank() != ctx.src:
            g = _C.zeros_like(g)
        return None, None, g


class _Reduce(Function):
    @staticmethod
    def forward(ctx, dst, op, group, tensor):
        ctx.dst, ctx.group = dst, group
        out = tensor.clone().contiguous()
        dist.reduce(out, dst, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, None, None, _Broadcast.apply(ctx.dst, ctx.group, grad)


class _ReduceScatter(Function):
    @staticmethod
    def forward(ctx, op, group, output, *inputs):
        ctx.group = group
        out = _C.empty_like(output)
        dist.reduce_scatter(out, [t.contiguous() for t in inputs], op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (None, None, None) + _AllGather.apply(ctx.group, grad)


class _Gather(Function):
    @staticmethod
    def forward(ctx, dst, group, tensor):
        ctx.dst, ctx.group = dst, group
        tensor = tensor.contiguous()
        out = [_C.zeros_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.gather(tensor, out if dist.get_rank() == dst else None, dst, group=group)
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        return None, None, _Scatter.apply(ctx.dst, ctx.group, *grads)


class _Scatter(Function):
    @staticmethod
    def forward(ctx, src, group, *tensors):
        ctx.src, ctx.group = src, group
        if any(t.shape != tensors[0].shape for t in tensors):
            raise ValueError("scatter: every tensor must have the same shape")
        out = _C.zeros_like(tensors[0])
        dist.scatter(out, [t.contiguous() for t in tensors] if dist.get_rank() == src else None,
                     src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (None, None) + _Gather.apply(ctx.src, ctx.group, grad)


class _AllToAll(Function):
    @staticmethod
    def forward(ctx, group, shapes, *tensors):
        ctx.group = group
        ctx.in_shapes = [t.shape for t in tensors]
        out = [_C.empty(s, dtype=tensors[0].dtype) for s in shapes]
        dist.all_to_all(out, [t.contiguous() for t in tensors], group=group)
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + _AllToAll.apply(ctx.group, ctx.in_shapes,
                                              *[g.contiguous() for g in grads])


class _AllToAllSingle(Function):
    @staticmethod
    def forward(ctx, group, out_shape, out_splits, in_splits, tensor):
        ctx.group, ctx.in_shape = group, tensor.shape
        ctx.out_splits, ctx.in_splits = out_splits, in_splits
        out = _C.empty(out_shape, dtype=tensor.dtype)
        dist.all_to_all_single(out, tensor.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (None, None, None, None,
                _AllToAllSingle.apply(ctx.group, ctx.in_shape, ctx.in_splits, ctx.out_splits,
                                      grad.contiguous()))


def all_gather(tensor, group=None):
    """Every rank's tensor, as a tuple in rank order; differentiable."""
    return _AllGather.apply(_world(group), tensor)


def all_reduce(tensor, op=ReduceOp.SUM, group=None):
    return _AllReduce.apply(op, _world(group), tensor)


def broadcast(tensor, src, group=None):
    return _Broadcast.apply(src, _world(group), tensor)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None):
    return _Reduce.apply(dst, op, _world(group), tensor)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None):
    """This rank's slot of the reduction of input_list (output gives its shape and dtype;
    it is not written)."""
    return _ReduceScatter.apply(op, _world(group), output, *input_list)


def gather(tensor, dst=0, group=None):
    """Every rank's tensor on dst (zeros elsewhere), as a tuple."""
    return _Gather.apply(dst, _world(group), tensor)


def scatter(tensors, src=0, group=None):
    return _Scatter.apply(src, _world(group), *tensors)


def all_to_all(output_tensor_list, input_tensor_list, group=None):
    """Tensor i of input goes to rank i; returns the received tensors (shaped like
    output_tensor_list, which is not written)."""
    return _AllToAll.apply(_world(group), [t.shape for t in output_tensor_list],
                           *input_tensor_list)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None,  # noqa: A002
                      group=None):
    return _AllToAllSingle.apply(_world(group), output.shape, output_split_sizes,
                                 input_split_sizes, input)
