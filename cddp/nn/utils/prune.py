"""torch.nn.utils.prune: pruning a module's tensor by a mask, recomputed before each forward.

Pruning `name` moves the parameter to `name + "_orig"`, adds the buffer `name + "_mask"`,
and sets the plain attribute `name` = mask * orig, refreshed by the method itself, which is
registered as a forward pre-hook (so state_dict holds `weight_orig` and `weight_mask`, as
torch's). Pruning the same tensor again makes (or extends) a PruningContainer, whose mask
only prunes among the entries that are still kept. remove() makes the pruning permanent:
`name` becomes a parameter again holding the pruned values.

The masks are chosen with torch's ops and draws: RandomUnstructured takes the topk of
rand_like(t), L1Unstructured the bottom-k of |t|, RandomStructured keeps the channels whose
rand(nchannels) draw exceeds the k-th smallest (kthvalue, here the k-th of a sort: the
draws are distinct), LnStructured the top-k channel norms. cddp's rand/rand_like draw what
torch's draw from the same seed, so the random methods prune the same entries as torch.
"""
import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

from ... import _C
from ..._extras import topk, sort

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured",
           "L1Unstructured", "RandomStructured", "LnStructured", "CustomFromMask", "identity",
           "random_unstructured", "l1_unstructured", "random_structured", "ln_structured",
           "global_unstructured", "custom_from_mask", "remove", "is_pruned"]


def _pruning_hook_keys(module, name):
    """Keys of module's forward pre-hooks that are pruning methods acting on `name`."""
    return [key for key, hook in module._forward_pre_hooks.items()
            if isinstance(hook, BasePruningMethod) and hook._tensor_name == name]


def _detach_pruning_hook(module, name):
    """Unhook (and return) the pruning method already acting on module.<name>, or None."""
    keys = _pruning_hook_keys(module, name)
    if len(keys) > 1:
        raise AssertionError(f"Avoid adding multiple pruning hooks to the same tensor "
                             f"{name} of module {module}. Use a PruningContainer.")
    if not keys:
        return None
    previous = module._forward_pre_hooks[keys[0]]
    del module._forward_pre_hooks[keys[0]]
    return previous


def _check_scores(scores, like, describe):
    """scores (or `like` when None), after checking the shapes agree."""
    if scores is None:
        return like
    if scores.shape != like.shape:
        raise AssertionError(f"importance_scores should have the same shape as {describe}, "
                             f"got {scores.shape} vs {like.shape}")
    return scores


class BasePruningMethod(ABC):
    """A pruning method: compute_mask(t, default_mask) says which entries of t to keep."""

    _tensor_name: str

    def __call__(self, module, inputs):
        """The forward pre-hook: recompute the pruned tensor from orig and the mask."""
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t, default_mask):
        """The mask (same shape as t) for t, pruning only where default_mask is 1."""

    def apply_mask(self, module):
        """mask * orig for the module's pruned tensor."""
        key = self._tensor_name
        if key is None:
            raise AssertionError(f"Module {module} has to be pruned")
        weights = getattr(module, key + "_orig")
        return getattr(module, key + "_mask").to(dtype=weights.dtype) * weights

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune module.<name> in place (reparametrized as name_orig * name_mask) and
        register the method (or the container it joins) as a forward pre-hook."""
        # torch unhooks an earlier pruning of this tensor before building the new method
        previous = _detach_pruning_hook(module, name)
        method = cls(*args, **kwargs)
        method._tensor_name = name
        if previous is not None:
            if not isinstance(previous, PruningContainer):
                previous = PruningContainer(previous)
            previous.add_pruning_method(method)
            method = previous

        target = getattr(module, name)
        scores = _check_scores(importance_scores, target,
                               f"parameter {name} of {module}")
        fresh = not isinstance(method, PruningContainer)
        if fresh:
            # first pruning of this tensor: the parameter moves to name_orig
            module.register_parameter(name + "_orig", target)
            del module._parameters[name]
            start_mask = _C.ones_like(target)
        else:
            start_mask = getattr(module, name + "_mask").detach().clone().contiguous()
        try:
            module.register_buffer(name + "_mask",
                                   method.compute_mask(scores, default_mask=start_mask))
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if fresh:   # put the parameter back where it was
                module.register_parameter(name, getattr(module, name + "_orig"))
                del module._parameters[name + "_orig"]
            raise
        return method

    def prune(self, t, default_mask=None, importance_scores=None):
        """t times its mask (t itself is left alone)."""
        scores = _check_scores(importance_scores, t, "tensor t")
        if default_mask is None:
            default_mask = _C.ones_like(t)
        return t * self.compute_mask(scores, default_mask=default_mask)

    def remove(self, module):
        """Make the pruning permanent: module.<name> becomes a parameter holding the pruned
        values; name_orig and name_mask go."""
        key = self._tensor_name
        if key is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be "
                                 "removed")
        pruned = self.apply_mask(module)
        if hasattr(module, key):
            delattr(module, key)
        # the _orig parameter object survives (optimizers may hold it) with pruned values
        param = module._parameters.pop(key + "_orig")
        param.data = pruned.data
        module._buffers.pop(key + "_mask")
        setattr(module, key, param)


def _slice_for(method, t, mask):
    """The index selecting the part of t that `method` may still prune, given mask."""
    kind = method.PRUNING_TYPE
    if kind == "unstructured":
        return mask == 1
    if kind == "global":
        return (slice(None),) * len(t.shape)
    if kind != "structured":
        raise ValueError(f"Unrecognized PRUNING_TYPE {method.PRUNING_TYPE}")
    if not hasattr(method, "dim"):
        raise AttributeError('Pruning methods of PRUNING_TYPE "structured" need to '
                             "have the attribute `dim` defined.")
    ndim = t.dim()
    axis = method.dim + ndim if method.dim < 0 else method.dim
    if axis < 0:
        raise IndexError(f"Index is out of bounds for tensor with dimensions {ndim}")
    others = [d for d in range(ndim) if d != axis]
    index = [slice(None)] * ndim
    index[axis] = mask.sum(dim=others) != 0     # channels with anything left
    return tuple(index)


def _masked_by(method, t, mask):
    """mask, with `method`'s mask over the still-prunable part of t written into it."""
    combined = mask.to(dtype=t.dtype)
    where = _slice_for(method, t, mask)
    combined[where] = method.compute_mask(t[where], default_mask=mask[where]).to(
        dtype=combined.dtype)
    return combined


class PruningContainer(BasePruningMethod):
    """The pruning methods applied in turn to one tensor; each new one prunes among the
    entries the earlier ones kept."""

    def __init__(self, *args):
        self._pruning_methods = ()
        # as torch: a single method names the container; with several, no name is set
        # (so adding them fails just as torch's does)
        if len(args) == 1:
            self._tensor_name = args[0]._tensor_name
        for item in args:
            self.add_pruning_method(item)

    def add_pruning_method(self, method):
        if method is not None:
            if not isinstance(method, BasePruningMethod):
                raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
            if self._tensor_name != method._tensor_name:
                raise ValueError("Can only add pruning methods acting on the parameter named "
                                 f"'{self._tensor_name}' to PruningContainer {self}."
                                 f" Found '{method._tensor_name}'")
        self._pruning_methods = (*self._pruning_methods, method)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        yield from self._pruning_methods

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t, default_mask):
        """The newest method's mask computed on the slice of t still unpruned: the entries
        (unstructured), the channels along its dim (structured) or all of t (global)."""
        return _masked_by(self._pruning_methods[-1], t, default_mask)


class Identity(BasePruningMethod):
    """Prunes nothing: the mask is all ones."""
    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


def _unstructured_mask(amount, t, default_mask, chosen):
    """default_mask with the entries chosen(k) (flat indices of the k to prune) zeroed."""
    total = t.nelement()
    count = _compute_nparams_toprune(amount, total)
    _validate_pruning_amount(count, total)
    mask = default_mask.clone().contiguous()
    if count != 0:
        mask.view(-1)[chosen(count)] = 0
    return mask


def _structured_mask(method, t, default_mask, kept_channels):
    """For a structured method (amount, dim): default_mask, or, when something is to be
    pruned, the channels kept_channels(nchannels, k) along dim (an index) times it."""
    _validate_structured_pruning(t)
    _validate_pruning_dim(t, method.dim)
    nchannels = t.shape[method.dim]
    count = _compute_nparams_toprune(method.amount, nchannels)
    _validate_pruning_amount(count, nchannels)
    keep = kept_channels(nchannels, count)
    if count == 0:
        return default_mask
    index = [slice(None)] * len(t.shape)
    index[method.dim] = keep()
    mask = _C.zeros_like(t)
    mask[tuple(index)] = 1
    mask *= default_mask.to(dtype=mask.dtype)
    return mask


class _AmountMethod(BasePruningMethod):
    """Shared constructor part: a validated `amount` (fraction or count)."""

    def __init__(self, amount):
        _validate_pruning_amount_init(amount)
        self.amount = amount


class RandomUnstructured(_AmountMethod):
    """Prune `amount` entries (a fraction, or a count) chosen at random."""
    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        # the largest of uniform draws: torch's choice, so the same seed prunes the same entries
        return _unstructured_mask(self.amount, t, default_mask,
                                  lambda k: topk(_C.rand_like(t).reshape(-1), k=k).indices)

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(_AmountMethod):
    """Prune the `amount` entries of smallest absolute value."""
    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return _unstructured_mask(self.amount, t, default_mask, lambda k: topk(
            t.abs().reshape(-1), k=k, largest=False).indices)

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class RandomStructured(_AmountMethod):
    """Prune `amount` whole channels along `dim`, chosen at random."""
    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        super().__init__(amount)
        self.dim = dim

    def compute_mask(self, t, default_mask):
        def kept(nchannels, k):
            # drawn only when something is pruned (as torch, so the RNG stream matches)
            def draw():
                scores = _C.rand(nchannels)
                return scores > sort(scores).values[k - 1]     # torch.kthvalue
            return draw
        return _structured_mask(self, t, default_mask, kept)

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(_AmountMethod):
    """Prune the `amount` channels along `dim` of smallest L`n` norm."""
    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim=-1):
        super().__init__(amount)
        self.n = n
        self.dim = dim

    def compute_mask(self, t, default_mask):
        def kept(nchannels, k):
            # torch takes the norms (and their top-k) even when nothing is pruned
            best = topk(_compute_norm(t, self.n, self.dim), k=nchannels - k, largest=True)
            return lambda: best.indices
        return _structured_mask(self, t, default_mask, kept)

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim,
                             importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prune where the given mask is 0."""
    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if default_mask.shape != self.mask.shape:
            raise AssertionError(f"default_mask shape {default_mask.shape} must match "
                                 f"self.mask shape {self.mask.shape}")
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def identity(module, name):
    """Reparametrize module.<name> with an all-ones mask; returns the module."""
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    """Prune `amount` random entries of module.<name>; returns the module."""
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    """Prune the `amount` entries of module.<name> of smallest |importance_scores| (the
    tensor itself by default); returns the module."""
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    """Prune `amount` random channels of module.<name> along dim; returns the module."""
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    """Prune the `amount` channels along dim of smallest L`n` norm; returns the module."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prune the (module, name) tensors together, as one vector, with an unstructured
    method class (e.g. L1Unstructured, amount=...): each gets its slice of the mask."""
    from . import parameters_to_vector
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    scores_by_key = {} if importance_scores is None else importance_scores
    if not isinstance(scores_by_key, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    targets = list(parameters)     # read twice below (torch's accepts a one-shot iterator
    #                                only by luck of its second loop seeing it empty)
    keys = [(module, name) for module, name in targets]
    tensors = [getattr(module, name) for module, name in keys]
    flat_scores = parameters_to_vector(
        [scores_by_key.get(key, tensor) for key, tensor in zip(keys, tensors)])
    flat_mask = parameters_to_vector(
        [getattr(module, name + "_mask", _C.ones_like(tensor))
         for (module, name), tensor in zip(keys, tensors)])
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"      # the name torch's temporary container gives it
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError('Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. '
                        f"Found method {pruning_method} of type {method.PRUNING_TYPE}")
    # what torch's one-method container computes: prune among the entries still kept
    flat_result = _masked_by(method, flat_scores, flat_mask)
    offset = 0
    for (module, name), tensor in zip(keys, tensors):
        size = tensor.numel()
        custom_from_mask(module, name, mask=flat_result[offset:offset + size].view_as(tensor))
        offset += size


def custom_from_mask(module, name, mask):
    """Prune module.<name> where `mask` is 0; returns the module."""
    CustomFromMask.apply(module, name, mask)
    return module


def remove(module, name):
    """Make the pruning of module.<name> permanent (see BasePruningMethod.remove)."""
    keys = _pruning_hook_keys(module, name)
    if not keys:
        raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before "
                         "pruning can be removed")
    module._forward_pre_hooks[keys[0]].remove(module)
    del module._forward_pre_hooks[keys[0]]
    return module


def is_pruned(module):
    """Whether module or any submodule has a pruning pre-hook."""
    return any(isinstance(hook, BasePruningMethod)
               for _, sub in module.named_modules()
               for hook in sub._forward_pre_hooks.values())


def _validate_pruning_amount_init(amount):
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
            not isinstance(amount, numbers.Integral)
            and (float(amount) > 1.0 or float(amount) < 0.0)):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a "
                         "non-negative integer")


def _validate_pruning_amount(amount, tensor_size):
    if isinstance(amount, numbers.Integral) and amount > tensor_size:
        raise ValueError(f"amount={amount} should be smaller than the number of parameters to "
                         f"prune={tensor_size}")


def _validate_structured_pruning(t):
    shape = t.shape
    if len(shape) <= 1:
        raise ValueError("Structured pruning can only be applied to multidimensional tensors. "
                         f"Found tensor of shape {shape} with {len(shape)} dims")


def _compute_nparams_toprune(amount, tensor_size):
    if isinstance(amount, numbers.Integral):
        return amount
    return round(amount * tensor_size)


def _validate_pruning_dim(t, dim):
    if dim >= t.dim():
        raise IndexError(f"Invalid index {dim} for tensor of size {t.shape}")


def _compute_norm(t, n, dim):
    """The L`n` norm of each slice of t along dim (over all the other dims)."""
    dims = list(range(t.dim()))
    if dim < 0:
        dim = dims[dim]
    dims.remove(dim)
    return _C.norm(t, p=n, dim=dims)
