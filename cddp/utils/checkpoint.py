"""torch.utils.checkpoint: activation checkpointing — run a segment without keeping its
intermediate activations and recompute them during backward.

use_reentrant=False (recommended, as torch): the segment runs with grad on under
saved-tensor hooks (cddp/autograd/graph.py, csrc/autograd/saved.c) that keep only a small
holder for each tensor a node would save. The first backward node to need one reruns the
segment (same inputs, the forward's RNG state) under hooks that collect the recomputed tensors
in the same order; each node then takes its own. The graph is the ordinary one, so gradients
equal the non-checkpointed run's bit for bit, parameters inside the segment get theirs even
when no input requires grad, and torch.autograd.grad works.

use_reentrant=True: a Function whose forward runs the segment under no_grad and whose
backward reruns it with grad on and calls backward inside (the engine lends the nested run
the leaves' accumulators: csrc/autograd/engine.c).
"""
import contextlib
import dataclasses
import enum
import warnings

import cddp
from ..autograd.function import Function
from ..autograd.graph import saved_tensors_hooks

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError", "CheckpointFunction",
           "detach_variable", "check_backward_validity", "noop_context_fn",
           "set_checkpoint_early_stop", "set_checkpoint_debug_enabled", "get_device_states",
           "set_device_states", "CheckpointPolicy", "SelectiveCheckpointContext",
           "create_selective_checkpoint_contexts"]


def noop_context_fn():
    """The default context_fn: no context around the forward or the recomputation."""
    return contextlib.nullcontext(), contextlib.nullcontext()


class CheckpointPolicy(enum.Enum):
    """What a selective-checkpoint policy answers for one op (torch's values)."""
    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3


@dataclasses.dataclass
class SelectiveCheckpointContext:
    is_recompute: bool


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False):
    """torch's selective activation checkpointing: a context_fn pair under which the policy
    picks ops whose outputs are saved instead of recomputed. cddp has no per-op dispatch to
    apply a policy at, so every op of the region is recomputed (the whole-segment rerun, with
    the forward's RNG state): gradients are the same, only the compute / memory trade
    differs. The argument is checked as torch checks it, and a warning says so."""
    if not isinstance(policy_fn_or_list, list) and not callable(policy_fn_or_list):
        raise TypeError("policy_fn_or_list must be either a function or a list of ops.")
    warnings.warn("cddp: create_selective_checkpoint_contexts: the policy is not applied; every "
                  "op of the checkpointed region is recomputed (same gradients)", stacklevel=2)
    return contextlib.nullcontext(), contextlib.nullcontext()


@contextlib.contextmanager
def set_checkpoint_early_stop(enable):
    """torch's switch for stopping a recomputation once the tensors backward needs exist. cddp
    always reruns the whole segment once per checkpoint (the results are the same either
    way), so the flag only scopes."""
    yield


@contextlib.contextmanager
def set_checkpoint_debug_enabled(enabled):
    """torch's debug traces of recomputations: cddp's CheckpointError messages already name the
    tensor and metadata that differ; the flag only scopes."""
    yield


def get_device_states(*args):
    """The accelerator RNG states of the devices args live on: none (tensors are on the CPU,
    whose state checkpoint itself saves)."""
    return [], []


def set_device_states(devices, states, *, device_type=None):
    if devices or states:
        raise RuntimeError("set_device_states: cddp has no accelerator RNG states to restore")


class CheckpointError(RuntimeError):
    """The recomputation did not reproduce the forward (torch.utils.checkpoint.CheckpointError)."""


def detach_variable(inputs):
    """Tensors detached, keeping requires_grad (what the reentrant backward differentiates)."""
    if not isinstance(inputs, tuple):
        raise RuntimeError("Only tuple of tensors is supported. Got Unsupported input type: ",
                           type(inputs).__name__)
    out = []
    for inp in inputs:
        if not isinstance(inp, cddp.Tensor):
            out.append(inp)
            continue
        x = inp.detach()
        x.requires_grad = inp.requires_grad
        out.append(x)
    return tuple(out)


def check_backward_validity(inputs):
    if not any(isinstance(inp, cddp.Tensor) and inp.requires_grad for inp in inputs):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                      stacklevel=3)


class _fork_rng:
    """Run a block from `state` (when given) and put the generator back afterwards."""

    def __init__(self, state):
        self.state = state

    def __enter__(self):
        if self.state is not None:
            self.outer = cddp.get_rng_state()
            cddp.set_rng_state(self.state)

    def __exit__(self, *exc):
        if self.state is not None:
            cddp.set_rng_state(self.outer)
        return False


class CheckpointFunction(Function):
    """The reentrant variant (torch's CheckpointFunction)."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        check_backward_validity(args)
        ctx.run_function = run_function
        ctx.preserve_rng_state = preserve_rng_state
        ctx.fwd_cpu_state = cddp.get_rng_state() if preserve_rng_state else None
        ctx.inputs, ctx.tensor_indices, tensor_inputs = [], [], []
        for i, arg in enumerate(args):
            if isinstance(arg, cddp.Tensor):
                tensor_inputs.append(arg)
                ctx.tensor_indices.append(i)
                ctx.inputs.append(None)
            else:
                ctx.inputs.append(arg)
        ctx.save_for_backward(*tensor_inputs)
        with cddp.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *args):
        # the recomputed segment's own backward would write its leaves' .grad, which
        # autograd.grad / backward(inputs=) must not do: refused, as torch
        if not cddp.autograd._is_checkpoint_valid():
            raise RuntimeError(
                "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() "
                "or passing an `inputs` parameter to .backward(). To resolve this error, you "
                "can either set use_reentrant=False, or call .backward() without passing the "
                "`inputs` argument.")
        inputs = list(ctx.inputs)
        for i, idx in enumerate(ctx.tensor_indices):
            inputs[idx] = ctx.saved_tensors[i]
        with _fork_rng(ctx.fwd_cpu_state):
            detached_inputs = detach_variable(tuple(inputs))
            with cddp.enable_grad():
                outputs = ctx.run_function(*detached_inputs)
        if isinstance(outputs, cddp.Tensor):
            outputs = (outputs,)
        outputs_with_grad, args_with_grad = [], []
        for out, g in zip(outputs, args):
            if isinstance(out, cddp.Tensor) and out.requires_grad:
                outputs_with_grad.append(out)
                args_with_grad.append(g)
        if not outputs_with_grad:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is "
                               "not necessary")
        cddp.autograd.backward(outputs_with_grad, args_with_grad)
        grads = tuple(inp.grad if isinstance(inp, cddp.Tensor) else None
                      for inp in detached_inputs)
        return (None, None) + grads


# ---- the non-reentrant variant -------------------------------------------------------------

class _Holder:
    """What a node keeps instead of the tensor it saved: its position in the frame."""
    __slots__ = ("frame", "index")

    def __init__(self, frame, index):
        self.frame, self.index = frame, index


class _Frame:
    """One checkpointed call: how to rerun it, and what it saved."""

    def __init__(self, fn, args, kwargs, rng_state, check, recompute_ctx):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.recompute_ctx = recompute_ctx
        self.rng_state, self.check = rng_state, check
        self.metas = []            # (shape, dtype) of each tensor the forward saved, in order
        self.recomputed = {}       # index -> recomputed tensor, taken by unpack
        self.recompute_count = 0

    def pack(self, x):
        self.metas.append((tuple(x.shape), x.dtype))
        return _Holder(self, len(self.metas) - 1)

    def recompute(self):
        # called from unpack, inside backward: grad mode is on there exactly when the backward
        # builds a graph (create_graph=True). Then the recomputed tensors keep their history,
        # which runs back to this frame's inputs, so a double backward differentiates through
        # the recomputation (torch relinks them to the forward's nodes instead: the same
        # derivatives); otherwise they are detached and the recomputed graph is freed.
        keep_graph = cddp.is_grad_enabled()
        store, count = {}, [0]

        def pack(x):
            i = count[0]
            if i >= len(self.metas):
                raise CheckpointError("torch.utils.checkpoint: trying to save more tensors "
                                      "during recomputation than during the original "
                                      "forward pass.")
            meta = (tuple(x.shape), x.dtype)
            if self.check and meta != self.metas[i]:
                raise CheckpointError(
                    "torch.utils.checkpoint: Recomputed values for the following tensors have "
                    "different metadata than during the forward pass.\n"
                    f"tensor at position {i}:\nsaved metadata: {_meta_str(self.metas[i])}\n"
                    f"recomputed metadata: {_meta_str(meta)}\n")
            if keep_graph:
                if not any(x is a for a in self.args):
                    x._cddp_recomputed = True      # formula.Ctx.input accepts its history
                store[i] = x
            else:
                store[i] = x.detach()
            count[0] = i + 1
            return x if keep_graph else None      # a kept graph needs its saved tensors

        def unpack(packed):
            if keep_graph:
                return packed
            raise CheckpointError("torch.utils.checkpoint: a recomputed graph was "
                                  "differentiated")

        with _fork_rng(self.rng_state), cddp.enable_grad(), saved_tensors_hooks(pack, unpack), \
                self.recompute_ctx:
            self.fn(*self.args, **self.kwargs)
        if count[0] != len(self.metas):
            raise CheckpointError("torch.utils.checkpoint: A different number of tensors was "
                                  f"saved during the original forward ({len(self.metas)}) and "
                                  f"recomputation ({count[0]}).")
        self.recomputed = store
        self.recompute_count += 1


def _meta_str(meta):
    return "{'shape': %s, 'dtype': %s}" % (cddp.Size(meta[0]), meta[1])


def _unpack(holder):
    frame = holder.frame
    if holder.index not in frame.recomputed:
        frame.recompute()
    return frame.recomputed.pop(holder.index)


def _checkpoint_without_reentrant(function, preserve, determinism_check, context_fn, *args,
                                  **kwargs):
    if determinism_check not in ("default", "none"):
        raise ValueError("determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    forward_ctx, recompute_ctx = context_fn()
    frame = _Frame(function, args, kwargs, cddp.get_rng_state() if preserve else None,
                   determinism_check == "default", recompute_ctx)
    with saved_tensors_hooks(frame.pack, _unpack), forward_ctx:
        return function(*args, **kwargs)


def checkpoint(function, *args, use_reentrant=None, context_fn=None,
               determinism_check="default", debug=False, early_stop=True, **kwargs):
    """torch.utils.checkpoint.checkpoint: function(*args, **kwargs) without keeping its
    activations; they are recomputed in backward. preserve_rng_state=True (a keyword) makes
    the recompute draw the forward's random numbers (dropout masks equal)."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed "
                      "explicitly. Starting in PyTorch 2.9, calling checkpoint without "
                      "use_reentrant will raise an exception. use_reentrant=False is "
                      "recommended, but if you need to preserve the current default "
                      "behavior, you can pass use_reentrant=True. Refer to docs for more "
                      "details on the differences between the two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    if use_reentrant:
        if context_fn is not None or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when "
                             "use_reentrant=False.")
        return CheckpointFunction.apply(function, preserve, *args)
    # context_fn() -> (forward context, recompute context), each entered around its run (a
    # recompute context is entered once: the segment is recomputed once per backward)
    return _checkpoint_without_reentrant(function, preserve, determinism_check,
                                         context_fn or noop_context_fn, *args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):  # noqa: A002
    """Split a Sequential (or list of modules) into `segments` runs of modules and checkpoint
    all but the last (torch's recipe)."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint.checkpoint_sequential: the use_reentrant "
                      "parameter should be passed explicitly. In version 2.9 we will raise an "
                      "exception if use_reentrant is not passed. use_reentrant=False is "
                      "recommended, but if you need to preserve the current default "
                      "behavior, you can pass use_reentrant=True. Refer to docs for more "
                      "details on the differences between the two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))

    def run_function(start, end, functions):
        def forward(input):  # noqa: A002
            for j in range(start, end + 1):
                input = functions[j](input)
            return input
        return forward

    if isinstance(functions, cddp.nn.Sequential):
        functions = list(functions.children())
    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(run_function(start, end, functions), input,
                           use_reentrant=use_reentrant, preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1, functions)(input)
