"""cddp.distributions — torch.distributions: probability distributions with torch's shapes,
validation, sampling (the same draws as torch for the same seed wherever torch draws through
uniform/normal/exponential kernels that cddp's generator reproduces), log_prob, entropy,
moments and closed-form KL divergences, all composed of cddp's differentiable ops (rsample and
log_prob carry gradients to the parameters); transforms, biject_to / transform_to and
TransformedDistribution.

Families: Normal, Laplace, Uniform, Exponential, Bernoulli, Categorical, OneHotCategorical,
OneHotCategoricalStraightThrough, MultivariateNormal, LowRankMultivariateNormal, Independent,
TransformedDistribution, Cauchy, HalfCauchy, HalfNormal, LogNormal, LogisticNormal, Gumbel,
Pareto, Weibull, Kumaraswamy, Geometric, ContinuousBernoulli, LogitRelaxedBernoulli,
RelaxedBernoulli, ExpRelaxedCategorical, RelaxedOneHotCategorical, MixtureSameFamily,
Gamma, Chi2, InverseGamma, Beta, Dirichlet, StudentT, FisherSnedecor, Poisson, Binomial,
NegativeBinomial, Multinomial, GeneralizedPareto, VonMises, LKJCholesky, Wishart, and every
KL pair torch registers among them. Families torch samples through its own gamma / poisson /
binomial kernels (the Gamma family, the counts, LKJCholesky, Wishart) are sampled here by
composition: their draws differ from torch's and are checked statistically; their rsample
carries exact implicit-reparameterization gradients in the concentration.
"""
from . import constraints, kl, transforms, utils  # noqa: F401
from .bernoulli import Bernoulli
from .binomial import Binomial, Multinomial, NegativeBinomial
from .categorical import Categorical, OneHotCategorical, OneHotCategoricalStraightThrough
from .cauchy import Cauchy, HalfCauchy
from .constraint_registry import biject_to, transform_to
from .continuous_bernoulli import ContinuousBernoulli
from .dirichlet import Beta, Dirichlet
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .gamma import Chi2, Gamma, InverseGamma
from .generalized_pareto import GeneralizedPareto
from .geometric import Geometric
from .gumbel import Gumbel, Kumaraswamy, Pareto, Weibull
from .independent import Independent
from .kl import kl_divergence, register_kl
from .lkj_cholesky import LKJCholesky
from .log_normal import HalfNormal, LogisticNormal, LogNormal
from .lowrank_multivariate_normal import LowRankMultivariateNormal
from .mixture_same_family import MixtureSameFamily
from .multivariate_normal import MultivariateNormal
from .normal import Laplace, Normal
from .poisson import Poisson
from .relaxed import (ExpRelaxedCategorical, LogitRelaxedBernoulli, RelaxedBernoulli,
                      RelaxedOneHotCategorical)
from .studentT import FisherSnedecor, StudentT
from .transformed_distribution import TransformedDistribution
from .transforms import *  # noqa: F401,F403
from .transforms import __all__ as _transforms_all
from .uniform import Exponential, Uniform
from .von_mises import VonMises
from .wishart import Wishart

__all__ = ["Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2", "ContinuousBernoulli",
           "Dirichlet", "Distribution", "ExpRelaxedCategorical", "Exponential",
           "ExponentialFamily", "FisherSnedecor", "Gamma", "GeneralizedPareto", "Geometric",
           "Gumbel",
           "HalfCauchy", "HalfNormal", "Independent", "InverseGamma", "Kumaraswamy", "LKJCholesky",
           "Laplace",
           "LogNormal", "LogisticNormal", "LogitRelaxedBernoulli",
           "LowRankMultivariateNormal", "MixtureSameFamily", "Multinomial", "MultivariateNormal",
           "NegativeBinomial", "Normal",
           "OneHotCategorical", "OneHotCategoricalStraightThrough", "Pareto", "Poisson",
           "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT", "TransformedDistribution",
           "Uniform", "VonMises", "Weibull", "Wishart", "biject_to", "constraints", "kl_divergence", "register_kl",
           "transform_to", "transforms"] + list(_transforms_all)


def _alias_modules():
    """torch keeps one family per module (torch.distributions.beta, .multinomial, ...) where
    cddp groups related families in one file; these module objects give torch's import paths
    (`from torch.distributions import multinomial`, `import torch.distributions.beta`) the
    same classes."""
    import sys
    import types
    where = {"beta": ["Beta"], "chi2": ["Chi2"], "exponential": ["Exponential"],
             "fishersnedecor": ["FisherSnedecor"], "half_cauchy": ["HalfCauchy"],
             "half_normal": ["HalfNormal"], "inverse_gamma": ["InverseGamma"],
             "kumaraswamy": ["Kumaraswamy"], "laplace": ["Laplace"],
             "logistic_normal": ["LogisticNormal"], "multinomial": ["Multinomial"],
             "negative_binomial": ["NegativeBinomial"], "pareto": ["Pareto"],
             "one_hot_categorical": ["OneHotCategorical", "OneHotCategoricalStraightThrough"],
             "relaxed_bernoulli": ["LogitRelaxedBernoulli", "RelaxedBernoulli"],
             "relaxed_categorical": ["ExpRelaxedCategorical", "RelaxedOneHotCategorical"],
             "weibull": ["Weibull"]}
    here = globals()
    for name, classes in where.items():
        mod = types.ModuleType(f"{__name__}.{name}", f"torch.distributions.{name}: "
                                                     f"{', '.join(classes)}.")
        mod.__all__ = list(classes)
        for cls in classes:
            setattr(mod, cls, here[cls])
        sys.modules[mod.__name__] = mod
        here[name] = mod


_alias_modules()
