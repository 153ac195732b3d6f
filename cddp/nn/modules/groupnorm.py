"""Group normalization (torch.nn.GroupNorm; torch.nn.modules.normalization in torch) over the
fused C kernel of csrc/nn/norm/group_norm.c, and LocalResponseNorm (a composite of C ops)."""
from .. import functional as F
from .module import Module
from .normalization import _affine_parameters, _reset_affine


class GroupNorm(Module):
    """Normalizes each of num_groups channel groups of every sample; per-channel affine."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        _affine_parameters(self, affine, num_channels, dtype, bias)
        if device is not None:
            self.to(device)

    def reset_parameters(self):
        _reset_affine(self)

    def forward(self, input):  # noqa: A002
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "{num_groups}, {num_channels}, eps={eps}, affine={affine}, bias={use_bias}".format(
            **self.__dict__, use_bias=self.bias is not None)


class LocalResponseNorm(Module):
    """Normalizes each channel by its neighbours' squared activity (AlexNet's LRN)."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input):  # noqa: A002
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return "{size}, alpha={alpha}, beta={beta}, k={k}".format(**self.__dict__)
