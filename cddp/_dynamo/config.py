"""torch._dynamo.config: the knobs scripts set, with torch's defaults (cddp/_config_module.py)."""
import sys

from .._config_module import ConfigModule

sys.modules[__name__] = ConfigModule("torch._dynamo.config", {
    "suppress_errors": False, "cache_size_limit": 8, "recompile_limit": 8,
    "accumulated_cache_size_limit": 256, "accumulated_recompile_limit": 256,
    "optimize_ddp": True, "verbose": False, "capture_scalar_outputs": False,
    "capture_dynamic_output_shape_ops": False, "automatic_dynamic_shapes": True,
    "assume_static_by_default": True, "inline_inbuilt_nn_modules": True,
    "compiled_autograd": False, "specialize_int": False, "specialize_float": False,
    "force_parameter_static_shapes": True, "force_nn_module_property_static_shapes": True,
    "guard_nn_modules": True, "allow_unspec_int_on_nn_module": False,
    "error_on_recompile": False,
    "dynamic_shapes": True, "replay_record_enabled": False,
    "allow_rnn": False, "raise_on_ctx_manager_usage": True,
})
