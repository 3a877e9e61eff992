"""Transforms onto structured events: the simplex (softmax, stick-breaking) and triangular or
positive-definite matrices (lower Cholesky factors, correlation Cholesky factors, positive
definite matrices), which change the event's shape or its rank."""

from __future__ import annotations

import math

from ...nn import functional as F
from ...ops import public
from ...ops.linalg import linalg_namespace as linalg
from ...ops.public import sigmoid
from .. import constraints
from ..utils import tril_matrix_to_vec, vec_to_tril_matrix
from .base import Transform

__all__ = [
    "CorrCholeskyTransform",
    "LowerCholeskyTransform",
    "PositiveDefiniteTransform",
    "SoftmaxTransform",
    "StickBreakingTransform",
]


class SoftmaxTransform(Transform):
    """Real vectors to the simplex (not bijective: no log-det)."""

    domain = constraints.real_vector
    codomain = constraints.simplex

    def __eq__(self, other):
        return isinstance(other, SoftmaxTransform)

    def _call(self, x):
        logprobs = x
        probs = (logprobs - logprobs.max(-1, True)[0]).exp()
        return probs / probs.sum(-1, True)

    def _inverse(self, y):
        return y.log()


class StickBreakingTransform(Transform):
    """Real vectors of length K-1 to the K-simplex by breaking a stick: each coordinate's
    sigmoid (shifted by ``log(K-1-i)``, so zeros map to the uniform point) takes its share of
    what is left. Bijective, unlike ``SoftmaxTransform``, so it has a log-det."""

    domain = constraints.real_vector
    codomain = constraints.simplex
    bijective = True

    def __eq__(self, other):
        return isinstance(other, StickBreakingTransform)

    @staticmethod
    def _offset(like, n):
        return (n - public.arange(n, dtype=like.dtype, device=like.device)).log()

    def _call(self, x):
        z = sigmoid(x - self._offset(x, x.shape[-1]))
        left = (1 - z).cumprod(-1)  # the stick left after each break
        return F.pad(z, (0, 1), value=1.0) * F.pad(left, (1, 0), value=1.0)

    def _inverse(self, y):
        shares = y[..., :-1]
        n = shares.shape[-1]
        left = (1 - shares.cumsum(-1)).clamp(min=public.finfo(y.dtype).tiny)
        return shares.log() - left.log() + self._offset(y, n)

    def log_abs_det_jacobian(self, x, y):
        shifted = x - self._offset(x, x.shape[-1])
        # y_i = z_i * left_i: log|J| = sum_i log z_i (1 - z_i) left_i = sum_i log y_i (1 - z_i)
        return (F.logsigmoid(shifted) - shifted + y[..., :-1].log()).sum(-1)

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] - 1,)


class CorrCholeskyTransform(Transform):
    """A real vector of D (D - 1) / 2 entries to the Cholesky factor of a D x D correlation
    matrix: tanh puts each entry in (-1, 1), and each row is stick-broken on its squares so it
    has unit length with a positive diagonal (Stan's construction). The log-det is over the
    flattened strictly lower triangle of the result."""

    domain = constraints.real_vector
    codomain = constraints.corr_cholesky
    bijective = True

    def _call(self, x):
        eps = public.finfo(x.dtype).eps
        r = vec_to_tril_matrix(x.tanh().clamp(min=-1 + eps, max=1 - eps), diag=-1)
        # row i: y_ij = r_ij * prod_{k<j} sqrt(1 - r_ik^2), the diagonal taking what is left
        left = (1 - r.pow(2)).sqrt().cumprod(-1)
        eye = public.eye(r.shape[-1], dtype=r.dtype, device=r.device)
        return (r + eye) * F.pad(left[..., :-1], (1, 0), value=1.0)

    def _inverse(self, y):
        left = F.pad((1 - (y * y).cumsum(-1))[..., :-1], (1, 0), value=1.0)
        t = tril_matrix_to_vec(y, diag=-1) / tril_matrix_to_vec(left, diag=-1).sqrt()
        return (t.log1p() - (-t).log1p()) / 2

    def log_abs_det_jacobian(self, x, y, intermediates=None):
        # diag=-2 picks each entry's stick left before it, without shifting the cumsum
        left = tril_matrix_to_vec(1 - (y * y).cumsum(-1), diag=-2)
        stick_breaking = 0.5 * left.log().sum(-1)
        tanh = -2 * (x + F.softplus(-2 * x) - math.log(2.0)).sum(-1)
        return stick_breaking + tanh

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        n = shape[-1]
        d = round((0.25 + 2 * n) ** 0.5 + 0.5)
        if d * (d - 1) // 2 != n:
            raise ValueError("Input is not a flattened lower-diagonal number")
        return tuple(shape[:-1]) + (d, d)

    def inverse_shape(self, shape):
        if len(shape) < 2:
            raise ValueError("Too few dimensions on input")
        if shape[-2] != shape[-1]:
            raise ValueError("Input is not square")
        d = shape[-1]
        return tuple(shape[:-2]) + (d * (d - 1) // 2,)


class LowerCholeskyTransform(Transform):
    """A square matrix to a lower Cholesky factor: the strict lower triangle kept, the
    diagonal exponentiated (not bijective on all matrices: no log-det)."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    def __eq__(self, other):
        return isinstance(other, LowerCholeskyTransform)

    def _call(self, x):
        return x.tril(-1) + x.diagonal(dim1=-2, dim2=-1).exp().diag_embed()

    def _inverse(self, y):
        return y.tril(-1) + y.diagonal(dim1=-2, dim2=-1).log().diag_embed()


class PositiveDefiniteTransform(Transform):
    """A square matrix to L L^T with L its ``LowerCholeskyTransform``; the inverse factors."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def __eq__(self, other):
        return isinstance(other, PositiveDefiniteTransform)

    def _call(self, x):
        factor = LowerCholeskyTransform()(x)
        return factor @ factor.mT

    def _inverse(self, y):
        return LowerCholeskyTransform().inv(linalg.cholesky(y))
