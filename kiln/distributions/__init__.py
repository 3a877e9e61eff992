"""``kiln.distributions``: PyTorch's probability distributions (sampling with and without the
reparameterization trick, log densities, entropies, KL divergences, transforms).

Parameters are kiln tensors, so gradients of ``log_prob``, ``entropy``, ``kl_divergence`` and
``rsample`` flow to them through the ordinary autograd engine, and the same code captures under
``kiln.compile`` (sampling from numpy-backed samplers is a graph break).
"""

from __future__ import annotations

from . import constraints, transforms
from .continuous import (
    Beta,
    Cauchy,
    Chi2,
    Exponential,
    Gamma,
    Gumbel,
    HalfNormal,
    Laplace,
    LogNormal,
    Normal,
    StudentT,
    Uniform,
)
from .discrete import (
    Bernoulli,
    Binomial,
    Categorical,
    Geometric,
    NegativeBinomial,
    OneHotCategorical,
    Poisson,
)
from .distribution import Distribution
from .kl import kl_divergence, register_kl
from .lowrank import LowRankMultivariateNormal
from .mixture import MixtureSameFamily
from .multivariate import Dirichlet, Independent, MultivariateNormal
from .transformed import TransformedDistribution
from .transforms import (
    AbsTransform,
    AffineTransform,
    ComposeTransform,
    ExpTransform,
    IndependentTransform,
    PowerTransform,
    SigmoidTransform,
    SoftmaxTransform,
    SoftplusTransform,
    TanhTransform,
    Transform,
)

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "Bernoulli",
    "Beta",
    "Binomial",
    "Categorical",
    "Cauchy",
    "Chi2",
    "ComposeTransform",
    "Dirichlet",
    "Distribution",
    "ExpTransform",
    "Exponential",
    "Gamma",
    "Geometric",
    "Gumbel",
    "HalfNormal",
    "Independent",
    "IndependentTransform",
    "Laplace",
    "LogNormal",
    "LowRankMultivariateNormal",
    "MixtureSameFamily",
    "MultivariateNormal",
    "NegativeBinomial",
    "Normal",
    "OneHotCategorical",
    "Poisson",
    "PowerTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StudentT",
    "TanhTransform",
    "Transform",
    "TransformedDistribution",
    "Uniform",
    "constraints",
    "kl_divergence",
    "register_kl",
    "transforms",
]
