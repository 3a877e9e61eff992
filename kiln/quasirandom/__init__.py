"""``torch.quasirandom``: ``SobolEngine``, low-discrepancy Sobol sequences, optionally scrambled.

Points are 30-bit integers per dimension, advanced in Gray-code order: point ``k + 1`` is point
``k`` XOR the direction number indexed by the lowest zero bit of ``k`` (Antonov and Saleev), so
unscrambled sequences are PyTorch's bit for bit. The direction numbers are Joe and Kuo's D(6)
table, which kiln carries for the first ``MAXDIM`` = 100 dimensions (``joe_kuo_table.py``;
PyTorch's reaches 21201). Scrambling is Owen's linear matrix scramble plus a digital shift, with
PyTorch's draws (a random lower-triangular bit matrix per dimension, a random shift) taken from
kiln's generator: a seed gives the same sequence every time, but not PyTorch's sequence for that
seed, since kiln's random stream is not PyTorch's.
"""

from __future__ import annotations

import numpy as np

from ..ops.public import Generator, Tensor, cat, get_default_dtype, randint, tensor
from .joe_kuo_table import MAX_DIMENSION, POLYNOMIALS_AND_INITIAL_NUMBERS

__all__ = ["SobolEngine"]

_MAXBIT = 30
_MSB_SHIFTS = np.arange(_MAXBIT - 1, -1, -1, dtype=np.int64)  # bit of MSB-first position p


def sobol_state(dimension: int) -> np.ndarray:
    """The (dimension, 30) direction numbers, each a 30-bit integer (``m_j`` shifted up to bit
    29 - j): all ones for dimension 1, else the table's first ``s`` and the primitive
    polynomial's recurrence ``v_j = v_{j-s} ^ (v_{j-s} >> s) ^ XOR_k c_k v_{j-k}``."""
    state = np.zeros((dimension, _MAXBIT), dtype=np.int64)
    state[0] = 1 << _MSB_SHIFTS
    for d, (a, initial) in enumerate(POLYNOMIALS_AND_INITIAL_NUMBERS[: dimension - 1], start=1):
        s = len(initial)
        v = state[d]
        for j in range(_MAXBIT):
            if j < s:
                v[j] = initial[j] << (_MAXBIT - 1 - j)
                continue
            value = v[j - s] ^ (v[j - s] >> s)
            for k in range(1, s):
                if (a >> (s - 1 - k)) & 1:
                    value ^= v[j - k]
            v[j] = value
    return state


def _lowest_zero_bits(start: int, n: int) -> np.ndarray:
    """For each counter ``k`` in [start, start + n), the index of its lowest zero bit."""
    k = np.arange(start, start + n, dtype=np.int64)
    return np.log2((k + 1) & ~k).astype(np.int64)


def _steps_taken(count: int) -> np.ndarray:
    """How many counters in [0, count) have their lowest zero bit at each of the 30 places
    (``k = 2^l - 1 mod 2^(l+1)``)."""
    places = np.arange(_MAXBIT, dtype=np.int64)
    return np.maximum(0, (count + (1 << places)) >> (places + 1))


def scramble_state(state: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """Owen's linear matrix scramble: each direction number's bits (most significant first)
    times its dimension's lower-triangular bit matrix ``lower`` (unit diagonal imposed), mod 2."""
    lower = lower.astype(np.int64)
    idx = np.arange(_MAXBIT)
    lower[:, idx, idx] = 1
    bits = (state[..., None] >> _MSB_SHIFTS) & 1  # (dimension, j, p)
    scrambled_bits = np.einsum("dpk,djk->djp", lower, bits) & 1
    return (scrambled_bits << _MSB_SHIFTS).sum(-1)


class SobolEngine:
    """An engine drawing (scrambled) Sobol points in [0, 1)^dimension; each draw continues the
    sequence where the previous one stopped.

    Args:
        dimension: the number of coordinates, 1 to ``MAXDIM``.
        scramble: scramble the sequence (randomized quasi-Monte Carlo).
        seed: the seed of the scrambling's generator (else kiln's global one is used).
    """

    MAXBIT = _MAXBIT
    MAXDIM = MAX_DIMENSION

    def __init__(self, dimension: int, scramble: bool = False, seed: int | None = None) -> None:
        if dimension < 1 or dimension > 21201:
            raise ValueError("Supported range of dimensionality for SobolEngine is [1, 21201]")
        if dimension > self.MAXDIM:
            raise ValueError(
                f"Supported range of dimensionality for SobolEngine is [1, {self.MAXDIM}] in "
                f"kiln, which carries Joe and Kuo's direction numbers for its first "
                f"{self.MAXDIM} dimensions only (PyTorch's table reaches 21201); got {dimension}"
            )
        self.seed = seed
        self.scramble = scramble
        self.dimension = dimension
        state = sobol_state(dimension)
        if scramble:
            generator = None
            if seed is not None:
                generator = Generator()
                generator.manual_seed(seed)
            shift_bits = randint(2, (dimension, _MAXBIT), generator=generator).numpy()
            lower = randint(2, (dimension, _MAXBIT, _MAXBIT), generator=generator).tril()
            state = scramble_state(state, lower.numpy())
            self.shift = tensor(shift_bits @ (1 << np.arange(_MAXBIT, dtype=np.int64)))
        else:
            self.shift = tensor(np.zeros(dimension, dtype=np.int64))
        self.sobolstate = tensor(state)
        self.quasi = self.shift.clone()
        self._first_point = (self.quasi / 2**self.MAXBIT).reshape(1, -1)
        self.num_generated = 0

    def _advance(self, n: int, counter: int) -> np.ndarray:
        """The next ``n`` points as 30-bit integers (n, dimension), ``counter`` being the Gray
        code's count so far; the engine's ``quasi`` moves to the last."""
        state = self.sobolstate.numpy()
        steps = state[:, _lowest_zero_bits(counter, n)].T
        points = np.bitwise_xor.accumulate(steps, axis=0) ^ self.quasi.numpy()
        if n:
            self.quasi = tensor(points[-1].copy())
        return points

    def draw(self, n: int = 1, out: Tensor | None = None, dtype=None) -> Tensor:
        """The next ``n`` points, an (n, dimension) tensor of ``dtype`` (the default dtype)."""
        if dtype is None:
            dtype = get_default_dtype()
        if self.num_generated == 0:
            first = self._first_point.to(dtype)
            rest = self._advance(n - 1, 0) if n > 1 else None
        else:
            first, rest = None, self._advance(n, self.num_generated - 1)
        parts = [] if first is None else [first]
        if rest is not None:
            parts.append(tensor(rest * 2.0**-self.MAXBIT).to(dtype))
        result = parts[0] if len(parts) == 1 else cat(parts, dim=-2)
        self.num_generated += n
        if out is not None:
            out.resize_as_(result).copy_(result)
            return out
        return result

    def draw_base2(self, m: int, out: Tensor | None = None, dtype=None) -> Tensor:
        """The next ``2**m`` points; the total drawn must stay a power of two (the balance
        property of Sobol points)."""
        n = 2**m
        total_n = self.num_generated + n
        if total_n & (total_n - 1):
            raise ValueError(
                "The balance properties of Sobol' points require "
                f"n to be a power of 2. {self.num_generated} points have been "
                f"previously generated, then: n={self.num_generated}+2**{m}={total_n}. "
                "If you still want to do this, please use "
                "'SobolEngine.draw()' instead."
            )
        return self.draw(n=n, out=out, dtype=dtype)

    def reset(self) -> SobolEngine:
        """Back to the sequence's first point."""
        self.quasi.copy_(self.shift)
        self.num_generated = 0
        return self

    def fast_forward(self, n: int) -> SobolEngine:
        """Skip ``n`` points, as drawing them would, without making them: each direction number
        is XORed in once per counter whose lowest zero bit selects it, so only the parity of
        those counts matters."""
        start = self.num_generated - 1 if self.num_generated else 0
        count = n if self.num_generated else n - 1
        if count > 0:
            odd = (_steps_taken(start + count) - _steps_taken(start)) & 1
            state = self.sobolstate.numpy()
            change = np.bitwise_xor.reduce(state * odd, axis=1)
            self.quasi = tensor(self.quasi.numpy() ^ change)
        self.num_generated += n
        return self

    def __repr__(self) -> str:
        fields = [f"dimension={self.dimension}"]
        if self.scramble:
            fields.append("scramble=True")
        if self.seed is not None:
            fields.append(f"seed={self.seed}")
        return f"{type(self).__name__}({', '.join(fields)})"
