"""Instance normalization (torch.nn.InstanceNorm1d/2d/3d): F.instance_norm, which runs the
batch norm C kernels over the (1, N*C, *) view. affine and track_running_stats default to
False, as torch's."""
import warnings

from .. import functional as F
from .batchnorm import _NormBase


class _InstanceNorm(_NormBase):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)

    def _check_input_dim(self, input):  # noqa: A002
        raise NotImplementedError

    def _get_no_batch_dim(self):
        raise NotImplementedError

    def _handle_no_batch_input(self, input):  # noqa: A002
        return self._apply_instance_norm(input.unsqueeze(0)).squeeze(0)

    def _apply_instance_norm(self, input):  # noqa: A002
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight,
                               self.bias, self.training or not self.track_running_stats,
                               self.momentum if self.momentum is not None else 0.0, self.eps)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs, assign=False):
        version = local_metadata.get("version", None)
        # checkpoints from before track_running_stats=False dropped the running stats
        if version is None and not self.track_running_stats:
            keys = [prefix + n for n in ("running_mean", "running_var") if prefix + n in state_dict]
            if keys:
                error_msgs.append(
                    "Unexpected running stats buffer(s) {names} for {klass} "
                    "with track_running_stats=False. If state_dict is a "
                    "checkpoint saved before 0.4.0, this may be expected "
                    "because {klass} does not track running stats by default "
                    "since 0.4.0. Please remove these keys from state_dict. If "
                    "the running stats are actually needed, instead set "
                    "track_running_stats=True in {klass} to enable them. See "
                    "the documentation of {klass} for details.".format(
                        names=" and ".join(f'"{k}"' for k in keys),
                        klass=self.__class__.__name__))
                for key in keys:
                    state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs, assign)

    def forward(self, input):  # noqa: A002
        self._check_input_dim(input)
        feature_dim = input.dim() - self._get_no_batch_dim()
        if input.size(feature_dim) != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match "
                                 f"num_features ({self.num_features}), but got: "
                                 f"{input.size(feature_dim)}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. "
                          "You can silence this warning by not passing in num_features, "
                          "which is not used because affine=False", stacklevel=2)
        if input.dim() == self._get_no_batch_dim():
            return self._handle_no_batch_input(input)
        return self._apply_instance_norm(input)


class InstanceNorm1d(_InstanceNorm):
    """Over (N, C, L) or unbatched (C, L) inputs."""

    def _get_no_batch_dim(self):
        return 2

    def _check_input_dim(self, input):  # noqa: A002
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class InstanceNorm2d(_InstanceNorm):
    """Over (N, C, H, W) or unbatched (C, H, W) inputs."""

    def _get_no_batch_dim(self):
        return 3

    def _check_input_dim(self, input):  # noqa: A002
        if input.dim() not in (3, 4):
            raise ValueError(f"expected 3D or 4D input (got {input.dim()}D input)")


class InstanceNorm3d(_InstanceNorm):
    """Over (N, C, D, H, W) or unbatched (C, D, H, W) inputs."""

    def _get_no_batch_dim(self):
        return 4

    def _check_input_dim(self, input):  # noqa: A002
        if input.dim() not in (4, 5):
            raise ValueError(f"expected 4D or 5D input (got {input.dim()}D input)")
