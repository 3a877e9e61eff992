"""Elementwise predicates about values: ``isreal`` and ``isin`` (a numpy kernel beside a
decomposition that compares every pair).
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, TensorOrScalar, fake, result_dtype, wrap
from ..core.registry import defop, tensor_method, torch_function
from ..creation.factories import full
from ..reductions.reduce import any_

__all__: list[str] = []


@torch_function()
@tensor_method()
def isreal(input: Tensor) -> Tensor:
    """Where the imaginary part is zero (everywhere, for a real tensor)."""
    if input.dtype.is_complex:
        return input.imag == 0
    return full(input.shape, True, dtype=dt.bool_, device=input.device)


@defop(kind="pointwise", differentiable=False)
def isin(
    elements: TensorOrScalar,
    test_elements: TensorOrScalar,
    *,
    assume_unique: bool = False,
    invert: bool = False,
): ...


def _isin_dtype(elements, test_elements) -> dt.dtype:
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin() expects at least one of elements and test_elements to be a Tensor")
    for operand in (elements, test_elements):  # PyTorch's kernels sort and compare numbers
        d = operand._dtype if isinstance(operand, Tensor) else _SCALAR_DTYPES.get(type(operand))
        if d is dt.bool_ or d is not None and d.is_complex:
            raise RuntimeError(
                f"Unsupported input type encountered for isin(): {dt.torch_type_name(d)}"
            )
    return result_dtype(elements, test_elements)


# a Python number's tensor dtype, where isin refuses it
_SCALAR_DTYPES = {bool: dt.bool_, complex: dt.complex128}


@isin.register_kernel
def _isin_kernel(elements, test_elements, assume_unique, invert):
    d = _isin_dtype(elements, test_elements).np
    a = elements._data if isinstance(elements, Tensor) else np.asarray(elements)
    b = test_elements._data if isinstance(test_elements, Tensor) else np.asarray(test_elements)
    return wrap(np.isin(a.astype(d), b.astype(d).reshape(-1), invert=invert), dt.bool_)


@isin.register_meta
def _isin_meta(elements, test_elements, assume_unique=False, invert=False):
    _isin_dtype(elements, test_elements)
    like = elements if isinstance(elements, Tensor) else test_elements
    shape = elements.shape if isinstance(elements, Tensor) else ()
    return fake(shape, dt.bool_, like)


@isin.register_decomposition
def _isin_decomp(elements, test_elements, assume_unique=False, invert=False):
    # every element against every test element: O(len(elements) * len(test_elements))
    _isin_dtype(elements, test_elements)
    if not isinstance(test_elements, Tensor):
        found = elements == test_elements
    elif not isinstance(elements, Tensor):
        found = any_(test_elements == elements)
    else:
        found = any_(elements.unsqueeze(-1) == test_elements.reshape(-1), -1)
    return found.logical_not() if invert else found
