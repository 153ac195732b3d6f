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

Tensor = _C.Tensor
_MISSING = object()

__all__ = ["functional_call"]


def _untie_named_tensors_map(module, parameters_and_buffers):
    """parameters_and_buffers with every name tied to a given one added (same value);
    ValueError when tied names are given different values."""
    names_of = {}
    for name, t in list(module.named_parameters(remove_duplicate=False)) + \
            list(module.named_buffers(remove_duplicate=False)):
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


def _swap(root, name, value):
    """Put value at the dotted name; return what was there (_MISSING when nothing)."""
    path, _, attr = name.rpartition(".")
    module = root.get_submodule(path)
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


@contextlib.contextmanager
def _reparametrize_module(module, parameters_and_buffers, tie_weights=False, strict=False):
    if tie_weights:
        parameters_and_buffers = _untie_named_tensors_map(module, parameters_and_buffers)
    if strict:
        valid = {n for n, _ in module.named_parameters(remove_duplicate=False)} | \
            {n for n, _ in module.named_buffers(remove_duplicate=False)}
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
    originals = {}
    try:
        for name, value in parameters_and_buffers.items():
            originals[name] = _swap(module, name, value)
        yield
    finally:
        for name, old in reversed(list(originals.items())):
            _swap(module, name, old)


def _functional_call(module, parameters_and_buffers, args=None, kwargs=None, *,
                     tie_weights=True, strict=False):
    # a lone non-tuple positional is taken as the single argument
    call_args = () if args is None else (args if isinstance(args, tuple) else (args,))
    call_kwargs = {} if kwargs is None else kwargs
    with _reparametrize_module(module, parameters_and_buffers, tie_weights=tie_weights,
                               strict=strict):
        return module(*call_args, **call_kwargs)


def functional_call(module, parameters_and_buffers, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """module(*args, **kwargs) with the named parameters/buffers replaced by the given tensors."""
    warnings.warn("`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 "
                  "and will be removed in a future version of PyTorch. Please use "
                  "`torch.func.functional_call` instead which is a drop-in replacement.",
                  FutureWarning, stacklevel=2)
    return _functional_call(module, parameters_and_buffers, args, kwargs,
                            tie_weights=tie_weights, strict=strict)
