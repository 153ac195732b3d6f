"""kl_divergence(p, q) = E_p[log p - log q], in closed form for the registered pairs of
families; register_kl adds a pair. The most specific registered pair for (type(p), type(q))
is used (the first match walking both classes' MROs)."""
import math

from .. import _C
from .bernoulli import Bernoulli
from .categorical import Categorical, OneHotCategorical
from .independent import Independent
from .multivariate_normal import MultivariateNormal, _half_log_det, _mahalanobis
from .normal import Laplace, Normal
from .uniform import Exponential, Uniform
from .utils import sum_rightmost

__all__ = ["register_kl", "kl_divergence"]

_KL_REGISTRY = {}


def register_kl(type_p, type_q):
    """Decorator: fn(p, q) computes KL(p || q) for p of type_p and q of type_q."""
    if not (isinstance(type_p, type) and isinstance(type_q, type)):
        raise TypeError("Expected type_p and type_q to be subclasses of Distribution")

    def decorator(fn):
        _KL_REGISTRY[type_p, type_q] = fn
        return fn
    return decorator


def _lookup(tp, tq):
    for a in tp.__mro__:
        for b in tq.__mro__:
            if (a, b) in _KL_REGISTRY:
                return _KL_REGISTRY[a, b]
    return None


def kl_divergence(p, q):
    fn = _lookup(type(p), type(q))
    if fn is None:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type "
                                  f"{type(p).__name__} and q type {type(q).__name__}")
    return fn(p, q)


def _inf_where(mask, t):
    return _C.where(mask, _C.full_like(t, math.inf), t)


def _zero_where(mask, t):
    return _C.where(mask, _C.zeros_like(t), t)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    # (s_p^2 / s_q^2 - log(s_p^2 / s_q^2) + (m_p - m_q)^2 / s_q^2 - 1) / 2
    r = (p.scale / q.scale) ** 2
    return (r - r.log() + ((p.loc - q.loc) / q.scale) ** 2 - 1) / 2


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    from ..nn.functional import softplus
    t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
    t1 = _zero_where(p.probs == 0, _inf_where(q.probs == 0, t1))
    t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
    t2 = _zero_where(p.probs == 1, _inf_where(q.probs == 1, t2))
    return t1 + t2


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = _zero_where((p.probs == 0).expand_as(t), _inf_where((q.probs == 0).expand_as(t), t))
    return t.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehot_onehot(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _inf_where((q.low > p.low) | (q.high < p.high), result)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    ratio = q.rate / p.rate
    return ratio - 1 - ratio.log()


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    d = (p.loc - q.loc).abs()
    return -scale_ratio.log() + d / q.scale + scale_ratio * (-d / p.scale).exp() - 1


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    n = p.reinterpreted_batch_ndims
    if n != q.reinterpreted_batch_ndims:
        raise NotImplementedError("KL between Independent distributions that reinterpret "
                                  "different numbers of batch dims")
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), n)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p, q):
    # KL = log|Lq| - log|Lp| + (|Lq^-1 Lp|_F^2 + |Lq^-1 (mq - mp)|^2 - n) / 2
    if p.event_shape != q.event_shape:
        raise ValueError("KL-divergence between two Multivariate Normals with different event "
                         "shapes cannot be computed")
    from ..linalg import solve
    Lp, Lq = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    term2 = solve(Lq, Lp).pow(2).sum((-2, -1))
    term3 = _mahalanobis(Lq, q.loc - p.loc)
    kl = _half_log_det(Lq) - _half_log_det(Lp) + 0.5 * (term2 + term3 - p.event_shape[0])
    shape = tuple(p.batch_shape)
    return kl.expand(shape) if shape and tuple(kl.shape) != shape else kl
