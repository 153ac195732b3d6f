"""torch.distributed.optim.PostLocalSGDOptimizer: an optimizer whose step() is the wrapped
optimizer's step followed by the averager's average_parameters (local SGD with periodic
model averaging). Its state dict adds the averager's "step"."""
import warnings

__all__ = ["PostLocalSGDOptimizer"]


class PostLocalSGDOptimizer:
    def __init__(self, optim, averager):
        self.optim = optim
        self.param_groups = self.optim.param_groups
        self.averager = averager

    @property
    def state(self):
        return self.optim.state

    def __repr__(self):
        return self.optim.__repr__()

    def state_dict(self):
        sd = self.optim.state_dict()
        sd["step"] = self.averager.step
        return sd

    def load_state_dict(self, state_dict):
        self.optim.load_state_dict(state_dict)
        if "step" in state_dict:
            self.averager.step = state_dict["step"]
        else:
            warnings.warn("Loaded state dict does not contain a step counter for an averager. "
                          "Setting step counter to 0.", stacklevel=2)
            self.averager.step = 0

    def step(self):
        self.optim.step()
        self.averager.average_parameters(params=self.param_groups)

    def zero_grad(self, set_to_none=True):
        self.optim.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group):
        self.optim.add_param_group(param_group)
