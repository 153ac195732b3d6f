"""cddp.nn.utils.parametrize — torch.nn.utils.parametrize: register_parametrization,
remove_parametrizations, is_parametrized, cached, type_before_parametrizations,
transfer_parametrizations_and_params, ParametrizationList.

torch's mechanism, kept as it is because state dicts and scripts depend on its shape: the
parametrized tensor leaves `module._parameters` and lives on as `original` (one tensor) or
`original0..n` (right_inverse returned a sequence) of a ParametrizationList at
`module.parametrizations.<name>`; the module's class becomes a one-off subclass
`Parametrized<Class>` whose property `<name>` evaluates the list (and whose setter runs
right_inverse). State dict keys are therefore torch's: `parametrizations.weight.original0`.

Where torch calls `Tensor.set_` (right_inverse assigning into `original`), cddp assigns
`.data`: the Parameter object — and so an optimizer holding it — stays the same.
"""
import collections.abc
import copyreg
from contextlib import contextmanager
from copy import deepcopy

from ... import _C
from ...autograd.grad_mode import no_grad
from ..modules.container import ModuleDict, ModuleList
from ..modules.module import Module
from ..parameter import Parameter

Tensor = _C.Tensor

__all__ = ["cached", "ParametrizationList", "register_parametrization", "is_parametrized",
           "remove_parametrizations", "type_before_parametrizations",
           "transfer_parametrizations_and_params"]

# depth of nested cached() contexts, and the values computed inside the outermost one
_cache_enabled = 0
_cache = {}


def _enter_cache():
    global _cache_enabled
    _cache_enabled += 1


def _exit_cache():
    global _cache_enabled, _cache
    _cache_enabled -= 1
    if _cache_enabled == 0:     # the outermost context ends: forget the values
        _cache = {}


@contextmanager
def cached():
    """Inside this context each parametrized tensor is computed once, on first access, and
    reused (torch.nn.utils.parametrize.cached); contexts nest."""
    _enter_cache()
    try:
        yield
    finally:
        _exit_cache()


def _register_parameter_or_buffer(module, name, X):
    if isinstance(X, Parameter):
        module.register_parameter(name, X)
    else:
        module.register_buffer(name, X)


def _maybe_set(dest, src):
    # torch: dest.set_(src). Assigning .data keeps dest's identity the same way.
    dest.data = src


def _invert_chain(chain, value, strict):
    """value pushed through the right_inverse of each parametrization, last first. Not
    strict (registration): one without right_inverse, or raising NotImplementedError, acts
    as the identity. Strict (assignment): one without it is an error."""
    for step in reversed(chain):
        if not hasattr(step, "right_inverse"):
            if strict:
                raise RuntimeError(f"parametrization {type(step).__name__} does not "
                                   "implement right_inverse.")
            continue
        if strict:
            value = step.right_inverse(value)
            continue
        try:
            value = step.right_inverse(value)
        except NotImplementedError:
            pass
    return value


def _check_output(out, dtype, shape, flag, before, after):
    """The checks torch makes on a parametrization's output when registering it: a tensor
    of the unparametrized dtype and shape. before/after label the two values ({} = dtype
    or shape)."""
    if not isinstance(out, Tensor):
        raise ValueError(f"A parametrization must return a tensor. Got {type(out).__name__}.")
    for what, expected in (("dtype", dtype), ("shape", shape)):
        got = getattr(out, what)
        if got != expected:
            raise ValueError(f"Registering a parametrization may not change the {what} of the "
                             f"tensor, unless {flag} flag is enabled.\n"
                             f"{before.format(what)}: {expected}\n{after.format(what)}: {got}")
    return out


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order; holds the unparametrized
    tensor(s) as `original` or `original0`, `original1`, ..."""

    def __init__(self, modules, original, unsafe=False):
        if not len(modules):
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        dtype_before, shape_before = original.dtype, original.shape

        # what gets stored: the right_inverse of every parametrization, last first
        with no_grad():
            stored = _invert_chain(self, original, strict=False)
        single = isinstance(stored, Tensor)
        if not (single or isinstance(stored, collections.abc.Sequence)):
            raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors "
                             f"(list, tuple...). Got {type(stored).__name__}")
        self.is_tensor = single
        self.ntensors = 1 if single else len(stored)

        if single:
            if stored.dtype != original.dtype:
                raise ValueError(
                    "When `right_inverse` outputs one tensor, it may not change the dtype.\n"
                    f"original.dtype: {original.dtype}\n"
                    f"right_inverse(original).dtype: {stored.dtype}")
            # the original tensor object itself is kept, now holding the inverted value
            with no_grad():
                _maybe_set(original, stored)
            _register_parameter_or_buffer(self, "original", original)
        else:
            wants_grad = original.requires_grad
            for idx, piece in enumerate(stored):
                if not isinstance(piece, Tensor):
                    raise ValueError(
                        "'right_inverse' must return a Tensor or a Sequence of tensors "
                        "(list, tuple...). "
                        f"Got element {idx} of the sequence with type {type(piece).__name__}.")
                if isinstance(original, Parameter):
                    piece = Parameter(piece, wants_grad)
                piece.requires_grad_(wants_grad)
                _register_parameter_or_buffer(self, f"original{idx}", piece)

        if not self.unsafe:
            _check_output(self(), dtype_before, shape_before, "`unsafe`",
                          "unparametrized {}", "parametrized {}")

    def right_inverse(self, value):
        """Set the original tensor(s) so the parametrization evaluates to `value`."""
        with no_grad():
            value = _invert_chain(self, value, strict=True)
            if self.is_tensor:
                self._store_single(value)
            else:
                self._store_sequence(value)

    def _store_single(self, value):
        if not isinstance(value, Tensor):
            raise ValueError("`right_inverse` should return a tensor. "
                             f"Got {type(value).__name__}")
        target = self.original
        if value.dtype != target.dtype:
            raise ValueError(f"The tensor returned by `right_inverse` has dtype "
                             f"{value.dtype} while `original` has dtype {target.dtype}")
        _maybe_set(target, value)

    def _store_sequence(self, values):
        if not isinstance(values, collections.abc.Sequence):
            raise ValueError("'right_inverse' must return a sequence of tensors. "
                             f"Got {type(values).__name__}.")
        if len(values) != self.ntensors:
            raise ValueError("'right_inverse' must return a sequence of tensors of "
                             f"length {self.ntensors}. Got a sequence of length "
                             f"{len(values)}.")
        for idx, piece in enumerate(values):
            target = getattr(self, f"original{idx}")
            if not isinstance(piece, Tensor):
                raise ValueError(f"`right_inverse` must return a sequence of tensors. "
                                 f"Got element {idx} of type {type(piece).__name__}")
            if target.dtype != piece.dtype:
                raise ValueError(f"Tensor {idx} returned by `right_inverse` has dtype "
                                 f"{piece.dtype} while `original{idx}` has dtype "
                                 f"{target.dtype}")
            _maybe_set(target, piece)

    def _originals(self):
        if self.is_tensor:
            return (self.original,)
        return tuple(getattr(self, f"original{idx}") for idx in range(self.ntensors))

    def forward(self):
        steps = list(self)
        out = steps[0](*self._originals())
        for step in steps[1:]:
            out = step(out)
        return out


def _plain_deepcopy(self, memo):
    """__deepcopy__ for parametrized classes whose base has none: what copy.deepcopy does
    by default (the __dict__ and any slots), since __getstate__ is made to refuse."""
    if id(self) in memo and memo[id(self)] is not None:
        return memo[id(self)]
    clone = self.__class__.__new__(self.__class__)
    memo[id(self)] = clone
    clone.__dict__ = deepcopy(self.__dict__, memo)
    for slot_name in copyreg._slotnames(self.__class__):
        if hasattr(self, slot_name):
            setattr(clone, slot_name, deepcopy(getattr(self, slot_name), memo))
    return clone


_NO_PICKLE = ("Serialization of parametrized modules is only supported through "
              "state_dict(). See:\nhttps://pytorch.org/tutorials/beginner/"
              "saving_loading_models.html#saving-loading-a-general-checkpoint-for-"
              "inference-and-or-resuming-training")


def _refuse_pickle(self):
    raise RuntimeError(_NO_PICKLE)


def _inject_new_class(module):
    """Make module an instance of a fresh subclass `Parametrized<Class>`, so properties can be
    added to its class without touching the original class."""
    base = module.__class__
    namespace = dict(__getstate__=_refuse_pickle)
    if not hasattr(base, "__deepcopy__"):
        namespace["__deepcopy__"] = _plain_deepcopy
    module.__class__ = type("Parametrized" + base.__name__, (base,), namespace)


def _inject_property(module, tensor_name):
    """The property `tensor_name` on module's (injected) class: get evaluates the
    parametrization (once per `cached()` context), set runs its right_inverse."""
    if hasattr(module, tensor_name):
        raise AssertionError(f"Module already has an attribute named '{tensor_name}'")
    # torch keys the cache by the module the property was made for
    cache_key = (id(module), tensor_name)

    def fget(self):
        evaluate = self.parametrizations[tensor_name]
        if not _cache_enabled:
            return evaluate()
        if _cache.get(cache_key) is None:
            _cache[cache_key] = evaluate()
        return _cache[cache_key]

    def fset(self, value):
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(fget, fset))


def _check_appended(module, tensor_name, parametrization):
    """torch's checks before appending to an existing parametrization (not unsafe): the new
    one keeps module.<tensor_name>'s dtype and shape, and so does its right_inverse."""
    current = getattr(module, tensor_name)
    image = _check_output(parametrization(current), current.dtype, current.shape,
                          "the `unsafe`", f"module.{tensor_name}.{{}}",
                          f"parametrization(module.{tensor_name}).{{}}")
    if not hasattr(parametrization, "right_inverse"):
        return
    try:
        inverted = parametrization.right_inverse(image)
    except NotImplementedError:
        return
    if not isinstance(inverted, Tensor):
        raise ValueError("parametrization.right_inverse must return a tensor. "
                         f"Got: {type(inverted).__name__}")
    for what in ("dtype", "shape"):
        want, got = getattr(current, what), getattr(inverted, what)
        if got != want:
            raise ValueError(
                "The tensor returned by parametrization.right_inverse must have the "
                f"same {what} as module.{tensor_name}, unless the `unsafe` flag is "
                f"enabled.\nmodule.{tensor_name}.{what}: {want}\nreturned {what}: {got}")


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Parametrize module.<tensor_name> (a parameter, buffer or already parametrized tensor)
    by `parametrization`; a second call on the same name appends to its list."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            _check_appended(module, tensor_name, parametrization)
        chain = module.parametrizations[tensor_name]
        chain.append(parametrization)
        chain.unsafe |= unsafe
        return module
    if tensor_name not in module._buffers and tensor_name not in module._parameters:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                         f"parametrized element with name '{tensor_name}'")
    # built before anything on module changes: a failing right_inverse leaves it intact
    chain = ParametrizationList([parametrization], getattr(module, tensor_name),
                                unsafe=unsafe)
    delattr(module, tensor_name)
    first = not is_parametrized(module)
    if first:
        _inject_new_class(module)
        module.parametrizations = ModuleDict()
    _inject_property(module, tensor_name)
    module.parametrizations[tensor_name] = chain
    return module


def is_parametrized(module, tensor_name=None):
    """True when module has a parametrization (on tensor_name, when given)."""
    found = getattr(module, "parametrizations", None)
    if not isinstance(found, ModuleDict):
        return False
    return len(found) > 0 if tensor_name is None else tensor_name in found


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Undo register_parametrization on tensor_name: the tensor becomes a plain parameter
    (or buffer) again, holding the parametrized value (leave_parametrized=True) or the
    original; the module gets its class back when nothing else is parametrized."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    chain = module.parametrizations[tensor_name]
    if chain.is_tensor:
        kept = chain.original
        if leave_parametrized:
            with no_grad():
                _maybe_set(kept, getattr(module, tensor_name))
    elif not leave_parametrized:
        raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor "
                         "that is parametrized in terms of a sequence of tensors.")
    else:
        value = getattr(module, tensor_name)
        # torch: Parameter(t) if t.requires_grad else t (a fresh leaf either way)
        kept = Parameter(value.detach()) if value.requires_grad else value

    parametrized_cls = module.__class__
    delattr(parametrized_cls, tensor_name)
    del module.parametrizations[tensor_name]
    _register_parameter_or_buffer(module, tensor_name, kept)
    if len(module.parametrizations) == 0:
        # nothing else parametrized: the module gets its own class back
        del module.parametrizations
        module.__class__ = parametrized_cls.__bases__[0]
    return module


def type_before_parametrizations(module):
    """The module's class before parametrizations were registered on it."""
    if is_parametrized(module):
        return module.__class__.__bases__[0]
    return type(module)


def transfer_parametrizations_and_params(from_module, to_module, tensor_name=None):
    """Give to_module from_module's parametrizations (all, or tensor_name's) and the same
    original tensors."""
    if not is_parametrized(from_module):
        return to_module
    names = list(from_module.parametrizations) if tensor_name is None else [tensor_name]
    for name in names:
        if not hasattr(to_module, name):
            setattr(to_module, name, Parameter(getattr(from_module, name).detach()))
        for step in from_module.parametrizations[name]:
            register_parametrization(to_module, name, step)
        src = from_module.parametrizations[name]
        dst = to_module.parametrizations[name]
        if hasattr(src, "original"):
            dst.original = src.original
            continue
        idx = 0
        while hasattr(src, f"original{idx}"):
            setattr(dst, f"original{idx}", getattr(src, f"original{idx}"))
            idx += 1
    return to_module
