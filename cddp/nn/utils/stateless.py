"""cddp.nn.utils.stateless — torch.nn.utils.stateless.functional_call (deprecated in torch for
torch.func.functional_call, cddp/func/, which shares this file's _functional_call): call a
module with some of its parameters and buffers replaced for the duration of the call.

As torch: the replacement goes straight into the owning module's `_parameters` / `_buffers`
(a plain tensor, even one with history, may stand in for a Parameter, so gradients flow back
to the given tensors), names tied to one tensor are all replaced when one is given
(tie_weights), strict=True refuses missing or unexpected names, and the originals are back
in place afterwards even if the call raised.
"""
import contextlib
import warnings

from ... import _C
from ..modules.module import Module

Tensor = _C.Tensor
_MISSING = object()

__all__ = ["functional_call"]


def _plain_traversal(root):
    """Whether named_parameters / named_buffers on root are Module's own walk (no class or
    instance override), so reading the stores directly lists what they would, without their
    generators; each submodule's named_modules is checked as the walk reaches it."""
    cls, d = type(root), root.__dict__
    return (cls.named_parameters is Module.named_parameters and
            cls.named_buffers is Module.named_buffers and
            cls._named_members is Module._named_members and
            "named_parameters" not in d and "named_buffers" not in d and
            "_named_members" not in d)


def _walk(module, prefix, params, buffers):
    """named_modules(remove_duplicate=False)'s order, each module's parameters and buffers
    appended with their dotted names; False where a module's named_modules is overridden
    (the generic walk must decide then). Recursive as that walk is, so a module cycle fails
    the same way."""
    if type(module).named_modules is not Module.named_modules or \
            "named_modules" in module.__dict__:
        return False
    dot = prefix + "." if prefix else ""
    for k, v in module._parameters.items():
        if v is not None:
            params.append((dot + k, v))
    for k, v in module._buffers.items():
        if v is not None:
            buffers.append((dot + k, v))
    for name, child in module._modules.items():
        if child is not None and not _walk(child, dot + name, params, buffers):
            return False
    return True


def _named_tensors(module):
    """(name, tensor) of named_parameters then named_buffers, duplicates kept."""
    params, buffers = [], []
    if _plain_traversal(module) and _walk(module, "", params, buffers):
        return params + buffers
    return (list(module.named_parameters(remove_duplicate=False)) +
            list(module.named_buffers(remove_duplicate=False)))


def _untie_named_tensors_map(module, parameters_and_buffers, named=None):
    """parameters_and_buffers with every name tied to a given one added (same value);
    ValueError when tied names are given different values."""
    named = _named_tensors(module) if named is None else named
    if len({id(t) for _, t in named}) == len(named):
        return parameters_and_buffers                  # nothing tied: the usual case
    names_of = {}
    for name, t in named:
        names_of.setdefault(id(t), set()).add(name)
    tied = {n: names for names in names_of.values() if len(names) > 1 for n in names}
    given = [n for n in parameters_and_buffers if n in tied]
    for name in given:
        names = tied[name]
        if len(names.intersection(given)) > 1 and \
                len({id(parameters_and_buffers[n]) for n in names if n in
                     parameters_and_buffers}) != 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(names)}, "
                             "which are tied. Consider using tie_weights=False")
    untied = dict(parameters_and_buffers)
    for name in given:
        for other in tied[name]:
            untied[other] = parameters_and_buffers[name]
    return untied


def _check_strict(module, parameters_and_buffers, named):
    valid = {n for n, _ in named}
    given = set(parameters_and_buffers)
    missing, unexpected = sorted(valid - given), sorted(given - valid)
    error_msgs = []
    if unexpected:
        error_msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
    if missing:
        error_msgs.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
    if error_msgs:
        raise RuntimeError("Error(s) in reparametrizing for {}:\n\t{}".format(
            module._get_name(), "\n\t".join(error_msgs)))


def _submodule(root, path):
    """root.get_submodule(path): Module's own lookup done with one getattr per step instead
    of hasattr then getattr (an override of get_submodule is called instead)."""
    if not path or type(root).get_submodule is not Module.get_submodule or \
            "get_submodule" in root.__dict__:
        return root.get_submodule(path)
    mod = root
    for item in path.split("."):
        child = getattr(mod, item, _MISSING)
        if child is _MISSING:
            raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
        if not isinstance(child, Module):
            raise AttributeError("`" + item + "` is not an nn.Module")
        mod = child
    return mod


def _put(module, attr, name, value):
    """Put value (_MISSING: nothing) at module's attr, the name being the dotted one; return
    what was there (_MISSING when nothing)."""
    for store in (module._parameters, module._buffers):
        if attr in store:
            old = store[attr]
            if value is _MISSING:
                del store[attr]
            else:
                store[attr] = value
            return old
    old = getattr(module, attr, _MISSING)
    if old is not _MISSING and not isinstance(old, Tensor):
        raise TypeError(f"{name} is {type(old).__name__}, not a Tensor")
    if value is not _MISSING:
        setattr(module, attr, value)
    elif old is not _MISSING:
        delattr(module, attr)
    return old


def _swap_in(module, parameters_and_buffers, tie_weights, strict, undo):
    """The checks, then each given tensor put in place, (owner, attr, name, replaced) added
    to undo as it goes (so a failure part-way can still be undone). Each submodule path is
    looked up once, and the originals go back to the modules they came from, as torch's
    accessor does."""
    named = _named_tensors(module) if tie_weights or strict else None
    if tie_weights:
        parameters_and_buffers = _untie_named_tensors_map(module, parameters_and_buffers,
                                                          named)
    if strict:
        _check_strict(module, parameters_and_buffers, named)
    owners = {}
    for name, value in parameters_and_buffers.items():
        path, _, attr = name.rpartition(".")
        owner = owners.get(path)
        if owner is None:
            owner = owners[path] = _submodule(module, path)
        undo.append((owner, attr, name, _put(owner, attr, name, value)))


def _swap_back(undo):
    for owner, attr, name, old in reversed(undo):
        _put(owner, attr, name, old)


@contextlib.contextmanager
def _reparametrize_module(module, parameters_and_buffers, tie_weights=False, strict=False):
    undo = []
    try:
        _swap_in(module, parameters_and_buffers, tie_weights, strict, undo)
        yield
    finally:
        _swap_back(undo)


def _functional_call(module, parameters_and_buffers, args=None, kwargs=None, *,
                     tie_weights=True, strict=False):
    # a lone non-tuple positional is taken as the single argument
    call_args = () if args is None else (args if isinstance(args, tuple) else (args,))
    call_kwargs = {} if kwargs is None else kwargs
    undo = []
    try:                  # not _reparametrize_module: its generator costs more than the swaps
        _swap_in(module, parameters_and_buffers, tie_weights, strict, undo)
        return module(*call_args, **call_kwargs)
    finally:
        _swap_back(undo)


def functional_call(module, parameters_and_buffers, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """module(*args, **kwargs) with the named parameters/buffers replaced by the given tensors."""
    warnings.warn("`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 "
                  "and will be removed in a future version of PyTorch. Please use "
                  "`torch.func.functional_call` instead which is a drop-in replacement.",
                  FutureWarning, stacklevel=2)
    return _functional_call(module, parameters_and_buffers, args, kwargs,
                            tie_weights=tie_weights, strict=strict)
