"""cddp.nn.utils.weight_norm — torch.nn.utils.weight_norm / remove_weight_norm, the hook-based
weight normalization (w = g * v / ||v||) that GAN and TTS scripts (HiFi-GAN, WaveGlow, ...)
still use, plus torch.norm_except_dim and torch._weight_norm, which it and
parametrizations.weight_norm compute with.

As torch: the parameter `<name>` is replaced by `<name>_g` (the norms, shaped to broadcast
along `dim`) and `<name>_v` (the direction), and a forward pre-hook recomputes the plain
attribute `<name>` before every call. dim=None, and dim=-1 (torch's quirk, kept), normalize
over the whole tensor with a 0-dim g.
"""
import warnings

from ..parameter import Parameter

__all__ = ["WeightNorm", "weight_norm", "remove_weight_norm"]


def norm_except_dim(v, pow=2, dim=0):  # noqa: A002  (torch's argument name)
    """The pow-norm of v over every dimension but dim, shaped to broadcast against v
    (torch.norm_except_dim); dim=-1 is the norm of the whole tensor."""
    if dim == -1:
        return v.norm(pow)
    if dim == 0:
        return v.contiguous().view(v.size(0), -1).norm(pow, 1) \
            .view((v.size(0),) + (1,) * (v.dim() - 1))
    if dim == v.dim() - 1:
        return v.contiguous().view(-1, v.size(-1)).norm(pow, 0) \
            .view((1,) * (v.dim() - 1) + (v.size(-1),))
    return norm_except_dim(v.transpose(0, dim), pow, 0).transpose(0, dim)


def _weight_norm(v, g, dim=0):
    """v * (g / ||v||) with the norm taken over every dimension but dim (torch._weight_norm);
    differentiable in v and g by composition."""
    return v * (g / norm_except_dim(v, 2, dim))


class WeightNorm:
    """The forward pre-hook: recomputes module.<name> from <name>_g and <name>_v."""

    def __init__(self, name, dim):
        if dim is None:
            dim = -1
        self.name = name
        self.dim = dim

    def compute_weight(self, module):
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return _weight_norm(v, g, self.dim)

    @staticmethod
    def apply(module, name, dim):
        warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                      "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning,
                      stacklevel=3)
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError("Cannot register two weight_norm hooks on the same "
                                   f"parameter {name}")
        if dim is None:
            dim = -1
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, dim).data))
        module.register_parameter(name + "_v", Parameter(weight.data))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module):
        folded = Parameter(self.compute_weight(module).data)
        delattr(module, self.name)
        for suffix in ("_g", "_v"):
            module._parameters.pop(self.name + suffix)
        setattr(module, self.name, folded)

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module, name="weight", dim=0):
    """Reparametrize module.<name> as <name>_g * <name>_v / ||<name>_v|| (torch's deprecated
    hook-based form; parametrizations.weight_norm is the new one)."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module, name="weight"):
    """Fold <name>_g and <name>_v back into one parameter <name>."""
    return _remove_norm_hook(module, name, WeightNorm, "weight_norm")


def _remove_norm_hook(module, name, cls, what):
    """Remove the forward pre-hook of type cls that reparametrizes <name> (its remove() puts
    the plain parameter back); ValueError naming `what` when there is none."""
    hooks = module._forward_pre_hooks
    key = next((k for k, h in hooks.items() if isinstance(h, cls) and h.name == name), None)
    if key is None:
        raise ValueError(f"{what} of '{name}' not found in {module}")
    hooks[key].remove(module)
    del hooks[key]
    return module
