"""Categorical(probs | logits) over {0, ..., K-1}, OneHotCategorical, its one-hot form, and
OneHotCategoricalStraightThrough (a one-hot sample whose gradient is that of probs).
probs are normalised over the last dim, logits to log-probabilities."""
import math

from .. import _C
from .._finfo import finfo
from .._size import Size
from ..autograd.grad_mode import no_grad
from . import constraints
from .bernoulli import _one_of
from .distribution import Distribution
from .utils import lazy_property, logits_to_probs, probs_to_logits

__all__ = ["Categorical", "OneHotCategorical", "OneHotCategoricalStraightThrough"]


class Categorical(Distribution):
    arg_constraints = {"probs": constraints.simplex,
                       "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        given, name = (probs, "probs") if probs is not None else (logits, "logits")
        if given.dim() < 1:
            raise ValueError(f"`{name}` parameter must be at least one-dimensional.")
        if name == "probs":
            self.probs = given / given.sum(-1, keepdim=True)
        else:                                # normalised: log-probabilities
            self.logits = given - given.logsumexp(-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.size()[-1]
        batch = self._param.size()[:-1] if self._param.dim() > 1 else Size()
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Categorical, _instance)
        batch_shape = Size(batch_shape)
        shape = tuple(batch_shape) + (self._num_events,)
        for name in ("probs", "logits"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(shape))
                new._param = getattr(new, name)
        new._num_events = self._num_events
        return self._expanded(new, batch_shape)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self):
        return self._param.size()

    @property
    def mean(self):
        return _C.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        return _C.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    def sample(self, sample_shape=Size()):
        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)
        with no_grad():
            probs_2d = self.probs.reshape(-1, self._num_events)
            drawn = _C.multinomial(probs_2d, math.prod(sample_shape), True).T   # (n, rows)
            return drawn.reshape(self._extended_shape(sample_shape))

    def log_prob(self, value):
        self._check_value(value)
        from .._shape_ops import broadcast_tensors
        index, log_pmf = broadcast_tensors(value.long().unsqueeze(-1), self.logits)
        return log_pmf.gather(-1, index[..., :1]).squeeze(-1)

    def entropy(self):
        logits = self.logits.clamp(min=finfo(self.logits.dtype).min)   # -inf * 0 would be nan
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand=True):
        values = _C.arange(self._num_events, dtype=_C.int64).reshape(
            (-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + tuple(self._batch_shape)) if expand else values


class OneHotCategorical(Distribution):
    arg_constraints = {"probs": constraints.simplex,
                       "logits": constraints.independent(constraints.real, 1)}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        param = self._categorical._param
        super().__init__(self._categorical.batch_shape, param.size()[-1:],
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(OneHotCategorical, _instance)
        new._categorical = self._categorical.expand(batch_shape)
        return self._expanded(new, Size(batch_shape), self.event_shape)

    @property
    def _param(self):
        return self._categorical._param

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def param_shape(self):
        return self._categorical.param_shape

    @property
    def mean(self):
        return self._categorical.probs

    @property
    def mode(self):
        from ..nn.functional import one_hot
        probs = self._categorical.probs
        return one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)

    @property
    def variance(self):
        p = self._categorical.probs
        return p * (1 - p)

    def sample(self, sample_shape=Size()):
        from ..nn.functional import one_hot
        idx = self._categorical.sample(sample_shape)
        return one_hot(idx, self._categorical._num_events).to(self.probs.dtype)

    def log_prob(self, value):
        self._check_value(value)
        return self._categorical.log_prob(value.max(-1)[1])

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand=True):
        k = self.event_shape[0]
        values = _C.eye(k, dtype=self._param.dtype).reshape(
            (k,) + (1,) * len(self.batch_shape) + (k,))
        return values.expand((k,) + tuple(self.batch_shape) + (k,)) if expand else values

    def __repr__(self):
        p = self._categorical._param
        name = "probs" if "probs" in self._categorical.__dict__ else "logits"
        return f"OneHotCategorical({name}: {p if p.numel() == 1 else p.size()})"


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """rsample: the one-hot sample in the forward pass, d/d probs of the identity in the
    backward (the straight-through estimator, Bengio et al. 2013)."""
    has_rsample = True

    def rsample(self, sample_shape=Size()):
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())
