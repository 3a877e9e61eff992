"""float32 add, sub, mul and div where one operand spreads along the other's rows or columns,
as machine code (``inductor/codegen/llvm/eager_broadcast.py``, reached through
``runtime.machine_code``): ``x + bias``, ``x * scale[:, None]``, ``x - x.mean(-1, keepdim=True)``.

numpy's broadcast ufuncs miss its vector loops (256 x 256 ``x + row``: 25-30 us against 9 for
``x + x``); the machine code does one IEEE operation per element, numpy's and PyTorch's bits, into
a C-contiguous result, which is TensorIterator's layout when the full operand is C-contiguous (a
broadcast operand's stride-0 dims order nothing)."""

from __future__ import annotations

import numpy as np

from ...runtime import machine_code
from ...runtime.storage import empty_array

__all__ = ["NATIVE_OPERATIONS", "broadcast_binary"]

# the numpy ufuncs the machine code has, by its names for them
NATIVE_OPERATIONS = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div"}
_MIN_SIZE = 4096  # smaller results: numpy's call costs as little as the machine code's
_f32 = np.dtype(np.float32)


def _spread(full_shape: tuple, small_shape: tuple) -> tuple | None:
    """(spread, rows, cols) of ``small`` against C-contiguous ``full``: "row" when small's
    shape, less leading ones, is a suffix of full's (one value per column of a (rows, cols)
    view); "column" when it is full's shape with a last dim of 1 (one value per row); None for
    any other pair (both operands broadcast, or the result is not full's shape)."""
    ndim = len(full_shape)
    pad = ndim - len(small_shape)
    if pad < 0:
        return None
    padded = (1,) * pad + tuple(small_shape)
    if padded[:-1] == full_shape[:-1] and padded[-1] == 1:
        cols = full_shape[-1]
        return "column", (0 if not cols else _size(full_shape) // cols), cols
    lead = 0
    while lead < ndim and padded[lead] == 1:
        lead += 1
    if padded[lead:] != full_shape[lead:]:
        return None
    cols = _size(padded)
    return "row", _size(full_shape[:lead]), cols


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def broadcast_binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``a op b`` for float32 arrays of different shapes where one is C-contiguous of the result's
    shape and the other (C-contiguous) spreads along its rows or columns; None for any other call
    (and where the machine code is missing), which numpy then computes."""
    if a.size >= b.size:
        full, small, full_first = a, b, True
    else:
        full, small, full_first = b, a, False
    if full.size < _MIN_SIZE or full.dtype != _f32 or small.dtype != _f32:
        return None
    if not (full.flags.c_contiguous and small.flags.c_contiguous):
        return None
    spread = _spread(full.shape, small.shape)
    if spread is None:
        return None
    kernels = machine_code.get("broadcast")
    if kernels is None:
        return None
    kind, rows, cols = spread
    out = empty_array(full.shape, _f32)
    kernels.apply(op, kind, full_first, full, small, out, rows, cols)
    return out
