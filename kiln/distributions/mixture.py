"""``MixtureSameFamily``: a mixture whose components are one distribution family with a
rightmost batch dim of size k (a Gaussian mixture model, a mixture density network's head),
weighted by a ``Categorical``. Densities mix in log space (logsumexp), so gradients reach the
mixture logits and every component parameter; sampling picks a component per draw."""

from __future__ import annotations

from kiln.runtime.tensor import Size

from ..ops.public import gather, log_softmax, logsumexp, no_grad
from ..ops.public import sum as tensor_sum
from . import constraints
from .discrete import Categorical
from .distribution import Distribution

__all__ = ["MixtureSameFamily"]

_EMPTY = Size()


class MixtureSameFamily(Distribution):
    """A batch of mixtures: ``mixture_distribution`` (a ``Categorical`` over k components)
    selects among ``component_distribution``'s rightmost batch dim (of size k)."""

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(
        self,
        mixture_distribution: Categorical,
        component_distribution: Distribution,
        validate_args=None,
    ):
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError(
                " The Mixture distribution needs to be an  instance of torch.distributions.Categorical"
            )
        if not isinstance(component_distribution, Distribution):
            raise ValueError(
                "The Component distribution needs to be an instance of "
                "torch.distributions.Distribution"
            )
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        mixture_batch = mixture_distribution.batch_shape
        component_batch = component_distribution.batch_shape[:-1]
        for size1, size2 in zip(reversed(mixture_batch), reversed(component_batch)):
            if size1 != 1 and size2 != 1 and size1 != size2:
                raise ValueError(
                    f"`mixture_distribution.batch_shape` ({mixture_batch}) is not compatible "
                    f"with `component_distribution.batch_shape`({component_batch})"
                )
        k_mixture = mixture_distribution.logits.shape[-1]
        k_component = component_distribution.batch_shape[-1]
        if k_mixture != k_component:
            raise ValueError(
                f"`mixture_distribution component` ({k_mixture}) does not equal "
                f"`component_distribution.batch_shape[-1]` ({k_component})"
            )
        self._num_component = k_mixture
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(
            batch_shape=component_batch,
            event_shape=component_distribution.event_shape,
            validate_args=validate_args,
        )

    def expand(self, batch_shape, _instance=None):
        batch_shape = Size(batch_shape)
        new = self._get_checked_instance(MixtureSameFamily, _instance)
        new._component_distribution = self._component_distribution.expand(
            batch_shape + (self._num_component,)
        )
        new._mixture_distribution = self._mixture_distribution.expand(batch_shape)
        new._num_component = self._num_component
        new._event_ndims = self._event_ndims
        Distribution.__init__(
            new, batch_shape, new._component_distribution.event_shape, validate_args=False
        )
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property
    def support(self):
        return constraints.MixtureSameFamilyConstraint(self._component_distribution.support)

    @property
    def mixture_distribution(self) -> Categorical:
        return self._mixture_distribution

    @property
    def component_distribution(self) -> Distribution:
        return self._component_distribution

    @property
    def mean(self):
        probs = self._pad_mixture_dimensions(self._mixture_distribution.probs)
        return tensor_sum(probs * self._component_distribution.mean, dim=-1 - self._event_ndims)

    @property
    def variance(self):
        probs = self._pad_mixture_dimensions(self._mixture_distribution.probs)
        component_dim = -1 - self._event_ndims
        mean_of_variances = tensor_sum(
            probs * self._component_distribution.variance, dim=component_dim
        )
        spread = (self._component_distribution.mean - self._pad(self.mean)).pow(2.0)
        return mean_of_variances + tensor_sum(probs * spread, dim=component_dim)

    def cdf(self, x):
        cdf_x = self._component_distribution.cdf(self._pad(x))
        return tensor_sum(cdf_x * self._mixture_distribution.probs, dim=-1)

    def log_prob(self, x):
        if self._validate_args:
            self._validate_sample(x)
        log_prob_x = self._component_distribution.log_prob(self._pad(x))  # [S, B, k]
        log_mix_prob = log_softmax(self._mixture_distribution.logits, dim=-1)  # [B, k]
        return logsumexp(log_prob_x + log_mix_prob, dim=-1)  # [S, B]

    def sample(self, sample_shape=_EMPTY):
        with no_grad():
            gather_dim = len(sample_shape) + len(self.batch_shape)
            event_shape = self.event_shape
            choice = self._mixture_distribution.sample(sample_shape)  # [S, B]
            drawn = self._component_distribution.sample(sample_shape)  # [S, B, k, E]
            index = choice.reshape(choice.shape + (1,) * (len(event_shape) + 1))
            index = index.repeat((1,) * choice.dim() + (1,) + tuple(event_shape))
            return gather(drawn, gather_dim, index).squeeze(gather_dim)

    def _pad(self, x):
        return x.unsqueeze(-1 - self._event_ndims)

    def _pad_mixture_dimensions(self, x):
        """Mixture probs [B', k] shaped to broadcast against component moments [B, k, E]."""
        batch_ndims = len(self.batch_shape)
        mixture_ndims = len(self._mixture_distribution.batch_shape)
        pad_ndims = 0 if mixture_ndims == 1 else batch_ndims - mixture_ndims
        shape = x.shape
        return x.reshape(shape[:-1] + (1,) * pad_ndims + shape[-1:] + (1,) * self._event_ndims)

    def __repr__(self) -> str:
        return (
            f"MixtureSameFamily(\n  {self._mixture_distribution},\n"
            f"  {self._component_distribution})"
        )
