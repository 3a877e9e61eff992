"""``Wishart``: the law of a scatter matrix sum_i x_i x_i^T of ``df`` Gaussian vectors with
covariance Sigma (the conjugate prior of a Gaussian's precision). Samples use Bartlett's
decomposition: L A A^T L^T with A lower triangular, chi-distributed on the diagonal and
standard normal below it, so ``rsample`` is differentiable in Sigma's factor L and (through
the chi-square draws' implicit reparameterization) in ``df``.

Its KL divergence has no closed form here: it is ``ExponentialFamily``'s Bregman divergence."""

from __future__ import annotations

import math
import warnings

from ..ops.linalg import linalg_namespace as linalg
from ..ops.public import (
    arange,
    broadcast_shapes,
    cholesky_solve,
    digamma,
    einsum,
    eye,
    finfo,
    mvlgamma,
    randn,
    tensor,
    where,
)
from ..runtime.tensor import Size
from . import constraints
from .continuous import Chi2
from .exp_family import ExponentialFamily
from .multivariate import _lower_factor
from .utils import lazy_property, vec_to_tril_matrix

__all__ = ["Wishart"]

_EMPTY = Size()
_LOG_2 = math.log(2)


def _mvdigamma(x, p: int):
    """The multivariate digamma: sum_j digamma(x - j / 2), j < p."""
    if not bool(x.gt((p - 1) / 2).all()):
        raise AssertionError("Wrong domain for multivariate digamma function.")
    halves = arange(p, dtype=x.dtype, device=x.device).div(2)
    return digamma(x.unsqueeze(-1) - halves.expand(x.shape + (-1,))).sum(-1)


class Wishart(ExponentialFamily):
    """``df`` degrees of freedom (more than the dimension less one) and Sigma given as
    ``covariance_matrix``, ``precision_matrix`` or its lower factor ``scale_tril`` (exactly
    one; all computation goes through the factor)."""

    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self) -> dict:  # type: ignore[override]
        return {
            "covariance_matrix": constraints.positive_definite,
            "precision_matrix": constraints.positive_definite,
            "scale_tril": constraints.lower_cholesky,
            "df": constraints.greater_than(self.event_shape[-1] - 1),
        }

    def __init__(
        self,
        df,
        covariance_matrix=None,
        precision_matrix=None,
        scale_tril=None,
        validate_args=None,
    ):
        given = [m for m in (covariance_matrix, precision_matrix, scale_tril) if m is not None]
        if len(given) != 1:
            raise AssertionError(
                "Exactly one of covariance_matrix or precision_matrix or scale_tril may be "
                "specified."
            )
        param = given[0]
        if param.dim() < 2:
            raise ValueError(
                "scale_tril must be at least two-dimensional, with optional leading batch "
                "dimensions"
            )
        if isinstance(df, (int, float)):
            batch_shape = Size(param.shape[:-2])
            self.df = tensor(df, dtype=param.dtype, device=param.device)
        else:
            batch_shape = broadcast_shapes(param.shape[:-2], df.shape)
            self.df = df.expand(batch_shape)
        event_shape = param.shape[-2:]
        n = event_shape[-1]
        if bool(self.df.le(n - 1).any()):
            raise ValueError(f"Value of df={df} expected to be greater than ndim - 1 = {n - 1}.")
        if scale_tril is not None:
            self.scale_tril = param.expand(batch_shape + (-1, -1))
        elif covariance_matrix is not None:
            self.covariance_matrix = param.expand(batch_shape + (-1, -1))
        else:
            self.precision_matrix = param.expand(batch_shape + (-1, -1))
        if bool(self.df.lt(n).any()):
            warnings.warn(
                "Low df values detected. Singular samples are highly likely to occur for "
                "ndim - 1 < df < ndim.",
                stacklevel=2,
            )
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        self._unbroadcasted_scale_tril = _lower_factor(
            covariance_matrix, precision_matrix, scale_tril
        )
        self._dist_chi2 = self._bartlett_chi2()

    def _bartlett_chi2(self) -> Chi2:
        """The squared diagonal of Bartlett's factor: chi-square with df - i degrees."""
        factor = self._unbroadcasted_scale_tril
        steps = arange(self._event_shape[-1], dtype=factor.dtype, device=factor.device)
        return Chi2(df=self.df.unsqueeze(-1) - steps.expand(self._batch_shape + (-1,)))

    @property
    def _batch_dims(self) -> list[int]:
        return [-(i + 1) for i in range(len(self._batch_shape))]

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Wishart, _instance)
        batch_shape = Size(batch_shape)
        cov_shape = batch_shape + self.event_shape
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(cov_shape)
        new.df = self.df.expand(batch_shape)
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(cov_shape))
        ExponentialFamily.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._dist_chi2 = new._bartlett_chi2()
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._batch_shape + self._event_shape)

    @lazy_property
    def covariance_matrix(self):
        factor = self._unbroadcasted_scale_tril
        return (factor @ factor.mT).expand(self._batch_shape + self._event_shape)

    @lazy_property
    def precision_matrix(self):
        factor = self._unbroadcasted_scale_tril
        identity = eye(self._event_shape[-1], dtype=factor.dtype, device=factor.device)
        return cholesky_solve(identity, factor).expand(self._batch_shape + self._event_shape)

    def _per_batch(self, value):
        return value.view(self._batch_shape + (1, 1))

    @property
    def mean(self):
        return self._per_batch(self.df) * self.covariance_matrix

    @property
    def mode(self):
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = where(factor <= 0, math.nan, factor)  # no mode for df <= p + 1
        return self._per_batch(factor) * self.covariance_matrix

    @property
    def variance(self):
        cov = self.covariance_matrix
        diagonal = cov.diagonal(dim1=-2, dim2=-1)
        outer = einsum("...i,...j->...ij", diagonal, diagonal)
        return self._per_batch(self.df) * (cov.pow(2) + outer)

    def _bartlett_sampling(self, sample_shape=_EMPTY):
        p = self._event_shape[-1]
        diagonal = self._dist_chi2.rsample(sample_shape).sqrt()
        diagonal = diagonal.clamp(min=finfo(diagonal.dtype).eps)
        below = randn(
            Size(sample_shape) + self._batch_shape + (p * (p - 1) // 2,),
            dtype=diagonal.dtype,
            device=diagonal.device,
        )
        noise = vec_to_tril_matrix(below, diag=-1) + diagonal.diag_embed(dim1=-2, dim2=-1)
        chol = self._unbroadcasted_scale_tril @ noise
        return chol @ chol.mT

    def rsample(self, sample_shape=_EMPTY, max_try_correction=None):
        """Bartlett samples; a draw that is numerically singular (possible for df near p - 1)
        is redrawn, up to ``max_try_correction`` (10) times, with a warning. PyTorch 2.13
        tests the opposite flag (it redraws the nonsingular draws and always warns); kiln
        redraws the singular ones it means to."""
        if max_try_correction is None:
            max_try_correction = 10
        sample_shape = Size(sample_shape)
        sample = self._bartlett_sampling(sample_shape)
        is_singular = self._singular(sample)
        if bool(is_singular.any()):
            warnings.warn("Singular sample detected.", stacklevel=2)
            for _ in range(max_try_correction):
                redrawn = self._bartlett_sampling(Size((int(is_singular.sum()),)))
                sample = sample.clone()
                sample[is_singular] = redrawn
                is_singular = self._singular(sample)
                if not bool(is_singular.any()):
                    break
        return sample

    def _singular(self, sample):
        """Per sample index: whether any matrix of the batch is not positive definite."""
        singular = ~self.support.check(sample)
        if self._batch_shape:
            singular = singular.amax(self._batch_dims)
        return singular

    def _log_det_factor_term(self):
        p = self._event_shape[-1]
        log_diagonal = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log()
        return p * _LOG_2 / 2 + log_diagonal.sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        nu = self.df
        p = self._event_shape[-1]
        trace = cholesky_solve(value, self._unbroadcasted_scale_tril)
        trace = trace.diagonal(dim1=-2, dim2=-1).sum(dim=-1)
        return (
            -nu * self._log_det_factor_term()
            - mvlgamma(nu / 2, p=p)
            + (nu - p - 1) / 2 * linalg.slogdet(value).logabsdet
            - trace / 2
        )

    def entropy(self):
        nu = self.df
        p = self._event_shape[-1]
        return (
            (p + 1) * self._log_det_factor_term()
            + mvlgamma(nu / 2, p=p)
            - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p=p)
            + nu * p / 2
        )

    @property
    def _natural_params(self):
        p = self._event_shape[-1]
        return -self.precision_matrix / 2, (self.df - p - 1) / 2

    def _log_normalizer(self, x, y):
        p = self._event_shape[-1]
        shifted = y + (p + 1) / 2
        return shifted * (-linalg.slogdet(-2 * x).logabsdet + _LOG_2 * p) + mvlgamma(shifted, p=p)
