"""``LKJCholesky``: the Lewandowski-Kurowicka-Joe law over Cholesky factors L of correlation
matrices, density proportional to det(L L^T)^(eta - 1) (the usual prior on a covariance's
correlation part, eta = 1 uniform). Sampling is the onion method (Lewandowski et al., 2009,
section 3.2) on the factor directly: row k is a Beta-distributed squared length times a
uniform direction in its first k coordinates, the diagonal taking the rest of unit length.

PyTorch 2.13 draws row k's length from Beta(k - 1/2, ...) instead of the method's Beta(k / 2,
...), so from the third row on its samples do not follow its own ``log_prob`` (a correlation's
variance comes out 0.37 instead of 1/3 for dim 3, eta 1/2). kiln draws the method's Betas:
every correlation has the LKJ marginal, variance 1 / (2 eta + dim - 1)."""

from __future__ import annotations

import math

from ..ops.public import arange, finfo, lgamma, mvlgamma, no_grad, randn
from ..runtime.tensor import Size
from . import constraints
from .continuous import Beta
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["LKJCholesky"]

_EMPTY = Size()


class LKJCholesky(Distribution):
    """``dim`` x ``dim`` factors with concentration eta > 0 (``concentration``); no
    ``rsample``."""

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim: int, concentration=1.0, validate_args=None):
        if dim < 2:
            raise ValueError(
                f"Expected dim to be an integer greater than or equal to 2. Found dim={dim}."
            )
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        # the squared length of row k's off-diagonal part (0-based, k >= 1) is
        # Beta(k / 2, eta + (dim - 1 - k) / 2), the onion method's; row 0 has none (its draw,
        # from Beta(1/2, ...), is discarded)
        rows = arange(self.dim, dtype=self.concentration.dtype, device=self.concentration.device)
        lengths_conc1 = (0.5 * rows).clamp(min=0.5)
        lengths_conc0 = self.concentration.unsqueeze(-1) + 0.5 * (self.dim - 1 - rows)
        self._beta = Beta(lengths_conc1.expand(lengths_conc0.shape), lengths_conc0)
        super().__init__(self.concentration.size(), Size((dim, dim)), validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = Size(batch_shape)
        new.dim = self.dim
        new.concentration = self.concentration.expand(batch_shape)
        new._beta = self._beta.expand(batch_shape + (self.dim,))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape=_EMPTY):
        with no_grad():
            lengths = self._beta.sample(sample_shape).unsqueeze(-1)
            shape = self._extended_shape(sample_shape)
            directions = randn(shape, dtype=lengths.dtype, device=lengths.device).tril(-1)
            directions = directions / directions.norm(dim=-1, keepdim=True)
            directions[..., 0, :] = 0.0  # the first row has no off-diagonal (0 / 0 above)
            w = lengths.sqrt() * directions
            tiny = finfo(w.dtype).tiny
            diagonal = (1 - w.pow(2).sum(-1)).clamp(min=tiny).sqrt()
            return w + diagonal.diag_embed()

    def log_prob(self, value):
        """prod_i L_ii^(2 (eta - 1) + dim - i) for i >= 2 (det^(eta - 1) times the Jacobian
        from the factor to the matrix), over the LKJ normalizer."""
        if self._validate_args:
            self._validate_sample(value)
        diagonal = value.diagonal(dim1=-1, dim2=-2)[..., 1:]
        order = arange(2, self.dim + 1, device=self.concentration.device)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized = (order * diagonal.log()).sum(dim=-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        # the paper's pi term is D (D - 1) / 4 log pi; mvlgamma's is (D - 1) (D - 2) / 4 log pi
        normalizer = (
            0.5 * dm1 * math.log(math.pi) + mvlgamma(alpha - 0.5, dm1) - lgamma(alpha) * dm1
        )
        return unnormalized - normalizer
