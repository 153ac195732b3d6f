"""cddp.distributions — torch.distributions: probability distributions with torch's shapes,
validation, sampling (the same draws as torch for the same seed), log_prob, entropy, moments
and closed-form KL divergences, all composed of cddp's differentiable ops (rsample and
log_prob carry gradients to the parameters).

Families: Normal, Laplace, Uniform, Exponential, Bernoulli, Categorical, OneHotCategorical,
MultivariateNormal, Independent. Not here (yet): Beta, Gamma, Dirichlet, Poisson, Binomial,
transforms and TransformedDistribution.
"""
from . import constraints, kl, utils  # noqa: F401
from .bernoulli import Bernoulli
from .categorical import Categorical, OneHotCategorical
from .distribution import Distribution
from .independent import Independent
from .kl import kl_divergence, register_kl
from .multivariate_normal import MultivariateNormal
from .normal import Laplace, Normal
from .uniform import Exponential, Uniform

__all__ = ["Bernoulli", "Categorical", "Distribution", "Exponential", "Independent",
           "Laplace", "MultivariateNormal", "Normal", "OneHotCategorical", "Uniform",
           "constraints", "kl_divergence", "register_kl"]
