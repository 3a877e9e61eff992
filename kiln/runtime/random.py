"""Counter-based random numbers: Philox4x32-10 keyed by (seed, offset).

Every random op is a pure function of (seed, offset, element index): element ``i`` of a call uses
counter ``offset + i`` and key ``seed``. A ``Generator`` only hands out disjoint offset ranges.
Compiled kernels (LLVM and Triton) implement the same function, so a compiled dropout can
regenerate its mask in the backward, and compiled and eager runs draw the same numbers.

Uniform floats take the top 24 bits of the first Philox word: ``(w >> 8) * 2**-24`` in [0, 1).
Normals use Box-Muller on the first two words.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time

import numpy as np

__all__ = [
    "Generator",
    "default_generator",
    "manual_seed",
    "seed",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "philox4x32",
    "uniform_from_bits",
    "philox_uniform",
    "philox_normal",
    "philox_bits",
    "numpy_normal",
    "set_native_sampler",
]

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
_MASK32 = 0xFFFFFFFF


def philox4x32(counter_lo, counter_hi, seed: int, rounds: int = 10, counter_2=None, counter_3=None):
    """Philox4x32 over counters (c0=lo, c1=hi, c2, c3 default 0) with key (seed_lo, seed_hi).

    Returns the four uint32 output words (Salmon et al., SC'11; Random123's philox4x32-10).
    """
    shape = np.shape(counter_lo)
    c0 = np.asarray(counter_lo).astype(np.uint64)
    c1 = np.asarray(counter_hi).astype(np.uint64)
    # every word is written in place below: copies, never the caller's arrays
    c2 = np.zeros(shape, np.uint64) if counter_2 is None else np.array(counter_2, np.uint64)
    c3 = np.zeros(shape, np.uint64) if counter_3 is None else np.array(counter_3, np.uint64)
    k0 = seed & _MASK32
    k1 = (seed >> 32) & _MASK32
    m0 = np.uint64(PHILOX_M0)
    m1 = np.uint64(PHILOX_M1)
    mask = np.uint64(_MASK32)
    shift = np.uint64(32)
    # in place, into two product buffers: a fresh array per step made this 4x slower (dropout's
    # masks of an LSTM language model's training step were a fifth of its time)
    p0 = np.empty(shape, np.uint64)
    p1 = np.empty(shape, np.uint64)
    for _ in range(rounds):
        np.multiply(c0, m0, out=p0)
        np.multiply(c2, m1, out=p1)
        # (c0, c1, c2, c3) <- (hi(p1) ^ c1 ^ k0, lo(p1), hi(p0) ^ c3 ^ k1, lo(p0)), each word
        # read before it is overwritten
        np.right_shift(p1, shift, out=c0)
        c0 ^= c1
        c0 ^= np.uint64(k0)
        np.bitwise_and(p1, mask, out=c1)
        np.right_shift(p0, shift, out=c2)
        c2 ^= c3
        c2 ^= np.uint64(k1)
        np.bitwise_and(p0, mask, out=c3)
        k0 = (k0 + PHILOX_W0) & _MASK32
        k1 = (k1 + PHILOX_W1) & _MASK32
    return (
        c0.astype(np.uint32),
        c1.astype(np.uint32),
        c2.astype(np.uint32),
        c3.astype(np.uint32),
    )


def _counters(offset: int, n: int):
    idx = np.arange(n, dtype=np.uint64) + np.uint64(offset)
    return (idx & np.uint64(_MASK32)).astype(np.uint32), (idx >> np.uint64(32)).astype(np.uint32)


def uniform_from_bits(bits: np.ndarray) -> np.ndarray:
    """uint32 words -> float32 uniform in [0, 1) using the top 24 bits (exactly representable)."""
    return (bits >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)


# The compiler's machine-code samplers (``inductor/codegen/llvm/eager_random.py``), which this
# layer cannot import: [loader, sampler]; the sampler is False once loading failed (numpy then
# draws, the same numbers more slowly)
_native: list = [None, None]


def set_native_sampler(loader) -> None:
    """Install the loader of the machine-code samplers (the facade does, on import)."""
    _native[:] = [loader, None]


def _sampler():
    sampler = _native[1]
    if sampler is None:
        if _native[0] is None:
            return None
        try:
            sampler = _native[0]()
        except Exception as error:  # noqa: BLE001 - any failure leaves the numpy sampler
            logging.getLogger("kiln.random").warning(
                "random: no machine-code sampler (%s: %s); numpy draws the numbers",
                type(error).__name__,
                error,
            )
            sampler = False
        _native[1] = sampler
    return sampler or None


def _numpy_words(seed: int, offset: int, n: int):
    lo, hi = _counters(offset, n)
    return philox4x32(lo, hi, seed)[:2]


def philox_bits(seed: int, offset: int, n: int) -> np.ndarray:
    sampler = _sampler()
    if sampler is not None:
        return sampler.words(seed, offset, n)[0]
    return _numpy_words(seed, offset, n)[0]


def philox_uniform(seed: int, offset: int, n: int) -> np.ndarray:
    sampler = _sampler()
    if sampler is not None:
        return sampler.uniform(seed, offset, n)
    return uniform_from_bits(_numpy_words(seed, offset, n)[0])


def philox_normal(seed: int, offset: int, n: int) -> np.ndarray:
    """Standard normals (float32) by Box-Muller on the first two Philox words of each counter."""
    sampler = _sampler()
    if sampler is not None:
        return sampler.normal(seed, offset, n)
    return numpy_normal(*_numpy_words(seed, offset, n))


def numpy_normal(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Box-Muller in float64 on two word arrays: the definition the samplers follow."""
    u1 = uniform_from_bits(w0).astype(np.float64)
    u2 = uniform_from_bits(w1).astype(np.float64)
    # 1 - u1 is in (0, 1]: log never sees zero
    r = np.sqrt(-2.0 * np.log(1.0 - u1))
    return (r * np.cos(2.0 * np.pi * u2)).astype(np.float32)


# reserving counters is a read and a write: threads drawing at once must get disjoint ranges
_reserve_lock = threading.Lock()


class Generator:
    """A (seed, offset) pair; each random call takes the next ``numel`` counters."""

    def __init__(self, device="cpu"):
        self.device = device
        self._seed = 67280421310721
        self._offset = 0

    def manual_seed(self, seed: int) -> Generator:
        seed = int(seed)
        if seed < 0:
            seed &= (1 << 64) - 1
        if seed >= 1 << 64:
            raise RuntimeError(f"Overflow when unpacking long: seed {seed} does not fit in 64 bits")
        self._seed = seed
        self._offset = 0
        return self

    def seed(self) -> int:
        s = int.from_bytes(os.urandom(8), "little") ^ time.time_ns()
        self.manual_seed(s & ((1 << 63) - 1))
        return self._seed

    def initial_seed(self) -> int:
        return self._seed

    def next_offset(self, n: int) -> tuple[int, int]:
        """Reserve ``n`` counters; returns (seed, first counter)."""
        with _reserve_lock:
            start = self._offset
            # round up to 4 so consecutive calls stay aligned with vector widths in compiled code
            self._offset = start + ((n + 3) & ~3)
            return self._seed, start

    def get_state(self):
        from . import dtypes
        from .tensor import wrap_array

        raw = np.frombuffer(struct.pack("<QQ", self._seed, self._offset), dtype=np.uint8).copy()
        return wrap_array(raw, dtypes.uint8)

    def set_state(self, new_state) -> Generator:
        raw = bytes(
            np.asarray(
                new_state._data if hasattr(new_state, "_data") else new_state, dtype=np.uint8
            )
        )
        if len(raw) != 16:
            raise RuntimeError(f"RNG state must be 16 bytes (seed, offset), got {len(raw)}")
        self._seed, self._offset = struct.unpack("<QQ", raw)
        return self

    def __repr__(self) -> str:
        return f"<kiln.Generator seed={self._seed} offset={self._offset}>"


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator (and the CUDA one, which shares it)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state) -> None:
    default_generator.set_state(new_state)
