"""Batch normalization (torch.nn.BatchNorm1d/2d/3d, SyncBatchNorm) over the fused C kernels of
csrc/nn/norm/. Parameters, buffers, state-dict keys (weight, bias, running_mean, running_var,
num_batches_tracked as int64) and the momentum rules are torch's."""
from ... import _C
from ...autograd.grad_mode import no_grad
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module


class _NormBase(Module):
    """Common base of _InstanceNorm and _BatchNorm."""

    _version = 2

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        dtype = dtype if dtype is not None else _C.get_default_dtype()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if self.affine:
            self.weight = Parameter(_C.empty(num_features, dtype=dtype))
            if bias:
                self.bias = Parameter(_C.empty(num_features, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            self.register_buffer("running_mean", _C.zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", _C.ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", _C.tensor(0, dtype=_C.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, input):  # noqa: A002
        raise NotImplementedError

    def extra_repr(self):
        return ("{num_features}, eps={eps}, momentum={momentum}, affine={affine}, "
                "bias={use_bias}, track_running_stats={track_running_stats}".format(
                    **self.__dict__, use_bias=self.bias is not None))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs, assign=False):
        version = local_metadata.get("version", None)
        if (version is None or version < 2) and self.track_running_stats:
            # version 2 added num_batches_tracked: older checkpoints load it as 0
            key = prefix + "num_batches_tracked"
            if key not in state_dict:
                state_dict[key] = (self.num_batches_tracked if self.num_batches_tracked is not None
                                   else _C.tensor(0, dtype=_C.int64))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs, assign)


class _BatchNorm(_NormBase):
    def _factor(self):
        """The running stats' update weight: momentum, or 1/n with momentum=None (cumulative
        average); counts the batch in num_batches_tracked (training with tracked stats)."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked.item())
        return factor

    def _stats_args(self):
        """(use batch stats, running_mean, running_var) as torch passes them: buffers are given
        when they are updated (training, tracked) or used (eval, present)."""
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        use = not self.training or self.track_running_stats
        return (bn_training, self.running_mean if use else None,
                self.running_var if use else None)

    def forward(self, input):  # noqa: A002
        self._check_input_dim(input)
        factor = self._factor()
        bn_training, rm, rv = self._stats_args()
        return F.batch_norm(input, rm, rv, self.weight, self.bias, bn_training, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L) inputs."""

    def _check_input_dim(self, input):  # noqa: A002
        if input.dim() != 2 and input.dim() != 3:
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W) inputs."""

    def _check_input_dim(self, input):  # noqa: A002
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")


class BatchNorm3d(_BatchNorm):
    """Over (N, C, D, H, W) inputs."""

    def _check_input_dim(self, input):  # noqa: A002
        if input.dim() != 5:
            raise ValueError(f"expected 5D input (got {input.dim()}D input)")


class SyncBatchNorm(_BatchNorm):
    """Batch norm whose training statistics span every rank of process_group (default: the
    world): per-rank mean/invstd/count are all-gathered and merged, and the backward
    all-reduces the per-channel sums of dy and dy * (x - mean). Eval mode, or a world of one,
    is plain batch norm."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None, *,
                 bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input):  # noqa: A002
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _check_non_zero_input_channels(self, input):  # noqa: A002
        if input.size(1) == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")

    def forward(self, input):  # noqa: A002
        from ... import distributed as dist
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        factor = self._factor()
        bn_training, rm, rv = self._stats_args()
        # eval mode never syncs; nor does a world of one
        need_sync = bn_training and self.training and dist.is_available() and \
            dist.is_initialized()
        if need_sync:
            process_group = self.process_group or dist.group.WORLD
            world_size = dist.get_world_size(process_group)
            need_sync = world_size > 1
        if not need_sync:
            return F.batch_norm(input, rm, rv, self.weight, self.bias, bn_training, factor,
                                self.eps)
        from ._functions import SyncBatchNorm as sync_batch_norm
        # float16 / bfloat16 (autocast's conv outputs, bf16 models): the float32 kernels on
        # float32 copies, the result rounded once to the input's dtype, as F.batch_norm does
        x, w, b = F._f32(input), F._f32(self.weight), F._f32(self.bias)
        rm32, rv32 = F._stats_f32(rm), F._stats_f32(rv)
        y = sync_batch_norm.apply(x, w, b, rm32, rv32, self.eps, factor, process_group,
                                  world_size)
        F._stats_back(rm, rm32)
        F._stats_back(rv, rv32)
        return y if x is input else y.to(input.dtype)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """Every BatchNorm*d in module replaced by a SyncBatchNorm sharing its parameters and
        buffers (a BatchNorm module itself is returned converted)."""
        module_output = module
        if isinstance(module, _BatchNorm):
            module_output = SyncBatchNorm(module.num_features, module.eps, module.momentum,
                                          module.affine, module.track_running_stats,
                                          process_group, bias=module.bias is not None)
            if module.affine:
                with no_grad():
                    module_output.weight = module.weight
                    module_output.bias = module.bias
            module_output.running_mean = module.running_mean
            module_output.running_var = module.running_var
            module_output.num_batches_tracked = module.num_batches_tracked
            module_output.training = module.training
            if hasattr(module, "qconfig"):
                module_output.qconfig = module.qconfig
        for name, child in module.named_children():
            module_output.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        del module
        return module_output
