"""``LowRankMultivariateNormal``: a Gaussian whose covariance is ``W W^T + diag(D)`` with ``W``
an (n, m) factor (m << n): factor models, low-rank VAE posteriors. Densities use the m x m
capacitance matrix ``I + W^T D^-1 W`` (Woodbury and the matrix determinant lemma), so nothing
n x n is factored."""

from __future__ import annotations

import math

from ..ops.linalg import linalg_namespace as linalg
from ..ops.public import broadcast_tensors, diag_embed, eye, randn
from . import constraints
from .distribution import Distribution
from .multivariate import _batch_mahalanobis, _batch_mv
from .utils import lazy_property

__all__ = ["LowRankMultivariateNormal"]


def _with_identity(k):
    """``k + I`` for a batch of square matrices."""
    return k + eye(k.shape[-1], dtype=k.dtype, device=k.device)


def _capacitance_tril(factor, diag):
    """Cholesky factor of ``I + W^T D^-1 W``."""
    scaled = factor.mT / diag.unsqueeze(-2)
    return linalg.cholesky(_with_identity(scaled @ factor))


def _lowrank_logdet(diag, capacitance_tril):
    """log det(W W^T + D) by the matrix determinant lemma."""
    half = capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return 2 * half + diag.log().sum(-1)


def _lowrank_mahalanobis(factor, diag, x, capacitance_tril):
    """x^T (W W^T + D)^-1 x by the Woodbury identity."""
    projected = _batch_mv(factor.mT / diag.unsqueeze(-2), x)
    return (x.pow(2) / diag).sum(-1) - _batch_mahalanobis(capacitance_tril, projected)


class LowRankMultivariateNormal(Distribution):
    """N(loc, cov_factor cov_factor^T + diag(cov_diag))."""

    arg_constraints = {
        "loc": constraints.real_vector,
        "cov_factor": constraints.independent(constraints.real, 2),
        "cov_diag": constraints.independent(constraints.positive, 1),
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        event_shape = loc.shape[-1:]
        if cov_factor.dim() < 2:
            raise ValueError(
                "cov_factor must be at least two-dimensional, with optional leading batch "
                "dimensions"
            )
        if cov_factor.shape[-2:-1] != event_shape:
            raise ValueError(
                f"cov_factor must be a batch of matrices with shape {event_shape[0]} x m"
            )
        if cov_diag.shape[-1:] != event_shape:
            raise ValueError(f"cov_diag must be a batch of vectors with shape {event_shape}")
        try:
            loc_, self.cov_factor, diag_ = broadcast_tensors(
                loc.unsqueeze(-1), cov_factor, cov_diag.unsqueeze(-1)
            )
        except RuntimeError as e:
            raise ValueError(
                f"Incompatible batch shapes: loc {loc.shape}, cov_factor {cov_factor.shape}, "
                f"cov_diag {cov_diag.shape}"
            ) from e
        self.loc = loc_[..., 0]
        self.cov_diag = diag_[..., 0]
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        self._capacitance_tril = _capacitance_tril(cov_factor, cov_diag)
        super().__init__(self.loc.shape[:-1], event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        loc_shape = tuple(batch_shape) + tuple(self.event_shape)
        new.loc = self.loc.expand(loc_shape)
        new.cov_diag = self.cov_diag.expand(loc_shape)
        new.cov_factor = self.cov_factor.expand(loc_shape + self.cov_factor.shape[-1:])
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    def _full_shape(self):
        return self._batch_shape + self._event_shape + self._event_shape

    @lazy_property
    def variance(self):
        factor, diag = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        return (factor.pow(2).sum(-1) + diag).expand(self._batch_shape + self._event_shape)

    @lazy_property
    def scale_tril(self):
        root = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        scaled = self._unbroadcasted_cov_factor / root
        return (root * linalg.cholesky(_with_identity(scaled @ scaled.mT))).expand(
            self._full_shape()
        )

    @lazy_property
    def covariance_matrix(self):
        factor = self._unbroadcasted_cov_factor
        covariance = factor @ factor.mT + diag_embed(self._unbroadcasted_cov_diag)
        return covariance.expand(self._full_shape())

    @lazy_property
    def precision_matrix(self):
        diag = self._unbroadcasted_cov_diag
        scaled = self._unbroadcasted_cov_factor.mT / diag.unsqueeze(-2)
        a = linalg.solve_triangular(self._capacitance_tril, scaled, upper=False)
        return (diag_embed(diag.reciprocal()) - a.mT @ a).expand(self._full_shape())

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps_w = randn(
            shape[:-1] + self.cov_factor.shape[-1:], dtype=self.loc.dtype, device=self.loc.device
        )
        eps_d = randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return (
            self.loc
            + _batch_mv(self._unbroadcasted_cov_factor, eps_w)
            + self._unbroadcasted_cov_diag.sqrt() * eps_d
        )

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        factor, diag = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        mahalanobis = _lowrank_mahalanobis(factor, diag, value - self.loc, self._capacitance_tril)
        log_det = _lowrank_logdet(diag, self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + log_det + mahalanobis)

    def entropy(self):
        log_det = _lowrank_logdet(self._unbroadcasted_cov_diag, self._capacitance_tril)
        h = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + log_det)
        return h if len(self._batch_shape) == 0 else h.expand(self._batch_shape)
