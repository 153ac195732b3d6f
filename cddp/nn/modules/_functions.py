"""SyncBatchNorm's autograd Function (torch.nn.modules._functions.SyncBatchNorm): the per-rank
C primitives of csrc/nn/norm/sync_bn.c around two collectives.

Forward: each rank's (mean, invstd, count) per channel, all-gathered (counts may differ: a rank
with an empty batch sends zeros and is skipped by the merge), merged in C into the global
mean/invstd (which also moves the running stats), then one normalize + affine pass.
Backward: each rank's per-channel sums of dy and dy * (x - mean), all-reduced, then one dx
pass. The weight and bias gradients stay local: DDP averages them as any other gradient.
"""
from ... import _C
from ...autograd import Function


class SyncBatchNorm(Function):
    @staticmethod
    def forward(self, input, weight, bias, running_mean, running_var, eps, momentum,  # noqa: A002
                process_group, world_size):
        from ... import distributed as dist
        input = input.contiguous()
        if weight is not None:
            weight = weight.contiguous()
        size = int(input.numel() // input.size(1))
        if size == 1 and world_size < 2:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")
        num_channels = input.shape[1]
        if input.numel() > 0:
            mean, invstd = _C._batch_norm_stats(input, eps)
            count = _C.full((1,), input.numel() // input.size(1), dtype=mean.dtype)
            combined = _C.cat([mean, invstd, count], 0)         # (2C + 1,)
        else:
            # an empty batch still joins the collective; its zero count drops it from the merge
            combined = _C.zeros(2 * num_channels + 1, dtype=input.dtype)
        gathered = [_C.empty_like(combined) for _ in range(world_size)]
        dist.all_gather(gathered, combined, process_group, async_op=False)
        combined = _C.stack(gathered, 0)                        # (world, 2C + 1)
        mean_all = combined[:, :num_channels]
        invstd_all = combined[:, num_channels:2 * num_channels]
        counts = combined[:, 2 * num_channels]
        if running_mean is not None and counts.dtype != running_mean.dtype:
            counts = counts.to(running_mean.dtype)
        mean, invstd = _C._batch_norm_gather_stats_with_counts(
            input, mean_all, invstd_all, running_mean, running_var, momentum, eps, counts)
        self.save_for_backward(input, weight, mean, invstd, counts.to(_C.int32))
        self.process_group = process_group
        if input.numel() > 0:
            return _C._batch_norm_elemt(input, weight, bias, mean, invstd, eps)
        return _C.empty_like(input)

    @staticmethod
    def backward(self, grad_output):
        from ... import distributed as dist
        grad_output = grad_output.contiguous()
        saved_input, weight, mean, invstd, count_tensor = self.saved_tensors
        grad_input = grad_weight = grad_bias = None
        need_x, need_w, need_b = self.needs_input_grad[:3]
        num_channels = saved_input.shape[1]
        if saved_input.numel() > 0:
            sum_dy, sum_dy_xmu, grad_weight, grad_bias = _C._batch_norm_backward_reduce(
                grad_output, saved_input, mean, invstd, weight, need_x, need_w, need_b)
            if need_x:
                combined = _C.cat([sum_dy, sum_dy_xmu], 0)
                dist.all_reduce(combined, dist.ReduceOp.SUM, self.process_group, async_op=False)
                sum_dy, sum_dy_xmu = combined[:num_channels], combined[num_channels:]
                grad_input = _C._batch_norm_backward_elemt(
                    grad_output, saved_input, mean, invstd, weight, sum_dy, sum_dy_xmu,
                    count_tensor)
            if weight is None or not need_w:
                grad_weight = None
            if weight is None or not need_b:
                grad_bias = None
        elif need_x:
            # an empty batch still joins the all_reduce its peers wait in
            combined = _C.zeros(2 * num_channels, dtype=saved_input.dtype)
            dist.all_reduce(combined, dist.ReduceOp.SUM, self.process_group, async_op=False)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None


class BackwardHookFunction(Function):
    """The identity that brackets a module with backward hooks (torch.nn.modules._functions.
    BackwardHookFunction; utils/hooks.py BackwardHook says how it is used).

    apply(callback, materialize, *tensors) returns the tensors (new aliases; those that do
    not require grad stay out of the graph); in backward, callback(grads) -> the gradients to
    pass on. materialize=False hands the callback None for outputs that got no gradient, as
    torch's node hook sees them; True gives zeros for those (also for a tensor that needs no
    grad, when another one does: torch's hooks see that zero too)."""

    @staticmethod
    def forward(ctx, callback, materialize, *args):
        ctx.mark_non_differentiable(*[arg for arg in args if not arg.requires_grad])
        ctx.set_materialize_grads(materialize)
        ctx.callback = callback
        return args

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(ctx.callback(grads))
