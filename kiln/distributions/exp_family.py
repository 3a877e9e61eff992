"""``ExponentialFamily``: the base of distributions with density exp(<t(x), theta> - F(theta) +
k(x)). Naming the natural parameters theta and the log normalizer F is enough for an entropy
(and a same-family KL divergence) from the Bregman divergence of F, its gradient taken by
autograd: the check on each closed form, and the only form Wishart's KL has."""

from __future__ import annotations

from ..autograd import grad
from .distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    """A distribution that names its natural parameters (``_natural_params``), log normalizer
    (``_log_normalizer``) and expected carrier measure (``_mean_carrier_measure``)."""

    @property
    def _natural_params(self) -> tuple:
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self) -> float:
        raise NotImplementedError

    def entropy(self):
        """H = F(theta) - <theta, grad F(theta)> - E[k(x)], computed (as PyTorch's) on detached
        copies of the natural parameters: no gradient reaches the distribution's parameters."""
        result = -self._mean_carrier_measure
        params = [p.detach().requires_grad_() for p in self._natural_params]
        log_normalizer = self._log_normalizer(*params)
        gradients = grad(log_normalizer.sum(), params, create_graph=True)
        result = result + log_normalizer
        for param, gradient in zip(params, gradients):
            result = result - (param * gradient).reshape(self._batch_shape + (-1,)).sum(-1)
        return result
