"""cddp.distributed.fsdp.wrap — torch.distributed.fsdp.wrap: auto-wrap policies and the
wrap/enable_wrap helpers.

Contract (torch's):
- A policy callable is called as policy(module=m, recurse=True|False, nonwrapped_numel=n):
  with recurse=True it says whether to descend into m's children, with recurse=False whether
  to wrap m itself, n being the parameter numel of m's subtree not yet wrapped (ignored
  parameters excluded). Wrapping is bottom-up: children first, then m if the policy agrees on
  what remains; the root is always wrapped, by the FullyShardedDataParallel constructor.
  So functools.partial(size_based_auto_wrap_policy, min_num_params=k) works as in torch.
- size_based_auto_wrap_policy(min_num_params=1e8, force_leaf_modules=None,
  exclude_wrap_modules=None): descend while n >= min_num_params and m is not a forced leaf
  (default {MultiheadAttention}); wrap when n >= min_num_params and m is not excluded
  (default {ModuleList, ModuleDict}).
- transformer_auto_wrap_policy(transformer_layer_cls=...), lambda_auto_wrap_policy
  (lambda_fn=...), always_wrap_policy, ModuleWrapPolicy(classes), CustomPolicy(fn -> bool or
  a kwargs dict overriding the root's).
- With MixedPrecision, modules of its _module_classes_to_ignore (BatchNorm) are wrapped
  separately in full precision, their floating inputs cast to float32 and outputs back, as
  torch does.
- Auto wrapping a module that already holds FSDP units raises ValueError (torch's rule).
- enable_wrap(wrapper_cls=..., **kwargs) / wrap(module, **overrides): wrap() wraps only
  inside an enable_wrap block; nesting enable_wrap raises NotImplementedError.

Differences from torch: none intended.
"""
import contextlib
import copy
from functools import partial

from ... import nn

__all__ = ["always_wrap_policy", "lambda_auto_wrap_policy", "transformer_auto_wrap_policy",
           "size_based_auto_wrap_policy", "enable_wrap", "wrap", "CustomPolicy",
           "ModuleWrapPolicy"]


def always_wrap_policy(*args, **kwargs):
    return True


class _Policy:
    """Policies that pick their targets in one pass (ModuleWrapPolicy, CustomPolicy):
    _run_policy(root, ignored_modules, root_kwargs) -> {module: kwargs}."""

    def _run_policy(self, root_module, ignored_modules, root_kwargs):
        raise NotImplementedError


class ModuleWrapPolicy(_Policy):
    """Wrap every module that is an instance of one of module_classes."""

    def __init__(self, module_classes):
        self._module_classes = set(module_classes)
        self._module_classes_str = str(self._module_classes)

    def _run_policy(self, root_module, ignored_modules, root_kwargs):
        classes = tuple(self._module_classes)
        return {m: copy.copy(root_kwargs) for m in root_module.modules()
                if m not in ignored_modules and isinstance(m, classes)}

    def __call__(self, module, recurse, *args, **kwargs):
        return True if recurse else isinstance(module, tuple(self._module_classes))

    def __repr__(self):
        return super().__repr__() + f"({self._module_classes_str})"


class CustomPolicy(_Policy):
    """lambda_fn(module) -> False / {} (leave), True (wrap with the root's kwargs) or a
    kwargs dict (wrap with the root's kwargs updated by it)."""

    def __init__(self, lambda_fn):
        self._lambda_fn = lambda_fn

    def _run_policy(self, root_module, ignored_modules, root_kwargs):
        out = {}
        for m in root_module.modules():
            if m in ignored_modules:
                continue
            res = self._lambda_fn(m)
            if not isinstance(res, (dict, bool)):
                raise ValueError("The lambda_fn passed to CustomPolicy should return "
                                 f"False/True or a kwarg dict, but it returned {res}")
            if res:                  # True: the root's kwargs; a dict overrides some of them
                out[m] = {**root_kwargs, **(res if isinstance(res, dict) else {})}
        return out


def lambda_auto_wrap_policy(module, recurse, nonwrapped_numel, lambda_fn):
    return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(module, recurse, nonwrapped_numel, transformer_layer_cls):
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def _wrap_module_cls_individually(module, module_classes, recurse, *args, **kwargs):
    return True if recurse else isinstance(module, tuple(module_classes))


def _or_policy(module, recurse, nonwrapped_numel, policies):
    return any(p(module=module, recurse=recurse, nonwrapped_numel=nonwrapped_numel)
               for p in policies)


def size_based_auto_wrap_policy(module, recurse, nonwrapped_numel, min_num_params=int(1e8),
                                force_leaf_modules=None, exclude_wrap_modules=None):
    if force_leaf_modules is None:
        force_leaf_modules = size_based_auto_wrap_policy.FORCE_LEAF_MODULES
    if exclude_wrap_modules is None:
        exclude_wrap_modules = size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES
    is_large = nonwrapped_numel >= min_num_params
    if recurse:
        return is_large and not isinstance(module, tuple(force_leaf_modules))
    return is_large and not isinstance(module, tuple(exclude_wrap_modules))


size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention}


# ---- enable_wrap / wrap ---------------------------------------------------------------------

class _ConfigAutoWrap:
    in_autowrap_context = False
    wrapper_cls = None
    kwargs = {}


@contextlib.contextmanager
def enable_wrap(*, wrapper_cls, **wrapper_kwargs):
    """Inside the block, wrap(m) wraps m with wrapper_cls(m, **wrapper_kwargs)."""
    if _ConfigAutoWrap.in_autowrap_context:
        raise NotImplementedError("You are already within an autowrap context and we "
                                  "currently do not supported nested autowrap.")
    _ConfigAutoWrap.in_autowrap_context = True
    _ConfigAutoWrap.wrapper_cls = wrapper_cls
    _ConfigAutoWrap.kwargs = dict(wrapper_kwargs)
    try:
        yield
    finally:
        _ConfigAutoWrap.in_autowrap_context = False
        _ConfigAutoWrap.wrapper_cls = None
        _ConfigAutoWrap.kwargs = {}


def wrap(module, **wrap_overrides):
    """module wrapped with enable_wrap's wrapper (its kwargs updated by wrap_overrides)
    inside an enable_wrap block; module itself outside one."""
    if not _ConfigAutoWrap.in_autowrap_context:
        return module
    return _wrap(module, _ConfigAutoWrap.wrapper_cls,
                 **{**_ConfigAutoWrap.kwargs, **wrap_overrides})


def _wrap(module, wrapper_cls, **kwargs):
    overrides = getattr(module, "_wrap_overrides", None)
    if overrides:
        kwargs = {**kwargs, **overrides}
    return wrapper_cls(module, **kwargs)


# ---- the traversal --------------------------------------------------------------------------

def _recursive_wrap(module, auto_wrap_policy, wrapper_cls, ignored_modules, ignored_params,
                    only_wrap_children=False, **kwargs):
    """(module or its wrapper, numel wrapped in its subtree), bottom-up."""
    ignored_ids = {id(p) for p in ignored_params}
    nonwrapped_numel = sum(p.numel() for p in module.parameters() if id(p) not in ignored_ids)
    if not auto_wrap_policy(module=module, recurse=True, nonwrapped_numel=nonwrapped_numel):
        return module, 0
    wrapped_numel = 0
    for name, child in list(module.named_children()):
        if child in ignored_modules:
            continue
        new_child, n = _recursive_wrap(child, auto_wrap_policy, wrapper_cls, ignored_modules,
                                       ignored_params, **kwargs)
        setattr(module, name, new_child)
        wrapped_numel += n
    remainder = nonwrapped_numel - wrapped_numel
    if not only_wrap_children and auto_wrap_policy(module=module, recurse=False,
                                                   nonwrapped_numel=remainder):
        return _wrap(module, wrapper_cls, **kwargs), nonwrapped_numel
    return module, wrapped_numel


def _post_order_apply(root, fn):
    """Replace every module m below root (children first, each module once) by fn(m) when
    that is not None."""
    visited = {id(root)}

    def visit(module, name, parent):
        for cname, child in list(module.named_children()):
            if id(child) not in visited:
                visited.add(id(child))
                visit(child, cname, module)
        new = fn(module)
        if new is not None and parent is not None:
            setattr(parent, name, new)

    visit(root, "", None)


def _cast_tree(obj, dtype, seen_dtypes, module):
    from ... import Tensor
    if isinstance(obj, Tensor):
        if not obj.is_floating_point() or obj.dtype == dtype:
            return obj
        seen_dtypes[module] = obj.dtype
        return obj.to(dtype)
    if isinstance(obj, tuple):
        return type(obj)(*(_cast_tree(o, dtype, seen_dtypes, module) for o in obj)) \
            if hasattr(obj, "_fields") else tuple(_cast_tree(o, dtype, seen_dtypes, module)
                                                  for o in obj)
    if isinstance(obj, list):
        return [_cast_tree(o, dtype, seen_dtypes, module) for o in obj]
    if isinstance(obj, dict):
        return {k: _cast_tree(v, dtype, seen_dtypes, module) for k, v in obj.items()}
    return obj


def _override_module_mixed_precision(root, module_classes):
    """Mark modules of module_classes to be wrapped without mixed precision, running in
    float32: inputs cast up before forward, outputs cast back to the input dtype after."""
    from ... import float32
    classes = tuple(set(module_classes))
    input_dtypes = {}
    for m in root.modules():
        if classes and isinstance(m, classes):
            m._wrap_overrides = {"mixed_precision": None}

            def pre(module, args):
                return _cast_tree(args, float32, input_dtypes, module)

            def post(module, args, output):
                old = input_dtypes.get(module)
                return output if old is None else _cast_tree(output, old, {}, module)
            m.register_forward_pre_hook(pre)
            m.register_forward_hook(post)


def _check_nested_wrapping(root, fsdp_cls):
    for name, m in root.named_modules():
        if isinstance(m, fsdp_cls):
            raise ValueError("FSDP auto wrapping requires modules to not already have FSDP "
                             f"applied but found {name} in\n{root}")


def _auto_wrap(root, policy, ignored_modules, ignored_params, root_kwargs, fsdp_cls):
    """Wrap root's submodules per policy (root itself is left to the caller)."""
    _check_nested_wrapping(root, fsdp_cls)
    mp = root_kwargs.get("mixed_precision")
    if isinstance(policy, _Policy):
        root_kwargs["auto_wrap_policy"] = None
        targets = policy._run_policy(root, ignored_modules, root_kwargs)
        if mp is not None:
            classes = tuple(set(mp._module_classes_to_ignore))
            for m in root.modules():
                if m not in ignored_modules and classes and isinstance(m, classes):
                    targets.setdefault(m, copy.copy(root_kwargs))["mixed_precision"] = None
            _override_module_mixed_precision(root, mp._module_classes_to_ignore)

        def fn(m):
            if m in targets and m is not root:
                return fsdp_cls(m, **targets[m])
            return None
        _post_order_apply(root, fn)
        return
    if mp is not None and tuple(mp._module_classes_to_ignore):
        _override_module_mixed_precision(root, mp._module_classes_to_ignore)
        policy = partial(_or_policy, policies=[
            policy, partial(_wrap_module_cls_individually,
                            module_classes=mp._module_classes_to_ignore)])
    _recursive_wrap(root, policy, fsdp_cls, ignored_modules, ignored_params,
                    only_wrap_children=True, **root_kwargs)
