"""cddp.optim.Optimizer — torch's param_groups / state / state_dict layout.

state_dict() = {"state": {param_index: {...}}, "param_groups": [{..., "params": [indices]}]},
indices counted across groups in order, exactly as torch writes them, so optimizer
checkpoints move between cddp and torch.
"""
from collections import OrderedDict, defaultdict
import copy
import functools
import itertools
import math
import warnings
from typing import Any, Dict, Iterable, Tuple, Union

from .. import _C
from .._shape_ops import _real_views
from ..autograd.grad_mode import no_grad, set_grad_enabled
from ..utils.hooks import add_hook

Tensor = _C.Tensor


ParamsT = Union[Iterable[Tensor], Iterable[Dict[str, Any]], Iterable[Tuple[str, Tensor]]]

# hooks every optimizer's step() runs: pre before its own, post after its own (torch's order)
_global_optimizer_pre_hooks = OrderedDict()
_global_optimizer_post_hooks = OrderedDict()


def register_optimizer_step_pre_hook(hook):
    """hook(optimizer, args, kwargs) -> None, before every optimizer's step()."""
    return add_hook(_global_optimizer_pre_hooks, hook)


def register_optimizer_step_post_hook(hook):
    """hook(optimizer, args, kwargs) -> None, after every optimizer's step()."""
    return add_hook(_global_optimizer_post_hooks, hook)


# ---- torch.optim.optimizer's helpers that optimizers written outside torch import ------------

def _use_grad_for_differentiable(func):
    """step() runs with grad mode = self.defaults["differentiable"] (False: no_grad)."""
    @functools.wraps(func)
    def _use_grad(self, *args, **kwargs):
        with set_grad_enabled(bool(self.defaults.get("differentiable", False))):
            return func(self, *args, **kwargs)
    return _use_grad


def _default_to_fused_or_foreach(params, differentiable, use_fused=False):
    """(fused, foreach): both False here, as torch answers for CPU tensors (its foreach and
    fused kernels are for accelerators; cddp's single-tensor steps are C loops already)."""
    return False, False


def _get_capturable_supported_devices(supports_xla=True):
    return ["cuda", "xla"] if supports_xla else ["cuda"]


def _get_value(x):
    return x.item() if isinstance(x, Tensor) else x


def _dispatch_sqrt(x):
    return x.sqrt() if isinstance(x, Tensor) else math.sqrt(x)


def _get_scalar_dtype(is_fused=None):
    return _C.float64 if _C.get_default_dtype() == _C.float64 else _C.float32


def _check_lr(lr):
    """torch's lr checks, in its order: a tensor lr holds one element, and lr >= 0."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")


def _first_violation(rules):
    """The message of the first (holds, message) pair that does not hold, else None."""
    return next((message for holds, message in rules if not holds), None)


def _dense_real_params_with_grad(group, name):
    """The group's parameters that have a gradient, refusing complex parameters and sparse
    gradients with torch's messages (optimizers written in tensor ops: Adafactor, Muon)."""
    params = []
    for p in group["params"]:
        if p.grad is None:
            continue
        if p.is_complex():
            raise RuntimeError(f"{name} does not support complex parameters")
        if p.grad.is_sparse:
            raise RuntimeError(f"{name} does not support sparse gradients")
        params.append(p)
    return params


def _check_adam_hyperparameters(lr, betas, eps, weight_decay):
    """The checks (and torch's messages) Adam, AdamW, Adamax, NAdam and RAdam share."""
    _check_lr(lr)
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


class _RequiredParameter:
    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _same_layout(a, b):
    """Same memory order for the same shape (strides compared on dims of size > 1)."""
    return all(n <= 1 or sa == sb for n, sa, sb in zip(a.shape, a.stride(), b.stride()))


class Optimizer:
    """Base class: holds param_groups (list of dicts) and per-parameter state."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = defaultdict(dict)
        self.param_groups = []
        self._step_post_hooks = {}
        self._step_pre_hooks = {}
        self._init_state_dict_hooks()
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + type(params).__name__)
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("_step_post_hooks", {})
        self.__dict__.setdefault("_step_pre_hooks", {})
        self._init_state_dict_hooks()

    _SD_HOOKS = ("_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks",
                 "_optimizer_load_state_dict_pre_hooks", "_optimizer_load_state_dict_post_hooks")

    def _init_state_dict_hooks(self):
        for name in self._SD_HOOKS:
            if not isinstance(self.__dict__.get(name), OrderedDict):
                self.__dict__[name] = OrderedDict()

    def __repr__(self):
        s = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += ("\n" if i else "") + "\nParameter Group {}".format(i)   # torch's blank line
            for key in sorted(group.keys()):
                if key != "params":
                    s += "\n    {}: {}".format(key, group[key])
        return s + "\n)"

    def add_param_group(self, param_group):
        """Add a group: its missing options come from the defaults; a parameter may appear in
        one group only."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            param_group["params"] = list(params)
            # a step() of cddp's updates a complex parameter as its real view (torch's
            # built-in optimizers do the same through view_as_real); a step() the user wrote
            # sees the complex parameter, as in torch
            owner = next(c for c in type(self).__mro__ if "step" in vars(c))
            if owner.__module__.startswith("cddp."):
                param_group["params"] = _real_views(param_group["params"])
        for p in param_group["params"]:
            if not isinstance(p, Tensor) and not getattr(p, "_is_complex_tensor", False):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + type(p).__name__)
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)
        if len({id(p) for p in param_group["params"]}) != len(param_group["params"]):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error; see "
                          "github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        seen = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
        if any(id(p) in seen for p in param_group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none=True):
        """Reset gradients: to None (default, as torch 2.x) or to zeros in place."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    def register_step_pre_hook(self, hook):
        return add_hook(self._step_pre_hooks, hook)

    def register_step_post_hook(self, hook):
        return add_hook(self._step_post_hooks, hook)

    # torch's state-dict hooks: pre(optimizer) before state_dict(); post(optimizer, sd) after
    # it (a returned dict replaces it); load pre(optimizer, sd) before load_state_dict (a
    # returned dict is loaded instead); load post(optimizer) after it. prepend=True: first.

    def _add_sd_hook(self, name, hook, prepend):
        hooks = self.__dict__[name]
        h = add_hook(hooks, hook)
        if prepend:
            hooks.move_to_end(h.id, last=False)
        return h

    def register_state_dict_pre_hook(self, hook, prepend=False):
        return self._add_sd_hook("_optimizer_state_dict_pre_hooks", hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend=False):
        return self._add_sd_hook("_optimizer_state_dict_post_hooks", hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend=False):
        return self._add_sd_hook("_optimizer_load_state_dict_pre_hooks", hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend=False):
        return self._add_sd_hook("_optimizer_load_state_dict_post_hooks", hook, prepend)

    def _run_step(self, closure):
        self._refuse_meta()
        for hook in [*_global_optimizer_pre_hooks.values(), *self._step_pre_hooks.values()]:
            res = hook(self, (), {})
            if res is not None:
                raise RuntimeError("optimizer step pre-hooks must return None")
        loss = None
        if closure is not None:
            from ..autograd.grad_mode import enable_grad
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                self._update_group(group)
        for hook in [*self._step_post_hooks.values(), *_global_optimizer_post_hooks.values()]:
            hook(self, (), {})
        return loss

    def step(self, closure=None):
        return self._run_step(closure)

    def _refuse_meta(self):
        # cddp's ops compute on a meta tensor's placeholder zeros instead of giving meta
        # results, so a model never materialized would otherwise train without an error
        for g, group in enumerate(self.param_groups):
            for i, p in enumerate(group["params"]):
                if p.is_meta:
                    raise RuntimeError(
                        f"optimizer step: parameter {i} of group {g} (shape {tuple(p.shape)}) "
                        "is on the meta device and has no values; "
                        "materialize the module first (module.to_empty(device='cpu'), then "
                        "initialize or load its weights)")

    def _update_group(self, group):
        raise NotImplementedError

    # ---- checkpoints ---------------------------------------------------------------------

    def state_dict(self):
        """torch's layout: state keyed by parameter index, groups with index lists (through
        the registered state-dict hooks)."""
        for hook in list(self._optimizer_state_dict_pre_hooks.values()):
            hook(self)
        sd = self._state_dict()
        for hook in list(self._optimizer_state_dict_post_hooks.values()):
            out = hook(self, sd)
            sd = out if out is not None else sd
        return sd

    def _state_dict(self):
        index = {}
        start = 0

        def pack_group(group):
            nonlocal start
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start):
                index.setdefault(id(p), i)
            packed["params"] = [index[id(p)] for p in group["params"]]
            start += len(packed["params"])
            return packed

        param_groups = [pack_group(g) for g in self.param_groups]
        state = {index[id(p)]: v for p, v in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": param_groups}

    def load_state_dict(self, state_dict):
        """Restore from state_dict(); group sizes must match, tensors are copied to each
        parameter's dtype (through the registered load hooks)."""
        for hook in list(self._optimizer_load_state_dict_pre_hooks.values()):
            out = hook(self, state_dict)
            state_dict = out if out is not None else state_dict
        self._load_state_dict(state_dict)
        for hook in list(self._optimizer_load_state_dict_post_hooks.values()):
            hook(self)

    def _load_state_dict(self, state_dict):
        state_dict = copy.copy(state_dict)
        groups = self.param_groups
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        param_lens = (len(g["params"]) for g in groups)
        saved_lens = (len(g["params"]) for g in saved_groups)
        if any(p_len != s_len for p_len, s_len in zip(param_lens, saved_lens)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        id_map = dict(zip(itertools.chain.from_iterable(g["params"] for g in saved_groups),
                          itertools.chain.from_iterable(g["params"] for g in groups)))
        state = defaultdict(dict)
        # cddp's own optimizers read a tensor step; a subclass written for torch's base class
        # gets its numbers back as numbers, as torch's base class leaves them
        builtin = type(self).__module__.startswith(__package__ + ".")
        for k, v in state_dict["state"].items():
            key = int(k) if isinstance(k, str) else k
            if key in id_map:
                param = id_map[key]
                state[param] = {name: self._cast_state(param, name, value, builtin)
                                for name, value in v.items()}
            else:
                state[k] = v

        def update_group(group, new_group):
            new_group["params"] = group["params"]
            return new_group

        self.__setstate__({"state": state,
                           "param_groups": [update_group(g, ng) for g, ng in zip(groups, saved_groups)]})

    @staticmethod
    def _cast_state(param, key, value, builtin=True):
        """torch's _process_value_according_to_param_policy: a floating state tensor in the
        parameter's dtype — the loaded tensor itself when it already is (shared with the
        state dict, as torch shares it), copied into the parameter's memory layout when its
        own differs (the C steps walk both in one order); step as it is."""
        if key == "step" and builtin and isinstance(value, (int, float)):   # old checkpoints
            return _C.tensor(float(value), dtype=_C.float32)
        if isinstance(value, Tensor):
            if key == "step" or not value.is_floating_point():
                return value
            value = value.to(param.dtype)
            if tuple(value.shape) == tuple(param.shape) and not _same_layout(value, param):
                value = _C.empty_like(param).copy_(value)
            return value
        return copy.deepcopy(value)
