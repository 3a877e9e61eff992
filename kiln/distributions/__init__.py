"""``kiln.distributions``: PyTorch's probability distributions (sampling with and without the
reparameterization trick, log densities, entropies, KL divergences, transforms).

Parameters are kiln tensors, so gradients of ``log_prob``, ``entropy``, ``kl_divergence`` and
``rsample`` flow to them through the ordinary autograd engine, and the same code captures under
``kiln.compile`` (sampling from numpy-backed samplers is a graph break).
"""

from __future__ import annotations

from . import (
    constraints,
    kl_cross_families,  # noqa: F401 - registers the cross-family divergences
    transforms,
)
from .constraint_registry import biject_to, transform_to
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
from .continuous_bernoulli import ContinuousBernoulli
from .derived import FisherSnedecor, HalfCauchy, InverseGamma, Kumaraswamy, Pareto, Weibull
from .discrete import (
    Bernoulli,
    Binomial,
    Categorical,
    Geometric,
    Multinomial,
    NegativeBinomial,
    OneHotCategorical,
    OneHotCategoricalStraightThrough,
    Poisson,
)
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .generalized_pareto import GeneralizedPareto
from .kl import kl_divergence, register_kl
from .lkj_cholesky import LKJCholesky
from .logistic_normal import LogisticNormal
from .lowrank import LowRankMultivariateNormal
from .mixture import MixtureSameFamily
from .multivariate import Dirichlet, Independent, MultivariateNormal
from .relaxed import RelaxedBernoulli, RelaxedOneHotCategorical
from .transformed import TransformedDistribution
from .transforms import (
    AbsTransform,
    AffineTransform,
    CatTransform,
    ComposeTransform,
    CorrCholeskyTransform,
    CumulativeDistributionTransform,
    ExpTransform,
    IndependentTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    PowerTransform,
    ReshapeTransform,
    SigmoidTransform,
    SoftmaxTransform,
    SoftplusTransform,
    StackTransform,
    StickBreakingTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from .von_mises import VonMises
from .wishart import Wishart

__all__ = [
    "CatTransform",
    "ContinuousBernoulli",
    "CorrCholeskyTransform",
    "CumulativeDistributionTransform",
    "ExponentialFamily",
    "GeneralizedPareto",
    "LKJCholesky",
    "LogisticNormal",
    "LowerCholeskyTransform",
    "OneHotCategoricalStraightThrough",
    "PositiveDefiniteTransform",
    "ReshapeTransform",
    "StackTransform",
    "VonMises",
    "Wishart",
    "biject_to",
    "identity_transform",
    "transform_to",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
    "Multinomial",
    "HalfCauchy",
    "InverseGamma",
    "FisherSnedecor",
    "Kumaraswamy",
    "Pareto",
    "Weibull",
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
    "StickBreakingTransform",
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


def _module_paths() -> None:
    """PyTorch's one-module-per-distribution paths (``torch.distributions.normal.Normal``,
    ``from torch.distributions.normal import Normal``): each a module holding its class."""
    import sys
    import types

    paths = {
        "bernoulli": "Bernoulli", "beta": "Beta", "binomial": "Binomial",
        "categorical": "Categorical", "cauchy": "Cauchy", "chi2": "Chi2",
        "dirichlet": "Dirichlet", "exponential": "Exponential", "fishersnedecor": "FisherSnedecor", "gamma": "Gamma",
        "geometric": "Geometric", "gumbel": "Gumbel", "half_cauchy": "HalfCauchy",
        "half_normal": "HalfNormal", "independent": "Independent",
        "inverse_gamma": "InverseGamma", "kumaraswamy": "Kumaraswamy", "laplace": "Laplace", "log_normal": "LogNormal",
        "lowrank_multivariate_normal": "LowRankMultivariateNormal",
        "mixture_same_family": "MixtureSameFamily",
        "multinomial": "Multinomial", "multivariate_normal": "MultivariateNormal", "negative_binomial": "NegativeBinomial",
        "normal": "Normal",
        "one_hot_categorical": ("OneHotCategorical", "OneHotCategoricalStraightThrough"),
        "pareto": "Pareto",
        "poisson": "Poisson", "studentT": "StudentT",
        "transformed_distribution": "TransformedDistribution", "uniform": "Uniform",
        "weibull": "Weibull",
    }  # fmt: skip
    from . import relaxed

    namespace = globals()
    sys.modules[f"{__name__}.relaxed_bernoulli"] = namespace["relaxed_bernoulli"] = relaxed
    sys.modules[f"{__name__}.relaxed_categorical"] = namespace["relaxed_categorical"] = relaxed
    for path, cls_names in paths.items():
        cls_names = (cls_names,) if isinstance(cls_names, str) else cls_names
        module = types.ModuleType(f"{__name__}.{path}", f"``torch.distributions.{path}``.")
        for cls_name in cls_names:
            setattr(module, cls_name, namespace[cls_name])
        module.__all__ = list(cls_names)
        sys.modules[module.__name__] = module
        namespace[path] = module


_module_paths()
