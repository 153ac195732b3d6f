"""LKJCholesky(dim, concentration): the lower Cholesky factor L of a dim x dim correlation
matrix C = L L^T with density proportional to det(C)^(concentration - 1) (Lewandowski,
Kurowicka & Joe 2009).

Sampled by the onion method (LKJ 2009, section 3.2) in torch's layout: row i of L is
sqrt(y_i) times a uniform direction on the sphere of its first i coordinates (normals,
normalised), y_i ~ Beta(i/2, concentration + (dim - 2)/2 - (i - 1)/2) for i >= 1, and the
diagonal completes each row to unit norm. torch 2.13 draws y_i ~ Beta((i + 1)/2, ...) for
i >= 2, which biases every correlation beyond the first row for dim >= 3 (their marginals
must be Beta(c - 1 + dim/2, same) on (r + 1)/2; tests check this); cddp uses the paper's
parameters, on purpose. The Beta draws come from dirichlet.py's gamma sampler, so the draws
differ from torch's anyway. log_prob is torch's closed form. No rsample (as torch)."""
import math

from .. import _C
from .._finfo import finfo
from .._size import Size
from ..autograd.grad_mode import no_grad
from . import constraints
from .dirichlet import Beta
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["LKJCholesky"]


def _mvlgamma(x, p):
    """log of the multivariate gamma function Gamma_p(x)."""
    j = _C.arange(p, dtype=x.dtype)                                    # 0 .. p-1
    return p * (p - 1) / 4 * math.log(math.pi) + (x.unsqueeze(-1) - j / 2).lgamma().sum(-1)


class LKJCholesky(Distribution):
    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim, concentration=1.0, validate_args=None):
        if dim < 2:
            raise ValueError("Expected dim to be an integer greater than or equal to 2. "
                             f"Found dim={dim}.")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        marginal_conc = self.concentration + 0.5 * (self.dim - 2)
        offset = _C.arange(self.dim - 1, dtype=self.concentration.dtype)
        offset = _C.cat([offset.new_zeros((1,)), offset])                  # 0, 0, 1, ..., d-2
        beta_conc1 = 0.5 * offset + 0.5               # row i: i/2 (row 0's draw is unused)
        beta_conc0 = marginal_conc.unsqueeze(-1) - 0.5 * offset
        self._beta = Beta(beta_conc1, beta_conc0)                          # (..., dim)
        super().__init__(self.concentration.size(), Size((dim, dim)), validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = Size(batch_shape)
        new.dim = self.dim
        new.concentration = self.concentration.expand(batch_shape)
        new._beta = self._beta.expand(tuple(batch_shape) + (self.dim,))
        return self._expanded(new, batch_shape, self.event_shape)

    def sample(self, sample_shape=Size()):
        with no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)              # (..., dim, 1)
            u_normal = _C.randn(self._extended_shape(sample_shape), dtype=y.dtype).tril(-1)
            norm = u_normal.norm(dim=-1, keepdim=True)
            # row 0 has no strictly-lower entries (0 / 0): it is all zero before the diagonal
            first = _C.arange(self.dim).reshape(-1, 1) == 0
            u_hypersphere = _C.where(first, _C.zeros_like(u_normal),
                                     u_normal / _C.where(first, _C.ones_like(norm), norm))
            w = y.sqrt() * u_hypersphere
            tiny = finfo(w.dtype).tiny
            diag_elems = (1 - (w ** 2).sum(-1)).clamp(min=tiny).sqrt()
            return w + diag_elems.diag_embed()

    def log_prob(self, value):
        # det(C)^(eta - 1) in terms of L's diagonal, times the Jacobian of C -> L
        self._check_value(value)
        diag_elems = value.diagonal(dim1=-1, dim2=-2)[..., 1:]
        order = _C.arange(2, self.dim + 1, dtype=self.concentration.dtype)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized_log_pdf = (order * diag_elems.log()).sum(-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        denominator = alpha.lgamma() * dm1
        numerator = _mvlgamma(alpha - 0.5, dm1)
        pi_constant = 0.5 * dm1 * math.log(math.pi)
        return unnormalized_log_pdf - (pi_constant + numerator - denominator)
