"""cddp.nn.utils.spectral_norm — torch.nn.utils.spectral_norm / remove_spectral_norm, the
hook-based spectral normalization (w = w_orig / sigma(w_orig)) of GAN discriminators.

As torch: the parameter `<name>` becomes `<name>_orig`, the power iteration's vectors are the
buffers `<name>_u` (height) and `<name>_v` (width of the weight seen as a matrix with `dim`
first), updated in place by n_power_iterations steps before every forward in training mode
(eval mode uses them as stored); `<name>` is a plain attribute recomputed by a forward
pre-hook. u and v are drawn with normal_ at registration, so under a shared seed they are
torch's.

Not carried over: torch's state-dict version metadata and the migration of version-0
checkpoints (saved before torch 0.4.1, no `_v` buffer) — cddp's state dicts carry no
metadata. Checkpoints of the current layout (`weight_orig`, `weight_u`, `weight_v`) load.
"""
from ... import mv, dot
from ...autograd.grad_mode import no_grad
from .. import functional as F
from ..parameter import Parameter
from .weight_norm import _remove_norm_hook

__all__ = ["SpectralNorm", "spectral_norm", "remove_spectral_norm"]


class SpectralNorm:
    """The forward pre-hook holding the options."""
    _version = 1

    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12):
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but "
                             f"got n_power_iterations={n_power_iterations}")
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight):
        weight_mat = weight
        if self.dim != 0:
            weight_mat = weight_mat.permute(
                self.dim, *[d for d in range(weight_mat.dim()) if d != self.dim])
        return weight_mat.reshape(weight_mat.size(0), -1)

    def _power_iteration(self, matrix, u, v):
        """n_power_iterations steps on the buffers u, v (in place: they carry the iteration
        across calls); returns clones, so that autograd's saved u, v do not change under the
        next update."""
        with no_grad():
            for _ in range(self.n_power_iterations):
                F.normalize(mv(matrix.t(), u), dim=0, eps=self.eps, out=v)
                F.normalize(mv(matrix, v), dim=0, eps=self.eps, out=u)
            return u.clone(), v.clone()

    def compute_weight(self, module, do_power_iteration):
        weight, u, v = (getattr(module, self.name + suffix) for suffix in ("_orig", "_u", "_v"))
        matrix = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            u, v = self._power_iteration(matrix, u, v)
        return weight / dot(u, mv(matrix, v))

    def remove(self, module):
        with no_grad():
            normalized = self.compute_weight(module, do_power_iteration=False)
        for suffix in ("", "_u", "_v", "_orig"):
            delattr(module, self.name + suffix)
        module.register_parameter(self.name, Parameter(normalized.detach()))

    def __call__(self, module, inputs):
        setattr(module, self.name,
                self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(module, name, n_power_iterations, dim, eps):
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError("Cannot register two spectral_norm hooks on the same "
                                   f"parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        with no_grad():
            # random unit starting vectors: u (rows) drawn first, then v (cols), as torch
            u, v = (F.normalize(weight.new_empty(size).normal_(0, 1), dim=0, eps=fn.eps)
                    for size in fn.reshape_weight_to_matrix(weight).size())
        delattr(module, name)
        module.register_parameter(name + "_orig", weight)
        setattr(module, name, weight.data)   # a plain attribute until the first forward
        for suffix, vector in (("_u", u), ("_v", v)):
            module.register_buffer(name + suffix, vector)
        module.register_forward_pre_hook(fn)
        return fn


def _default_dim(module, dim):
    """torch's choice: the output-channel dimension, 1 for transposed convolutions."""
    if dim is not None:
        return dim
    from ..modules.conv import ConvTranspose1d, ConvTranspose2d
    transposed = (ConvTranspose1d, ConvTranspose2d)
    try:
        from ..modules.conv import ConvTranspose3d
        transposed += (ConvTranspose3d,)
    except ImportError:
        pass
    return 1 if isinstance(module, transposed) else 0


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Divide module.<name> by its largest singular value, estimated by power iteration
    before each training forward."""
    SpectralNorm.apply(module, name, n_power_iterations, _default_dim(module, dim), eps)
    return module


def remove_spectral_norm(module, name="weight"):
    """Undo spectral_norm: <name> becomes a parameter holding the last normalized weight."""
    return _remove_norm_hook(module, name, SpectralNorm, "spectral_norm")
