"""cddp.distributions: Normal, Uniform, Bernoulli, Categorical, OneHotCategorical, Exponential,
Laplace, Independent and MultivariateNormal (covariance / scale_tril / precision), their
kl_divergence pairs, register_kl, constraints, utils, argument/support validation, expand,
and sampling.

Oracles:
  * closed forms in NumPy/math for log_prob, entropy, mean, mode, variance, stddev, cdf and icdf
    (the Normal icdf through Newton's method on math.erf) and for every KL pair, in float64
    (tight) and float32 (rtol ~1e-5, dtype kept);
  * central finite differences of those NumPy closed forms (float64) for the gradients of
    log_prob, entropy, cdf, icdf and kl with respect to the parameters; finite differences of
    cddp's own seeded rsample for the reparameterised gradients, plus explicit
    d(loc + scale*eps) formulas for Normal;
  * torch.distributions, when importable, on the same parameters: values and gradients in
    float64, values in float32, and sample()/rsample() numbers after the same manual_seed
    (cddp's generator draws what torch's draws);
  * torch-free statistics of 20000 samples (mean, variance, frequencies, covariance) with loose
    tolerances;
  * error classes as torch's: ValueError for invalid parameters and values outside the support,
    NotImplementedError for an unregistered KL pair or Bernoulli.rsample.
Covariance and precision matrices are built as (A + A^T)/2 of a leaf A (SPD for the seeds used)
so that every element perturbation keeps them symmetric; scale_tril as tril(A) with a positive
diagonal.
"""
import importlib
import math

import numpy as np
import pytest

import cddp
from conftest import n, numeric_grad, t

# works both for cddp and, in a scratch copy that aliases torch as cddp, for torch itself
D = importlib.import_module(cddp.__name__ + ".distributions")
constraints = importlib.import_module(cddp.__name__ + ".distributions.constraints")
dist_utils = importlib.import_module(cddp.__name__ + ".distributions.utils")
kl_module = importlib.import_module(cddp.__name__ + ".distributions.kl")

LOG2PI = math.log(2 * math.pi)


# ---- inputs -------------------------------------------------------------------------------

def rng(seed):
    return np.random.default_rng(seed)


def randn(shape, seed):
    return rng(seed).standard_normal(shape)


def pos(shape, seed, lo=0.5, hi=2.0):
    return rng(seed).uniform(lo, hi, shape)


def spd(k, seed):
    x = randn((k, k), seed)
    return x @ x.T + k * np.eye(k)


def tril_pos(shape, seed):
    a = np.tril(randn(shape, seed))
    idx = np.arange(shape[-1])
    a[..., idx, idx] = pos(shape[:-1], seed + 1)
    return a


def onehot(idx, k):
    return np.eye(k)[idx]


def sym(x):
    return (x + x.transpose(-2, -1)) / 2


def nsym(a):
    return (a + np.swapaxes(a, -1, -2)) / 2


def logsumexp(a, axis=-1):
    m = a.max(axis=axis, keepdims=True)
    return m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))


def log_softmax(a):
    return a - logsumexp(a)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


_erf = np.vectorize(math.erf)


def np_normal_cdf(x, mu, s):
    return 0.5 * (1 + _erf((x - mu) / (s * math.sqrt(2))))


def np_normal_icdf(p, mu, s):
    """Newton's method on the standard normal cdf (independent of any erfinv)."""
    z = np.zeros(np.broadcast(p, mu, s).shape)
    for _ in range(60):
        z = z - (np_normal_cdf(z, 0.0, 1.0) - p) / (np.exp(-z * z / 2) / math.sqrt(2 * math.pi))
    return mu + s * z


def np_mvn_lp(x, mu, cov):
    k = mu.shape[-1]
    d = x - mu
    d = np.broadcast_to(d, np.broadcast_shapes(d.shape[:-1], cov.shape[:-2]) + (k,))
    sol = np.linalg.solve(np.broadcast_to(cov, d.shape + (k,)), d[..., None])[..., 0]
    return -0.5 * (k * LOG2PI + np.linalg.slogdet(cov)[1] + (d * sol).sum(-1))


def np_mvn_entropy(cov):
    k = cov.shape[-1]
    return 0.5 * k * (1 + LOG2PI) + 0.5 * np.linalg.slogdet(cov)[1]


def nan_like(shape):
    return np.full(shape, np.nan)


# ---- the case table -----------------------------------------------------------------------

class Case:
    """One distribution: build(DM, *params) with DM the distributions module (cddp's or
    torch's); NumPy closed forms take the float64 parameter arrays."""

    def __init__(self, id, build, params, value, lp, ent, mean, var, mode, batch, event,
                 rsample, discrete=False, cdf=None, icdf=None, cdf_value=None):
        self.id, self.build, self.params, self.value = id, build, params, value
        self.lp, self.ent, self.mean, self.var, self.mode = lp, ent, mean, var, mode
        self.batch, self.event, self.rsample, self.discrete = batch, event, rsample, discrete
        self.cdf, self.icdf, self.cdf_value = cdf, icdf, cdf_value

    def __repr__(self):
        return self.id

    def shape(self):
        return self.batch + self.event


def _bcast(f, shape):
    return lambda *p: np.broadcast_to(f(*p), shape)


def _normal_case():
    loc, scale = randn((3, 1), 1), pos((4,), 2)
    B = (3, 4)
    return Case(
        "normal", lambda DM, l, s: DM.Normal(l, s), [loc, scale], randn((2, 3, 4), 3),
        lp=lambda x, m, s: -((x - m) ** 2) / (2 * s ** 2) - np.log(s) - 0.5 * LOG2PI,
        ent=_bcast(lambda m, s: 0.5 + 0.5 * LOG2PI + np.log(s) + 0 * m, B),
        mean=_bcast(lambda m, s: m + 0 * s, B), var=_bcast(lambda m, s: s ** 2 + 0 * m, B),
        mode=_bcast(lambda m, s: m + 0 * s, B), batch=B, event=(), rsample=True,
        cdf=np_normal_cdf, icdf=np_normal_icdf, cdf_value=randn((2, 3, 4), 4))


def _uniform_case():
    low = randn((3,), 5)
    high = low + pos((2, 1), 6)    # batch (2, 3)
    u = rng(7).uniform(0.05, 0.95, (4, 2, 3))
    value = low + u * (high - low)
    return Case(
        "uniform", lambda DM, lo, hi: DM.Uniform(lo, hi), [low, high], value,
        lp=lambda x, lo, hi: np.broadcast_to(-np.log(hi - lo), x.shape),
        ent=lambda lo, hi: np.log(hi - lo), mean=lambda lo, hi: (lo + hi) / 2,
        var=lambda lo, hi: (hi - lo) ** 2 / 12, mode=lambda lo, hi: nan_like((2, 3)),
        batch=(2, 3), event=(), rsample=True,
        cdf=lambda x, lo, hi: np.clip((x - lo) / (hi - lo), 0, 1),
        icdf=lambda p, lo, hi: lo + p * (hi - lo), cdf_value=value)


def _bern_lp(x, p):
    return x * np.log(p) + (1 - x) * np.log1p(-p)


def _bern_ent(p):
    return -(p * np.log(p) + (1 - p) * np.log1p(-p))


def _bernoulli_probs_case():
    probs = rng(8).uniform(0.1, 0.9, (2, 3))
    return Case(
        "bernoulli_probs", lambda DM, p: DM.Bernoulli(probs=p), [probs],
        (rng(9).random((4, 2, 3)) < 0.5).astype(np.float64),
        lp=_bern_lp, ent=_bern_ent, mean=lambda p: p, var=lambda p: p * (1 - p),
        mode=lambda p: (p >= 0.5).astype(np.float64), batch=(2, 3), event=(), rsample=False,
        discrete=True)


def _bernoulli_logits_case():
    logits = randn((2, 3), 10)
    return Case(
        "bernoulli_logits", lambda DM, l: DM.Bernoulli(logits=l), [logits],
        (rng(11).random((2, 3)) < 0.5).astype(np.float64),
        lp=lambda x, l: _bern_lp(x, sigmoid(l)), ent=lambda l: _bern_ent(sigmoid(l)),
        mean=sigmoid, var=lambda l: sigmoid(l) * (1 - sigmoid(l)),
        mode=lambda l: (l >= 0).astype(np.float64), batch=(2, 3), event=(), rsample=False,
        discrete=True)


def _cat_lp_from_logp(x, logp):
    logp = np.broadcast_to(logp, x.shape + logp.shape[-1:])
    return np.take_along_axis(logp, x[..., None], -1)[..., 0]


def _norm_logp(p):
    return np.log(p / p.sum(-1, keepdims=True))


def _categorical_probs_case():
    probs = pos((2, 3, 5), 12, 0.2, 2.0)       # unnormalised: the distribution normalises
    return Case(
        "categorical_probs", lambda DM, p: DM.Categorical(probs=p), [probs],
        rng(13).integers(0, 5, (4, 2, 3)),
        lp=lambda x, p: _cat_lp_from_logp(x, _norm_logp(p)),
        ent=lambda p: -(np.exp(_norm_logp(p)) * _norm_logp(p)).sum(-1),
        mean=lambda p: nan_like((2, 3)), var=lambda p: nan_like((2, 3)),
        mode=lambda p: p.argmax(-1), batch=(2, 3), event=(), rsample=False, discrete=True)


def _categorical_logits_case():
    logits = randn((3, 4), 14)
    return Case(
        "categorical_logits", lambda DM, l: DM.Categorical(logits=l), [logits],
        rng(15).integers(0, 4, (2, 3)),
        lp=lambda x, l: _cat_lp_from_logp(x, log_softmax(l)),
        ent=lambda l: -(np.exp(log_softmax(l)) * log_softmax(l)).sum(-1),
        mean=lambda l: nan_like((3,)), var=lambda l: nan_like((3,)),
        mode=lambda l: l.argmax(-1), batch=(3,), event=(), rsample=False, discrete=True)


def _onehot_case():
    probs = pos((2, 4), 16, 0.2, 2.0)
    P = lambda p: p / p.sum(-1, keepdims=True)  # noqa: E731
    return Case(
        "onehot", lambda DM, p: DM.OneHotCategorical(probs=p), [probs],
        onehot(rng(17).integers(0, 4, (3, 2)), 4),
        lp=lambda x, p: (x * _norm_logp(p)).sum(-1),
        ent=lambda p: -(P(p) * np.log(P(p))).sum(-1),
        mean=P, var=lambda p: P(p) * (1 - P(p)), mode=lambda p: onehot(p.argmax(-1), 4),
        batch=(2,), event=(4,), rsample=False, discrete=True)


def _exponential_case():
    rate = pos((2, 3), 18)
    return Case(
        "exponential", lambda DM, r: DM.Exponential(r), [rate], pos((4, 2, 3), 19, 0.01, 3.0),
        lp=lambda x, r: np.log(r) - r * x, ent=lambda r: 1 - np.log(r),
        mean=lambda r: 1 / r, var=lambda r: r ** -2.0, mode=lambda r: 0 * r,
        batch=(2, 3), event=(), rsample=True,
        cdf=lambda x, r: 1 - np.exp(-r * x), icdf=lambda p, r: -np.log1p(-p) / r,
        cdf_value=pos((2, 3), 20, 0.01, 3.0))


def _laplace_case():
    loc, scale = randn((3,), 21), pos((2, 1), 22)
    B = (2, 3)
    return Case(
        "laplace", lambda DM, l, s: DM.Laplace(l, s), [loc, scale], randn((2, 3), 23),
        lp=lambda x, m, b: -np.log(2 * b) - np.abs(x - m) / b,
        ent=_bcast(lambda m, b: 1 + np.log(2 * b) + 0 * m, B),
        mean=_bcast(lambda m, b: m + 0 * b, B), var=_bcast(lambda m, b: 2 * b ** 2 + 0 * m, B),
        mode=_bcast(lambda m, b: m + 0 * b, B), batch=B, event=(), rsample=True,
        cdf=lambda x, m, b: np.where(x < m, 0.5 * np.exp((x - m) / b),
                                     1 - 0.5 * np.exp(-(x - m) / b)),
        icdf=lambda p, m, b: m - b * np.sign(p - 0.5) * np.log1p(-2 * np.abs(p - 0.5)),
        cdf_value=randn((5, 2, 3), 24))


def _independent_case():
    loc, scale = randn((2, 3, 4), 25), pos((2, 3, 4), 26)
    nlp = lambda x, m, s: -((x - m) ** 2) / (2 * s ** 2) - np.log(s) - 0.5 * LOG2PI  # noqa
    return Case(
        "independent_normal", lambda DM, l, s: DM.Independent(DM.Normal(l, s), 2),
        [loc, scale], randn((5, 2, 3, 4), 27),
        lp=lambda x, m, s: nlp(x, m, s).sum((-1, -2)),
        ent=lambda m, s: (0.5 + 0.5 * LOG2PI + np.log(s)).sum((-1, -2)),
        mean=lambda m, s: m, var=lambda m, s: s ** 2, mode=lambda m, s: m,
        batch=(2,), event=(3, 4), rsample=True)


def _mvn_cov_case():
    loc, A = randn((2, 3), 28), spd(3, 29)
    return Case(
        "mvn_covariance", lambda DM, l, a: DM.MultivariateNormal(l, covariance_matrix=sym(a)),
        [loc, A], randn((4, 2, 3), 30),
        lp=lambda x, m, a: np_mvn_lp(x, m, nsym(a)),
        ent=lambda m, a: np.broadcast_to(np_mvn_entropy(nsym(a)), (2,)),
        mean=lambda m, a: m, var=lambda m, a: np.broadcast_to(np.diag(nsym(a)), (2, 3)),
        mode=lambda m, a: m, batch=(2,), event=(3,), rsample=True)


def _mvn_tril_case():
    loc, A = randn((3,), 31), tril_pos((2, 3, 3), 32)
    C = lambda a: np.tril(a) @ np.swapaxes(np.tril(a), -1, -2)  # noqa: E731
    return Case(
        "mvn_scale_tril", lambda DM, l, a: DM.MultivariateNormal(l, scale_tril=a.tril()),
        [loc, A], randn((2, 3), 33),
        lp=lambda x, m, a: np_mvn_lp(x, m, C(a)), ent=lambda m, a: np_mvn_entropy(C(a)),
        mean=lambda m, a: np.broadcast_to(m, (2, 3)),
        var=lambda m, a: np.diagonal(C(a), axis1=-2, axis2=-1),
        mode=lambda m, a: np.broadcast_to(m, (2, 3)), batch=(2,), event=(3,), rsample=True)


def _mvn_precision_case():
    loc, A = randn((3,), 34), spd(3, 35)
    C = lambda a: np.linalg.inv(nsym(a))  # noqa: E731
    return Case(
        "mvn_precision", lambda DM, l, a: DM.MultivariateNormal(l, precision_matrix=sym(a)),
        [loc, A], randn((2, 3), 36),
        lp=lambda x, m, a: np_mvn_lp(x, m, C(a)), ent=lambda m, a: np_mvn_entropy(C(a)),
        mean=lambda m, a: m, var=lambda m, a: np.diag(C(a)), mode=lambda m, a: m,
        batch=(), event=(3,), rsample=True)


CASES = [_normal_case(), _uniform_case(), _bernoulli_probs_case(), _bernoulli_logits_case(),
         _categorical_probs_case(), _categorical_logits_case(), _onehot_case(),
         _exponential_case(), _laplace_case(), _independent_case(), _mvn_cov_case(),
         _mvn_tril_case(), _mvn_precision_case()]
CDF_CASES = [c for c in CASES if c.cdf is not None]
RSAMPLE_CASES = [c for c in CASES if c.rsample]
ids = lambda cs: [c.id for c in cs]  # noqa: E731


def cd(case, dtype=np.float64, requires_grad=False):
    """(cddp distribution, cddp parameter leaves) for a case."""
    ps = [t(p.astype(dtype), requires_grad=requires_grad) for p in case.params]
    return case.build(D, *ps), ps


def cvalue(case, dtype=np.float64):
    v = case.value
    return t(v if v.dtype.kind == "i" else v.astype(dtype))


def close(got, want, rtol=1e-10, atol=1e-12, msg=""):
    got = n(got) if not isinstance(got, np.ndarray) else got
    want = np.asarray(want)
    assert got.shape == want.shape, f"{msg}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=msg)


# ---- values against the closed forms (float64 and float32) ---------------------------------

@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_closed_forms_float64_and_float32(case):
    d, _ = cd(case)
    P = case.params
    assert tuple(d.batch_shape) == case.batch and tuple(d.event_shape) == case.event
    lp = d.log_prob(cvalue(case))
    assert lp.dtype == cddp.float64
    close(lp, case.lp(case.value, *P), msg="log_prob")
    close(d.entropy(), case.ent(*P), msg="entropy")
    close(d.perplexity(), np.exp(case.ent(*P)), msg="perplexity")
    shape = case.shape()
    close(d.mean, np.broadcast_to(case.mean(*P), shape), msg="mean")
    close(d.variance, np.broadcast_to(case.var(*P), shape), msg="variance")
    close(d.stddev, np.broadcast_to(np.sqrt(case.var(*P)), shape), msg="stddev")
    mode = d.mode
    want = np.broadcast_to(case.mode(*P), shape)
    close(mode if want.dtype.kind == "f" else mode.to(cddp.int64), want, msg="mode")
    # float32 parameters: float32 results, values within float32 rounding
    d, _ = cd(case, np.float32)
    P32 = [p.astype(np.float32).astype(np.float64) for p in case.params]
    v = case.value if case.value.dtype.kind == "i" else \
        case.value.astype(np.float32).astype(np.float64)
    lp = d.log_prob(cvalue(case, np.float32))
    assert lp.dtype == cddp.float32
    close(lp, case.lp(v, *P32), rtol=1e-5, atol=2e-5, msg="log_prob float32")
    ent = d.entropy()
    assert ent.dtype == cddp.float32
    close(ent, case.ent(*P32), rtol=1e-5, atol=2e-5, msg="entropy float32")
    s = d.sample((2,))
    assert tuple(s.shape) == (2,) + case.shape()
    if not case.id.startswith("categorical"):
        assert s.dtype == cddp.float32
    else:
        assert s.dtype == cddp.int64


@pytest.mark.parametrize("case", CDF_CASES, ids=ids(CDF_CASES))
def test_cdf_icdf_match_closed_forms_and_gradients(case):
    P = [p.copy() for p in case.params]
    x = case.cdf_value
    d, ps = cd(case, requires_grad=True)
    c = d.cdf(t(x))
    close(c, case.cdf(x, *P), msg="cdf")
    p = rng(40).uniform(0.05, 0.95, np.broadcast(x, *P).shape)
    q = d.icdf(t(p))
    close(q, case.icdf(p, *P), rtol=1e-9, atol=1e-10, msg="icdf")
    close(d.cdf(q), p, rtol=1e-9, atol=1e-10, msg="cdf(icdf(p))")
    for name, f, arg in (("cdf", case.cdf, x), ("icdf", case.icdf, p)):
        w, num = numeric_grad(lambda *ps_: f(arg, *ps_), P)
        for pp in ps:
            pp.grad = None
        out = getattr(d, name)(t(arg))
        out.backward(t(w))
        for i, (pp, g) in enumerate(zip(ps, num)):
            close(pp.grad, g, rtol=1e-5, atol=1e-6, msg=f"d {name} / d param {i}")


# ---- gradients against central finite differences of the closed forms -----------------------

@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_log_prob_and_entropy_gradients_match_finite_differences(case):
    P = [p.copy() for p in case.params]
    for name, f in (("log_prob", lambda *ps_: case.lp(case.value, *ps_)),
                    ("entropy", case.ent)):
        w, num = numeric_grad(f, P)
        d, ps = cd(case, requires_grad=True)
        out = d.log_prob(cvalue(case)) if name == "log_prob" else d.entropy()
        out.backward(t(w))
        for i, (pp, g) in enumerate(zip(ps, num)):
            got = np.zeros_like(g) if pp.grad is None else n(pp.grad)
            np.testing.assert_allclose(got, g, rtol=1e-5, atol=1e-6,
                                       err_msg=f"d {name} / d param {i}")


@pytest.mark.parametrize("case", RSAMPLE_CASES, ids=ids(RSAMPLE_CASES))
def test_rsample_gradients_match_finite_differences_of_the_seeded_draw(case):
    P = [p.copy() for p in case.params]

    def f(*ps_):
        cddp.manual_seed(5)
        with cddp.no_grad():
            return n(case.build(D, *[t(p) for p in ps_]).rsample((3,)))

    w, num = numeric_grad(f, P)
    d, ps = cd(case, requires_grad=True)
    cddp.manual_seed(5)
    x = d.rsample((3,))
    assert x.requires_grad and tuple(x.shape) == (3,) + case.shape()
    np.testing.assert_allclose(n(x), f(*P), rtol=1e-12, atol=1e-12)
    x.backward(t(w))
    for i, (pp, g) in enumerate(zip(ps, num)):
        close(pp.grad, g, rtol=1e-5, atol=1e-6, msg=f"d rsample / d param {i}")


def test_normal_rsample_gradient_is_the_reparameterisation():
    loc = t(randn((3, 1), 41), requires_grad=True)
    scale = t(pos((4,), 42), requires_grad=True)
    x = D.Normal(loc, scale).rsample((5,))
    assert tuple(x.shape) == (5, 3, 4)
    eps = (n(x) - n(loc)) / n(scale)
    w = randn((5, 3, 4), 43)
    x.backward(t(w))
    close(loc.grad, w.sum((0, 2))[:, None], msg="d/d loc = sum w")
    close(scale.grad, (w * eps).sum((0, 1)), msg="d/d scale = sum w*eps")


# ---- shapes, expand, sample vs rsample --------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_shapes_expand_and_sample_grad_flags(case):
    d, ps = cd(case, requires_grad=True)
    B, E = case.batch, case.event
    assert d.has_rsample is case.rsample
    for ss in [(), (2,), [2, 3], cddp.Size([4])]:
        s = d.sample(ss)
        assert tuple(s.shape) == tuple(ss) + B + E, ss
        assert not s.requires_grad
    if case.rsample:
        r = d.rsample((2,))
        assert tuple(r.shape) == (2,) + B + E and r.requires_grad
    else:
        with pytest.raises(NotImplementedError):
            d.rsample()
    # log_prob broadcasts the value's sample dims against batch_shape
    v = cvalue(case)
    assert tuple(d.log_prob(v).shape) == tuple(
        np.broadcast_shapes(case.value.shape[:len(case.value.shape) - len(E)], B))
    # expand adds leading batch dims; values are those of the original, broadcast
    new = (5,) + B
    e = d.expand(new)
    assert type(e) is type(d)
    assert tuple(e.batch_shape) == new and tuple(e.event_shape) == E
    assert tuple(e.sample((2,)).shape) == (2,) + new + E
    with cddp.no_grad():
        ve = e.sample((2,))
        close(e.log_prob(ve), n(d.log_prob(ve)))
        assert tuple(e.log_prob(ve).shape) == (2,) + new
        close(e.entropy(), np.broadcast_to(n(d.entropy()), new))
        close(e.mean, np.broadcast_to(n(d.mean), new + E))
        close(e.variance, np.broadcast_to(n(d.variance), new + E))
    if B:
        with pytest.raises(RuntimeError):
            d.expand((7,) * (len(B) + 1))


def test_broadcast_parameters_and_python_floats():
    d = D.Normal(t(np.zeros((3, 1))), t(np.ones(4)))
    assert tuple(d.batch_shape) == (3, 4) and tuple(d.loc.shape) == (3, 4)
    assert tuple(d.scale.shape) == (3, 4) and tuple(d.event_shape) == ()
    f = D.Normal(0.0, 1.0)
    assert tuple(f.batch_shape) == () and f.loc.dtype == cddp.float32
    close(f.log_prob(t(np.float32(0.5))), -0.125 - 0.5 * LOG2PI, rtol=1e-6)
    m = D.Normal(t(np.array([0.0, 1.0])), 2.0)
    assert m.scale.dtype == cddp.float64 and tuple(m.batch_shape) == (2,)
    close(m.log_prob(t(np.array([1.0, 1.0]))),
          [-1 / 8 - math.log(2) - 0.5 * LOG2PI, -math.log(2) - 0.5 * LOG2PI])
    u = D.Uniform(t(np.zeros((2, 1))), t(np.array([1.0, 2.0, 4.0])))
    assert tuple(u.batch_shape) == (2, 3)
    close(u.entropy(), np.log(np.broadcast_to([1.0, 2.0, 4.0], (2, 3))))
    e = D.Exponential(2.0)
    close(e.log_prob(t(np.float32(1.0))), math.log(2) - 2, rtol=1e-6)
    lap = D.Laplace(t(np.zeros(3)), 0.5)
    assert tuple(lap.batch_shape) == (3,) and lap.scale.dtype == cddp.float64


def test_independent_reinterprets_batch_dims():
    loc, scale = randn((2, 3, 4), 44), pos((2, 3, 4), 45)
    base = D.Normal(t(loc), t(scale))
    x = randn((5, 2, 3, 4), 46)
    blp = n(base.log_prob(t(x)))
    for k, (B, E) in enumerate([((2, 3, 4), ()), ((2, 3), (4,)), ((2,), (3, 4)), ((), (2, 3, 4))]):
        ind = D.Independent(base, k)
        assert tuple(ind.batch_shape) == B and tuple(ind.event_shape) == E
        assert ind.reinterpreted_batch_ndims == k and ind.base_dist is base
        want = blp.sum(tuple(range(-k, 0))) if k else blp
        close(ind.log_prob(t(x)), want)
        close(ind.entropy(), n(base.entropy()).sum(tuple(range(-k, 0))) if k else
              n(base.entropy()))
        assert tuple(ind.sample((7,)).shape) == (7, 2, 3, 4)
        assert ind.has_rsample
    assert not D.Independent(D.Bernoulli(t(np.full((2, 3), 0.3))), 1).has_rsample
    # nested Independent adds up the reinterpreted dims
    nested = D.Independent(D.Independent(base, 1), 1)
    assert tuple(nested.batch_shape) == (2,) and tuple(nested.event_shape) == (3, 4)
    close(nested.log_prob(t(x)), blp.sum((-1, -2)))
    # the support of an Independent is the base support reinterpreted
    s = D.Independent(D.Uniform(t(np.zeros((2, 3))), t(np.ones((2, 3)))), 1).support
    assert n(s.check(t(np.array([[0.5, 0.5, 0.5], [0.5, 1.5, 0.5]])))).tolist() == [True, False]


def test_enumerate_support():
    bp = rng(47).uniform(0.1, 0.9, (2, 3))
    b = D.Bernoulli(t(bp))
    es = n(b.enumerate_support())
    assert es.shape == (2, 2, 3) and (es[0] == 0).all() and (es[1] == 1).all()
    assert tuple(b.enumerate_support(expand=False).shape) == (2, 1, 1)
    close(b.log_prob(b.enumerate_support()).exp().sum(0), np.ones((2, 3)))
    c = D.Categorical(t(pos((2, 3, 5), 48)))
    es = n(c.enumerate_support())
    assert es.shape == (5, 2, 3) and (es == np.arange(5)[:, None, None]).all()
    assert es.dtype == np.int64
    assert tuple(c.enumerate_support(False).shape) == (5, 1, 1)
    close(c.log_prob(c.enumerate_support()).exp().sum(0), np.ones((2, 3)))
    o = D.OneHotCategorical(t(pos((2, 4), 49)))
    es = n(o.enumerate_support())
    assert es.shape == (4, 2, 4) and (es == np.eye(4)[:, None, :]).all()
    assert tuple(o.enumerate_support(expand=False).shape) == (4, 1, 4)
    close(o.log_prob(o.enumerate_support()).exp().sum(0), np.ones(2))
    assert c.has_enumerate_support and b.has_enumerate_support and o.has_enumerate_support
    assert not D.Normal(0.0, 1.0).has_enumerate_support
    with pytest.raises(NotImplementedError):
        D.Normal(0.0, 1.0).enumerate_support()


def test_zero_probabilities_edge_cases():
    """Zero probabilities: probs are clamped to [eps, 1 - eps] for logits (as torch), entropy
    treats 0 * log 0 as 0, the Bernoulli mode is nan at exactly 0.5, KL to a zero is inf."""
    eps = np.finfo(np.float64).eps
    c = D.Categorical(probs=t(np.array([0.0, 0.5, 0.5])))
    close(c.entropy(), math.log(2))
    close(c.log_prob(t(np.array([0, 1]))), [math.log(eps), -math.log(2)])
    b = D.Bernoulli(probs=t(np.array([0.0, 1.0, 0.5])))
    close(b.entropy(), [0.0, 0.0, math.log(2)], atol=1e-15)
    close(b.log_prob(t(np.ones(3))), [math.log(eps), 0.0, -math.log(2)], rtol=1e-9,
          atol=1e-15)
    m = n(b.mode)
    assert m[0] == 0 and m[1] == 1 and np.isnan(m[2])
    cl = D.Categorical(logits=t(np.array([-np.inf, 0.0, 1.0])))
    p = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    close(cl.probs, [0.0, p[0], p[1]])
    close(cl.entropy(), -(p * np.log(p)).sum())
    o = D.OneHotCategorical(probs=t(np.array([0.0, 0.25, 0.75])))
    close(o.entropy(), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    kb = n(D.kl_divergence(D.Bernoulli(t(np.array([0.3, 0.0]))),
                           D.Bernoulli(t(np.array([0.0, 0.5])))))
    assert kb[0] == math.inf
    np.testing.assert_allclose(kb[1], math.log(2), rtol=1e-12)
    kc = D.kl_divergence(D.Categorical(t(np.array([0.3, 0.7]))),
                         D.Categorical(t(np.array([0.0, 1.0]))))
    assert n(kc) == math.inf
    kc0 = D.kl_divergence(D.Categorical(t(np.array([0.0, 1.0]))),
                          D.Categorical(t(np.array([0.3, 0.7]))))
    close(kc0, -math.log(0.7))
    close(D.Normal(0.0, 1.0).icdf(t(np.array([0.0, 1.0], np.float32))), [-np.inf, np.inf])


def test_bernoulli_and_categorical_probs_logits_views():
    l = randn((2, 3), 50)
    b = D.Bernoulli(logits=t(l))
    close(b.probs, sigmoid(l))
    close(b.logits, l)
    p = rng(51).uniform(0.1, 0.9, (4,))
    bp = D.Bernoulli(probs=t(p))
    close(bp.logits, np.log(p) - np.log1p(-p))
    raw = pos((2, 5), 52)
    c = D.Categorical(probs=t(raw))
    close(c.probs, raw / raw.sum(-1, keepdims=True))
    close(c.logits, _norm_logp(raw))
    cl = D.Categorical(logits=t(l))
    close(cl.logits, log_softmax(l))
    close(cl.probs, np.exp(log_softmax(l)))
    assert tuple(cl.param_shape) == (2, 3)
    o = D.OneHotCategorical(logits=t(l))
    close(o.probs, np.exp(log_softmax(l)))
    assert tuple(o.event_shape) == (3,) and tuple(o.batch_shape) == (2,)


def test_multivariate_normal_parametrisations_agree():
    cov = spd(3, 53)
    L = np.linalg.cholesky(cov)
    P = np.linalg.inv(cov)
    loc = randn((2, 3), 54)
    x = randn((4, 2, 3), 55)
    want = np_mvn_lp(x, loc, cov)
    for kw in (dict(covariance_matrix=t(cov)), dict(scale_tril=t(L)),
               dict(precision_matrix=t(P))):
        d = D.MultivariateNormal(t(loc), **kw)
        assert tuple(d.batch_shape) == (2,) and tuple(d.event_shape) == (3,)
        close(d.log_prob(t(x)), want, msg=str(list(kw)))
        close(d.covariance_matrix, np.broadcast_to(cov, (2, 3, 3)), msg="covariance_matrix")
        close(d.scale_tril, np.broadcast_to(L, (2, 3, 3)), msg="scale_tril")
        close(d.precision_matrix, np.broadcast_to(P, (2, 3, 3)), rtol=1e-9, msg="precision")
        close(d.entropy(), np.broadcast_to(np_mvn_entropy(cov), (2,)))
        close(d.loc, loc)
    # batch from the matrix, loc broadcast
    covs = np.stack([spd(2, 56), spd(2, 57), spd(2, 58)])
    d = D.MultivariateNormal(t(np.zeros(2)), t(covs))
    assert tuple(d.batch_shape) == (3,) and tuple(d.loc.shape) == (3, 2)
    close(d.log_prob(t(np.ones(2))), np_mvn_lp(np.ones(2), np.zeros(2), covs))
    # rsample is loc + scale_tril @ standard normals: the same numbers as Normal's draws
    cddp.manual_seed(3)
    s = n(D.MultivariateNormal(t(loc), scale_tril=t(L)).rsample((4,)))
    cddp.manual_seed(3)
    eps = n(cddp.randn(4, 2, 3, dtype=cddp.float64))
    close(s, loc + eps @ L.T, rtol=1e-10)


# ---- statistics of many samples (torch-free) ------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_sample_statistics(case):
    N = 20000
    cddp.manual_seed(1234)
    d, _ = cd(case)
    s = n(d.sample((N,)))
    P = case.params
    if case.id.startswith("categorical"):
        K = P[0].shape[-1]
        freq = onehot(s, K).mean(0)
        probs = np.exp(_norm_logp(P[0]) if case.id == "categorical_probs" else
                       log_softmax(P[0]))
        assert (s >= 0).all() and (s < K).all()
        np.testing.assert_allclose(freq, probs, atol=6 * np.sqrt(0.25 / N))
        return
    mean = np.broadcast_to(case.mean(*P), case.shape())
    var = np.broadcast_to(case.var(*P), case.shape())
    assert np.all(np.abs(s.mean(0) - mean) <= 6 * np.sqrt(var / N) + 1e-9), case.id
    np.testing.assert_allclose(s.var(0), var, rtol=0.1)
    if case.id.startswith("mvn"):
        c = s - s.mean(0)
        emp = np.einsum("n...i,n...j->...ij", c, c) / N
        want = {"mvn_covariance": lambda: nsym(P[1]),
                "mvn_scale_tril": lambda: P[1] @ np.swapaxes(P[1], -1, -2),
                "mvn_precision": lambda: np.linalg.inv(nsym(P[1]))}[case.id]()
        sd = np.sqrt(np.diagonal(want, axis1=-2, axis2=-1))
        np.testing.assert_allclose(emp, np.broadcast_to(want, emp.shape),
                                   atol=0.1 * sd.max())
    if case.id == "uniform":
        assert (s >= P[0]).all() and (s < P[1]).all()
    if case.id == "exponential":
        assert (s >= 0).all()
    if case.id.startswith("bernoulli") or case.id == "onehot":
        assert set(np.unique(s)) <= {0.0, 1.0}
        if case.id == "onehot":
            assert (s.sum(-1) == 1).all()


# ---- validation ------------------------------------------------------------------------------

INVALID_PARAMS = [
    ("normal_scale_zero", lambda: D.Normal(t(np.zeros(2)), t(np.array([1.0, 0.0]))), "scale"),
    ("normal_scale_negative", lambda: D.Normal(0.0, -1.0), "scale"),
    ("uniform_low_ge_high", lambda: D.Uniform(t(np.array([0.0, 2.0])), t(np.array([1.0, 1.0]))),
     None),
    ("bernoulli_probs_gt_1", lambda: D.Bernoulli(t(np.array([0.2, 1.5]))), "probs"),
    ("bernoulli_both", lambda: D.Bernoulli(probs=t(np.array(0.3)), logits=t(np.array(0.1))),
     None),
    ("bernoulli_neither", lambda: D.Bernoulli(), None),
    ("categorical_negative", lambda: D.Categorical(t(np.array([0.5, -0.1, 0.6]))), "probs"),
    ("categorical_neither", lambda: D.Categorical(), None),
    ("onehot_both", lambda: D.OneHotCategorical(t(np.ones(3)), t(np.zeros(3))), None),
    ("exponential_rate_zero", lambda: D.Exponential(t(np.array([1.0, 0.0]))), "rate"),
    ("laplace_scale_negative", lambda: D.Laplace(0.0, -2.0), "scale"),
    ("independent_too_many_dims", lambda: D.Independent(D.Normal(t(np.zeros(3)), 1.0), 2), None),
    ("mvn_not_pd", lambda: D.MultivariateNormal(t(np.zeros(2)),
                                                t(np.array([[1.0, 2.0], [2.0, 1.0]]))), None),
    ("mvn_scalar_loc", lambda: D.MultivariateNormal(t(np.array(0.0)), t(np.eye(1))), None),
    ("mvn_no_matrix", lambda: D.MultivariateNormal(t(np.zeros(2))), None),
    ("mvn_two_matrices", lambda: D.MultivariateNormal(t(np.zeros(2)), t(np.eye(2)),
                                                      scale_tril=t(np.eye(2))), None),
    ("mvn_tril_not_lower", lambda: D.MultivariateNormal(
        t(np.zeros(2)), scale_tril=t(np.array([[1.0, 0.5], [0.0, 1.0]]))), "scale_tril"),
]

OUTSIDE_SUPPORT = [
    ("normal_nan", lambda: D.Normal(0.0, 1.0), np.array(np.nan, np.float32)),
    ("uniform_above", lambda: D.Uniform(0.0, 1.0), np.array([0.5, 1.5], np.float32)),
    ("bernoulli_half", lambda: D.Bernoulli(0.3), np.array([0.0, 0.5], np.float32)),
    ("categorical_too_big", lambda: D.Categorical(t(np.array([0.2, 0.8]))), np.array(2)),
    ("categorical_negative", lambda: D.Categorical(t(np.array([0.2, 0.8]))), np.array([-1, 0])),
    ("onehot_two_hot", lambda: D.OneHotCategorical(t(np.array([0.2, 0.8]))),
     np.array([1.0, 1.0])),
    ("exponential_negative", lambda: D.Exponential(1.0), np.array([1.0, -1.0], np.float32)),
    ("mvn_event_shape", lambda: D.MultivariateNormal(t(np.zeros(3)), t(np.eye(3))),
     np.zeros(2)),
]


def test_invalid_parameters_raise_value_error():
    for name, make, word in INVALID_PARAMS:
        with pytest.raises(ValueError) as e:
            make()
        if word is not None:
            msg = str(e.value)
            assert "Expected parameter " + word in msg and "constraint" in msg, (name, msg)


def test_values_outside_the_support_raise_value_error():
    for name, make, v in OUTSIDE_SUPPORT:
        d = make()
        with pytest.raises(ValueError) as e:
            d.log_prob(t(v))
        if name != "mvn_event_shape":
            assert "support" in str(e.value), (name, str(e.value))
    # cdf validates as log_prob does
    with pytest.raises(ValueError):
        D.Exponential(1.0).cdf(t(np.array(-1.0, np.float32)))


def test_validate_args_switch():
    # per instance
    d = D.Normal(0.0, -1.0, validate_args=False)
    assert n(d.scale) == -1.0
    u = D.Uniform(0.0, 1.0, validate_args=False)
    assert n(u.log_prob(t(np.array([2.0, 0.5], np.float32)))).tolist() == [-math.inf, 0.0]
    e = D.Exponential(2.0, validate_args=False)
    close(e.log_prob(t(np.array(-1.0, np.float32))), math.log(2) + 2, rtol=1e-6)
    with pytest.raises(ValueError):
        D.Normal(0.0, -1.0, validate_args=True)
    # the process-wide default
    D.Distribution.set_default_validate_args(False)
    try:
        D.Normal(0.0, -1.0)
        D.Exponential(-1.0)
        D.Normal(0.0, 1.0).log_prob(t(np.array(np.nan, np.float32)))
        with pytest.raises(ValueError):
            D.Normal(0.0, -1.0, validate_args=True)
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        D.Normal(0.0, -1.0)


# ---- constraints, utils, metadata --------------------------------------------------------------

def test_constraints_check():
    def chk(c, v):
        return n(c.check(t(np.array(v)))).tolist()

    assert chk(constraints.real, [1.0, np.nan, np.inf, -np.inf]) == [True, False, True, True]
    assert chk(constraints.positive, [1.0, 0.0, -1.0]) == [True, False, False]
    assert chk(constraints.nonnegative, [1.0, 0.0, -1.0]) == [True, True, False]
    assert chk(constraints.unit_interval, [0.0, 0.5, 1.0, 1.1, -0.1]) == \
        [True, True, True, False, False]
    assert chk(constraints.boolean, [0.0, 1.0, 0.5]) == [True, True, False]
    assert chk(constraints.simplex, [[0.2, 0.8], [0.5, 0.6], [-0.1, 1.1]]) == \
        [True, False, False]
    assert chk(constraints.greater_than(2.0), [2.0, 2.5]) == [False, True]
    assert chk(constraints.greater_than_eq(2.0), [2.0, 1.5]) == [True, False]
    assert chk(constraints.less_than(1.0), [0.5, 1.0]) == [True, False]
    assert chk(constraints.interval(0.0, 2.0), [0.0, 2.0, 2.5]) == [True, True, False]
    assert chk(constraints.half_open_interval(0.0, 2.0), [0.0, 2.0]) == [True, False]
    assert chk(constraints.integer_interval(0, 3), [0.0, 3.0, 1.5, 4.0]) == \
        [True, True, False, False]
    assert chk(constraints.nonnegative_integer, [0.0, 2.0, -1.0, 0.5]) == \
        [True, True, False, False]
    assert chk(constraints.one_hot, [[0.0, 1.0], [1.0, 1.0]]) == [True, False]
    assert chk(constraints.lower_cholesky, [[[1.0, 0.0], [2.0, 1.0]],
                                            [[1.0, 0.5], [0.0, 1.0]],
                                            [[-1.0, 0.0], [0.0, 1.0]]]) == [True, False, False]
    assert chk(constraints.positive_definite, [[[2.0, 1.0], [1.0, 2.0]],
                                               [[1.0, 2.0], [2.0, 1.0]]]) == [True, False]
    assert chk(constraints.independent(constraints.positive, 1),
               [[1.0, 2.0], [1.0, -2.0]]) == [True, False]
    assert constraints.real.event_dim == 0 and constraints.simplex.event_dim == 1
    assert constraints.positive_definite.event_dim == 2
    assert constraints.boolean.is_discrete and not constraints.real.is_discrete


def test_support_arg_constraints_and_flags():
    assert D.Normal(0.0, 1.0).support is constraints.real
    assert set(D.Normal.arg_constraints) == {"loc", "scale"}
    assert D.Normal.arg_constraints["scale"].check(t(np.array([1.0, 0.0]))).tolist() == \
        [True, False]
    assert set(D.Laplace.arg_constraints) == {"loc", "scale"}
    assert set(D.Exponential.arg_constraints) == {"rate"}
    assert set(D.Bernoulli.arg_constraints) == {"probs", "logits"}
    assert set(D.Categorical.arg_constraints) == {"probs", "logits"}
    assert set(D.MultivariateNormal.arg_constraints) == \
        {"loc", "covariance_matrix", "precision_matrix", "scale_tril"}
    assert D.Bernoulli(0.3).support is constraints.boolean
    assert D.Exponential(1.0).support is constraints.nonnegative
    assert D.OneHotCategorical(t(np.ones(3))).support is constraints.one_hot
    sup = D.Uniform(t(np.array([0.0, 1.0])), t(np.array([1.0, 3.0]))).support
    assert n(sup.check(t(np.array([0.5, 0.5])))).tolist() == [True, False]
    cs = D.Categorical(t(np.ones(3))).support
    assert n(cs.check(t(np.array([0, 2, 3])))).tolist() == [True, True, False]
    flags = {D.Normal: True, D.Uniform: True, D.Exponential: True, D.Laplace: True,
             D.MultivariateNormal: True, D.Bernoulli: False, D.Categorical: False,
             D.OneHotCategorical: False}
    for cls, f in flags.items():
        assert cls.has_rsample is f, cls
    for cls in (D.Normal, D.Uniform, D.Bernoulli, D.Categorical, D.OneHotCategorical,
                D.Exponential, D.Laplace, D.Independent, D.MultivariateNormal):
        assert issubclass(cls, D.Distribution)
    r = repr(D.Normal(t(np.zeros(2)), 1.0))
    assert r.startswith("Normal(") and "loc" in r and "scale" in r and "2" in r
    assert repr(D.Independent(D.Normal(t(np.zeros((2, 3))), 1.0), 1)).startswith(
        "Independent(Normal(")


def test_utils_probs_logits():
    p = np.array([0.1, 0.5, 0.9])
    close(dist_utils.probs_to_logits(t(p)), np.log(p))
    close(dist_utils.probs_to_logits(t(p), is_binary=True), np.log(p) - np.log1p(-p))
    l = randn((2, 4), 60)
    close(dist_utils.logits_to_probs(t(l)), np.exp(log_softmax(l)))
    close(dist_utils.logits_to_probs(t(l), is_binary=True), sigmoid(l))
    # probabilities are clamped to [eps, 1 - eps] so the logits stay finite
    e = np.finfo(np.float32).eps
    got = n(dist_utils.probs_to_logits(t(np.array([0.0, 1.0], np.float32)), is_binary=True))
    np.testing.assert_allclose(got, [math.log(e) - math.log1p(-e), math.log1p(-e) - math.log(e)],
                               rtol=1e-5)
    c = n(dist_utils.clamp_probs(t(np.array([0.0, 0.5, 1.0]))))
    eps64 = np.finfo(np.float64).eps
    np.testing.assert_array_equal(c, [eps64, 0.5, 1 - eps64])


# ---- KL divergence ---------------------------------------------------------------------------

class KL:
    def __init__(self, id, build_p, build_q, pp, qp, ref):
        self.id, self.build_p, self.build_q, self.pp, self.qp, self.ref = \
            id, build_p, build_q, pp, qp, ref

    def make(self, DM, ps):
        k = len(self.pp)
        return self.build_p(DM, *ps[:k]), self.build_q(DM, *ps[k:])


def _kl_normal(m1, s1, m2, s2):
    return np.log(s2 / s1) + (s1 ** 2 + (m1 - m2) ** 2) / (2 * s2 ** 2) - 0.5


def _kl_cat(l1, l2):
    a, b = log_softmax(l1), log_softmax(l2)
    return (np.exp(a) * (a - b)).sum(-1)


def _kl_mvn(m1, a1, m2, a2):
    S1, S2 = nsym(a1), nsym(a2)
    k = m1.shape[-1]
    d = m2 - m1
    inv2 = np.linalg.inv(S2)
    return 0.5 * (np.trace(inv2 @ S1, axis1=-2, axis2=-1)
                  + np.einsum("...i,...ij,...j->...", d, inv2, d) - k
                  + np.linalg.slogdet(S2)[1] - np.linalg.slogdet(S1)[1])


_ul = randn((2, 3), 70)
KL_CASES = [
    KL("normal", lambda DM, m, s: DM.Normal(m, s), lambda DM, m, s: DM.Normal(m, s),
       [randn((3, 1), 71), pos((3, 1), 72)], [randn((4,), 73), pos((4,), 74)], _kl_normal),
    KL("bernoulli", lambda DM, p: DM.Bernoulli(probs=p), lambda DM, l: DM.Bernoulli(logits=l),
       [rng(75).uniform(0.1, 0.9, (2, 3))], [randn((2, 3), 76)],
       lambda p, l: _bern_lp(1.0, p) * p + _bern_lp(0.0, p) * (1 - p)
       - (np.log(sigmoid(l)) * p + np.log1p(-sigmoid(l)) * (1 - p))),
    KL("categorical", lambda DM, p: DM.Categorical(probs=p),
       lambda DM, l: DM.Categorical(logits=l),
       [pos((2, 5), 77, 0.2, 2.0)], [randn((3, 1, 5), 78)],
       lambda p, l: _kl_cat(np.log(p), l)),
    KL("onehot", lambda DM, l: DM.OneHotCategorical(logits=l),
       lambda DM, l: DM.OneHotCategorical(logits=l),
       [randn((2, 4), 79)], [randn((2, 4), 80)], _kl_cat),
    KL("uniform", lambda DM, lo, hi: DM.Uniform(lo, hi), lambda DM, lo, hi: DM.Uniform(lo, hi),
       [_ul, _ul + pos((2, 3), 81)], [_ul - pos((2, 3), 82, 0.1, 1.0),
                                      _ul + pos((2, 3), 83, 2.5, 3.0)],
       lambda l1, h1, l2, h2: np.log((h2 - l2) / (h1 - l1))),
    KL("exponential", lambda DM, r: DM.Exponential(r), lambda DM, r: DM.Exponential(r),
       [pos((2, 3), 84)], [pos((3,), 85)], lambda a, b: np.log(a / b) + b / a - 1),
    KL("laplace", lambda DM, m, b: DM.Laplace(m, b), lambda DM, m, b: DM.Laplace(m, b),
       [randn((2, 3), 86), pos((2, 3), 87)], [randn((2, 3), 88), pos((3,), 89)],
       lambda m1, b1, m2, b2: np.log(b2 / b1) + np.abs(m1 - m2) / b2
       + b1 / b2 * np.exp(-np.abs(m1 - m2) / b1) - 1),
    KL("independent_normal", lambda DM, m, s: DM.Independent(DM.Normal(m, s), 1),
       lambda DM, m, s: DM.Independent(DM.Normal(m, s), 1),
       [randn((2, 3), 90), pos((2, 3), 91)], [randn((2, 3), 92), pos((2, 3), 93)],
       lambda m1, s1, m2, s2: _kl_normal(m1, s1, m2, s2).sum(-1)),
    KL("mvn", lambda DM, m, a: DM.MultivariateNormal(m, covariance_matrix=sym(a)),
       lambda DM, m, a: DM.MultivariateNormal(m, covariance_matrix=sym(a)),
       [randn((2, 3), 94), spd(3, 95)], [randn((3,), 96), spd(3, 97)], _kl_mvn),
]


@pytest.mark.parametrize("kc", KL_CASES, ids=[k.id for k in KL_CASES])
def test_kl_divergence_matches_closed_form_and_finite_differences(kc):
    P = [p.copy() for p in kc.pp + kc.qp]
    want = kc.ref(*P)
    ps = [t(p, requires_grad=True) for p in P]
    p, q = kc.make(D, ps)
    kl = D.kl_divergence(p, q)
    close(kl, want, msg="kl")
    assert tuple(kl.shape) == tuple(np.broadcast_shapes(tuple(p.batch_shape),
                                                        tuple(q.batch_shape)))
    close(kl_module.kl_divergence(p, q), want, msg="kl via the kl module")
    # KL(p || p) = 0
    close(D.kl_divergence(p, p), np.zeros(tuple(p.batch_shape)), atol=1e-12)
    w, num = numeric_grad(kc.ref, P)
    kl.backward(t(w))
    for i, (pp, g) in enumerate(zip(ps, num)):
        close(pp.grad, g, rtol=1e-5, atol=1e-6, msg=f"d kl / d param {i}")


def test_kl_uniform_not_contained_is_infinite_and_float32():
    p = D.Uniform(t(np.array([0.0, 0.6])), t(np.array([1.0, 1.0])))
    q = D.Uniform(0.5, 2.0)
    got = n(D.kl_divergence(p, q))
    assert got[0] == math.inf
    np.testing.assert_allclose(got[1], math.log(1.5 / 0.4), rtol=1e-6)
    k = D.kl_divergence(D.Normal(t(np.float32([0.0, 1.0])), 1.0), D.Normal(0.5, 2.0))
    assert k.dtype == cddp.float32
    close(k, _kl_normal(np.array([0.0, 1.0]), 1.0, 0.5, 2.0), rtol=1e-5, atol=1e-6)


def test_kl_unregistered_pairs_raise_not_implemented():
    with pytest.raises(NotImplementedError):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Categorical(t(np.ones(3))))
    with pytest.raises(NotImplementedError):
        D.kl_divergence(D.Categorical(t(np.ones(3))), D.Laplace(0.0, 1.0))
    base = D.Normal(t(np.zeros((2, 3))), 1.0)
    with pytest.raises(NotImplementedError):
        D.kl_divergence(D.Independent(base, 1), D.Independent(base, 2))


def test_register_kl_dispatch():
    class MyNormal(D.Normal):
        pass

    class MyOther(D.Normal):
        pass

    calls = []

    @D.register_kl(MyNormal, MyNormal)
    def _kl_mine(p, q):
        calls.append((p, q))
        return (p.loc - q.loc) * 0 + 42.0

    p, q = MyNormal(t(np.zeros(2)), 1.0), MyNormal(t(np.ones(2)), 2.0)
    close(D.kl_divergence(p, q), [42.0, 42.0])
    assert calls == [(p, q)]
    # subclasses without their own rule use the parent's (Normal, Normal) rule
    o = MyOther(t(np.zeros(2)), 1.0)
    close(D.kl_divergence(o, q), _kl_normal(0.0, 1.0, np.ones(2), 2.0))
    assert len(calls) == 1
    assert kl_module.register_kl is D.register_kl


# ---- against torch ---------------------------------------------------------------------------

def tdist(torch, case, dtype=np.float64, requires_grad=False):
    ps = [torch.from_numpy(p.astype(dtype)).requires_grad_(requires_grad) for p in case.params]
    return case.build(torch.distributions, *ps), ps


def tvalue(torch, case, dtype=np.float64):
    v = case.value
    return torch.from_numpy(v.copy() if v.dtype.kind == "i" else v.astype(dtype))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_values_and_gradients_match_torch(torch, case):
    d, ps = cd(case, requires_grad=True)
    td, tps = tdist(torch, case, requires_grad=True)
    lp, tlp = d.log_prob(cvalue(case)), td.log_prob(tvalue(torch, case))
    close(lp, tlp.detach().numpy(), msg="log_prob")
    ent, tent = d.entropy(), td.entropy()
    close(ent, tent.detach().numpy(), msg="entropy")
    for a in ("mean", "variance", "stddev"):
        close(getattr(d, a), getattr(td, a).detach().numpy(), msg=a)
    tm = td.mode.detach().numpy()
    close(n(d.mode).astype(tm.dtype), tm, msg="mode")
    w = randn(tuple(tlp.shape), 99)
    w2 = randn(tuple(tent.shape), 98)
    (lp * t(w)).sum().add((ent * t(w2)).sum()).backward()
    ((tlp * torch.from_numpy(w)).sum() + (tent * torch.from_numpy(w2)).sum()).backward()
    for i, (pp, tp) in enumerate(zip(ps, tps)):
        close(pp.grad, tp.grad.numpy(), rtol=1e-9, atol=1e-12, msg=f"grad of param {i}")
    if case.cdf is not None:
        x = case.cdf_value
        close(d.cdf(t(x)), td.cdf(torch.from_numpy(x)).detach().numpy(), msg="cdf")
        p = rng(41).uniform(0.05, 0.95, tuple(tlp.shape[-len(case.batch):]) or ())
        close(d.icdf(t(p)), td.icdf(torch.from_numpy(p)).detach().numpy(), msg="icdf")
    if case.discrete:
        close(d.enumerate_support(), td.enumerate_support().numpy(), msg="enumerate_support")
    # float32 values
    d32, _ = cd(case, np.float32)
    td32, _ = tdist(torch, case, np.float32)
    close(d32.log_prob(cvalue(case, np.float32)),
          td32.log_prob(tvalue(torch, case, np.float32)).numpy(), rtol=1e-5, atol=1e-5)
    close(d32.entropy(), td32.entropy().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_samples_match_torch_for_the_same_seed(torch, case):
    for dtype, tol in ((np.float32, 1e-6), (np.float64, 1e-12)):
        d, _ = cd(case, dtype)
        td, _ = tdist(torch, case, dtype)
        for seed, shape in ((0, ()), (7, (3,)), (11, (2, 17))):
            # seeded one after the other, so that a torch-aliased scratch run sees it too
            cddp.manual_seed(seed)
            got = n(d.sample(shape))
            torch.manual_seed(seed)
            want = td.sample(shape).numpy()
            assert got.shape == want.shape and got.dtype == want.dtype, (shape, dtype)
            if case.discrete:
                np.testing.assert_array_equal(got, want, err_msg=f"sample {shape} {dtype}")
            else:
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol,
                                           err_msg=f"sample {shape} {dtype}")
            if case.rsample:
                cddp.manual_seed(seed + 1)
                got = n(d.rsample(shape))
                torch.manual_seed(seed + 1)
                want = td.rsample(shape).detach().numpy()
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol,
                                           err_msg=f"rsample {shape} {dtype}")


def test_kl_values_and_gradients_match_torch(torch):
    for kc in KL_CASES:
        P = kc.pp + kc.qp
        ps = [t(p, requires_grad=True) for p in P]
        tps = [torch.from_numpy(p.copy()).requires_grad_(True) for p in P]
        kl = D.kl_divergence(*kc.make(D, ps))
        tkl = torch.distributions.kl_divergence(*kc.make(torch.distributions, tps))
        close(kl, tkl.detach().numpy(), msg=kc.id)
        w = randn(tuple(tkl.shape), 100)
        kl.backward(t(w))
        tkl.backward(torch.from_numpy(w))
        for i, (pp, tp) in enumerate(zip(ps, tps)):
            close(pp.grad, tp.grad.numpy(), rtol=1e-9, atol=1e-12, msg=f"{kc.id} param {i}")
