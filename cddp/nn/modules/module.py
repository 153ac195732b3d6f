"""cddp.nn.Module — torch.nn.Module's behaviour: registration through attribute assignment,
recursive parameter/buffer/module traversal, state_dict/load_state_dict with torch's key names
and messages, train/eval, device/dtype moves, torch's repr, and torch's hooks: forward
(pre-)hooks, full backward (pre-)hooks (utils/hooks.py BackwardHook), the global
register_module_* hooks of this module, state_dict and load_state_dict pre/post hooks.

register_backward_hook (deprecated in torch) gives its hooks the full hooks' arguments:
torch's hand them the gradients of the last autograd node of forward, which are the module's
own only when forward is one op whose differentiable inputs are the module's inputs (an
activation); cddp's C nodes take no Python hooks to reproduce the rest. torch's warnings
about it are given where torch gives them.

One addition over torch: load_state_dict accepts a state dict whose keys all carry a leading
"module." (saved from a DistributedDataParallel/DataParallel wrapper) into a bare module, and
the reverse, when the other form matches the module's keys exactly (seed 001 §4 shows users
hand-writing that fix).
"""
from collections import OrderedDict, namedtuple
import functools
import inspect
import itertools
import typing
import warnings
import weakref

from ... import _C
from ..._compat import memory_format as _memory_format
from ..._device import _is_meta, device as _device
from ...autograd.grad_mode import no_grad
from ...utils.hooks import RemovableHandle, BackwardHook, add_hook
from ..parameter import Parameter, Buffer, _ComplexBuffer

Tensor = _C.Tensor

_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])



_EXTRA_STATE_KEY_SUFFIX = "_extra_state"     # the state-dict key of get_extra_state()

class _IncompatibleKeys(_IncompatibleKeys):  # noqa: F811 (torch's repr)
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _addindent(s, n):
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


class _WrappedHook:
    """A hook that is called with the module first (held weakly, as torch)."""

    def __init__(self, hook, module=None):
        self.hook = hook
        functools.update_wrapper(self, hook)
        self.with_module = False
        if module is not None:
            self.module = weakref.ref(module)
            self.with_module = True

    def __call__(self, *args, **kwargs):
        if not self.with_module:
            return self.hook(*args, **kwargs)
        owner = self.module()           # the weakref's target, None once it is collected
        if owner is None:
            raise RuntimeError("You are trying to call the hook of a dead Module!")
        return self.hook(owner, *args, **kwargs)

    def __getstate__(self):
        result = {"hook": self.hook, "with_module": self.with_module}
        if self.with_module:
            result["module"] = self.module()
        return result

    def __setstate__(self, state):
        self.hook = state["hook"]
        self.with_module = state["with_module"]
        if self.with_module:
            if state["module"] is None:
                raise RuntimeError("You are trying to revive the hook of a dead Module!")
            self.module = weakref.ref(state["module"])


# Hooks common to all modules (torch.nn.modules.module's globals: for debugging/profiling);
# they run before each module's own.
_global_backward_pre_hooks = OrderedDict()
_global_backward_hooks = OrderedDict()
_global_is_full_backward_hook = None
_global_forward_pre_hooks = OrderedDict()
_global_forward_hooks = OrderedDict()
_global_forward_hooks_always_called = OrderedDict()
_global_forward_hooks_with_kwargs = OrderedDict()


def register_module_forward_pre_hook(hook):
    """hook(module, input) -> None or modified input, before every module's forward."""
    return add_hook(_global_forward_pre_hooks, hook)


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    """hook(module, input, output) -> None or modified output, after every module's forward
    (hook(module, args, kwargs, output) with with_kwargs=True)."""
    handle = RemovableHandle(_global_forward_hooks,
                             extra_dict=[_global_forward_hooks_always_called,
                                         _global_forward_hooks_with_kwargs])
    key = handle.id
    _global_forward_hooks[key] = hook
    # the flag dicts list only the hooks that asked for the behaviour
    for wanted, flags in ((with_kwargs, _global_forward_hooks_with_kwargs),
                          (always_call, _global_forward_hooks_always_called)):
        if wanted:
            flags[key] = True
    return handle


def register_module_backward_hook(hook):
    """Deprecated in torch for register_module_full_backward_hook (see Module's
    register_backward_hook for what cddp passes these hooks)."""
    global _global_is_full_backward_hook
    if _global_is_full_backward_hook is True:
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks as a "
                           "global Module hook. Please use only one of them.")
    _global_is_full_backward_hook = False
    return add_hook(_global_backward_hooks, hook)


def register_module_full_backward_pre_hook(hook):
    """hook(module, grad_output) -> None or new grad_output, for every module."""
    return add_hook(_global_backward_pre_hooks, hook)


def register_module_full_backward_hook(hook):
    """hook(module, grad_input, grad_output) -> None or new grad_input, for every module."""
    global _global_is_full_backward_hook
    if _global_is_full_backward_hook is False:
        raise RuntimeError("Cannot use both regular backward hooks and full backward hooks as a "
                           "global Module hook. Please use only one of them.")
    _global_is_full_backward_hook = True
    return add_hook(_global_backward_hooks, hook)


def _built_on_meta(init):
    """cddp's layers make their parameters on the CPU and move them to `device` after
    reset_parameters; with device="meta" they are made there from the start instead, so the
    construction takes no memory and draws no random numbers (torch's behaviour)."""
    names = list(inspect.signature(init).parameters)
    at = names.index("device") - 1             # positional index, after self

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if not _is_meta(args[at] if len(args) > at else kwargs.get("device")):
            return init(self, *args, **kwargs)
        with _device("meta"):
            return init(self, *args, **kwargs)

    return __init__


def _foreign(value):
    """einops.layers.torch's layers become their cddp counterparts (cddp/_einops_layers.py);
    anything else is returned as it is (the check is one attribute read)."""
    if type(value).__module__ == "einops.layers.torch":
        from ... import _einops_layers
        if _einops_layers.is_foreign_layer(value):
            return _einops_layers.convert(value)
    return value


class Module:
    """Base class for all neural network modules (torch.nn.Module)."""

    training: bool
    _version = 1
    call_super_init = False
    dump_patches = False
    T_destination = typing.TypeVar("T_destination", bound=dict)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and cls.__module__.startswith("cddp.") and \
                "device" in inspect.signature(init).parameters:
            cls.__init__ = _built_on_meta(init)

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments")
        sa = object.__setattr__
        sa(self, "training", True)
        sa(self, "_parameters", OrderedDict())
        sa(self, "_buffers", OrderedDict())
        sa(self, "_non_persistent_buffers_set", set())
        sa(self, "_modules", OrderedDict())
        sa(self, "_forward_pre_hooks", OrderedDict())
        sa(self, "_forward_hooks", OrderedDict())
        sa(self, "_forward_hooks_with_kwargs", set())
        sa(self, "_forward_hooks_always_called", set())
        sa(self, "_forward_pre_hooks_with_kwargs", set())
        sa(self, "_backward_pre_hooks", OrderedDict())
        sa(self, "_backward_hooks", OrderedDict())
        sa(self, "_is_full_backward_hook", None)
        sa(self, "_state_dict_hooks", OrderedDict())
        sa(self, "_state_dict_pre_hooks", OrderedDict())
        sa(self, "_load_state_dict_pre_hooks", OrderedDict())
        sa(self, "_load_state_dict_post_hooks", OrderedDict())

    def _forward_unimplemented(self, *input):
        """What a subclass without forward runs (torch's stub: callable, with a signature)."""
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  '"forward" function')

    forward = _forward_unimplemented  # subclasses define it

    # ---- registration --------------------------------------------------------------------

    def _check_init(self, what):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {what} before Module.__init__() call")

    def register_parameter(self, name, param):
        """Add a parameter (or None) under `name`."""
        self._check_init("parameter")
        if not isinstance(name, str):
            raise TypeError(f"parameter name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError('parameter name can\'t contain "."')
        if name == "":
            raise KeyError('parameter name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is None:
            self._parameters[name] = None
        elif not isinstance(param, Parameter) and not getattr(param, "_is_complex_parameter", False):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(cddp.nn.Parameter or None required)")
        elif param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                             f"parameters must be created explicitly. To express '{name}' as a "
                             "function of another Tensor, compute the value in the forward() method.")
        else:
            self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Add a buffer (a Tensor that is state but not a parameter); persistent ones are saved."""
        self._check_init("buffer")
        if not isinstance(name, str):
            raise TypeError(f"buffer name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError('buffer name can\'t contain "."')
        if name == "":
            raise KeyError('buffer name can\'t be empty string ""')
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor) and \
                not getattr(tensor, "_is_complex_tensor", False):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(cddp Tensor or None required)")
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers_set.add(name)
        else:
            self._non_persistent_buffers_set.discard(name)

    def add_module(self, name, module):
        """Add a child module under `name` (None allowed)."""
        module = _foreign(module)
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        mod = self
        if target == "":
            return mod
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def set_submodule(self, target, module, strict=False):
        """Put `module` at the dotted path `target`: the parent must exist; the last name may
        be new unless strict, and if it exists it must be a Module (torch's errors)."""
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        atoms = target.split(".")
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not an nn.Module, found {type(module)}")
        parent = self if len(atoms) == 1 else self.get_submodule(".".join(atoms[:-1]))
        if strict and not hasattr(parent, atoms[-1]):
            raise AttributeError(parent._get_name() + " has no attribute `" + atoms[-1] + "`")
        if hasattr(parent, atoms[-1]) and not isinstance(getattr(parent, atoms[-1]), Module):
            raise AttributeError("`" + atoms[-1] + "` is not an nn.Module")
        setattr(parent, atoms[-1], module)

    def _get_entry(self, target, table, kind):
        """The entry `name` of table ("_parameters" / "_buffers") of submodule `path` for
        target "path.name"; AttributeError naming what it is not."""
        mod_path, _, name = target.rpartition(".")
        entries = getattr(self.get_submodule(mod_path), table)
        if name not in entries:
            raise AttributeError(f"`{name}` is not {kind}")
        return entries[name]

    def get_parameter(self, target):
        return self._get_entry(target, "_parameters", "an nn.Parameter")

    def get_buffer(self, target):
        return self._get_entry(target, "_buffers", "a buffer")

    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        value = _foreign(value)

        def remove_from(*dicts):
            for dd in dicts:
                if name in dd:
                    if isinstance(dd, dict):
                        del dd[name]
                    else:
                        dd.discard(name)

        if isinstance(value, Parameter) or getattr(value, "_is_complex_parameter", False):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(d, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(cddp.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            modules = d.get("_modules")
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            remove_from(d, self._parameters, self._buffers, self._non_persistent_buffers_set)
            modules[name] = value
        elif d.get("_modules") is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (cddp.nn.Module or None expected)")
            d["_modules"][name] = value
        elif isinstance(value, (Buffer, _ComplexBuffer)):
            self.register_buffer(name, value.data, value.persistent)
        elif d.get("_buffers") is not None and name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor) and \
                    not getattr(value, "_is_complex_tensor", False):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(cddp.Tensor or None expected)")
            d["_buffers"][name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            s = d.get(store)
            if s is not None and name in s:
                return s[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(object.__dir__(self)) + list(self._parameters) + list(self._modules) + \
            list(self._buffers)
        return sorted(k for k in set(keys) if not k[0].isdigit())

    # ---- traversal -----------------------------------------------------------------------

    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for k, v in get_members(module):
                if v is None or (remove_duplicate and id(v) in memo):
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield (module_prefix + ("." if module_prefix else "") + k, v)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """(name, Parameter) pairs, each parameter once even if shared."""
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                       remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                       remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self):
        memo = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in memo:
                memo.add(id(module))
                yield name, module

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    # ---- state ---------------------------------------------------------------------------

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        extra = getattr(type(self), "get_extra_state", None)
        if extra is not None and extra is not Module.get_extra_state:
            destination[prefix + _EXTRA_STATE_KEY_SUFFIX] = self.get_extra_state()

    def get_extra_state(self):
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never "
                           "be called.")

    def set_extra_state(self, state):
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never "
                           "be called.")

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """OrderedDict of parameters and persistent buffers under torch's dotted names."""
        if args:  # torch's deprecated positional form state_dict(destination, prefix, keep_vars)
            destination = args[0]
            if len(args) > 1:
                prefix = args[1]
            if len(args) > 2:
                keep_vars = args[2]
        own_meta = {"version": self._version}
        if destination is None:
            # a fresh destination carries the per-module version table load_state_dict reads
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = own_meta
        for pre_hook in self._state_dict_pre_hooks.values():
            pre_hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for child_name, child in self._modules.items():
            if child is None:
                continue
            child.state_dict(destination=destination, prefix=f"{prefix}{child_name}.",
                             keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            result = hook(self, destination, prefix, own_meta)
            if result is None:
                continue
            # the private API's hooks may hand back a new dict (kept from the root call
            # only, as torch); register_state_dict_post_hook's must work in place
            if getattr(hook, "_from_public_api", False):
                raise RuntimeError("state_dict post-hook must return None")
            destination = result
        return destination

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs, assign=False):
        assign = assign or local_metadata.get("assign_to_params_buffers", False)
        persistent = {k: v for k, v in self._buffers.items()
                      if k not in self._non_persistent_buffers_set}
        for name, param in itertools.chain(self._parameters.items(), persistent.items()):
            key = prefix + name
            if param is None:
                continue
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor) and not getattr(value, "_is_complex_tensor", False):
                error_msgs.append(f'While copying the parameter named "{key}", expected '
                                  f"cddp.Tensor or Tensor-like object from checkpoint but "
                                  f"received {type(value)}")
                continue
            if param.dim() == 0 and value.dim() == 1 and value.shape[0] == 1:
                value = value[0]              # torch's backward compatibility: old checkpoints
                # (and NumPy round trips) hold 0-dim entries such as num_batches_tracked as [1]
            if tuple(value.shape) != tuple(param.shape):
                error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                                  f"{value.shape} from checkpoint, the shape in current model "
                                  f"is {param.shape}.")
                continue
            try:
                if assign:
                    if isinstance(param, Parameter):
                        new = Parameter(value if getattr(value, "_is_dtensor", False)
                                        else value.detach(), requires_grad=param.requires_grad)
                        setattr(self, name, new)
                    else:
                        setattr(self, name, value)
                else:
                    with no_grad():
                        param.copy_(value)
            except Exception as ex:  # noqa: BLE001 (torch collects every error message)
                error_msgs.append(f'While copying the parameter named "{key}", whose dimensions '
                                  f"in the model are {param.shape} and whose dimensions in the "
                                  f"checkpoint are {value.shape}, an exception occurred : {ex.args}.")
        extra_key = prefix + _EXTRA_STATE_KEY_SUFFIX
        if getattr(type(self), "set_extra_state", Module.set_extra_state) is not \
                Module.set_extra_state:
            if extra_key in state_dict:
                self.set_extra_state(state_dict[extra_key])
            elif strict:
                missing_keys.append(extra_key)
        elif strict and extra_key in state_dict:
            unexpected_keys.append(extra_key)
        if strict:      # this module's share of the unexpected keys (an override may edit it)
            local = {k for k, v in itertools.chain(self._parameters.items(), persistent.items())
                     if v is not None}
            for key in state_dict:
                if key.startswith(prefix) and key != extra_key:
                    head, dot, _ = key[len(prefix):].partition(".")
                    if (head not in self._modules) if dot else (head not in local):
                        unexpected_keys.append(key)

    def _expected_keys(self):
        """The keys state_dict() gives, without running its hooks (load_state_dict asks)."""
        keys = OrderedDict()

        def walk(module, prefix):
            module._save_to_state_dict(keys, prefix, True)
            for name, child in module._modules.items():
                if child is not None:
                    walk(child, prefix + name + ".")
        walk(self, "")
        return list(keys)

    def _adapt_module_prefix(self, state_dict):
        """The "module." fix: strip or add the prefix when that makes the keys match."""
        keys = list(state_dict.keys())
        if not keys:
            return state_dict
        expected = set(self._expected_keys())
        if set(keys) == expected:
            return state_dict
        pre = "module."
        if all(k.startswith(pre) for k in keys):
            stripped = OrderedDict((k[len(pre):], v) for k, v in state_dict.items())
            if set(stripped) == expected:
                return stripped
        if expected and all(k.startswith(pre) for k in expected) and \
                not any(k.startswith(pre) for k in keys):
            added = OrderedDict((pre + k, v) for k, v in state_dict.items())
            if set(added) == expected:
                return added
        return state_dict

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy parameters and buffers from state_dict; returns (missing_keys, unexpected_keys).
        strict=True raises torch's RuntimeError listing every mismatch."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing_keys, unexpected_keys, error_msgs = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(self._adapt_module_prefix(state_dict))
        if metadata is not None:
            state_dict._metadata = metadata
        loaded = []      # the modules in torch's post-hook order: each after its children

        def load(module, prefix=""):
            local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
            if assign:
                local_metadata["assign_to_params_buffers"] = assign
            for hook in module._load_state_dict_pre_hooks.values():
                hook(state_dict, prefix, local_metadata, True, missing_keys, unexpected_keys,
                     error_msgs)
            # torch's seven arguments (overrides in the wild — DETR's FrozenBatchNorm2d,
            # torchvision's, detectron2's — take exactly these); assign rides in the metadata
            module._load_from_state_dict(state_dict, prefix, local_metadata, True,
                                         missing_keys, unexpected_keys, error_msgs)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")
            loaded.append(module)

        load(self)
        incompatible_keys = _IncompatibleKeys(missing_keys, unexpected_keys)
        for module in loaded:
            for hook in module._load_state_dict_post_hooks.values():
                out = hook(module, incompatible_keys)
                if out is not None:
                    raise AssertionError(
                        "Hooks registered with ``register_load_state_dict_post_hook`` are not"
                        "expected to return new values, if incompatible_keys need to be "
                        "modified,it should be done inplace.")
        if strict:
            if unexpected_keys:
                error_msgs.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected_keys)))
            if missing_keys:
                error_msgs.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing_keys)))
        if error_msgs:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                self._get_name(), "\n\t".join(error_msgs)))
        return _IncompatibleKeys(missing_keys, unexpected_keys)

    # ---- modes and moves -----------------------------------------------------------------

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                g = p.grad
                if g.grad_fn is not None:
                    g.detach_()
                else:
                    g.requires_grad_(False)
                g.zero_()

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply(self, fn, recurse=True):
        """Replace every parameter's and buffer's data by fn(data), keeping the objects."""
        for m in self.children() if recurse else ():
            m._apply(fn)
        with no_grad():
            for key, p in self._parameters.items():
                if p is None:
                    continue
                new = fn(p)
                if new is not p:
                    p.data = new
                if p.grad is not None:
                    g = fn(p.grad)
                    if g is not p.grad:
                        p.grad = None
                        p.grad = g
            for key, b in self._buffers.items():
                if b is not None:
                    self._buffers[key] = fn(b)
        return self

    def to(self, *args, **kwargs):
        """to(device), to(dtype), to(tensor), to(device, dtype): floating parameters and
        buffers change dtype; integer ones keep theirs, as torch."""
        dtype = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        # memory_format: accepted and checked; parameters stay row-major (cddp/_compat.py)
        memory_format = kwargs.pop("memory_format", None)
        if memory_format is not None and not isinstance(memory_format, _memory_format):
            raise TypeError("to() received an invalid combination of arguments - got "
                            f"memory_format={type(memory_format).__name__}")
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {list(kwargs)}")
        for a in args:
            if isinstance(a, _C.dtype):
                dtype = a
            elif isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, bool):
                continue
            else:
                device = a
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError("nn.Module.to only accepts floating point dtypes, but got desired "
                            f"dtype={dtype}")

        def convert(t):
            if dtype is not None and t.is_floating_point():
                return t.to(device, dtype) if device is not None else t.to(dtype)
            return t.to(device) if device is not None else t

        try:
            return self._apply(convert)
        except NotImplementedError as e:
            if "Cannot copy out of meta tensor" not in str(e):
                raise
            raise NotImplementedError(
                f"{e} Please use torch.nn.Module.to_empty() instead of torch.nn.Module.to() "
                "when moving module from meta to a different device.") from None

    def compile(self, *args, **kwargs):
        """torch's Module.compile(): compile the module's call in place. cddp runs eagerly, so
        the arguments are checked as cddp.compile checks them and the module stays as it is."""
        from ..._compat import compile as _compile
        _compile(self, *args, **kwargs)

    def to_empty(self, *, device, recurse=True):
        """Every parameter and buffer replaced by an uninitialized tensor of its shape and
        dtype on `device` (the objects kept): how a module built on the meta device gets
        memory before its weights are initialized or loaded."""
        from ... import empty_like
        return self._apply(lambda t: empty_like(t, device=device), recurse)

    def cuda(self, device=None):
        return self._apply(lambda t: t.cuda(device))

    def cpu(self):
        return self._apply(lambda t: t.cpu())

    def float(self):
        return self._apply(lambda t: t.float() if t.is_floating_point() else t)

    def double(self):
        return self._apply(lambda t: t.double() if t.is_floating_point() else t)

    def half(self):
        return self._apply(lambda t: t.half() if t.is_floating_point() else t)

    def bfloat16(self):
        return self._apply(lambda t: t.bfloat16() if t.is_floating_point() else t)

    def type(self, dst_type):
        """Every parameter and buffer (integer ones too) to `dst_type`: a dtype, a type name
        such as "torch.DoubleTensor" or a tensor type, as torch."""
        return self._apply(lambda t: t.type(dst_type))

    def share_memory(self):
        """Move every parameter and buffer into shared memory (Tensor.share_memory_)."""
        return self._apply(lambda t: t.share_memory_())

    # ---- calling -------------------------------------------------------------------------

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        handle = RemovableHandle(self._forward_pre_hooks,
                                 extra_dict=self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs.add(handle.id)
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        handle = RemovableHandle(self._forward_hooks,
                                 extra_dict=[self._forward_hooks_with_kwargs,
                                             self._forward_hooks_always_called])
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs.add(handle.id)
        if always_call:
            self._forward_hooks_always_called.add(handle.id)
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) -> None or a new grad_output, run when the gradients
        w.r.t. the module's outputs are known (None for outputs that are not Tensors or got
        no gradient); forward then sees aliases of its input tensors, the caller aliases of
        its output tensors."""
        handle = RemovableHandle(self._backward_pre_hooks)
        self._backward_pre_hooks[handle.id] = hook
        if prepend:
            self._backward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_backward_hook(self, hook):
        """Deprecated in torch for register_full_backward_hook; see the module docstring
        for the grad_input these hooks get in cddp."""
        if self._is_full_backward_hook is True:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks "
                               "on a single Module. Please use only one of them.")
        self._is_full_backward_hook = False
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        return handle

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) -> None or a new grad_input, run once the
        gradients w.r.t. the module's positional inputs are computed (None for inputs that
        are not Tensors or do not require grad). When no input requires grad it fires with
        the output gradients, grad_input all None; when no output requires grad, never."""
        if self._is_full_backward_hook is False:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks "
                               "on a single Module. Please use only one of them.")
        self._is_full_backward_hook = True
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        if prepend:
            self._backward_hooks.move_to_end(handle.id, last=False)
        return handle

    def _get_backward_hooks(self):
        """(full hooks, non-full hooks): the global ones first."""
        full, non_full = [], []
        # each registry is all-full or all-old-style; its flag is None while it is empty
        for is_full, registry in ((_global_is_full_backward_hook, _global_backward_hooks),
                                  (self._is_full_backward_hook, self._backward_hooks)):
            if is_full is True:
                full.extend(registry.values())
            elif is_full is False:
                non_full.extend(registry.values())
        return full, non_full

    def _get_backward_pre_hooks(self):
        return [*_global_backward_pre_hooks.values(), *self._backward_pre_hooks.values()]

    def _maybe_warn_non_full_backward_hook(self, inputs, result, grad_fn):
        """torch's FutureWarnings for register_backward_hook on a module where its (old)
        semantics would miss gradients."""
        if not isinstance(result, Tensor):
            if not (isinstance(result, tuple) and all(isinstance(r, Tensor) for r in result)):
                warnings.warn(
                    "Using non-full backward hooks on a Module that does not return a single "
                    "Tensor or a tuple of Tensors is deprecated and will be removed in future "
                    "versions. This hook will be missing some of the grad_output. Please use "
                    "register_full_backward_hook to get the documented behavior.",
                    FutureWarning, stacklevel=3)
                return
        else:
            result = (result,)
        if not isinstance(inputs, Tensor):
            if not (isinstance(inputs, tuple) and all(isinstance(i, Tensor) for i in inputs)):
                warnings.warn(
                    "Using non-full backward hooks on a Module that does not take as input a "
                    "single Tensor or a tuple of Tensors is deprecated and will be removed in "
                    "future versions. This hook will be missing some of the grad_input. Please "
                    "use register_full_backward_hook to get the documented behavior.",
                    FutureWarning, stacklevel=3)
                return
        else:
            inputs = (inputs,)
        out_grad_fn = {r.grad_fn for r in result if r.grad_fn is not None}
        if len(out_grad_fn) == 0 or (len(out_grad_fn) == 1 and grad_fn not in out_grad_fn):
            warnings.warn(
                "Using a non-full backward hook when outputs are nested in python data "
                "structure is deprecated and will be removed in future versions. This hook "
                "will be missing some grad_output.", FutureWarning, stacklevel=3)
        elif len(out_grad_fn) > 1:
            warnings.warn(
                "Using a non-full backward hook when outputs are generated by different "
                "autograd Nodes is deprecated and will be removed in future versions. This "
                "hook will be missing some grad_output. Please use "
                "register_full_backward_hook to get the documented behavior.",
                FutureWarning, stacklevel=3)
        else:
            inputs_grad_fn = {i.grad_fn for i in inputs if i.grad_fn is not None}
            next_functions = set()
            for node, _ in grad_fn.next_functions:
                # look through the input side's identity, which torch's graph lacks here
                if node is not None and node.name() == "BackwardHookFunctionBackward":
                    next_functions.update(n for n, _ in node.next_functions)
                else:
                    next_functions.add(node)
            if inputs_grad_fn != next_functions:
                warnings.warn(
                    "Using a non-full backward hook when the forward contains multiple "
                    "autograd Nodes is deprecated and will be removed in future versions. "
                    "This hook will be missing some grad_input. Please use "
                    "register_full_backward_hook to get the documented behavior.",
                    FutureWarning, stacklevel=3)

    def register_state_dict_pre_hook(self, hook):
        """hook(module, prefix, keep_vars) -> None, before state_dict saves this module."""
        handle = RemovableHandle(self._state_dict_pre_hooks)
        self._state_dict_pre_hooks[handle.id] = hook
        return handle

    def _register_state_dict_hook(self, hook):
        """hook(module, state_dict, prefix, local_metadata) -> None or a state_dict (the
        returned one is kept only on the module state_dict() was called on, as torch)."""
        if getattr(hook, "_from_public_api", False):
            raise RuntimeError("Cannot register the same function as the state dict post hook "
                               "that was previously registered via "
                               "register_state_dict_post_hook")
        handle = RemovableHandle(self._state_dict_hooks)
        self._state_dict_hooks[handle.id] = hook
        return handle

    def register_state_dict_post_hook(self, hook):
        """hook(module, state_dict, prefix, local_metadata) -> None, after state_dict saved
        this module and its children; it may change state_dict in place."""
        hook._from_public_api = True
        handle = RemovableHandle(self._state_dict_hooks)
        self._state_dict_hooks[handle.id] = hook
        return handle

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        """hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
        error_msgs) before this module's keys are read (it may rename keys in place);
        with_module=True passes the module first. weight_norm's and spectral_norm's
        checkpoint compatibility hooks use it, as in torch."""
        handle = RemovableHandle(self._load_state_dict_pre_hooks)
        self._load_state_dict_pre_hooks[handle.id] = \
            _WrappedHook(hook, self if with_module else None)
        return handle

    def register_load_state_dict_pre_hook(self, hook):
        """hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs) -> None, before load_state_dict reads this module."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def register_load_state_dict_post_hook(self, hook):
        """hook(module, incompatible_keys) -> None after load_state_dict loaded this module
        and its children; it may change incompatible_keys.missing_keys / unexpected_keys in
        place, which strict=True then checks."""
        handle = RemovableHandle(self._load_state_dict_post_hooks)
        self._load_state_dict_post_hooks[handle.id] = hook
        return handle

    def _call_impl(self, *args, **kwargs):
        forward = self.forward
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                or self._backward_pre_hooks or _global_forward_pre_hooks
                or _global_forward_hooks or _global_backward_hooks
                or _global_backward_pre_hooks):
            return forward(*args, **kwargs)
        result = None
        called_always_called_hooks = set()
        try:
            backward_pre_hooks = (self._get_backward_pre_hooks()
                                  if self._backward_pre_hooks or _global_backward_pre_hooks
                                  else [])
            full_backward_hooks = non_full_backward_hooks = []
            if self._backward_hooks or _global_backward_hooks:
                full_backward_hooks, non_full_backward_hooks = self._get_backward_hooks()
            # the old-style hooks get the full hooks' arguments (module docstring)
            full_backward_hooks = full_backward_hooks + non_full_backward_hooks

            for hid, hook in (*_global_forward_pre_hooks.items(),
                              *self._forward_pre_hooks.items()):
                if hid in self._forward_pre_hooks_with_kwargs:
                    res = hook(self, args, kwargs)
                    if res is not None:
                        if isinstance(res, tuple) and len(res) == 2:
                            args, kwargs = res
                        else:
                            raise RuntimeError("forward pre-hook must return None or a tuple "
                                               f"of (new_args, new_kwargs), but got {res}.")
                else:
                    res = hook(self, args)
                    if res is not None:
                        args = res if isinstance(res, tuple) else (res,)

            bw_hook = None
            raw_args = args
            if full_backward_hooks or backward_pre_hooks:
                bw_hook = BackwardHook(self, full_backward_hooks, backward_pre_hooks)
                args = bw_hook.setup_input_hook(args)

            result = forward(*args, **kwargs)
            for hid, hook in (*_global_forward_hooks.items(), *self._forward_hooks.items()):
                if hid in self._forward_hooks_always_called or \
                        hid in _global_forward_hooks_always_called:
                    called_always_called_hooks.add(hid)
                if hid in self._forward_hooks_with_kwargs or \
                        hid in _global_forward_hooks_with_kwargs:
                    res = hook(self, args, kwargs, result)
                else:
                    res = hook(self, args, result)
                if res is not None:
                    result = res

            if bw_hook:
                if not isinstance(result, (Tensor, tuple)):
                    warnings.warn("For backward hooks to be called, module output should be a "
                                  "Tensor or a tuple of Tensors but received "
                                  f"{type(result)}", stacklevel=2)
                raw_result = result
                result = bw_hook.setup_output_hook(result)
                if non_full_backward_hooks:
                    # torch's warnings, judged on the graph forward made (before the output
                    # side's identity)
                    var = raw_result
                    while not isinstance(var, Tensor):
                        if isinstance(var, dict):
                            var = next(v for v in var.values() if isinstance(v, Tensor))
                        else:
                            var = var[0]
                    if var.grad_fn is not None:
                        self._maybe_warn_non_full_backward_hook(raw_args, raw_result,
                                                                var.grad_fn)
            return result
        except Exception:
            # forward hooks registered with always_call=True run even when forward failed
            for hid, hook in _global_forward_hooks.items():
                if hid in _global_forward_hooks_always_called and \
                        hid not in called_always_called_hooks:
                    try:
                        res = hook(self, args, result)
                        if res is not None:
                            result = res
                    except Exception as e:  # noqa: BLE001 (torch silences it with a warning)
                        warnings.warn("global module forward hook with ``always_call=True`` "
                                      "raised an exception that was silenced as another error "
                                      f"was raised in forward: {str(e)}", stacklevel=2)
            for hid, hook in self._forward_hooks.items():
                if hid in self._forward_hooks_always_called and \
                        hid not in called_always_called_hooks:
                    try:
                        if hid in self._forward_hooks_with_kwargs:
                            res = hook(self, args, kwargs, result)
                        else:
                            res = hook(self, args, result)
                        if res is not None:
                            result = res
                    except Exception as e:  # noqa: BLE001
                        warnings.warn("module forward hook with ``always_call=True`` raised an "
                                      "exception that was silenced as another error was raised "
                                      f"in forward: {str(e)}", stacklevel=2)
            raise

    __call__ = _wrapped_call_impl = _call_impl

    # ---- printing ------------------------------------------------------------------------

    def _get_name(self):
        return type(self).__name__

    def extra_repr(self):
        return ""

    def __repr__(self):
        extra_lines = []
        extra = self.extra_repr()
        if extra:
            extra_lines = extra.split("\n")
        child_lines = []
        for key, module in self._modules.items():
            mod_str = _addindent(repr(module), 2)
            child_lines.append("(" + key + "): " + mod_str)
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __getstate__(self):
        return self.__dict__.copy()

    def __setstate__(self, state):
        self.__dict__.update(state)
        # modules pickled before these attributes existed
        for name, make in (("_forward_hooks_always_called", set),
                           ("_backward_pre_hooks", OrderedDict),
                           ("_backward_hooks", OrderedDict),
                           ("_state_dict_hooks", OrderedDict),
                           ("_load_state_dict_post_hooks", OrderedDict)):
            if name not in self.__dict__:
                object.__setattr__(self, name, make())
        if "_is_full_backward_hook" not in self.__dict__:
            object.__setattr__(self, "_is_full_backward_hook", None)
