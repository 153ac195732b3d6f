"""Bernoulli(probs | logits): one of the two is given, the other computed on first use."""
from .. import _C
from .._size import Size
from ..autograd.grad_mode import no_grad
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["Bernoulli"]


def _one_of(probs, logits):
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")


class _BinaryParams:
    """A two-outcome parameter given as probs or logits (exactly one), the other derived on
    first use: Bernoulli, Geometric, LogitRelaxedBernoulli, ContinuousBernoulli, Binomial and
    NegativeBinomial keep theirs this way."""

    def _set_params(self, probs, logits, *others):
        """Broadcast `others` with the given parameter, store it as probs or logits (and as
        _param); the broadcast others are returned."""
        _one_of(probs, logits)
        *rest, param = broadcast_all(*others, probs if probs is not None else logits)
        setattr(self, "probs" if probs is not None else "logits", param)
        self._param = param
        return rest

    def _expand_params(self, new, batch_shape):
        for name in ("probs", "logits"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(batch_shape))
                new._param = getattr(new, name)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.size()


def _bce_with_logits(logits, target):
    """Elementwise binary cross-entropy from logits (what log_prob and entropy negate)."""
    from ..nn.functional import binary_cross_entropy_with_logits
    return binary_cross_entropy_with_logits(logits, target, reduction="none")


class Bernoulli(_BinaryParams, Distribution):
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._set_params(probs, logits)
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Bernoulli, _instance)
        batch_shape = Size(batch_shape)
        self._expand_params(new, batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return _C.where(self.probs == 0.5, _C.full_like(mode, float("nan")), mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        with no_grad():
            return _C.bernoulli(self.probs.expand(shape))

    def log_prob(self, value):
        self._check_value(value)
        from .._shape_ops import broadcast_tensors
        logits, value = broadcast_tensors(self.logits, value)
        return -_bce_with_logits(logits, value)

    def entropy(self):
        return _bce_with_logits(self.logits, self.probs)

    def enumerate_support(self, expand=True):
        values = _C.arange(2, dtype=self._param.dtype).reshape(
            (-1,) + (1,) * len(self._batch_shape))
        return values.expand((-1,) + tuple(self._batch_shape)) if expand else values
