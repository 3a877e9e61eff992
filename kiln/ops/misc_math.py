"""Assorted namespace functions built from existing ops: small products (inner, addr, vander),
tensor assembly (block_diag, diagflat, cartesian_prod, combinations, tril/triu_indices,
v/h/dsplit, ravel), predicates (isin, isreal, bucketize) and distances (cdist, pdist, dist,
renorm). Finite differences and integrals live in ``differences``.

All are composites (their parts carry autograd and lower in the compiler) except ``addr`` and
``isin``, which also have numpy kernels: addr's derivative must give self a (zero) gradient even
when beta = 0 makes the forward ignore it, and isin's decomposition compares every pair. Index sets
that depend only on sizes (combinations, tril_indices) are computed in Python at call time.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..amp.autocast_mode import autocast_policy
from ..runtime import dtypes as dt
from .api import tensor
from .cat_split import cat, stack, tensor_split
from .common import (
    Scalar,
    Tensor,
    TensorOrScalar,
    compute_np_dtype,
    fake,
    result_dtype,
    wrap,
    wrap_dim,
)
from .creation import full
from .index_dim import index_select
from .linalg import diag, mv, outer, tensordot
from .padding import constant_pad_nd
from .pointwise import where
from .reductions import any_, torch_type_name
from .registry import OPS, defop, tensor_method, torch_function
from .shape import meshgrid
from .sorting import searchsorted
from .vector_norm import vector_norm
from .views import expand_shape

__all__ = ["known_any"]

_int64 = dt.int64


def known_any(mask: Tensor) -> bool:
    """Whether any element of ``mask`` is set, for value checks (q in [0, 1], weights >= 0):
    False when it has no data (fake or meta tensors during capture), where checks are skipped."""
    flag = any_(mask)
    return flag._data is not None and flag.device.type != "meta" and bool(flag.item())


# ------------------------------------------------------------------------------ products


@torch_function()
@tensor_method()
def inner(input: Tensor, other: Tensor) -> Tensor:
    """Sum over the last dims of the products (for 0-d operands: the product)."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(
            "inner() the last dimension must match on both input tensors but got shapes "
            f"{list(input.shape)} and {list(other.shape)}"
        )
    if input.dtype is not other.dtype:
        raise RuntimeError("both inputs should have same dtype")
    return tensordot(input, other, dims=([-1], [-1]))


@defop(kind="linalg")
def addr(self: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1): ...


def _addr_check(x, vec1, vec2, beta, alpha):
    """Result shape and dtype (PyTorch promotes all three operands), with its argument checks."""
    for name, v in (("vec1", vec1), ("vec2", vec2)):
        if v.ndim != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {v.ndim}-D")
    d = result_dtype(x, vec1, vec2)
    if not d.is_floating_point and d is not dt.bool_:
        for name, v in (("beta", beta), ("alpha", alpha)):
            if isinstance(v, float):
                raise RuntimeError(
                    f"For integral input tensors, argument {name} must not be a floating point "
                    "number."
                )
    shape = (vec1.shape[0], vec2.shape[0])
    expand_shape(x.shape, shape)
    return shape, d


@addr.register_kernel
def _addr_kernel(x, vec1, vec2, beta, alpha):
    shape, d = _addr_check(x, vec1, vec2, beta, alpha)
    cd = compute_np_dtype(d)
    a, b = vec1._data.astype(cd, copy=False), vec2._data.astype(cd, copy=False)
    base = np.broadcast_to(x._data.astype(cd, copy=False), shape)
    if d is dt.bool_:  # beta and alpha act as logical switches
        out = np.logical_and.outer(a, b) & bool(alpha)
        return wrap(out | (base & bool(beta)), d)
    out = np.multiply.outer(a, b)
    if alpha != 1:
        out = out * alpha
    if beta != 0:  # beta == 0 ignores self, NaN included
        out = out + (base * beta if beta != 1 else base)
    return wrap(out, d)


@addr.register_meta
def _addr_meta(x, vec1, vec2, beta=1, alpha=1):
    shape, d = _addr_check(x, vec1, vec2, beta, alpha)
    return fake(shape, d, x)


@addr.register_derivative
def _addr_grad(c, g):
    x, vec1, vec2, beta, alpha = c.args
    needs = c.needs_input_grad
    scaled = g * alpha if alpha != 1 else g
    return (
        g * beta if needs[0] else None,
        mv(scaled, vec2.to(g.dtype)) if needs[1] else None,
        mv(scaled.t(), vec1.to(g.dtype)) if needs[2] else None,
        None,
        None,
    )


@addr.register_decomposition
def _addr_decomp(x, vec1, vec2, beta=1, alpha=1):
    shape, d = _addr_check(x, vec1, vec2, beta, alpha)
    base = x.expand(shape)
    if d is dt.bool_:
        out = vec1.unsqueeze(1).logical_and(vec2.unsqueeze(0)).logical_and(bool(alpha))
        return out.logical_or(base.logical_and(bool(beta)))
    product = outer(vec1.to(d), vec2.to(d))
    out = product * alpha if alpha != 1 else product
    if beta == 0:  # self is ignored (NaN included) but keeps a zero gradient, as in the kernel
        return where(full(shape, False, device=x.device), base, out)
    return out + (base * beta if beta != 1 else base)


@torch_function()
def vander(x: Tensor, N: int | None = None, increasing: bool = False) -> Tensor:  # noqa: N803
    """Columns of powers of ``x`` (highest first unless ``increasing``); integers give int64."""
    if x.ndim != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    d = x.dtype if x.dtype.is_floating_point else _int64
    base = x.to(d)
    columns = [full((x.shape[0], min(n, 1)), 1, dtype=d, device=x.device)]
    if n > 1:
        columns.append(base.unsqueeze(1).expand(x.shape[0], n - 1).cumprod(1))
    out = cat(columns, 1) if len(columns) > 1 else columns[0]
    return out if increasing else out.flip(-1)


# ------------------------------------------------------------------------------ assembly


@torch_function()
def block_diag(*tensors: Tensor) -> Tensor:
    """The blocks along the diagonal of a zero matrix (0-d blocks are 1x1, 1-D blocks 1xn)."""
    if not tensors:
        return full((1, 0), 0, dtype=dt.get_default_dtype())
    blocks = []
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(
                "torch.block_diag: Input tensors must have 2 or fewer dimensions. Input "
                f"{i} has {t.ndim} dimensions"
            )
        blocks.append(t.reshape(1, -1) if t.ndim < 2 else t)
    d = blocks[0].dtype
    for b in blocks[1:]:
        d = dt.promote_types(d, b.dtype)
    width = 0
    for b in blocks:
        width += b.shape[1]
    rows, left = [], 0
    for b in blocks:
        right = width - left - b.shape[1]
        rows.append(constant_pad_nd(b.to(d), [left, right]))
        left += b.shape[1]
    return cat(rows, 0)


@torch_function()
@tensor_method()
def diagflat(input: Tensor, offset: int = 0) -> Tensor:
    """A square matrix with the flattened ``input`` on diagonal ``offset``."""
    return diag(input.reshape(-1), offset)


def _check_vector(t: Tensor) -> None:
    if t.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")


@torch_function()
def cartesian_prod(*tensors: Tensor) -> Tensor:
    """Every combination of one element from each 1-D tensor, one per row."""
    for t in tensors:
        _check_vector(t)
    if len(tensors) == 1:
        return tensors[0]
    for t in tensors[1:]:
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    grids = meshgrid(*tensors, indexing="ij")
    return stack([g.reshape(-1) for g in grids], 1)


@torch_function()
def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The length-``r`` combinations of a 1-D tensor's elements, in lexicographic index order."""
    _check_vector(input)
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return full((0,), 0, dtype=input.dtype, device=input.device)
    make = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    picks = [i for combo in make(range(input.shape[0]), r) for i in combo]
    index = tensor(picks, dtype=_int64, device=input.device)
    return index_select(input, 0, index).reshape(-1, r)


def _tri_indices(name: str, np_fn, row: int, col: int, offset: int, dtype, device) -> Tensor:
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    d = _int64 if dtype is None else dtype
    if d.is_floating_point or d is dt.bool_:
        raise NotImplementedError(f"\"{name}\" not implemented for '{torch_type_name(d)}'")
    rows, cols = np_fn(row, offset, col)
    return tensor(np.stack([rows, cols]), dtype=d, device=device)


@torch_function()
def tril_indices(
    row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None
) -> Tensor:
    """Coordinates (2, N) of the lower triangle of a row x col matrix, row by row."""
    return _tri_indices("tril_indices", np.tril_indices, row, col, offset, dtype, device)


@torch_function()
def triu_indices(
    row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None
) -> Tensor:
    """Coordinates (2, N) of the upper triangle of a row x col matrix, row by row."""
    return _tri_indices("triu_indices", np.triu_indices, row, col, offset, dtype, device)


def _split_along(name: str, input: Tensor, sections, dim: int, min_ndim: int) -> tuple:
    if input.ndim < min_ndim:
        raise RuntimeError(
            f"torch.{name} requires a tensor with at least {min_ndim} dimension, but got a "
            f"tensor with {input.ndim} dimensions!"
        )
    if isinstance(sections, (int, np.integer)) and not isinstance(sections, bool):
        size = input.shape[dim]
        if sections == 0 or size % sections:
            raise RuntimeError(
                f"torch.{name} attempted to split along dimension {dim}, but the size of the "
                f"dimension {size} is not divisible by the split_size {sections}!"
            )
    return tensor_split(input, sections, dim)


@torch_function()
@tensor_method()
def hsplit(input: Tensor, indices_or_sections) -> tuple:
    """Split along dim 1 (dim 0 for 1-D tensors) into equal sections or at indices."""
    dim = 1 if input.ndim >= 2 else 0
    return _split_along("hsplit", input, indices_or_sections, dim, 1)


@torch_function()
@tensor_method()
def vsplit(input: Tensor, indices_or_sections) -> tuple:
    """Split along dim 0 of a tensor of two or more dims."""
    return _split_along("vsplit", input, indices_or_sections, 0, 2)


@torch_function()
@tensor_method()
def dsplit(input: Tensor, indices_or_sections) -> tuple:
    """Split along dim 2 of a tensor of three or more dims."""
    return _split_along("dsplit", input, indices_or_sections, 2, 3)


@torch_function()
@tensor_method()
def ravel(input: Tensor) -> Tensor:
    """The elements as a 1-D tensor (a view when the layout allows)."""
    return input.reshape(-1)


# ------------------------------------------------------------------------------ predicates


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
    return result_dtype(elements, test_elements)


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


@torch_function()
def bucketize(
    input: TensorOrScalar, boundaries: Tensor, *, out_int32: bool = False, right: bool = False
) -> Tensor:
    """Index of the bucket of each value: boundaries[i-1] < x <= boundaries[i] (``<`` with right)."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


# ------------------------------------------------------------------------------ distances


def _check_distance_p(name: str, p: float) -> None:
    if p < 0:
        raise RuntimeError(f"{name} only supports non-negative p values")


@torch_function()
@autocast_policy("cdist")
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str | None = None) -> Tensor:
    """p-norm distances between the rows of ``x1`` (..., P, M) and of ``x2`` (..., R, M):
    (..., P, R), batch dims broadcast. ``compute_mode`` is accepted and ignored (kiln always
    takes differences, never the matmul expansion, so results carry no cancellation error)."""
    for name, t in (("X1", x1), ("X2", x2)):
        if t.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {t.ndim}D")
        if not t.dtype.is_floating_point:
            raise RuntimeError(
                f"cdist only supports floating-point dtypes, {name} got: {torch_type_name(t.dtype)}"
            )
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(
            f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}"
        )
    if x1.dtype is not x2.dtype:
        raise RuntimeError(
            f"expected scalar type {torch_type_name(x1.dtype)} but found "
            f"{torch_type_name(x2.dtype)}"
        )
    _check_distance_p("cdist", p)
    differences = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    distances = vector_norm(differences, p, [-1])
    if p == 0:
        # a count of nonzero differences: PyTorch's cdist gives it zero gradients (the 0-norm
        # gives none), so the differences join through a selection of exact zeros
        always = full((), True, dtype=dt.bool_, device=differences.device)
        distances = distances + where(always, 0.0, differences).sum(-1)
    return distances


@torch_function()
def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """Distances between every pair of rows i < j of a 2-D tensor, in row-major pair order."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    _check_distance_p("pdist", p)
    n = input.shape[0]
    rows, cols = np.triu_indices(n, 1)
    first = index_select(input, 0, tensor(rows, dtype=_int64, device=input.device))
    second = index_select(input, 0, tensor(cols, dtype=_int64, device=input.device))
    return vector_norm(first - second, p, [-1])


@torch_function()
@tensor_method()
def dist(input: Tensor, other: Tensor, p: float = 2.0) -> Tensor:
    """The p-norm of ``input - other`` (broadcast) over all elements."""
    difference = input - other
    if not difference.dtype.is_floating_point:
        raise RuntimeError(
            "norm(): input dtype should be either floating point or complex. Got "
            f"{torch_type_name(difference.dtype)} instead."
        )
    return vector_norm(difference, p)


@defop(kind="reduction")
def renorm(self: Tensor, p: Scalar, dim: int, maxnorm: Scalar): ...


@renorm.register_decomposition
def _renorm_decomp(x, p, dim, maxnorm):
    """Scale each slice along ``dim`` whose p-norm exceeds ``maxnorm`` down to norm ``maxnorm``."""
    if not p > 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm:g}")
    if x.ndim < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {x.ndim} dimensions")
    d = wrap_dim(dim, x.ndim)
    others = [i for i in range(x.ndim) if i != d]
    norms = vector_norm(x, p, others, True)
    # the 1e-7 keeps the scale finite for zero norms, as PyTorch's kernel does
    factor = where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0)
    return x * factor


# ------------------------------------------------------------------------------ fmax / fmin


def _nan_ignoring_extreme_grad(keep_self):
    """fmax/fmin send the gradient to ``self`` where it was chosen (``keep_self``: self >= other
    for fmax, self <= other for fmin; ties go to self) or where ``other`` is NaN, else to
    ``other``: PyTorch's formulas."""

    def derivative(c, g):
        a, b = c.args
        to_self = keep_self(a, b) | (b != b)
        return (
            where(to_self, g, 0) if c.needs_input_grad[0] else None,
            where(to_self, 0, g) if c.needs_input_grad[1] else None,
        )

    return derivative


# the ops live with the other binary ops in ``pointwise``; their derivatives are added here
for _name, _keep_self in (("fmax", lambda a, b: a >= b), ("fmin", lambda a, b: a <= b)):
    OPS[_name].differentiable = True
    OPS[_name].register_derivative(_nan_ignoring_extreme_grad(_keep_self))
