"""The settings objects behind torch._dynamo.config, torch._inductor.config and
torch.compiler.config: scripts set their knobs (`torch._dynamo.config.suppress_errors = True`,
`torch._inductor.config.coordinate_descent_tuning = True`) before torch.compile. cddp compiles
nothing (cddp.compile hands the model back), so the knobs are recorded and read back, torch's
defaults and names kept; an unknown name raises AttributeError as torch's does, so a typo is
still caught."""
import contextlib
import copy


class ConfigModule:
    """Named settings with defaults; nested dicts are sub-settings (config.triton.cudagraphs)."""

    def __init__(self, name, defaults):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_values", {})
        for key, value in defaults.items():
            self._values[key] = (ConfigModule(f"{name}.{key}", value)
                                 if isinstance(value, dict) else value)

    def __getattr__(self, key):
        values = object.__getattribute__(self, "_values")
        if key in values:
            return values[key]
        raise AttributeError(f"{self._name}.{key} does not exist")

    def __setattr__(self, key, value):
        if key not in self._values or isinstance(self._values[key], ConfigModule):
            raise AttributeError(f"{self._name}.{key} does not exist")
        self._values[key] = value

    def __dir__(self):
        return sorted(self._values)

    def get_config_copy(self):
        return {k: (v.get_config_copy() if isinstance(v, ConfigModule) else copy.copy(v))
                for k, v in self._values.items()}

    @contextlib.contextmanager
    def patch(self, arg1=None, arg2=None, **changes):
        """Set knobs for a block (torch's config.patch("name", value) or patch(name=value))."""
        if arg1 is not None:
            changes = {arg1: arg2} if not isinstance(arg1, dict) else dict(arg1)
        old = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            yield
        finally:
            for k, v in old.items():
                setattr(self, k, v)
