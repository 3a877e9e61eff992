"""``LogisticNormal``: a point on the simplex whose stick-breaking logits are Gaussian (a
topic-proportion prior with correlations a Dirichlet cannot express): a ``Normal`` over K - 1
coordinates pushed through ``StickBreakingTransform`` to K."""

from __future__ import annotations

from . import constraints
from .continuous import Normal
from .transformed import TransformedDistribution
from .transforms import StickBreakingTransform

__all__ = ["LogisticNormal"]


class LogisticNormal(TransformedDistribution):
    """``loc`` and ``scale`` of the base Normal; a scalar base becomes one coordinate (a point
    on the 2-simplex)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        base = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:
            base = base.expand([1])
        super().__init__(base, StickBreakingTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogisticNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def loc(self):
        return self.base_dist.base_dist.loc

    @property
    def scale(self):
        return self.base_dist.base_dist.scale
