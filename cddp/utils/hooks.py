"""torch.utils.hooks: RemovableHandle (what register_*_hook returns) and BackwardHook, the
machinery behind nn.Module's full backward hooks and backward pre-hooks.

BackwardHook follows torch's: the module's tensor inputs, and then its tensor outputs, each
go through one identity autograd Function (nn.modules._functions.BackwardHookFunction), so
the module's backward is bracketed by two graph nodes. torch hangs its logic on those nodes
with Node.register_hook; cddp's C nodes take no Python hooks, so the Function carries the
callback itself and runs it inside its backward, where the same gradients are at hand: the
output-side node sees the gradients w.r.t. the outputs (None where an output got none) and
runs the pre-hooks, the input-side node sees the gradients w.r.t. the inputs (zeros where a
tensor input got none, as torch's node materializes them) and runs the hooks.
"""
import itertools
import warnings

__all__ = ["RemovableHandle", "unserializable_hook", "warn_if_has_hooks", "BackwardHook"]


class RemovableHandle:
    """handle.remove() takes the hook out of the dict or list it was added to (and its id out
    of `extra_dict`, a dict / set or a list of them, as torch's); also a context manager that
    removes on exit."""
    _ids = itertools.count()

    def __init__(self, container, key=None, *, extra_dict=None):
        self._container = container
        self.id = next(self._ids) if key is None else key
        if extra_dict is None:
            extra_dict = ()
        elif not isinstance(extra_dict, list):
            extra_dict = (extra_dict,)
        self._extra = tuple(extra_dict)

    def remove(self):
        c = self._container
        if isinstance(c, dict):
            c.pop(self.id, None)
        elif isinstance(c, list):
            hook = self.id
            for i, h in enumerate(c):
                if h is hook:
                    del c[i]
                    break
        for extra in self._extra:
            if isinstance(extra, dict):
                extra.pop(self.id, None)
            else:
                extra.discard(self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def add_hook(hooks, hook):
    """hooks[new id] = hook; returns the handle that takes it out again (the registration
    every register_*_hook function shares)."""
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def unserializable_hook(f):
    """Mark a function as a hook that is not saved with its tensor (torch's decorator)."""
    f.__torch_unserializable__ = True
    return f


def warn_if_has_hooks(tensor):
    """torch warns that a tensor's hooks are not serialized; cddp keeps no Python-visible
    registry of them, so there is nothing to warn about."""


class BackwardHook:
    """Runs one module call's backward pre-hooks and full backward hooks (torch's class).

    setup_input_hook(args) and setup_output_hook(result) put the tensors among args / result
    through the identity Function and return the new args / result; each call of the module
    makes its own BackwardHook, so state passes from the output side to the input side of
    that one call (grad_outputs), and each hook fires once per backward through it."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks, self.user_pre_hooks = user_hooks, user_pre_hooks
        # the call's layout, set by setup_*_hook: how many args / results, and the positions
        # of the tensors among them (None: none of them requires grad)
        self.n_inputs = self.n_outputs = -1
        self.input_tensors_index = self.output_tensors_index = None
        # grad_output of the backward in flight, from the output side to the input side
        self.grad_outputs = None

    @staticmethod
    def _spread(positions, values, size):
        """A size-long tuple with values at positions and None everywhere else."""
        at = dict(zip(positions, values))
        return tuple(at.get(i) for i in range(size))

    @staticmethod
    def _gather(positions, values):
        """The entries of values at positions (the tensors' slots only)."""
        return tuple(map(values.__getitem__, positions))

    def _input_hook(self, grad_input):
        """The input-side node's gradients -> the hooks' grad_input -> what flows on."""
        grad_output = self.grad_outputs
        if grad_output is None:
            # the gradient reached the inputs without passing through the outputs
            return grad_input
        current = self._spread(self.input_tensors_index, grad_input, self.n_inputs)
        for hook in self.user_hooks:
            replaced = hook(self.module, current, grad_output)
            if replaced is not None:
                if len(replaced) != len(current):
                    raise RuntimeError(
                        "Backward hook returned an invalid number of grad_input, "
                        f"got {len(replaced)}, but expected {len(current)}")
                current = replaced
        self.grad_outputs = None        # this call's backward is done with
        return self._gather(self.input_tensors_index, current)

    def _output_hook(self, grad_output):
        """The output-side node's incoming gradients -> the pre-hooks -> what flows on."""
        grads = self._spread(self.output_tensors_index, grad_output, self.n_outputs)
        want = len(grads)
        # self.grad_outputs tracks every accepted replacement, so it is current even if a
        # later pre-hook raises
        self.grad_outputs = grads
        for pre_hook in self.user_pre_hooks:
            replaced = pre_hook(self.module, grads)
            if replaced is not None:
                if len(replaced) != want:
                    raise RuntimeError(
                        "Backward pre hook returned an invalid number of grad_output, "
                        f"got {len(replaced)}, but expected {want}")
                grads = self.grad_outputs = replaced
        # no input requires grad: the hooks fire here, with None for every grad_input
        if self.input_tensors_index is None:
            warnings.warn("Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients. See "
                          "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
                          "#torch.nn.Module.register_full_backward_hook for more details.",
                          stacklevel=5)
            no_grads = (None,) * self.n_inputs
            for hook in self.user_hooks:
                res = hook(self.module, no_grads, grads)
                # nothing to replace: only None, or a tuple of Nones, is accepted
                if res is None or (isinstance(res, tuple) and all(g is None for g in res)):
                    continue
                raise RuntimeError("Backward hook for Modules where no input requires "
                                   "gradient should always return None or None for all "
                                   "gradients.")
            self.grad_outputs = None
        return self._gather(self.output_tensors_index, grads)

    def _apply_on_tensors(self, callback, args, materialize):
        from .. import _C
        from ..nn.modules._functions import BackwardHookFunction
        tensors_idx = []
        tensors = []
        requires_grad = False
        for i, arg in enumerate(args):
            if isinstance(arg, _C.Tensor):
                tensors_idx.append(i)
                tensors.append(arg)
                requires_grad |= arg.requires_grad
        if not (requires_grad and _C.is_grad_enabled()):
            return args, None
        new_tensors = BackwardHookFunction.apply(callback, materialize, *tensors)
        if len(new_tensors) == 0:
            raise RuntimeError("Cannot set Module backward hook for a Module with no input "
                               "Tensors.")
        arg_list = list(args)
        for idx, val in zip(tensors_idx, new_tensors):
            arg_list[idx] = val
        out = tuple(arg_list) if type(args) is tuple else type(args)(*arg_list)
        return out, tensors_idx

    def setup_input_hook(self, args):
        """args with their tensors routed through the input-side node (gradients made
        concrete there, as torch's node does)."""
        self.n_inputs = len(args)
        new_args, self.input_tensors_index = self._apply_on_tensors(self._input_hook, args,
                                                                    True)
        return new_args

    def setup_output_hook(self, args):
        """The forward's result, its tensors routed through the output-side node; a lone
        result is handled as a 1-tuple and handed back unwrapped."""
        lone = not isinstance(args, tuple)
        results = (args,) if lone else args
        self.n_outputs = len(results)
        new_results, self.output_tensors_index = self._apply_on_tensors(self._output_hook,
                                                                        results, False)
        return new_results[0] if lone else new_results
