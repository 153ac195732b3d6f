"""torch.library's custom operators, eagerly: an op is its Python function plus what was
registered for it, callable directly and as torch.ops.<namespace>.<name> (cddp/ops.py).

    @torch.library.custom_op("mylib::scale", mutates_args=())
    def scale(x: Tensor, k: float) -> Tensor:
        return x * k            # cddp ops (or NumPy): the body runs with grad mode off
    scale.register_autograd(backward, setup_context=setup_context)
    scale.register_fake(lambda x, k: torch.empty_like(x))

What runs (torch's eager semantics on the CPU): the "cpu" kernel registered with
register_kernel, else the decorated function, with grad mode off; when an input needs a
gradient and grad mode is on, the call is one autograd.Function node whose backward is the
registered one (setup_context(ctx, inputs, output) first, as torch's). Without a registered
backward the output still records the call, and backward through it raises torch's error.
register_fake, register_vmap, register_autocast and register_torch_dispatch are recorded and
not used (cddp has no fake tensors, graph capture or dispatch modes); mutates_args is checked
for form. The older Library / define / impl API registers a Python kernel the same way.
Differences: no schema is inferred or enforced (arguments pass as given); triton_op and
wrap_triton are not provided (no GPU compiler).
"""
import functools

from . import _C
from .autograd.function import Function
from .autograd.grad_mode import no_grad

__all__ = ["custom_op", "CustomOpDef", "register_fake", "register_autograd", "register_kernel",
           "register_vmap", "register_autocast", "register_torch_dispatch", "impl_abstract",
           "Library", "define", "impl", "get_ctx", "opcheck", "infer_schema"]

_OPS = {}                 # "ns::name" -> CustomOpDef


def _split(qualname):
    if not isinstance(qualname, str) or qualname.count("::") != 1 or \
            not all(part.isidentifier() for part in qualname.split("::")):
        raise ValueError(f"Expected the name of a custom op to be of the form "
                         f"'{{namespace}}::{{name}}', e.g. 'mylib::my_op', but got {qualname!r}")
    return tuple(qualname.split("::"))


def _tensors(args):
    return [a for a in args if isinstance(a, _C.Tensor)]


class _OpCall(Function):
    """One custom-op call as an autograd node: inputs are the op's positional arguments."""

    @staticmethod
    def forward(ctx, op, kwargs, *args):
        with no_grad():
            out = op._kernel(*args, **kwargs)
        ctx.op, ctx.n_args = op, len(args)
        if op._setup_context is not None:
            op._setup_context(ctx, args, out)
        return out

    @staticmethod
    def backward(ctx, *grads):
        op = ctx.op
        if op._backward is None:
            raise RuntimeError(f"Trying to backward through {op._namespace}.{op._opname}"
                               ".default but no autograd formula was registered. Please use "
                               "register_autograd to add one.")
        g = op._backward(ctx, *grads)
        g = tuple(g) if isinstance(g, (tuple, list)) else (g,)
        if len(g) != ctx.n_args:
            raise RuntimeError(f"{op._name}: the backward returned {len(g)} gradients, expected "
                               f"{ctx.n_args} (one per positional input, None for "
                               "non-Tensors)")
        return (None, None) + g


class CustomOpDef:
    """A custom operator: call it like the function it wraps."""

    def __init__(self, namespace, name, fn, mutates_args):
        self._namespace, self._opname, self._name = namespace, name, f"{namespace}::{name}"
        self._init_fn = fn
        self._cpu_kernel = None
        self._backward = self._setup_context = None
        self._fake = self._vmap = self._autocast = None
        self._mutates_args = mutates_args
        functools.update_wrapper(self, fn)

    @property
    def default(self):
        """torch.ops.ns.name.default (the OpOverload): the op itself here."""
        return self

    def _kernel(self, *args, **kwargs):
        return (self._cpu_kernel or self._init_fn)(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        from .autograd.grad_mode import is_grad_enabled
        if is_grad_enabled() and any(t.requires_grad for t in _tensors(args)):
            return _OpCall.apply(self, kwargs, *args)
        with no_grad():
            return self._kernel(*args, **kwargs)

    def __repr__(self):
        return f"<CustomOpDef({self._name})>"

    def register_kernel(self, device_types, fn=None):
        """fn becomes the implementation for "cpu" (other device types: recorded only)."""
        def inner(f):
            types = [device_types] if isinstance(device_types, str) or device_types is None \
                else list(device_types)
            if any(str(d).split(":")[0] == "cpu" for d in types if d is not None):
                self._cpu_kernel = f
            return f
        return inner if fn is None else inner(fn)

    def register_autograd(self, backward, /, *, setup_context=None):
        if not callable(backward):
            raise TypeError(f"Expected backward to be callable but got {type(backward)}")
        self._backward, self._setup_context = backward, setup_context

    def register_fake(self, fn=None, /):
        def inner(f):
            self._fake = f
            return f
        return inner if fn is None else inner(fn)

    def register_vmap(self, fn=None, /):
        def inner(f):
            self._vmap = f
            return f
        return inner if fn is None else inner(fn)

    def register_autocast(self, device_type, cast_inputs):
        self._autocast = (device_type, cast_inputs)

    def register_torch_dispatch(self, torch_dispatch_class, fn=None, /):
        return (lambda f: f) if fn is None else fn


def custom_op(name, fn=None, /, *, mutates_args, device_types=None, schema=None):
    """Decorator (or function) making fn the custom op `name` ("namespace::name")."""
    namespace, opname = _split(name)
    if not (mutates_args == "unknown" or isinstance(mutates_args, (tuple, list, set, frozenset,
                                                                   str))):
        raise ValueError("mutates_args must be a sequence of argument names, or 'unknown'")

    def inner(f):
        op = CustomOpDef(namespace, opname, f, mutates_args)
        if device_types is not None:
            op.register_kernel(device_types, f)
        _OPS[op._name] = op
        return op
    return inner if fn is None else inner(fn)


def _op(op):
    if isinstance(op, CustomOpDef):
        return op
    key = op if isinstance(op, str) else getattr(op, "_name", None)
    if key not in _OPS:
        raise ValueError(f"{op!r}: not a custom op defined with torch.library.custom_op or "
                         "Library.define here (cddp has no aten operator registry)")
    return _OPS[key]


def register_fake(op, fn=None, /, *, lib=None, _stacklevel=1):
    return _op(op).register_fake(fn)


impl_abstract = register_fake


def register_autograd(op, backward, /, *, setup_context=None, lib=None):
    _op(op).register_autograd(backward, setup_context=setup_context)


def register_kernel(op, device_types, fn=None, /, *, lib=None):
    return _op(op).register_kernel(device_types, fn)


def register_vmap(op, fn=None, /, *, lib=None):
    return _op(op).register_vmap(fn)


def register_autocast(op, device_type, cast_inputs, /, *, lib=None):
    _op(op).register_autocast(device_type, cast_inputs)


def register_torch_dispatch(op, torch_dispatch_class, fn=None, /, *, lib=None):
    return (lambda f: f) if fn is None else fn


def get_ctx():
    raise RuntimeError("torch.library.get_ctx() is for fake (meta) kernels; cddp runs none")


def infer_schema(prototype_function, /, *, mutates_args, op_name=None):
    """A best-effort schema string from the annotations (informational here)."""
    import inspect
    params = ", ".join(f"{p.annotation.__name__ if isinstance(p.annotation, type) else 'Any'} "
                       f"{p.name}" for p in inspect.signature(prototype_function).parameters
                       .values())
    return f"({params}) -> Tensor"


def opcheck(op, args, kwargs=None, *, test_utils=None, raise_exception=True, atol=None,
            rtol=None):
    """Runs op(*args, **kwargs) once (its errors propagate); cddp has no schema, fake-tensor
    or AOT checks to run, so torch's test utilities are all reported SKIPPED."""
    _op(op)(*args, **(kwargs or {}))
    names = ("test_schema", "test_autograd_registration", "test_faketensor",
             "test_aot_dispatch_dynamic")
    return {k: "SKIPPED" for k in names}


class Library:
    """torch.library.Library(ns, kind): define(schema) names an op, impl(name, fn, key)
    gives it a Python kernel (any dispatch key: cddp runs it on the CPU)."""

    def __init__(self, ns, kind, dispatch_key=""):
        if kind not in ("DEF", "IMPL", "FRAGMENT"):
            raise ValueError(f"Unsupported kind: {kind}")
        self.ns, self.kind = ns, kind

    def define(self, schema, alias_analysis="", *, tags=()):
        name = schema.split("(", 1)[0].strip().split(".", 1)[0]
        qual = f"{self.ns}::{name}"
        if qual not in _OPS:
            def missing(*args, **kwargs):
                raise NotImplementedError(f"{qual} has no kernel: register one with "
                                          "Library.impl or torch.library.impl")
            _OPS[qual] = CustomOpDef(self.ns, name, missing, "unknown")
        return name

    def impl(self, op_name, fn, dispatch_key="", *, with_keyset=False, allow_override=False):
        name = op_name if isinstance(op_name, str) else op_name._opname
        qual = f"{self.ns}::{name.split('.', 1)[0]}"
        if qual not in _OPS:
            _OPS[qual] = CustomOpDef(self.ns, name, fn, "unknown")
        if dispatch_key in ("Autograd", "AutogradCPU"):
            return                          # an autograd kernel: the op's function is it
        _OPS[qual]._cpu_kernel = fn

    def _destroy(self):
        pass


def define(qualname, schema, *, lib=None, tags=()):
    ns, name = _split(qualname)
    Library(ns, "FRAGMENT").define(name + schema)


def impl(qualname, types, func=None, *, lib=None):
    ns, name = _split(qualname)

    def inner(f):
        Library(ns, "FRAGMENT").impl(name, f, "CPU")
        return f
    return inner if func is None else inner(func)
