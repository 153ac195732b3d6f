"""einops' layers on cddp.nn.Module: Rearrange, Reduce and EinMix, einops.layers.torch's
classes with cddp in place of torch (einops' own mixins parse the patterns; the recipes run
through cddp's einops backend, cddp/_einops.py). How a script reaches them without changing
its `from einops.layers.torch import Rearrange`:
- torch installed: the layer is torch's; a cddp Module given one (Sequential(Rearrange(...)),
  self.proj = EinMix(...), add_module) stores its cddp counterpart instead (convert(): the
  same pattern and lengths; EinMix's weights copied);
- torch absent: `import einops.layers.torch` would fail, so cddp/_einops.py answers it with a
  module holding these classes.
einops is not a dependency: this module is imported only where einops already is."""
from einops.layers import RearrangeMixin, ReduceMixin
from einops.layers._einmix import _EinmixMixin

from . import _C
from .nn.modules.module import Module
from .nn.parameter import Parameter

__all__ = ["Rearrange", "Reduce", "EinMix", "convert", "is_foreign_layer"]


class Rearrange(RearrangeMixin, Module):
    def forward(self, input):  # noqa: A002
        return self._apply_recipe(input)


class Reduce(ReduceMixin, Module):
    def forward(self, input):  # noqa: A002
        return self._apply_recipe(input)


class EinMix(_EinmixMixin, Module):
    def _create_parameters(self, weight_shape, weight_bound, bias_shape, bias_bound):
        self.weight = Parameter(_C.zeros(weight_shape).uniform_(-weight_bound, weight_bound))
        self.bias = (Parameter(_C.zeros(bias_shape).uniform_(-bias_bound, bias_bound))
                     if bias_shape is not None else None)

    def _create_rearrange_layers(self, pre_reshape_pattern, pre_reshape_lengths,
                                 post_reshape_pattern, post_reshape_lengths):
        self.pre_rearrange = (Rearrange(pre_reshape_pattern, **pre_reshape_lengths)
                              if pre_reshape_pattern is not None else None)
        self.post_rearrange = (Rearrange(post_reshape_pattern, **post_reshape_lengths)
                               if post_reshape_pattern is not None else None)

    def forward(self, input):  # noqa: A002
        if self.pre_rearrange is not None:
            input = self.pre_rearrange(input)
        result = _C.einsum(self.einsum_pattern, input, self.weight)
        if self.bias is not None:
            result = result + self.bias
        if self.post_rearrange is not None:
            result = self.post_rearrange(result)
        return result


def is_foreign_layer(obj):
    """An einops.layers.torch layer (a torch module: only its pattern is used here)."""
    cls = type(obj)
    return cls.__module__ == "einops.layers.torch" and cls.__name__ in ("Rearrange", "Reduce",
                                                                         "EinMix")


def _to_cddp(t):
    return _C.tensor(t.detach().cpu().numpy())


def convert(obj):
    """The cddp layer with obj's pattern (and EinMix's weights)."""
    name = type(obj).__name__
    if name == "Rearrange":
        return Rearrange(obj.pattern, **obj.axes_lengths)
    if name == "Reduce":
        return Reduce(obj.pattern, obj.reduction, **obj.axes_lengths)
    new = EinMix(obj.pattern, obj.weight_shape, obj.bias_shape, **obj.axes_lengths)
    new.weight.detach().copy_(_to_cddp(obj.weight))          # .detach(): no graph records it
    if obj.bias is not None:
        new.bias.detach().copy_(_to_cddp(obj.bias))
    new.train(obj.training)
    return new
