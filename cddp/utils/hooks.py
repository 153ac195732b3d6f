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
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.module = module
        self.grad_outputs = None
        self.n_outputs = -1
        self.output_tensors_index = None
        self.n_inputs = -1
        self.input_tensors_index = None

    @staticmethod
    def _pack_with_none(indices, values, size):
        res = [None] * size
        for idx, val in zip(indices, values):
            res[idx] = val
        return tuple(res)

    @staticmethod
    def _unpack_none(indices, values):
        return tuple(values[idx] for idx in indices)

    def _input_hook(self, grad_input):
        """The input-side node's gradients -> the hooks' grad_input -> what flows on."""
        if self.grad_outputs is None:
            # the gradient reached the inputs without passing through the outputs
            return grad_input
        res = self._pack_with_none(self.input_tensors_index, grad_input, self.n_inputs)
        for hook in self.user_hooks:
            out = hook(self.module, res, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(res):
                raise RuntimeError("Backward hook returned an invalid number of grad_input, "
                                   f"got {len(out)}, but expected {len(res)}")
            res = out
        self.grad_outputs = None
        return self._unpack_none(self.input_tensors_index, res)

    def _output_hook(self, grad_output):
        """The output-side node's incoming gradients -> the pre-hooks -> what flows on."""
        self.grad_outputs = self._pack_with_none(self.output_tensors_index, grad_output,
                                                 self.n_outputs)
        if self.user_pre_hooks:
            expected_len = len(self.grad_outputs)
            for user_pre_hook in self.user_pre_hooks:
                hook_grad_outputs = user_pre_hook(self.module, self.grad_outputs)
                if hook_grad_outputs is None:
                    continue
                actual_len = len(hook_grad_outputs)
                if actual_len != expected_len:
                    raise RuntimeError("Backward pre hook returned an invalid number of "
                                       f"grad_output, got {actual_len}, but expected "
                                       f"{expected_len}")
                self.grad_outputs = hook_grad_outputs
        local_grad_outputs = self.grad_outputs
        # no input requires grad: the hooks fire here, with None for every grad_input
        if self.input_tensors_index is None:
            warnings.warn("Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients. See "
                          "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
                          "#torch.nn.Module.register_full_backward_hook for more details.",
                          stacklevel=5)
            grad_inputs = self._pack_with_none([], [], self.n_inputs)
            for user_hook in self.user_hooks:
                res = user_hook(self.module, grad_inputs, self.grad_outputs)
                if res is not None and not (isinstance(res, tuple)
                                            and all(el is None for el in res)):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
            self.grad_outputs = None
        return tuple(local_grad_outputs[i] for i in self.output_tensors_index)

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
        res, input_idx = self._apply_on_tensors(self._input_hook, args, True)
        self.n_inputs = len(args)
        self.input_tensors_index = input_idx
        return res

    def setup_output_hook(self, args):
        is_tuple = True
        if not isinstance(args, tuple):
            args = (args,)
            is_tuple = False
        res, output_idx = self._apply_on_tensors(self._output_hook, args, False)
        self.n_outputs = len(args)
        self.output_tensors_index = output_idx
        if not is_tuple:
            res = res[0]
        return res
