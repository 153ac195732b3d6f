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

    def compute_weight(self, module, do_power_iteration):
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    # in place: the buffers carry the iteration across calls
                    F.normalize(mv(weight_mat.t(), u), dim=0, eps=self.eps, out=v)
                    F.normalize(mv(weight_mat, v), dim=0, eps=self.eps, out=u)
                # clones, so that autograd's saved u, v do not change under the next update
                u = u.clone()
                v = v.clone()
        sigma = dot(u, mv(weight_mat, v))
        return weight / sigma

    def remove(self, module):
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

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
            weight_mat = fn.reshape_weight_to_matrix(weight)
            h, w = weight_mat.size()
            u = F.normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=fn.eps)
            v = F.normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        # a plain attribute until the first forward (torch: weight.data)
        setattr(module, fn.name, weight.data)
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
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
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, SpectralNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"spectral_norm of '{name}' not found in {module}")
