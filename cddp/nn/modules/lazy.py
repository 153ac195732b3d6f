"""LazyModuleMixin (torch.nn.modules.lazy): modules whose parameter shapes come from the first
input. A forward pre-hook calls initialize_parameters(*args) once, then the module becomes its
cls_to_become (LazyLinear -> Linear), as torch's. Loading a state dict into a module that has
not run yet materializes each uninitialized parameter (and buffer) to the saved shape first.

Also here: UninitializedBuffer (torch.nn.UninitializedBuffer, the lazy norms' running stats)
and the lazy convolutions and norms (torch.nn.LazyConv1d/2d/3d, LazyConvTranspose1d/2d/3d,
LazyBatchNorm1d/2d/3d, LazyInstanceNorm1d/2d/3d): each is its regular class with the shaped
tensors replaced by uninitialized ones until the first input fixes in_channels /
num_features; then they are materialized and drawn by the regular reset_parameters, so with
the same seed they equal the regular module's."""
from ... import _C
from ...autograd.grad_mode import no_grad
from ..parameter import UninitializedParameter, is_lazy as _is_lazy_param

_Tensor = _C.Tensor


class UninitializedBuffer(_Tensor):
    """torch.nn.UninitializedBuffer: a lazy module's buffer before its shape is known.
    materialize(shape) gives it storage of that shape (uninitialized values, as torch.empty)
    and turns it into a plain Tensor in place, so references to it stay valid."""

    cls_to_become = _Tensor

    def __new__(cls, requires_grad=False, device=None, dtype=None, persistent=True):
        data = _C.empty(0, dtype=dtype if dtype is not None else _C.get_default_dtype())
        buf = _Tensor._make_subclass(cls, data, requires_grad)
        buf.persistent = persistent
        return buf

    def __init__(self, requires_grad=False, device=None, dtype=None, persistent=True):
        pass

    def materialize(self, shape, device=None, dtype=None):
        self.data = _C.empty(tuple(shape), dtype=dtype if dtype is not None else self.dtype)
        self.__class__ = self.cls_to_become

    def __repr__(self):
        return "<UninitializedBuffer>"

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, None, self.dtype,
                                        getattr(self, "persistent", True))
        return memo[id(self)]

    def __reduce_ex__(self, proto):
        return (UninitializedBuffer, (self.requires_grad, None, self.dtype,
                                      getattr(self, "persistent", True)))


def is_lazy(t):
    """True for a parameter or buffer a lazy module has not materialized yet."""
    return _is_lazy_param(t) or isinstance(t, UninitializedBuffer)


class LazyModuleMixin:
    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters)

    def has_uninitialized_params(self):
        """True while any parameter or buffer is still uninitialized (torch counts both)."""
        return any(is_lazy(t) for t in (*self._parameters.values(), *self._buffers.values())
                   if t is not None)

    def initialize_parameters(self, *args, **kwargs):
        raise NotImplementedError(f"initialize_parameters is not implemented for "
                                  f"{self.__class__.__name__}")

    def _infer_parameters(self, module, args):
        module.initialize_parameters(*args)
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        module._initialize_hook.remove()
        del module._initialize_hook
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # uninitialized parameters are saved as themselves (torch's state_dict shows
        # <UninitializedParameter>), the rest as usual
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if (is_lazy(param) or keep_vars) \
                    else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if (is_lazy(buf) or keep_vars) \
                    else buf.detach()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs, assign=False):
        for name, param in (*self._parameters.items(), *self._buffers.items()):
            key = prefix + name
            if param is not None and is_lazy(param) and key in state_dict \
                    and not is_lazy(state_dict[key]):
                with no_grad():
                    param.materialize(state_dict[key].shape)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs, assign)

    def _apply(self, fn, recurse=True):
        # Module._apply stores fn(buffer), a plain tensor: an uninitialized buffer takes the
        # new data (dtype) instead and stays itself, as the uninitialized parameters do
        lazy = {k: b for k, b in self._buffers.items() if isinstance(b, UninitializedBuffer)}
        super()._apply(fn, recurse)
        for k, b in lazy.items():
            new = self._buffers[k]
            if new is not b:
                b.data = new
                self._buffers[k] = b
        return self


# ---- lazy convolutions ------------------------------------------------------------------------

from .conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,  # noqa: E402
                   ConvTranspose3d)
from .batchnorm import _BatchNorm, _NormBase, BatchNorm1d, BatchNorm2d, BatchNorm3d  # noqa: E402
from .instancenorm import (_InstanceNorm, InstanceNorm1d, InstanceNorm2d,  # noqa: E402
                           InstanceNorm3d)


class _LazyConvXdMixin(LazyModuleMixin):
    """in_channels from the first input's channel dim (dim 1 batched, 0 unbatched)."""

    def reset_parameters(self):
        # the constructor's call (in_channels still 0) draws nothing; the first forward's does
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def _get_in_channels(self, input):  # noqa: A002
        nd = self._nd
        if input.dim() not in (nd + 1, nd + 2):
            raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to "
                               f"{self.__class__.__name__}, but got input of size: "
                               f"{input.shape}")
        return input.shape[1] if input.dim() == nd + 2 else input.shape[0]

    def initialize_parameters(self, input, *args, **kwargs):  # noqa: A002
        if not self.has_uninitialized_params():
            return
        self.in_channels = self._get_in_channels(input)
        if self.in_channels % self.groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if self.transposed:
            shape = (self.in_channels, self.out_channels // self.groups)
        else:
            shape = (self.out_channels, self.in_channels // self.groups)
        with no_grad():
            self.weight.materialize(shape + tuple(self.kernel_size))
            if self.bias is not None:
                self.bias.materialize((self.out_channels,))
            self.reset_parameters()


def _lazy_conv_init(self, out_channels, bias, dtype):
    """The constructor's tail: the (0, 0, *k) tensors the regular __init__ made are replaced
    by uninitialized ones (bias=False was passed so no bias tensor was made for nothing)."""
    self.weight = UninitializedParameter(dtype=dtype)
    self.out_channels = out_channels
    if bias:
        self.bias = UninitializedParameter(dtype=dtype)


class _LazyConvForward(_LazyConvXdMixin):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups, False,
                         padding_mode, None, dtype)
        _lazy_conv_init(self, out_channels, bias, dtype)


class _LazyConvTranspose(_LazyConvXdMixin):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 groups=1, bias=True, dilation=1, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(0, 0, kernel_size, stride, padding, output_padding, groups, False,
                         dilation, padding_mode, None, dtype)
        _lazy_conv_init(self, out_channels, bias, dtype)


class LazyConv1d(_LazyConvForward, Conv1d):
    """Conv1d whose in_channels is the first input's channel count."""
    cls_to_become = Conv1d


class LazyConv2d(_LazyConvForward, Conv2d):
    """Conv2d whose in_channels is the first input's channel count."""
    cls_to_become = Conv2d


class LazyConv3d(_LazyConvForward, Conv3d):
    """Conv3d whose in_channels is the first input's channel count."""
    cls_to_become = Conv3d


class LazyConvTranspose1d(_LazyConvTranspose, ConvTranspose1d):
    """ConvTranspose1d whose in_channels is the first input's channel count."""
    cls_to_become = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose, ConvTranspose2d):
    """ConvTranspose2d whose in_channels is the first input's channel count."""
    cls_to_become = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose, ConvTranspose3d):
    """ConvTranspose3d whose in_channels is the first input's channel count."""
    cls_to_become = ConvTranspose3d


# ---- lazy batch / instance norm ---------------------------------------------------------------

class _LazyNormBase(LazyModuleMixin, _NormBase):
    """num_features from the first input's dim 1 (torch's rule, for unbatched instance-norm
    input too). affine / track_running_stats give uninitialized weight, bias and running
    stats; num_batches_tracked is an ordinary int64 zero from the start."""

    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None, *, bias=True):
        # affine, bias and tracking off here: no tensors are made only to be replaced
        super().__init__(0, eps, momentum, False, False, None, dtype, bias=False)
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = UninitializedParameter(dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(dtype=dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(dtype=dtype)
            self.running_var = UninitializedBuffer(dtype=dtype)
            self.num_batches_tracked = _C.tensor(0, dtype=_C.int64)

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input):  # noqa: A002
        if not self.has_uninitialized_params():
            return
        self.num_features = input.shape[1]
        with no_grad():
            if self.affine:
                self.weight.materialize((self.num_features,))
                if self.bias is not None:
                    self.bias.materialize((self.num_features,))
            if self.track_running_stats:
                self.running_mean.materialize((self.num_features,))
                self.running_var.materialize((self.num_features,))
            self.reset_parameters()


class LazyBatchNorm1d(_LazyNormBase, _BatchNorm):
    """BatchNorm1d whose num_features is the first input's dim 1."""
    cls_to_become = BatchNorm1d
    _check_input_dim = BatchNorm1d._check_input_dim


class LazyBatchNorm2d(_LazyNormBase, _BatchNorm):
    """BatchNorm2d whose num_features is the first input's dim 1."""
    cls_to_become = BatchNorm2d
    _check_input_dim = BatchNorm2d._check_input_dim


class LazyBatchNorm3d(_LazyNormBase, _BatchNorm):
    """BatchNorm3d whose num_features is the first input's dim 1."""
    cls_to_become = BatchNorm3d
    _check_input_dim = BatchNorm3d._check_input_dim


class LazyInstanceNorm1d(_LazyNormBase, _InstanceNorm):
    """InstanceNorm1d whose num_features is the first input's dim 1; affine and
    track_running_stats default to True here, as torch's lazy form."""
    cls_to_become = InstanceNorm1d
    _check_input_dim = InstanceNorm1d._check_input_dim
    _get_no_batch_dim = InstanceNorm1d._get_no_batch_dim


class LazyInstanceNorm2d(_LazyNormBase, _InstanceNorm):
    """InstanceNorm2d whose num_features is the first input's dim 1."""
    cls_to_become = InstanceNorm2d
    _check_input_dim = InstanceNorm2d._check_input_dim
    _get_no_batch_dim = InstanceNorm2d._get_no_batch_dim


class LazyInstanceNorm3d(_LazyNormBase, _InstanceNorm):
    """InstanceNorm3d whose num_features is the first input's dim 1."""
    cls_to_become = InstanceNorm3d
    _check_input_dim = InstanceNorm3d._check_input_dim
    _get_no_batch_dim = InstanceNorm3d._get_no_batch_dim
