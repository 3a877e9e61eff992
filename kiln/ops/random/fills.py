"""In-place random fills: ``Tensor.uniform_``, ``normal_``, ``bernoulli_``, ``exponential_``,
``random_``, ``cauchy_``, ``log_normal_`` and ``geometric_`` (and the out-of-place method
``Tensor.bernoulli``).

Each one draws from the ``rand``/``randn`` ops (Philox counters of ``generator``, or of the
default generator) and writes the transformed sample into ``self`` with ``copy_``. So they work
under graph capture (AOT replaces ``rand``/``randn`` by seeded Philox draws on each call), and
autograd treats the fill as an overwrite by values that need no gradient, as PyTorch does.
The values are not PyTorch's (different generator); the distributions are.

``random_`` needs integers wider than the 24 random bits of one uniform float: up to three draws
are combined into 64 random bits with integer ops (see ``_random_bits``).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.random import Generator
from ..core.common import Tensor
from ..core.registry import tensor_method
from ..creation import api
from ..creation.factories import rand, randn
from ..reductions.reduce import known_any, torch_type_name

__all__ = ["C_TYPE_NAMES", "C_FLOAT_NAMES"]

_int64 = dt.int64
# mantissa digits: the integers a float dtype holds exactly are those in [-2**d, 2**d]
_FLOAT_DIGITS = {dt.float16: 11, dt.bfloat16: 8, dt.float32: 24, dt.float64: 53}
# the C type names PyTorch's bound checks print
C_TYPE_NAMES = {
    dt.uint8: "unsigned char",
    dt.int8: "signed char",
    dt.int16: "short",
    dt.int32: "int",
    dt.int64: "long int",
    dt.bool_: "bool",
}
_FLOAT_MAX = {
    dt.float16: 65504.0,
    dt.bfloat16: 3.3895313892515355e38,
    dt.float32: float(np.finfo(np.float32).max),
    dt.float64: float(np.finfo(np.float64).max),
}
_UNSET = object()  # random_: whether ``to`` was given at all
C_FLOAT_NAMES = {
    dt.float16: "c10::Half",
    dt.bfloat16: "c10::BFloat16",
    dt.float32: "float",
    dt.float64: "double",
}


def _uniform(self: Tensor, generator: Generator | None) -> Tensor:
    """Uniform [0, 1) samples of ``self``'s shape, in float64 for float64 tensors else float32."""
    d = dt.float64 if self._dtype is dt.float64 else dt.float32
    return rand(self.shape, generator=generator, dtype=d, device=self.device)


def _normal(self: Tensor, generator: Generator | None) -> Tensor:
    d = dt.float64 if self._dtype is dt.float64 else dt.float32
    return randn(self.shape, generator=generator, dtype=d, device=self.device)


def _require_float(self: Tensor, kernel: str) -> None:
    if not self._dtype.is_floating_point:
        raise NotImplementedError(
            f"\"{kernel}\" not implemented for '{torch_type_name(self._dtype)}'"
        )


def _require_continuous(self: Tensor, distribution: str, c_name: bool) -> None:
    if not self._dtype.is_floating_point:
        name = C_TYPE_NAMES[self._dtype] if c_name else torch_type_name(self._dtype)
        raise RuntimeError(
            f"{distribution} distribution is a continuous probability distribution. dtype must be "
            f"a floating point but you specified {name}"
        )


def _fill(self: Tensor, values: Tensor) -> Tensor:
    """Write ``values`` into ``self`` (cast to its dtype) and return ``self``."""
    return self.copy_(values)


@tensor_method("uniform_")
def uniform_(
    self: Tensor, from_: float = 0.0, to: float = 1.0, *, generator: Generator | None = None
) -> Tensor:
    """Fill with samples of the continuous uniform distribution on [from_, to)."""
    _require_float(self, "check_uniform_bounds")
    if from_ > to:
        raise RuntimeError(
            f"uniform_ expects to return a [from, to) range, but found from={from_:g} > to={to:g}"
        )
    limit = _FLOAT_MAX[self._dtype]
    if to - from_ > limit:
        raise RuntimeError(
            "uniform_ expects to-from <= std::numeric_limits<Float>::max(), but found "
            f"to={to:g} and from={from_:g} which result in to-from to exceed the limit"
        )
    return _fill(self, _uniform(self, generator) * (to - from_) + from_)


@tensor_method("normal_")
def normal_(
    self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Generator | None = None
) -> Tensor:
    """Fill with samples of the normal distribution N(mean, std**2)."""
    _require_float(self, "normal_kernel_cpu")
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
    return _fill(self, _normal(self, generator) * std + mean)


@tensor_method("bernoulli_")
def bernoulli_(
    self: Tensor, p: float | Tensor = 0.5, *, generator: Generator | None = None
) -> Tensor:
    """Fill with 0/1 draws that are 1 with probability ``p`` (a number, or a tensor that
    broadcasts to ``self``'s shape, one probability per element)."""
    if self._dtype.is_complex:  # (PyTorch's kernels have no complex draws)
        kernel = "bernoulli_tensor_cpu_self_" if isinstance(p, Tensor) else "bernoulli_scalar_cpu_"
        raise NotImplementedError(
            f"\"{kernel}\" not implemented for '{torch_type_name(self._dtype)}'"
        )
    if isinstance(p, Tensor):
        if known_any((p < 0) | (p > 1)):
            raise RuntimeError(
                "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
                "message be improved?  If so, please report an enhancement request to PyTorch.)"
            )
        prob = p.detach().expand(self.shape)
    else:
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p:g}")
        prob = p
    return _fill(self, _uniform(self, generator) < prob)


@tensor_method("bernoulli")
def bernoulli(
    self: Tensor, p: float | None = None, *, generator: Generator | None = None
) -> Tensor:
    """0/1 draws of ``self``'s dtype, 1 with probability ``self`` (or ``p`` when given)."""
    return api.bernoulli(self, p, generator=generator)


@tensor_method("exponential_")
def exponential_(self: Tensor, lambd: float = 1.0, *, generator: Generator | None = None) -> Tensor:
    """Fill with samples of the exponential distribution of rate ``lambd`` (inverse CDF)."""
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd:g}")
    _require_continuous(self, "Exponential", c_name=False)
    return _fill(self, -(-_uniform(self, generator)).log1p() / lambd)


@tensor_method("cauchy_")
def cauchy_(
    self: Tensor, median: float = 0.0, sigma: float = 1.0, *, generator: Generator | None = None
) -> Tensor:
    """Fill with samples of the Cauchy distribution ``median + sigma * tan(pi * (u - 1/2))``."""
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma:g}")
    _require_continuous(self, "Cauchy", c_name=True)
    return _fill(self, ((_uniform(self, generator) - 0.5) * math.pi).tan() * sigma + median)


@tensor_method("log_normal_")
def log_normal_(
    self: Tensor, mean: float = 1.0, std: float = 2.0, *, generator: Generator | None = None
) -> Tensor:
    """Fill with ``exp(N(mean, std**2))`` samples."""
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std:g}")
    _require_float(self, "log_normal_cpu")
    return _fill(self, (_normal(self, generator) * std + mean).exp())


@tensor_method("geometric_")
def geometric_(self: Tensor, p: float, *, generator: Generator | None = None) -> Tensor:
    """Fill with the number of Bernoulli(p) trials up to the first success (1, 2, ...)."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p:g}")
    if self._dtype is dt.bool_:
        raise NotImplementedError("\"geometric_cpu\" not implemented for 'Bool'")
    # 1 - u lies in (0, 1]: log(1 - u) / log(1 - p) is >= 0; u = 0 would give 0 trials
    trials = ((-_uniform(self, generator)).log1p() / math.log1p(-p)).ceil().clamp(min=1)
    return _fill(self, trials)


# ------------------------------------------------------------------------------ random_


def _dtype_bounds(d: dt.dtype) -> tuple[int, int]:
    """The integers ``random_`` may produce for dtype ``d`` (inclusive)."""
    if d is dt.bool_:
        return 0, 1
    if d.is_floating_point:
        top = 2 ** _FLOAT_DIGITS[d]
        return -top, top
    info = np.iinfo(d.np)
    return int(info.min), int(info.max)


def _check_random_bounds(d: dt.dtype, low: int, high_inclusive: int) -> None:
    lo, hi = _dtype_bounds(d)
    if d.is_floating_point:
        if not (lo <= low <= hi and lo <= high_inclusive <= hi):
            digits = _FLOAT_DIGITS[d]
            warnings.warn(
                f"to - 1 is out of bounds [-(2^{digits}), 2^{digits}]. Due to precision "
                f"limitations {C_FLOAT_NAMES[d]} can support discrete uniform distribution only "
                "within this range. This warning will become an error in version 1.7 release, "
                "please fix the code in advance",
                UserWarning,
                stacklevel=3,
            )
        return
    if not lo <= low <= hi:
        raise RuntimeError(f"from is out of bounds for {C_TYPE_NAMES[d]}")
    if not lo <= high_inclusive <= hi:
        raise RuntimeError(f"to - 1 is out of bounds for {C_TYPE_NAMES[d]}")


def _random_bits(self: Tensor, generator: Generator | None, draws: int) -> Tensor:
    """int64 random integers from ``draws`` uniform floats (24 bits each): ``draws`` = 1 or 2
    give non-negative values below 2**(24 * draws), 3 gives all 64 bits (any int64)."""
    words = [
        (rand(self.shape, generator=generator, dtype=dt.float32, device=self.device) * 2**24).to(
            _int64
        )
        for _ in range(draws)
    ]
    if draws == 1:
        return words[0]
    if draws == 2:
        return (words[0] << 24) | words[1]
    return (words[0] << 40) | (words[1] << 16) | (words[2] >> 8)


def _random_integers(self: Tensor, low: int, span: int, generator: Generator | None) -> Tensor:
    """int64 integers on [low, low + span), wrapping in int64 like PyTorch. Spans up to 2**24
    scale one uniform float; wider ones take 64 random bits modulo the span, as PyTorch's CPU
    generator does (so spans just above 2**63 favour their lower part, as there)."""
    if span <= 2**24:
        u = rand(self.shape, generator=generator, dtype=dt.float64, device=self.device)
        return (u * span).floor().to(_int64) + low
    bits = _random_bits(self, generator, 3)
    if span < 2**63:
        return (bits & (2**63 - 1)) % span + low
    if span == 2**63:
        return (bits & (2**63 - 1)) + low
    if span == 2**64:
        return bits + low
    # 2**63 < span < 2**64: the 64 bits as an unsigned u, u mod span = u - span * (u >= span);
    # unsigned order is the signed order of values with their sign bit flipped
    span_signed = span - 2**64
    too_big = (bits ^ -(2**63)) >= (span_signed ^ -(2**63))
    return bits - too_big.to(_int64) * span_signed + low


@tensor_method("random_")
def random_(
    self: Tensor,
    from_: int | None = None,
    to: int | None | object = _UNSET,
    *,
    generator: Generator | None = None,
) -> Tensor:
    """Fill with integers uniform on [from_, to). A lone positional bound is ``to``
    (``random_(5)`` draws from [0, 5)); ``random_()`` draws from [0, largest] where largest is
    the dtype's maximum (2**mantissa digits for floats); ``random_(from_, None)`` from
    [from_, largest]."""
    if to is _UNSET:
        from_, to = (0, None) if from_ is None else (0, from_)
    low = 0 if from_ is None else from_
    for v in (low, to):
        if v is not None and (isinstance(v, (float, bool)) or not isinstance(v, (int, np.integer))):
            raise TypeError(
                "random_() received an invalid combination of arguments - got "
                f"({type(v).__name__}), but expected (int from, int to, *, Generator generator)"
            )
    low = int(low)
    d = self._dtype
    largest = _dtype_bounds(d)[1]
    if to is None:
        if low > largest:
            raise RuntimeError(
                "random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' "
                f"casted to dtype, but got from={low} > to_inc={largest}"
            )
        high_inclusive = largest
    else:
        if low >= to:
            raise RuntimeError(
                f"random_ expects 'from' to be less than 'to', but got from={low} >= to={to}"
            )
        high_inclusive = int(to) - 1
    _check_random_bounds(d, low, high_inclusive)
    return _fill(self, _random_integers(self, low, high_inclusive - low + 1, generator))
