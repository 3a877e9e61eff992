"""The op sample database: each op family lists ``Sample``s; ``test_oracle`` runs them all.

A sample names a callable in both libraries (``fn(lib, *args, **kwargs)`` where ``lib`` is the
``kiln`` or ``torch`` module), its tensor arguments as ``T`` specs (values are generated once in
numpy and given to both libraries), and which checks apply: forward values and dtype against
PyTorch, gradients against PyTorch, float64 gradcheck, and the meta function against eager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class T:
    """A tensor argument: shape, dtype name, value range and layout."""

    shape: tuple = (3, 4)
    dtype: str = "float32"
    low: float = -2.0
    high: float = 2.0
    layout: str = (
        "contiguous"  # "contiguous", "transposed" (a .t()/.mT view), "strided" (step-2 slice)
    )
    requires_grad: bool = True
    values: Any = None  # explicit values (list/array) instead of random ones

    def make(self, rng: np.random.Generator) -> np.ndarray:
        if self.values is not None:
            arr = np.array(self.values)
        elif self.dtype == "bool":
            arr = rng.random(self.shape) > 0.5
        elif self.dtype.startswith(("int", "uint")):
            arr = rng.integers(int(self.low), int(self.high) + 1, size=self.shape)
        else:
            arr = rng.uniform(self.low, self.high, size=self.shape)
        np_dtype = {"bfloat16": np.float32}.get(self.dtype, self.dtype)
        arr = np.asarray(arr).astype(np_dtype if self.dtype != "bool" else np.bool_)
        if self.dtype == "bfloat16":
            import ml_dtypes

            arr = arr.astype(ml_dtypes.bfloat16).astype(np.float32)
        return arr


@dataclass
class Sample:
    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    fn: Callable | None = None  # (lib, *args, **kwargs) -> result; default getattr(lib, name)
    ops: tuple = ()  # registered op names this sample covers (default: (name,))
    grad: bool = True  # compare gradients with PyTorch
    gradcheck: bool = True  # float64 finite differences
    meta: bool = True  # run under FakeTensorMode and compare shape/dtype
    oracle: bool = True  # compare with PyTorch (False for ops whose values differ by design: RNG)
    rtol: float | None = None
    atol: float | None = None
    grad_rtol: float | None = None
    grad_atol: float | None = None
    id: str = ""

    def covered_ops(self) -> tuple:
        return self.ops or (self.name,)

    def call(self, lib, args, kwargs):
        if self.fn is not None:
            return self.fn(lib, *args, **kwargs)
        return getattr(lib, self.name)(*args, **kwargs)

    def label(self) -> str:
        return self.id or f"{self.name}-" + "-".join(
            f"{a.dtype}{list(a.shape)}{'' if a.layout == 'contiguous' else a.layout[0]}"
            if isinstance(a, T)
            else type(a).__name__
            for a in self.args
        )
