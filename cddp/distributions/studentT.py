"""StudentT(df, loc, scale) and FisherSnedecor(df1, df2), composed as torch composes them:
StudentT = loc + scale * N / sqrt(Chi2(df) / df), FisherSnedecor = ratio of two Gammas. Their
rsample gradients in df come through gamma.py's implicit reparameterization (the draws
differ from torch's: the chi-square / gamma parts are sampled by gamma.py)."""
import math

from .. import _C
from .._finfo import finfo
from .._size import Size
from . import constraints
from .distribution import Distribution
from .gamma import Chi2, Gamma
from .utils import broadcast_all

__all__ = ["StudentT", "FisherSnedecor"]


class StudentT(Distribution):
    arg_constraints = {"df": constraints.positive, "loc": constraints.real,
                       "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)
        super().__init__(self.df.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(StudentT, _instance)
        batch_shape = Size(batch_shape)
        new.df = self.df.expand(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new._chi2 = self._chi2.expand(batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def mean(self):
        return _C.where(self.df <= 1, math.nan, self.loc)     # undefined for df <= 1

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        # scale^2 df / (df - 2) for df > 2, inf for 1 < df <= 2, undefined for df <= 1
        v = self.scale.pow(2) * self.df / (self.df - 2)
        v = _C.where(self.df > 2, v, math.inf)
        return _C.where(self.df <= 1, math.nan, v)

    def rsample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        X = _C.empty(shape, dtype=self.df.dtype).normal_()
        Z = self._chi2.rsample(sample_shape)
        Y = X * (Z / self.df).rsqrt()
        return self.loc + self.scale * Y

    def log_prob(self, value):
        self._check_value(value)
        y = (value - self.loc) / self.scale
        Z = self.scale.log() + 0.5 * self.df.log() + 0.5 * math.log(math.pi) + \
            (0.5 * self.df).lgamma() - (0.5 * (self.df + 1.0)).lgamma()
        return -0.5 * (self.df + 1.0) * (y ** 2.0 / self.df).log1p() - Z

    def entropy(self):
        lbeta = (0.5 * self.df).lgamma() + math.lgamma(0.5) - (0.5 * (self.df + 1)).lgamma()
        return self.scale.log() + 0.5 * (self.df + 1) * \
            ((0.5 * (self.df + 1)).digamma() - (0.5 * self.df).digamma()) + \
            0.5 * self.df.log() + lbeta


class FisherSnedecor(Distribution):
    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args=None):
        self.df1, self.df2 = broadcast_all(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        super().__init__(self.df1.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(FisherSnedecor, _instance)
        batch_shape = Size(batch_shape)
        new.df1, new.df2 = self.df1.expand(batch_shape), self.df2.expand(batch_shape)
        new._gamma1 = self._gamma1.expand(batch_shape)
        new._gamma2 = self._gamma2.expand(batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def mean(self):
        df2 = _C.where(self.df2 <= 2, math.nan, self.df2)
        return df2 / (df2 - 2)

    @property
    def mode(self):
        mode = (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2)
        return _C.where(self.df1 <= 2, math.nan, mode)

    @property
    def variance(self):
        df2 = _C.where(self.df2 <= 4, math.nan, self.df2)
        return 2 * df2.pow(2) * (self.df1 + df2 - 2) / \
            (self.df1 * (df2 - 2).pow(2) * (df2 - 4))

    def rsample(self, sample_shape=Size(())):
        shape = self._extended_shape(sample_shape)
        X1 = self._gamma1.rsample(sample_shape).reshape(shape)
        X2 = self._gamma2.rsample(sample_shape).reshape(shape)
        tiny = finfo(X2.dtype).tiny
        X2 = X2 + (X2.detach().clamp(min=tiny) - X2.detach())     # clamps not recorded
        Y = X1 / X2
        return Y + (Y.detach().clamp(min=tiny) - Y.detach())

    def log_prob(self, value):
        self._check_value(value)
        ct1, ct2 = self.df1 * 0.5, self.df2 * 0.5
        ct3 = self.df1 / self.df2
        t1 = (ct1 + ct2).lgamma() - ct1.lgamma() - ct2.lgamma()
        t2 = ct1 * ct3.log() + (ct1 - 1) * value.log()
        t3 = (ct1 + ct2) * (ct3 * value).log1p()
        return t1 + t2 - t3
