"""torch.distributions.ExponentialFamily: p(x) = h(x) exp(<theta, t(x)> - A(theta)). A family
gives its natural parameters theta and log-normalizer A; entropy (and the KL between two
members of one family, in kl.py) then follow from the Bregman divergence of A, with A's
gradient taken by autograd (create_graph, so the result stays differentiable)."""
from .distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    @property
    def _natural_params(self):
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError

    def entropy(self):
        # H = A(theta) - <theta, grad A(theta)> - E[log h(x)]
        from ..autograd import grad
        result = -self._mean_carrier_measure
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        lg_normal = self._log_normalizer(*nparams)
        gradients = grad(lg_normal.sum(), nparams, create_graph=True)
        result = result + lg_normal
        for p, g in zip(nparams, gradients):
            result = result - (p * g).reshape(tuple(self._batch_shape) + (-1,)).sum(-1)
        return result
