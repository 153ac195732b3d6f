"""cddp.optim.swa_utils — torch.optim.swa_utils: AveragedModel (SWA and EMA weight averaging),
SWALR (anneal to a constant SWA learning rate), update_bn (recompute BatchNorm statistics for
the averaged weights), and the avg_fn factories get_swa_avg_fn / get_ema_avg_fn /
get_swa_multi_avg_fn / get_ema_multi_avg_fn.

AveragedModel keeps torch's layout — the copy under `module.`, the count in the long buffer
`n_averaged` — so its state dict is torch's. torch's default (no avg_fn) runs the foreach
lerp on CPU tensors: averaged += (current - averaged) * (1 / (n + 1)); cddp computes that
same lerp per parameter.
"""
import itertools
import math
import warnings
from copy import deepcopy

from .. import _C
from ..autograd.grad_mode import no_grad
from ..nn.modules.module import Module
from .lr_scheduler import LRScheduler, _format_param

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn",
           "get_swa_multi_avg_fn", "get_ema_avg_fn", "get_swa_avg_fn"]


def _lerp_(start, end, weight):
    """start += weight * (end - start), torch.lerp_'s formula for a scalar weight (which it
    evaluates from end's side when weight >= 0.5)."""
    if weight < 0.5:
        start.add_((end - start) * weight)
    else:
        start.copy_(end - (end - start) * (1 - weight))


def get_ema_multi_avg_fn(decay=0.999):
    """multi_avg_fn for an exponential moving average: ema = decay*ema + (1-decay)*current."""
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in "
                         "[0,1] range.")

    def ema_update(ema_param_list, current_param_list, _):
        with no_grad():
            if ema_param_list[0].is_floating_point():
                for p_ema, p_model in zip(ema_param_list, current_param_list):
                    _lerp_(p_ema, p_model, 1 - decay)
            else:
                for p_ema, p_model in zip(ema_param_list, current_param_list):
                    p_ema.copy_(p_ema * decay + p_model * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn():
    """multi_avg_fn for the running mean: avg += (current - avg) / (n + 1)."""
    def swa_update(averaged_param_list, current_param_list, num_averaged):
        with no_grad():
            n = num_averaged.item() if isinstance(num_averaged, _C.Tensor) else num_averaged
            if averaged_param_list[0].is_floating_point():
                for p_avg, p_model in zip(averaged_param_list, current_param_list):
                    _lerp_(p_avg, p_model, 1 / (n + 1))
            else:
                # integer buffers (num_batches_tracked): the quotient truncated, as torch's
                # integer addcdiv_ leaves it
                for p_avg, p_model in zip(averaged_param_list, current_param_list):
                    p_avg.add_(((p_model - p_avg) / (n + 1)).to(p_avg.dtype))
    return swa_update


def get_ema_avg_fn(decay=0.999):
    """avg_fn for an exponential moving average (one tensor at a time)."""
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in "
                         "[0,1] range.")

    def ema_update(ema_param, current_param, num_averaged):
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn():
    """avg_fn for the running mean (one tensor at a time)."""
    def swa_update(averaged_param, current_param, num_averaged):
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)
    return swa_update


class AveragedModel(Module):
    """A deep copy of model whose parameters (and, with use_buffers, buffers) are the average
    of the model's over the update_parameters() calls."""

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", _C.tensor(0, dtype=_C.int64))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def update_parameters(self, model):
        """Fold model's current parameters into the average (the first call copies them)."""
        self_param = itertools.chain(self.module.parameters(), self.module.buffers()) \
            if self.use_buffers else self.parameters()
        model_param = itertools.chain(model.parameters(), model.buffers()) \
            if self.use_buffers else model.parameters()
        self_param_detached, model_param_detached = [], []
        copy_param = int(self.n_averaged.item()) == 0
        with no_grad():
            for p_averaged, p_model in zip(self_param, model_param):
                p_model_ = p_model.detach()
                self_param_detached.append(p_averaged.detach())
                model_param_detached.append(p_model_)
                if copy_param:
                    p_averaged.detach().copy_(p_model_)
            if int(self.n_averaged.item()) > 0:
                if self.multi_avg_fn is not None or self.avg_fn is None:
                    # torch groups by (device, dtype) for the foreach kernels: same result
                    groups = {}
                    for a, m in zip(self_param_detached, model_param_detached):
                        groups.setdefault(a.dtype, ([], []))
                        groups[a.dtype][0].append(a)
                        groups[a.dtype][1].append(m)
                    fn = self.multi_avg_fn or get_swa_multi_avg_fn()
                    for averaged, current in groups.values():
                        fn(averaged, current, self.n_averaged)
                else:
                    for p_averaged, p_model in zip(self_param_detached, model_param_detached):
                        p_averaged.copy_(self.avg_fn(p_averaged, p_model, self.n_averaged))
            if not self.use_buffers:
                # buffers are not averaged: the averaged model keeps the latest ones
                for b_swa, b_model in zip(self.module.buffers(), model.buffers()):
                    b_swa.detach().copy_(b_model.detach())
            self.n_averaged += 1


def update_bn(loader, model, device=None):
    """One pass over loader in training mode with momentum=None (a cumulative average), so
    every BatchNorm's running statistics are those of the averaged weights."""
    from ..nn.modules.batchnorm import _BatchNorm
    with no_grad():
        momenta = {}
        for module in model.modules():
            if isinstance(module, _BatchNorm):
                module.reset_running_stats()
                momenta[module] = module.momentum
        if not momenta:
            return
        was_training = model.training
        model.train()
        for module in momenta:
            module.momentum = None
        for input in loader:  # noqa: A001  (torch's name)
            if isinstance(input, (list, tuple)):
                input = input[0]  # noqa: A001
            if device is not None:
                input = input.to(device)  # noqa: A001
            model(input)
        for bn_module in momenta:
            bn_module.momentum = momenta[bn_module]
        model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's lr to swa_lr over anneal_epochs steps ("cos" or "linear"), then
    hold it."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos",
                 last_epoch=-1):
        swa_lrs = _format_param("swa_lr", optimizer, swa_lr)
        for swa_lr, group in zip(swa_lrs, optimizer.param_groups):
            group["swa_lr"] = swa_lr
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', "
                             f"instead got {anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self):
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, "
                          "please use `get_last_lr()`.", UserWarning, stacklevel=2)
        # the lr the schedule started from is recovered from the current one, so SWALR can
        # take over from any other scheduler mid-run
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_t = max(0, min(1, (step - 1) / max(1, self.anneal_epochs)))
        prev_alpha = self.anneal_func(prev_t)
        prev_lrs = [self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha)
                    for group in self.optimizer.param_groups]
        t = max(0, min(1, step / max(1, self.anneal_epochs)))
        alpha = self.anneal_func(t)
        return [group["swa_lr"] * alpha + lr * (1 - alpha)
                for group, lr in zip(self.optimizer.param_groups, prev_lrs)]

    def _set_anneal_func(self, anneal_strategy):
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" \
            else self._linear_anneal

    def state_dict(self):
        return {key: value for key, value in self.__dict__.items()
                if key not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
