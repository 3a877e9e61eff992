"""The table ``dispatch`` consults for an op with a sparse COO argument: the sparse version of
each dense op kiln has one for (the rest raise PyTorch's NotImplementedError)."""

from __future__ import annotations

from .arithmetic import add, add_, div, mul, mul_, neg, pow_, sub, sum_op, zero_preserving
from .construction import cast, clone
from .products import matmul_op, mm_op

__all__ = ["SPARSE_OPS", "ZERO_PRESERVING", "sparse_dispatch"]

# the dense ops a sparse argument may reach, by op name (anything else: NotImplementedError)
SPARSE_OPS = {
    "mm": mm_op,
    "matmul": matmul_op,
    "add": add,
    "sub": sub,
    "add_": add_,
    "mul": mul,
    "mul_": mul_,
    "neg": neg,
    "sum": sum_op,
    "clone": clone,
    "convert_element_type": cast,
    "div": div,
    "pow": pow_,
}
# unary ops that map zero to zero, as PyTorch's sparse kernels run them: on the coalesced values
ZERO_PRESERVING = (
    "abs sqrt sin tan tanh relu sign expm1 log1p floor ceil round trunc frac asin atan sinh asinh "
    "atanh erf erfinv isnan isinf signbit nan_to_num"
).split()
SPARSE_OPS.update({name: zero_preserving(name) for name in ZERO_PRESERVING})


def sparse_dispatch(op, args: tuple):
    """Run the sparse version of ``op`` (``dispatch`` found a sparse tensor among ``args``)."""
    impl = SPARSE_OPS.get(op.name)
    if impl is None:
        raise NotImplementedError(
            f"Could not run 'aten::{op.name}' with arguments from the 'SparseCPU' backend: kiln's "
            f"sparse COO tensors support {', '.join(sorted(SPARSE_OPS))}; call .to_dense() first"
        )
    return impl(*args)
