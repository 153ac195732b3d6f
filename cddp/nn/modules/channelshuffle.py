"""ChannelShuffle (torch.nn.ChannelShuffle) over F.channel_shuffle: (N, g * k, *) with its
channels regrouped as (N, k * g, *)."""
from .. import functional as F
from .module import Module


class ChannelShuffle(Module):
    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):  # noqa: A002
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self):
        return f"groups={self.groups}"
