"""``kiln.poisson`` and ``kiln.binomial``: counts drawn per element from given rates / trials.

The draws come from numpy's exact samplers seeded by the Philox counters of ``generator`` (or
the default generator), so ``manual_seed`` makes them reproducible; the values are not
PyTorch's (different generator), the distributions are. As in PyTorch, ``poisson`` passes a
zero gradient back to its rates and ``binomial`` has no derivative.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ...runtime import random as rng
from ...runtime.random import Generator
from ..core.common import Tensor, broadcast_shapes, pointwise_meta, wrap
from ..core.registry import defop
from ..reductions.reduce import torch_type_name

__all__: list[str] = []


def _numpy_generator(generator: Generator | None, n: int) -> np.random.Generator:
    """A numpy generator seeded from ``n`` reserved Philox counters of ``generator``."""
    gen = generator or rng.default_generator
    seed, offset = gen.next_offset(max(n, 1))
    return np.random.default_rng(rng.philox_bits(seed, offset, 4).astype(np.uint64))


@defop(kind="random")
def poisson(self: Tensor, generator: Generator | None = None):
    """Counts drawn from Poisson distributions with the rates in ``self``."""


@poisson.register_kernel
def _poisson_kernel(rates, generator):
    if not rates._dtype.is_floating_point:
        raise NotImplementedError(
            f"\"poisson_cpu\" not implemented for '{torch_type_name(rates._dtype)}'"
        )
    lam = rates._data.astype(np.float64)
    if np.any(lam < 0):
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
    finite = np.isfinite(lam)
    counts = _numpy_generator(generator, lam.size).poisson(np.where(finite, lam, 0.0))
    return wrap(np.where(finite, counts, np.nan).astype(rates._dtype.np), rates._dtype)


poisson.register_meta(lambda rates, generator=None: pointwise_meta(rates._dtype, rates))
poisson.register_derivative(lambda c, g: (g * 0,), save_inputs=())


@defop(kind="random")
def binomial(count: Tensor, prob: Tensor, generator: Generator | None = None):
    """Successes in ``count`` trials of probability ``prob`` (broadcast together)."""


def _binomial_dtype(count: Tensor, prob: Tensor) -> dt.dtype:
    if not count._dtype.is_floating_point:
        raise ValueError(
            "binomial only supports floating-point dtypes for count, got: "
            f"{torch_type_name(count._dtype)}"
        )
    if count._dtype not in (dt.float32, dt.float64):
        raise NotImplementedError(
            f"\"binomial_cpu\" not implemented for '{torch_type_name(count._dtype)}'"
        )
    return count._dtype


@binomial.register_kernel
def _binomial_kernel(count, prob, generator):
    d = _binomial_dtype(count, prob)
    shape = broadcast_shapes(count._shape, prob._shape)
    n = np.broadcast_to(count._data, shape).astype(np.float64)
    p = np.clip(np.broadcast_to(prob._data, shape).astype(np.float64), 0.0, 1.0)
    valid = np.isfinite(n) & (n >= 0) & ~np.isnan(p)
    trials = np.where(valid, np.floor(n), 0).astype(np.int64)
    draws = _numpy_generator(generator, trials.size).binomial(trials, np.where(valid, p, 0.0))
    return wrap(np.where(valid, draws, np.nan).astype(d.np), d)


binomial.register_meta(
    lambda count, prob, generator=None: pointwise_meta(_binomial_dtype(count, prob), count, prob)
)


def _binomial_derivative(c, g):
    raise RuntimeError("derivative for aten::binomial is not implemented")


binomial.register_derivative(_binomial_derivative, save_inputs=())
