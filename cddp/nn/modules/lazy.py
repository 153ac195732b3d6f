"""LazyModuleMixin (torch.nn.modules.lazy): modules whose parameter shapes come from the first
input. A forward pre-hook calls initialize_parameters(*args) once, then the module becomes its
cls_to_become (LazyLinear -> Linear), as torch's. Loading a state dict into a module that has
not run yet materializes each uninitialized parameter to the saved shape first."""
from ..parameter import is_lazy


class LazyModuleMixin:
    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters)

    def has_uninitialized_params(self):
        return any(is_lazy(p) for p in self._parameters.values() if p is not None)

    def initialize_parameters(self, *args, **kwargs):
        raise NotImplementedError(f"initialize_parameters is not implemented for "
                                  f"{self.__class__.__name__}")

    def _infer_parameters(self, module, args):
        module.initialize_parameters(*args)
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        module._initialize_hook.remove()
        del module._initialize_hook
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # uninitialized parameters are saved as themselves (torch's state_dict shows
        # <UninitializedParameter>), the rest as usual
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if (is_lazy(param) or keep_vars) \
                    else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs, assign=False):
        for name, param in self._parameters.items():
            key = prefix + name
            if param is not None and is_lazy(param) and key in state_dict \
                    and not is_lazy(state_dict[key]):
                param.materialize(state_dict[key].shape)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs, assign)
