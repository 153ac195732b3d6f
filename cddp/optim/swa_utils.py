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
        self.avg_fn, self.multi_avg_fn = avg_fn, multi_avg_fn
        self.use_buffers = use_buffers

    @staticmethod
    def _tracked(module, with_buffers):
        """The tensors that get averaged: parameters, then (with_buffers) buffers."""
        if not with_buffers:
            return module.parameters()
        return itertools.chain(module.parameters(), module.buffers())

    def update_parameters(self, model):
        """Fold model's current parameters into the average (the first call copies them)."""
        # with use_buffers the walk is over the inner copy; without, over self, whose
        # parameters are exactly the copy's (n_averaged is a buffer)
        ours = self._tracked(self.module if self.use_buffers else self, self.use_buffers)
        theirs = self._tracked(model, self.use_buffers)
        first_call = int(self.n_averaged.item()) == 0
        with no_grad():
            pairs = [(dst.detach(), src.detach()) for dst, src in zip(ours, theirs)]
            if first_call:
                for dst, src in pairs:
                    dst.copy_(src)
            elif self.avg_fn is not None and self.multi_avg_fn is None:
                for dst, src in pairs:
                    dst.copy_(self.avg_fn(dst, src, self.n_averaged))
            else:
                # torch batches by (device, dtype) for its foreach kernels; one device here,
                # so batching by dtype gives the same lists in the same order
                by_dtype = {}
                for dst, src in pairs:
                    dsts, srcs = by_dtype.setdefault(dst.dtype, ([], []))
                    dsts.append(dst)
                    srcs.append(src)
                update = self.multi_avg_fn or get_swa_multi_avg_fn()
                for dsts, srcs in by_dtype.values():
                    update(dsts, srcs, self.n_averaged)
            if not self.use_buffers:
                # buffers are not averaged: the averaged model keeps the latest ones
                for mine, latest in zip(self.module.buffers(), model.buffers()):
                    mine.detach().copy_(latest.detach())
            self.n_averaged += 1

    def forward(self, *args, **kwargs):
        """Runs the averaged copy."""
        return self.module(*args, **kwargs)


def update_bn(loader, model, device=None):
    """torch.optim.swa_utils.update_bn: one pass over loader in training mode with
    momentum=None (a cumulative average), so every BatchNorm's running statistics are those
    of the averaged weights. Does nothing when model has no BatchNorm."""
    from ..nn.modules.batchnorm import _BatchNorm
    norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    if not norms:
        return
    with no_grad():
        saved_momenta = []
        for bn in norms:
            bn.reset_running_stats()
            saved_momenta.append(bn.momentum)
            bn.momentum = None
        restore_training = model.training
        model.train()
        for batch in loader:
            # (input, target, ...) batches feed only their first element
            x = batch[0] if isinstance(batch, (list, tuple)) else batch
            model(x if device is None else x.to(device))
        for bn, momentum in zip(norms, saved_momenta):
            bn.momentum = momentum
        model.train(restore_training)


class SWALR(LRScheduler):
    """torch.optim.swa_utils.SWALR: anneal each group's lr to swa_lr over anneal_epochs steps
    ("cos" or "linear"), then hold it."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos",
                 last_epoch=-1):
        # same order of side effects and checks as torch: groups get swa_lr first
        for group, target in zip(optimizer.param_groups,
                                 _format_param("swa_lr", optimizer, swa_lr)):
            group["swa_lr"] = target
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', "
                             f"instead got {anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        valid_epochs = isinstance(anneal_epochs, int) and anneal_epochs >= 0
        if not valid_epochs:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    def _set_anneal_func(self, anneal_strategy):
        self._anneal_strategy = anneal_strategy
        self.anneal_func = {"cos": self._cosine_anneal}.get(anneal_strategy,
                                                            self._linear_anneal)

    @staticmethod
    def _cosine_anneal(t):
        # half a cosine period: 0 at t=0, 1 at t=1
        return 0.5 * (1 - math.cos(t * math.pi))

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        """Invert lr = alpha*swa_lr + (1-alpha)*start for start."""
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def _alpha(self, step):
        """anneal_func at the fraction of the annealing done by `step`, clamped to [0, 1]."""
        fraction = step / max(self.anneal_epochs, 1)
        # clamped in torch's order, so the ends come out as the ints 0 and 1 as in torch
        return self.anneal_func(min(1, max(0, fraction)))

    def get_lr(self):
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, "
                          "please use `get_last_lr()`.", UserWarning, stacklevel=2)
        # the lr the schedule started from is recovered from the current one, so SWALR can
        # take over from any other scheduler mid-run; with no annealing, step 0 counts as 1
        step = self._step_count - 1
        step = step if self.anneal_epochs else max(step, 1)
        before, now = self._alpha(step - 1), self._alpha(step)
        lrs = []
        for group in self.optimizer.param_groups:
            start = self._get_initial_lr(group["lr"], group["swa_lr"], before)
            lrs.append(group["swa_lr"] * now + start * (1 - now))
        return lrs

    def state_dict(self):
        # anneal_func is a bound function; it is rebuilt from _anneal_strategy on load
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and k != "anneal_func"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
