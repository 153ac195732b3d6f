"""cddp.nn.utils.fusion — torch.nn.utils.fuse_conv_bn_eval / fuse_conv_bn_weights /
fuse_linear_bn_eval / fuse_linear_bn_weights: fold an eval-mode BatchNorm's affine map into
the preceding convolution's or linear layer's weight and bias (torch's formulas, computed
in the weights' dtype)."""
import copy

from ... import _C
from ..parameter import Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights"]


def fuse_conv_bn_eval(conv, bn, transpose=False):
    """A copy of conv whose output equals bn(conv(x)) in eval mode."""
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    result = copy.deepcopy(conv)
    stats = (bn.running_mean, bn.running_var)
    if any(stat is None for stat in stats):
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    result.weight, result.bias = fuse_conv_bn_weights(
        result.weight, result.bias, *stats, bn.eps, bn.weight, bn.bias, transpose)
    return result


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose=False):
    """(weight, bias) Parameters of the fused convolution; conv_b, bn_w, bn_b may be None."""
    conv_weight_dtype = conv_w.dtype
    conv_bias_dtype = conv_b.dtype if conv_b is not None else conv_weight_dtype
    if conv_b is None:
        conv_b = _C.zeros_like(bn_rm)
    if bn_w is None:
        bn_w = _C.ones_like(bn_rm)
    if bn_b is None:
        bn_b = _C.zeros_like(bn_rm)
    bn_var_rsqrt = _C.rsqrt(bn_rv + bn_eps)
    # output channels are dim 0 of a convolution's weight, dim 1 of a transposed one's
    if transpose:
        shape = [1, -1] + [1] * (len(conv_w.shape) - 2)
    else:
        shape = [-1, 1] + [1] * (len(conv_w.shape) - 2)
    fused_conv_w = (conv_w * (bn_w * bn_var_rsqrt).reshape(shape)).to(conv_weight_dtype)
    fused_conv_b = ((conv_b - bn_rm) * bn_var_rsqrt * bn_w + bn_b).to(conv_bias_dtype)
    return (Parameter(fused_conv_w.detach(), conv_w.requires_grad),
            Parameter(fused_conv_b.detach(), conv_b.requires_grad))


def fuse_linear_bn_eval(linear, bn):
    """A copy of linear whose output equals bn(linear(x)) in eval mode."""
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused_linear = copy.deepcopy(linear)
    # bn's features are linear's outputs, or one feature broadcast over them
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError(
            "To fuse, linear.out_features == bn.num_features or bn.num_features == 1, "
            f"got linear.out_features={linear.out_features} and "
            f"bn.num_features={bn.num_features}")
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused_linear.weight, fused_linear.bias = fuse_linear_bn_weights(
        fused_linear.weight, fused_linear.bias, bn.running_mean, bn.running_var, bn.eps,
        bn.weight, bn.bias)
    return fused_linear


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """(weight, bias) Parameters of the fused linear layer; linear_b may be None."""
    linear_weight_dtype = linear_w.dtype
    linear_bias_dtype = linear_b.dtype if linear_b is not None else linear_weight_dtype
    if linear_b is None:
        linear_b = _C.zeros_like(bn_rm)
    bn_scale = bn_w * _C.rsqrt(bn_rv + bn_eps)
    fused_w = linear_w * bn_scale.unsqueeze(-1).to(linear_weight_dtype)
    fused_b = ((linear_b - bn_rm) * bn_scale + bn_b).to(linear_bias_dtype)
    return (Parameter(fused_w.detach(), linear_w.requires_grad),
            Parameter(fused_b.detach(), linear_b.requires_grad))
