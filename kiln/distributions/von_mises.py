"""``VonMises``: the circular normal, density exp(kappa cos(x - loc)) / (2 pi I0(kappa)) for an
angle x (wind directions, phases, dihedral angles). ``loc`` and values may be any reals, read
modulo 2 pi; samples land in [-pi, pi).

The Bessel functions are the polynomial approximations of Abramowitz and Stegun (9.8.1-9.8.4),
as PyTorch's are, so densities agree to the last digit rather than to the approximation's
~1e-7. Sampling is Best and Fisher's (1979) rejection method, run in float64 whatever the
parameters' dtype: in float32 a tiny concentration makes the acceptance test fail forever."""

from __future__ import annotations

import math

from ..ops.public import bool as bool_dtype
from ..ops.public import cos, float64, no_grad, rand, where, zeros
from ..runtime.tensor import Size
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all, lazy_property

__all__ = ["VonMises"]

_EMPTY = Size()

# coefficients in (x / 3.75)^2 for x < 3.75 and in 3.75 / x above, of I0 and I1
_SMALL = {
    0: (1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.360768e-1, 0.45813e-2),
    1: (0.5, 0.87890594, 0.51498869, 0.15084934, 0.2658733e-1, 0.301532e-2, 0.32411e-3),
}
_LARGE = {
    0: (
        0.39894228, 0.1328592e-1, 0.225319e-2, -0.157565e-2, 0.916281e-2, -0.2057706e-1,
        0.2635537e-1, -0.1647633e-1, 0.392377e-2,
    ),
    1: (
        0.39894228, -0.3988024e-1, -0.362018e-2, 0.163801e-2, -0.1031555e-1, 0.2282967e-1,
        -0.2895312e-1, 0.1787654e-1, -0.420059e-2,
    ),
}  # fmt: skip


def _horner(y, coefficients):
    result = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        result = c + y * result
    return result


def _log_modified_bessel(x, order: int = 0):
    """log I_order(x) for x > 0, order 0 or 1."""
    if order not in (0, 1):
        raise AssertionError(f"order must be 0 or 1, got {order}")
    small = _horner((x / 3.75) ** 2, _SMALL[order])
    if order == 1:
        small = x.abs() * small
    large = x - 0.5 * x.log() + _horner(3.75 / x, _LARGE[order]).log()
    return where(x < 3.75, small.log(), large)


def _rejection_sample(loc, concentration, proposal_r, shape):
    """Best and Fisher's wrapped-Cauchy envelope: draw until every entry is accepted."""
    x = zeros(shape, dtype=loc.dtype, device=loc.device)
    done = zeros(shape, dtype=bool_dtype, device=loc.device)
    while not bool(done.all()):
        u1, u2, u3 = rand((3,) + tuple(shape), dtype=loc.dtype, device=loc.device).unbind()
        z = cos(math.pi * u1)
        f = (1 + proposal_r * z) / (proposal_r + z)
        c = concentration * (proposal_r - f)
        accept = ((c * (2 - c) - u2) > 0) | ((c / u2).log() + 1 - c >= 0)
        x = where(accept & ~done, (u3 - 0.5).sign() * f.acos(), x)
        done = done | accept
    return (x + math.pi + loc) % (2 * math.pi) - math.pi


class VonMises(Distribution):
    """Mean direction ``loc`` (radians) and ``concentration`` kappa > 0; the mean, mode and
    variance are the circular ones (no ``rsample``: rejection sampling has no gradient)."""

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, concentration, validate_args=None):
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, Size(), validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(VonMises, batch_shape, ("loc", "concentration"), _instance)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_prob = self.concentration * cos(value - self.loc)
        return log_prob - math.log(2 * math.pi) - _log_modified_bessel(self.concentration, 0)

    @lazy_property
    def _loc(self):
        return self.loc.to(float64)

    @lazy_property
    def _concentration(self):
        return self.concentration.to(float64)

    @lazy_property
    def _proposal_r(self):
        kappa = self._concentration
        tau = 1 + (1 + 4 * kappa**2).sqrt()
        rho = (tau - (2 * tau).sqrt()) / (2 * kappa)
        # below 1e-5 the closed form cancels: its second-order expansion at kappa = 0
        return where(kappa < 1e-5, 1 / kappa + kappa, (1 + rho**2) / (2 * rho))

    def sample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        with no_grad():
            angles = _rejection_sample(self._loc, self._concentration, self._proposal_r, shape)
            return angles.to(self.loc.dtype)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @lazy_property
    def variance(self):
        """1 - I1(kappa) / I0(kappa), the circular variance."""
        ratio = _log_modified_bessel(self.concentration, 1) - _log_modified_bessel(
            self.concentration, 0
        )
        return 1 - ratio.exp()
