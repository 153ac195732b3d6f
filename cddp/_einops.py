"""einops on cddp tensors: rearrange / reduce / repeat / einsum / pack / unpack / parse_shape
take cddp.Tensor as they take torch.Tensor, so models written with einops run on cddp with
only their torch imports changed.

einops picks a backend per tensor type among the subclasses of einops._backends.AbstractBackend
whose framework module is imported (its TorchBackend answers only for torch.Tensor). cddp adds
one for itself, defined when einops._backends is loaded: at once if einops is already imported
when cddp is, otherwise by a finder on sys.meta_path that waits for that one module, defines the
backend right after it executes, and removes itself. einops is not a dependency; nothing here
runs unless a script imports it.

einops.layers.torch (Rearrange / Reduce / EinMix as modules) imports torch. Where torch is
installed, cddp modules store the cddp counterparts of those layers (cddp/_einops_layers.py);
where it is not, a second finder answers `import einops.layers.torch` with a module of the
cddp layers (that import would fail otherwise), so model code keeps its einops imports.
"""
import importlib.abc
import sys

_MODULE = "einops._backends"


def _define_backend(backends):
    """Subclass einops' AbstractBackend for cddp (once per einops module object)."""
    if getattr(backends, "_cddp_backend", None) is not None:
        return
    import cddp

    class CddpBackend(backends.AbstractBackend):
        framework_name = "cddp"

        def is_appropriate_type(self, tensor):
            return isinstance(tensor, cddp.Tensor)

        def from_numpy(self, x):
            t = cddp.from_numpy(x)
            if self.is_float_type(t):        # einops' tests differentiate what they create
                t.requires_grad_(True)
            return t

        def to_numpy(self, x):
            return x.detach().numpy()

        def arange(self, start, stop):
            return cddp.arange(start, stop, dtype=cddp.int64)

        def reduce(self, x, operation, reduced_axes):
            axes = tuple(reduced_axes)
            if operation in ("min", "max"):
                return getattr(x, "a" + operation)(dim=axes)
            if operation in ("sum", "mean"):
                return getattr(x, operation)(dim=axes)
            if operation in ("any", "all", "prod"):   # one dimension per call, highest first
                for d in sorted(axes, reverse=True):
                    x = getattr(x, operation)(dim=d)
                return x
            raise NotImplementedError("Unknown reduction ", operation)

        def transpose(self, x, axes):
            return x.permute(axes)

        def stack_on_zeroth_dimension(self, tensors):
            return cddp.stack(tensors)

        def add_axes(self, x, n_axes, pos2len):
            sizes = [-1] * n_axes
            for position, length in pos2len.items():
                x = x.unsqueeze(position)
                sizes[position] = length
            return x.expand(sizes)

        def tile(self, x, repeats):
            return x.repeat(repeats)

        def concat(self, tensors, axis):
            return cddp.cat(tensors, dim=axis)

        def add_axis(self, x, new_position):
            return x.unsqueeze(new_position)

        def is_float_type(self, x):
            return x.dtype in (cddp.float16, cddp.float32, cddp.float64, cddp.bfloat16)

        def layers(self):
            from . import _einops_layers
            return _einops_layers

        def einsum(self, pattern, *x):
            return cddp.einsum(pattern, *x)

    backends._cddp_backend = CddpBackend


class _Loader(importlib.abc.Loader):
    """The real loader of einops._backends, then the backend definition."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _define_backend(module)

    def __getattr__(self, name):         # get_source, get_filename ... of the real loader
        return getattr(self.loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for einops._backends on sys.meta_path; answers nothing else."""

    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


_LAYERS = "einops.layers.torch"


class _LayersLoader(importlib.abc.Loader):
    """einops.layers.torch without torch: a module of cddp's einops layers."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from . import _einops_layers
        for name in ("Rearrange", "Reduce", "EinMix"):
            setattr(module, name, getattr(_einops_layers, name))


class _LayersFinder(importlib.abc.MetaPathFinder):
    """Answers einops.layers.torch only where torch cannot be imported."""

    def find_spec(self, name, path, target=None):
        if name != _LAYERS:
            return None
        import importlib.util
        torch = sys.modules.get("torch", False)       # None: an import blocked on purpose
        if torch is not None and (torch is not False or
                                  importlib.util.find_spec("torch") is not None):
            return None
        return importlib.util.spec_from_loader(name, _LayersLoader())


def install():
    """Define the backend now if einops is loaded, else when it is; answer
    einops.layers.torch where torch is absent."""
    module = sys.modules.get(_MODULE)
    if module is not None:
        _define_backend(module)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    if not any(isinstance(f, _LayersFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _LayersFinder())
