"""Reductions over dims: sums and products, extremes, mean, logsumexp, logical tests and counts.

``dim`` is an int, a tuple/list, or None (an empty list also means every dim); ``reduce_dims``
normalises it once and ``reduced_shape`` gives the (dim, keepdim) output shape. Integer and bool
inputs of sum/prod accumulate in int64, as in PyTorch; float32 sums use numpy's pairwise
``add.reduce`` in float32 (PyTorch's accuracy, not a float64 accumulator); half types accumulate
in float32. Value-selecting reductions differentiate like PyTorch: the full ones (amax, amin,
max(), min()) split the gradient evenly among ties, the ``dim`` forms (max(x, dim)) send it to
the index they return. The helpers here are shared by ``variance``, ``vector_norm`` and ``scans``.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ...runtime import blas, machine_code
from ...runtime import dtypes as dt
from ...runtime.dtypes import c_type_name, torch_type_name  # (their home is the dtypes)
from ...runtime.tensor import wrap_array
from ..core.common import (
    DType,
    Tensor,
    cast_array,
    compute_np_dtype,
    fake,
    laid_out,
    to_float_dtype,
    widened,
    wrap,
    wrap_dim,
    wrap_dims,
)
from ..core.complex_support import complex_not_implemented
from ..core.grad_fn_naming import overload_name
from ..core.out_arguments import writes_out
from ..core.registry import OPS, defop, return_type, tensor_method, torch_function
from ..indexing.gather_scatter import gather, scatter_add
from ..pointwise.unary_binary import maximum, minimum, where
from .sum_order import (
    EXACT_SUM_MAX_SIZE,
    native_last_dim_sums,
    over_last_dim,
    torch_order_flat_sum,
    torch_order_last_dim_sums,
    torch_order_sum,
)

__all__ = [
    "known_any",
    "reduced_shape",
    "reduce_dims",
    "reduced_numel",
    "is_full_reduction",
    "expand_back",
    "sum_dtype",
    "data_as_dtype",
    "scale_by_count",
    "scatter_back",
    "float_sum",
    "torch_type_name",
    "c_type_name",
]


_add_reduce = np.add.reduce
_int64 = dt.int64
_INF = float("inf")

# ------------------------------------------------------------------------------ machinery


def reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def reduce_dims(x, dim) -> tuple:
    """Wrapped reduction dims; None or an empty list means all dims. A 0-d tensor has none."""
    n = x.ndim
    if dim.__class__ is int and -n <= dim < n:  # the common single dim, without the general path
        return (dim + n if dim < 0 else dim,)
    dims = wrap_dims(None if is_full_reduction(dim) else dim, n)
    return dims if n else ()


def is_full_reduction(dim) -> bool:
    """No ``dim`` (None or an empty list): reduce every element."""
    return dim is None or (not isinstance(dim, (int, np.integer)) and len(dim) == 0)


def reduced_numel(shape, dims) -> int:
    """How many elements each output of a reduction over ``dims`` combines."""
    return math.prod(shape[d] for d in dims)


def _reduce_meta(out_dtype_fn):
    def meta(x, dim=None, keepdim=False, *rest):
        dims = reduce_dims(x, dim)
        return fake(reduced_shape(x._shape, dims, keepdim), out_dtype_fn(x, *rest), x)

    return meta


def expand_back(g: Tensor, shape, dims, keepdim: bool) -> Tensor:
    """Gradient of a reduction: unsqueeze the reduced dims (unless kept) and expand to ``shape``."""
    if not keepdim and g._shape:  # a 0-d gradient expands to any shape as it is
        for d in dims:
            g = g.unsqueeze(d)
    return g.expand(shape)


_CASCADE_MIN_SIZE = 4096  # smaller sums are accurate enough added slice by slice
_f32 = np.float32
_CASCADE_MIN_LENGTH = 128


def float_sum(a: np.ndarray, dims: tuple, dtype=None, keepdims: bool = False) -> np.ndarray:
    """``np.add.reduce`` with the accuracy of PyTorch's float sums.

    numpy sums pairwise only along the axis its inner loop runs over (the smallest stride); it
    adds slice after slice across the other reduced axes, an error growing like n * eps. Long
    reduced axes of that kind are summed in blocks of about sqrt(n) first, a two-level cascade
    like PyTorch's, at nearly the speed of the plain reduction.
    """
    if a.size <= EXACT_SUM_MAX_SIZE and a.dtype == np.float32 and dims and dtype in (None, _f32):
        exact = torch_order_sum(a, tuple(dims), keepdims)  # PyTorch's bits, for small sums
        if exact is not None:
            return exact
    if a.size < _CASCADE_MIN_SIZE or np.dtype(dtype or a.dtype).kind != "f" or _collapses(a, dims):
        return _add_reduce(a, dims, dtype, keepdims=keepdims, out=...)
    columns = _column_sums(a, dims, dtype)
    if columns is not None:
        return columns.reshape(reduced_shape(a.shape, dims, keepdims))
    shape, strides = a.shape, a.strides
    inner = min((i for i in range(a.ndim) if shape[i] > 1), key=lambda i: abs(strides[i]))
    long_axes = [d for d in dims if d != inner and shape[d] >= _CASCADE_MIN_LENGTH]
    if not long_axes:
        return _add_reduce(a, dims, dtype, keepdims=keepdims)
    r = a
    for d in long_axes:
        r = _cascade(r, d, dtype)
    rest = tuple(d for d in dims if d not in long_axes)
    if rest:
        r = _add_reduce(r, rest, dtype, keepdims=True)
    return r if keepdims else r.reshape(reduced_shape(shape, dims, False))


def _column_sums(a: np.ndarray, dims, dtype) -> np.ndarray | None:
    """The sums over a C-contiguous float array's leading dims (a linear layer's bias
    gradient: ``g.sum((0, 1))`` of a batch x tokens x features gradient) as products with a
    vector of ones, per block of about sqrt(rows) rows, then the few block sums added: the
    two-level cascade ``_cascade`` makes, with the blocks summed by BLAS. numpy's add.reduce
    over a leading axis adds one row at a time: 17 us for 512 x 256 float32 against 7 us here
    (PyTorch: 7 us), and 3.5 ms against 0.2 ms for 200,000 x 3. None where the call is not of
    that kind."""
    count = len(dims)
    if (
        not 0 < count < a.ndim
        or a.dtype not in _BLAS_FLOATS
        or (dtype is not None and np.dtype(dtype) != a.dtype)
        or not a.flags.c_contiguous
        or tuple(dims) != tuple(range(count))
    ):
        return None
    rows = math.prod(a.shape[:count])
    columns = a.size // rows
    if rows < _CASCADE_MIN_LENGTH or columns < 2 or (columns > 1024 and a.size > 1 << 20):
        return None  # (long rows of a large array: add.reduce streams them as fast)
    matrix = a.reshape(rows, columns)
    block = math.isqrt(rows)
    whole = rows - rows % block
    ones = np.ones(block, a.dtype)
    sums = _add_reduce(
        blas.kernel_matmul(ones, matrix[:whole].reshape(whole // block, block, columns)), 0
    )
    if whole < rows:
        sums += blas.kernel_matmul(np.ones(rows - whole, a.dtype), matrix[whole:])
    return sums


_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _collapses(a: np.ndarray, dims) -> bool:
    """The reduced dims form one contiguous run numpy sums pairwise (a contiguous suffix)."""
    n = a.ndim
    return not n or (a.flags.c_contiguous and tuple(dims) == tuple(range(n - len(dims), n)))


def _cascade(a: np.ndarray, d: int, dtype) -> np.ndarray:
    """Sum axis ``d`` (kept, size 1) as sums of blocks of about sqrt(n) elements."""
    n = a.shape[d]
    block = math.isqrt(n)
    whole = n - n % block
    before = (slice(None),) * d
    blocks = a[before + (slice(0, whole),)].reshape(
        a.shape[:d] + (whole // block, block) + a.shape[d + 1 :]
    )
    r = _add_reduce(_add_reduce(blocks, d + 1, dtype), d, dtype, keepdims=True)
    if whole < n:
        r = r + _add_reduce(a[before + (slice(whole, None),)], d, dtype, keepdims=True)
    return r


def sum_dtype(x, dtype=None):
    """Result dtype of sum/prod/cumsum/cumprod: ``dtype`` if given, else int64 for integer and
    bool inputs (PyTorch's rule), else the input's."""
    if dtype is not None:
        return dtype
    return _int64 if x._dtype.category < 2 else x._dtype


def data_as_dtype(x, dtype):
    """The input's data converted to ``dtype`` (PyTorch casts before reducing when given one)."""
    a = x._data
    if dtype is not None and dtype is not x._dtype:
        return cast_array(a, compute_np_dtype(dtype))
    return widened(a)


def scatter_back(g: Tensor, indices: Tensor, dim: int, shape) -> Tensor:
    """zeros(shape) with ``g`` placed at ``indices`` along ``dim``: the gradient of taking
    values at those indices (max(x, dim), sort...), where indices are distinct per slice."""
    return scatter_add(g.new_zeros(tuple(shape)), dim, indices, g)


def scale_by_count(g, mask, dims):
    """Split ``g`` evenly among the True entries of ``mask`` within each reduced slice.

    A product with the mask, as in PyTorch's amax/amin and inf-norm formulas: an inf or NaN
    ``g`` gives NaN off the mask there too."""
    return g * mask / mask.sum(dims, True)


def evenly_distribute(g: Tensor, x: Tensor, value: Tensor) -> Tensor:
    """Gradient of a full value-selecting reduction (max(), median()): shared among the elements
    equal to the result; a NaN result shares it among the NaNs, as PyTorch does."""
    mask = x == value
    if x.dtype.is_floating_point:
        mask = where(value.isnan(), x.isnan(), mask)
    # selected, not multiplied by the mask: the other elements get exactly zero even when ``g``
    # is inf or NaN (PyTorch's CPU formula; its amax/amin multiply, see ``scale_by_count``)
    return where(mask, g / mask.sum(), 0)


def select_evenly(x: Tensor, value: Tensor) -> Tensor:
    """``value`` (a 0-d result picked out of ``x``) rebuilt as the mean of the elements equal to
    it, so decompositions differentiate like ``evenly_distribute``; the boolean mask carries no
    gradient, and the mean equals ``value`` (up to rounding for odd numbers of ties)."""
    if not x.dtype.is_floating_point:
        return value
    mask = where(value.isnan(), x.isnan(), x == value)
    return sum(where(mask, x, 0)) / sum(mask)


def _check_reducible(name: str, x, dims, full: bool, error=RuntimeError) -> None:
    """Reductions without an identity (max, argmax...) refuse empty slices, as PyTorch does."""
    shape = x._shape
    for d in dims:
        if shape[d] == 0:
            if full:  # argmax/argmin (IndexError) leave out PyTorch's second sentence
                hint = (
                    ""
                    if error is IndexError
                    else (" Specify the reduction dim with the 'dim' argument.")
                )
                raise error(
                    f"{name}(): Expected reduction dim to be specified for input.numel() == 0."
                    + hint
                )
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


# ------------------------------------------------------------------------------ sum / prod


def _has_dim(args) -> int:
    """The overload number of a reduction: 1 when it names dims (``x.sum(0)``), else 0."""
    return int(args[1] is not None)


@defop(
    kind="reduction",
    prim=True,
    autocast={"cuda": "fp32_set_dtype"},
    grad_fn_name=overload_name("Sum", _has_dim),
)
def sum(
    self: Tensor, dim: list[int] | None = None, keepdim: bool = False, *, dtype: DType | None = None
): ...  # noqa: A001


def _contiguous_float_total(x, dim, keepdim: bool, dtype) -> np.ndarray | None:
    """The 0-d sum of every element for the commonest call (``x.sum()``, ``x.mean()``: a
    C-contiguous float32 or float64 ``x``, no dim, dtype or keepdim), in the order of the
    general path's sums; None for any other call."""
    d = x._dtype
    a = x._data
    if dim is None and dtype is None and not keepdim and (d is dt.float32 or d is dt.float64):
        if a.flags.c_contiguous:
            if d is dt.float32 and a.size <= EXACT_SUM_MAX_SIZE:
                return torch_order_flat_sum(a.reshape(-1))
            # one pairwise add.reduce straight into a 0-d array
            return _add_reduce(a, None, out=...)
    return None


def _last_dim_sums(x, dim, keepdim: bool, dtype) -> np.ndarray | None:
    """The row sums of the commonest call along a dim (``x.sum(-1)``, ``x.mean(1)``: a
    non-empty C-contiguous float32 ``x`` along its last dim, no dtype), PyTorch's additions
    ``torch_order_sum``'s: small ones as ``float_sum`` would reach them, larger ones where the
    machine-code rows take them (rows shorter than PyTorch's cascade); None for any other call."""
    a = x._data
    rank = a.ndim
    if dtype is not None or x._dtype is not dt.float32 or dim.__class__ is not int or not rank:
        return None
    if dim != -1 and dim != rank - 1:
        return None
    if not a.size or not a.flags.c_contiguous:
        return None
    if a.size <= EXACT_SUM_MAX_SIZE:
        return torch_order_last_dim_sums(a, keepdim)
    return native_last_dim_sums(a, keepdim)


@sum.register_kernel
def _sum_kernel(x, dim, keepdim, dtype):
    total = _contiguous_float_total(x, dim, keepdim, dtype)
    if total is not None:
        return wrap_array(total, x._dtype)
    sums = _last_dim_sums(x, dim, keepdim, dtype)
    if sums is not None:
        return wrap_array(laid_out(sums), x._dtype)
    od = sum_dtype(x, dtype)
    a = data_as_dtype(x, dtype)
    return wrap(laid_out(float_sum(a, reduce_dims(x, dim), compute_np_dtype(od), keepdim)), od)


sum.register_meta(_reduce_meta(lambda x, dtype=None: sum_dtype(x, dtype)))
sum.register_derivative(
    lambda c, g: (expand_back(g, c.args[0].shape, reduce_dims(c.args[0], c.args[1]), c.args[2]),),
    save_inputs=(),
)


@defop(
    kind="reduction",
    prim=True,
    autocast={"cpu": "fp32", "cuda": "fp32_set_dtype"},
    holomorphic=True,
    grad_fn_name=overload_name("Prod", _has_dim),
)
def prod(
    self: Tensor, dim: int | None = None, keepdim: bool = False, *, dtype: DType | None = None
): ...


@prod.register_kernel
def _prod_kernel(x, dim, keepdim, dtype):
    od = sum_dtype(x, dtype)
    a = data_as_dtype(x, dtype)
    r = np.multiply.reduce(a, reduce_dims(x, dim), compute_np_dtype(od), keepdims=keepdim)
    return wrap(laid_out(r), od)


prod.register_meta(_reduce_meta(lambda x, dtype=None: sum_dtype(x, dtype)))


def _exclusive_products(x: Tensor, d: int) -> Tensor:
    """The product of every other element of ``x``'s slice along ``d``, as PyTorch computes it
    where the input holds a zero: the running product of the elements before times that of the
    elements after (each a ``cumprod``, so NaN/inf and 0 * inf come out as PyTorch's do)."""
    n = x.shape[d]
    if n == 1:
        return x.new_ones(())
    ones = x.new_ones(tuple(1 if i == d else s for i, s in enumerate(x.shape)))
    before = OPS["cat"]([ones, x.narrow(d, 0, n - 1)], d).cumprod(d)
    after = OPS["cat"]([ones, x.narrow(d, 1, n - 1).flip([d])], d).cumprod(d).flip([d])
    return before * after


def _prod_grad(c, g):
    """d prod / d x_j is the product of the other elements. PyTorch's formula, branch for
    branch: when no element of the whole input is zero, prod / x_j (so an inf or NaN factor
    gives NaN); when some element is, the exclusive products of every slice. A full product
    with two or more zeros has zero gradient outright, whatever ``g`` is. The branch is a
    ``where`` on the global test, so a traced backward takes it at run time too."""
    x, dim, keepdim, dtype = c.args
    dims = reduce_dims(x, dim)
    if dtype is not None:
        x = x.to(dtype)
    grad = expand_back(g, x.shape, dims, keepdim)
    if x.ndim == 0 or x.numel() == 0:
        return (grad,)
    zero = x == 0
    quotient = prod(x, dims, True) / x
    if len(dims) == 1:
        exclusive = _exclusive_products(x, dims[0])
    else:  # every dim (prod reduces one dim or all): the flat slice
        exclusive = _exclusive_products(x.reshape(-1), 0).reshape(x.shape)
    grad = grad * where(zero.any(), exclusive, quotient)
    if is_full_reduction(dim):
        grad = where(zero.sum() > 1, 0, grad)
    return (grad,)


prod.register_derivative(_prod_grad)


# ------------------------------------------------------------------------------ extremes


def _amax_schema(self: Tensor, dim: list[int] = (), keepdim: bool = False): ...


def _extreme_check(name: str):
    def check(x, dim=(), keepdim=False) -> None:
        full = is_full_reduction(dim)
        _check_reducible(name, x, range(x.ndim) if full else reduce_dims(x, dim), full)

    return check


def _extreme_kernel(name, np_fn, kind: str):
    check = _extreme_check(name)

    def kernel(x, dim, keepdim):
        a = x._data
        if not a.size:
            check(x, dim, keepdim)
        dims = None if is_full_reduction(dim) else reduce_dims(x, dim)
        rows = _last_dim_extremes(kind, x, dims, keepdim)
        if rows is not None:
            return wrap_array(rows, x._dtype)
        return wrap_array(laid_out(np_fn(a, dims, keepdims=keepdim, out=...)), x._dtype)

    return kernel


_NATIVE_EXTREMES_MIN_SIZE = 256  # below it numpy's reduction costs no more than the call


def _last_dim_extremes(kind: str, x, dims, keepdim: bool) -> np.ndarray | None:
    """``x.amax(-1)`` / ``x.amin(-1)`` of a non-empty C-contiguous float32 ``x`` by the
    machine-code rows (numpy reduces a short last axis one element at a time: 21-35 us for 256 x
    256 against PyTorch's 5); None for any other call."""
    a = x._data
    if x._dtype is not dt.float32 or dims is None or len(dims) != 1 or dims[0] != a.ndim - 1:
        return None
    if a.size < _NATIVE_EXTREMES_MIN_SIZE or not a.flags.c_contiguous:
        return None
    kernels = machine_code.get("extremes")
    if kernels is None:
        return None
    return over_last_dim(functools.partial(kernels.rows, kind), a, keepdim)


def _extreme_grad(c, g):
    # PyTorch's amax/amin backward: even split among the elements equal to the result
    x, dim, keepdim = c.args
    dims = reduce_dims(x, dim)
    mask = x == expand_back(c.out, x.shape, dims, keepdim)
    return (scale_by_count(expand_back(g, x.shape, dims, keepdim), mask, dims),)


amax = defop(
    _amax_schema,
    name="amax",
    kind="reduction",
    prim=True,
    complex_refused=complex_not_implemented("max_values_cpu"),
)
amin = defop(
    _amax_schema,
    name="amin",
    kind="reduction",
    prim=True,
    complex_refused=complex_not_implemented("min_values_cpu"),
)

for _op, _np_fn, _kind in ((amax, np.maximum.reduce, "max"), (amin, np.minimum.reduce, "min")):
    _op.register_kernel(_extreme_kernel(_op.name, _np_fn, _kind))
    _op.register_meta(_reduce_meta(lambda x: x._dtype))
    _op.check_in_meta(_extreme_check(_op.name))
    _op.register_derivative(_extreme_grad, save_output=True)


def _arg_schema(self: Tensor, dim: int | None = None, keepdim: bool = False): ...


def _arg_check(name: str):
    def check(x, dim=None, keepdim=False) -> None:
        if x._dtype is dt.bool_:
            raise RuntimeError(f"{name}(): does not support bool input")
        if dim is None:
            _check_reducible(name, x, range(x.ndim), True, IndexError)
        elif x.ndim:
            _check_reducible(name, x, (wrap_dim(dim, x.ndim),), False)
        else:
            wrap_dim(dim, 0)  # a scalar takes dims -1 and 0 only

    return check


def _arg_kernel(name, np_fn):
    check = _arg_check(name)

    def kernel(x, dim, keepdim):
        check(x, dim, keepdim)
        a = x._data
        if dim is None:
            return wrap(np.asarray(np_fn(a)).reshape((1,) * a.ndim if keepdim else ()), _int64)
        if not a.ndim:
            return wrap(np.zeros((), np.int64), _int64)
        return wrap(laid_out(np_fn(a, axis=wrap_dim(dim, x.ndim), keepdims=keepdim)), _int64)

    return kernel


def _arg_meta(x, dim=None, keepdim=False):
    if dim is None:
        return fake((1,) * x.ndim if keepdim else (), _int64, x)
    return fake(reduced_shape(x._shape, reduce_dims(x, dim), keepdim), _int64, x)


argmax = defop(
    _arg_schema,
    name="argmax",
    kind="reduction",
    prim=True,
    differentiable=False,
    complex_refused=(RuntimeError, "argmax(): does not support complex input"),
)
argmin = defop(
    _arg_schema,
    name="argmin",
    kind="reduction",
    prim=True,
    differentiable=False,
    complex_refused=(RuntimeError, "argmin(): does not support complex input"),
)
for _op, _np_fn in ((argmax, np.argmax), (argmin, np.argmin)):
    _op.register_kernel(_arg_kernel(_op.name, _np_fn))
    _op.register_meta(_arg_meta)
    _op.check_in_meta(_arg_check(_op.name))


# max(x) / min(x): the full reduction, with max()'s NaN-aware even split of the gradient


def _full_schema(self: Tensor): ...


def _full_extreme_check(name: str):
    def check(x) -> None:
        _check_reducible(name, x, range(x.ndim), True)

    return check


def _full_extreme_kernel(name, extreme):
    check = _full_extreme_check(name)

    def kernel(x):
        if not x._data.size:
            check(x)
        return extreme.kernel(x, (), False)

    return kernel


max_all = defop(
    _full_schema,
    name="max",
    kind="reduction",
    complex_refused=complex_not_implemented("max_all"),
    grad_fn_name="MaxBackward1",
)
min_all = defop(
    _full_schema,
    name="min",
    kind="reduction",
    complex_refused=complex_not_implemented("min_all"),
    grad_fn_name="MinBackward1",
)


for _op, _extreme in ((max_all, amax), (min_all, amin)):
    _op.register_kernel(_full_extreme_kernel(_op.name, _extreme))
    _op.register_meta(lambda x: fake((), x._dtype, x))
    _op.check_in_meta(_full_extreme_check(_op.name))
    _op.register_derivative(
        lambda c, g: (evenly_distribute(g, c.args[0], c.out),), save_output=True
    )
    _op.register_decomposition(lambda x, _ex=_extreme: select_evenly(x, _ex(x)))


# max(x, dim) / min(x, dim): (values, indices); the gradient goes to the returned index


def _dim_select_schema(input: Tensor, dim: int, keepdim: bool = False): ...


max_dim = defop(
    _dim_select_schema,
    name="max_dim",
    kind="reduction",
    complex_refused=(RuntimeError, "max(): does not support complex input"),
    grad_fn_name="MaxBackward0",
)
min_dim = defop(
    _dim_select_schema,
    name="min_dim",
    kind="reduction",
    complex_refused=(RuntimeError, "min(): does not support complex input"),
    grad_fn_name="MinBackward0",
)
max_dim.returns = return_type("max", ("values", "indices"))
min_dim.returns = return_type("min", ("values", "indices"))


def _dim_select_check(name: str):
    def check(x, dim, keepdim=False) -> None:
        if x.ndim:
            _check_reducible(name, x, (wrap_dim(dim, x.ndim),), False)

    return check


def _dim_select_kernel(op, np_arg, np_extreme):
    check = _dim_select_check(op.returns.__name__)

    def kernel(x, dim, keepdim):
        a = x._data
        d = wrap_dim(dim, x.ndim)
        if not a.ndim:
            return op.returns(wrap(a.copy(), x._dtype), wrap(np.zeros((), np.int64), _int64))
        if not a.shape[d]:
            check(x, dim, keepdim)
        # the extreme value itself equals the element at the arg index (NaN included)
        a = widened(a)
        values = laid_out(np_extreme(a, d, keepdims=keepdim))
        indices = laid_out(np_arg(a, d, keepdims=keepdim))
        return op.returns(wrap(values, x._dtype), wrap(indices, _int64))

    return kernel


def _dim_select_meta(op):
    def meta(x, dim, keepdim=False):
        shape = reduced_shape(x._shape, reduce_dims(x, dim), keepdim)
        return op.returns(fake(shape, x._dtype, x), fake(shape, _int64, x))

    return meta


def _dim_select_grad(c, g, _g_indices=None):
    x, dim, keepdim = c.args
    indices = c.out[1]
    if x.ndim and not keepdim:
        g, indices = g.unsqueeze(dim), indices.unsqueeze(dim)
    return (scatter_back(g, indices, dim, x.shape),)


def _dim_select_decomp(op, arg_op):
    def decomposition(x, dim, keepdim=False):
        if not x.ndim:
            return op.returns(x.clone(), x.new_zeros((), dtype=_int64))
        d = wrap_dim(dim, x.ndim)
        indices = arg_op(x.to(dt.uint8) if x.dtype is dt.bool_ else x, d, True)
        values = gather(x, d, indices)
        if not keepdim:
            values, indices = values.squeeze(d), indices.squeeze(d)
        return op.returns(values, indices)

    return decomposition


for _op, _np_arg, _np_extreme, _arg_op in (
    # (the ndarray methods: np.argmax is a Python wrapper around them)
    (max_dim, np.ndarray.argmax, np.maximum.reduce, argmax),
    (min_dim, np.ndarray.argmin, np.minimum.reduce, argmin),
):
    _op.register_kernel(_dim_select_kernel(_op, _np_arg, _np_extreme))
    _op.register_meta(_dim_select_meta(_op))
    _op.check_in_meta(_dim_select_check(_op.returns.__name__))
    _op.register_derivative(_dim_select_grad, save_output=(1,), save_inputs=())
    _op.register_decomposition(_dim_select_decomp(_op, _arg_op))


def _overloads(name, full_op, dim_op, binary_op):
    """PyTorch's max/min: ``f(x)``, ``f(x, dim, keepdim=False)`` and ``f(x, other)``."""

    def fn(input: Tensor, dim=None, keepdim: bool | None = None, *, other=None):
        if isinstance(dim, Tensor) or other is not None:
            if keepdim is not None:
                raise TypeError(f"{name}() received an invalid combination of arguments")
            return binary_op(input, dim if other is None else other)
        if dim is None:
            if keepdim is not None:
                raise TypeError(
                    f"{name}() received an invalid combination of arguments - got keepdim "
                    "without dim"
                )
            return full_op(input)
        if not isinstance(dim, (int, np.integer)):
            raise TypeError(
                f"{name}() received an invalid combination of arguments - dim must be an int, "
                f"got {type(dim).__name__}"
            )
        return dim_op(input, dim, bool(keepdim))

    fn.__name__ = name
    return writes_out(fn)


for _name, _full, _dim_op, _binary in (
    ("max", max_all, max_dim, maximum),
    ("min", min_all, min_dim, minimum),
):
    _fn = _overloads(_name, _full, _dim_op, _binary)
    torch_function(_name)(_fn)
    tensor_method(_name)(_fn)

_AminmaxResult = return_type("aminmax", ("min", "max"))


@torch_function()
@writes_out(exact_dtype=True)
@tensor_method()
def aminmax(input: Tensor, *, dim: int | None = None, keepdim: bool = False):
    """(amin, amax) in one call; over every element when ``dim`` is None."""
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError(
                "aminmax(): cannot compute aminmax over an empty dimension as the operation has "
                "no identity."
            )
        dims = ()
    else:
        dims = wrap_dim(dim, input.ndim)
        if input.ndim and input.shape[dims] == 0:
            raise IndexError(f"aminmax: Expected reduction dim {dims} to have non-zero size.")
    return _AminmaxResult(amin(input, dims, keepdim), amax(input, dims, keepdim))


# ------------------------------------------------------------------------------ mean


@defop(kind="reduction", grad_fn_name=overload_name("Mean", _has_dim))
def mean(
    self: Tensor, dim: list[int] | None = None, keepdim: bool = False, *, dtype: DType | None = None
): ...


def _mean_dtype(x, dtype=None):
    d = dtype or x._dtype
    if d.category < 2:  # neither floating nor complex
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating point or "
            f"complex dtype. Got: {torch_type_name(d)}"
        )
    return d


@mean.register_kernel
def _mean_kernel(x, dim, keepdim, dtype):
    total = _contiguous_float_total(x, dim, keepdim, dtype)
    if total is not None:  # (divided by the count as below: NaN for an empty ``x``)
        return wrap(total / x._data.size, x._dtype)
    sums = _last_dim_sums(x, dim, keepdim, dtype)
    if sums is not None:
        return wrap_array(laid_out(sums / x._shape[-1]), x._dtype)
    od = _mean_dtype(x, dtype)
    dims = reduce_dims(x, dim)
    r = np.asarray(float_sum(data_as_dtype(x, dtype), dims, compute_np_dtype(od), keepdim))
    r = r / reduced_numel(x._shape, dims)
    return wrap(laid_out(r), od)


mean.register_meta(_reduce_meta(lambda x, dtype=None: _mean_dtype(x, dtype)))


def _mean_grad(c, g):
    x, dim, keepdim, _ = c.args
    dims = reduce_dims(x, dim)
    n = reduced_numel(x.shape, dims)
    if n.__class__ is int and n == 0:
        # no element was reduced: the input is empty, and so is its gradient
        return (g.new_zeros(tuple(x.shape)),)
    # a symbolic count (a masked_select's, unbacked) divides without deciding whether it is 0
    return (expand_back(g, x.shape, dims, keepdim) / n,)


mean.register_derivative(_mean_grad, save_inputs=())


@mean.register_decomposition
def _mean_decomp(x, dim=None, keepdim=False, dtype=None):
    _mean_dtype(x, dtype)
    dims = reduce_dims(x, dim)
    return sum(x, dims, keepdim, dtype=dtype) / reduced_numel(x.shape, dims)


# ------------------------------------------------------------------------------ logsumexp


@defop(kind="reduction", autocast={"cuda": "fp32"})
def logsumexp(self: Tensor, dim: list[int], keepdim: bool = False): ...


@logsumexp.register_kernel
def _logsumexp_kernel(x, dim, keepdim):
    od = to_float_dtype(x._dtype)
    dims = reduce_dims(x, dim)
    a = x._data.astype(compute_np_dtype(od), copy=False)
    if reduced_numel(x._shape, dims) == 0:
        return wrap(np.full(reduced_shape(x._shape, dims, keepdim), -np.inf), od)
    # shift by the (finite) max so exp never overflows; inf and nan pass through
    m = np.maximum.reduce(a, dims, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    r = np.log(float_sum(np.exp(a - m), dims, keepdims=True)) + m
    return wrap(laid_out(r.reshape(reduced_shape(x._shape, dims, keepdim))), od)


logsumexp.register_meta(
    lambda x, dim, keepdim=False: fake(
        reduced_shape(x._shape, reduce_dims(x, dim), keepdim), to_float_dtype(x._dtype), x
    )
)


def _logsumexp_grad(c, g):
    x, dim, keepdim = c.args
    dims = reduce_dims(x, dim)
    return (
        expand_back(g, x.shape, dims, keepdim)
        * (x - expand_back(c.out, x.shape, dims, keepdim)).exp(),
    )


logsumexp.register_derivative(_logsumexp_grad, save_output=True)


@logsumexp.register_decomposition
def _logsumexp_decomp(x, dim, keepdim=False):
    if not x.dtype.is_floating_point:
        x = x.to(to_float_dtype(x.dtype))
    dims = reduce_dims(x, dim)
    if reduced_numel(x.shape, dims) == 0:
        return x.new_full(reduced_shape(x.shape, dims, keepdim), -_INF)
    m = amax(x, dims, True)
    m = where(m.abs() == _INF, 0, m)
    out = sum((x - m).exp(), dims, True).log() + m
    return out if keepdim else out.squeeze(dims)


# ------------------------------------------------------------------------------ logical / counts


def _logical_schema(self: Tensor, dim: list[int] | None = None, keepdim: bool = False): ...


def _logical_dtype(x):
    return dt.uint8 if x._dtype is dt.uint8 else dt.bool_


def _no_dims(dim) -> bool:
    """``all``/``any`` given an empty dim list reduce nothing (PyTorch's ``dim=()``), where
    ``sum`` and the other reductions take it as every dim."""
    return dim is not None and not isinstance(dim, (int, np.integer)) and len(dim) == 0


def _logical_kernel(np_fn):
    def kernel(x, dim, keepdim):
        if _no_dims(dim):
            return wrap(x._data != 0, _logical_dtype(x))
        found = np_fn(x._data, reduce_dims(x, dim), keepdims=keepdim)
        return wrap(laid_out(found), _logical_dtype(x))

    return kernel


_logical_reduce_meta = _reduce_meta(_logical_dtype)


def _logical_meta(x, dim=None, keepdim=False):
    if _no_dims(dim):
        return fake(x._shape, _logical_dtype(x), x)
    return _logical_reduce_meta(x, dim, keepdim)


def _logical_decomposition(reduced):
    """``reduced(x, dim, keepdim)``'s verdict per slice in all/any's dtype; with no dims, each
    element's own (nonzero)."""

    def decomposition(x, dim=None, keepdim=False):
        found = (x != 0) if _no_dims(dim) else reduced(x, dim, keepdim)
        return found.to(_logical_dtype(x))

    return decomposition


all_ = defop(_logical_schema, name="all", kind="reduction", differentiable=False)
any_ = defop(_logical_schema, name="any", kind="reduction", differentiable=False)
all_.register_kernel(_logical_kernel(np.logical_and.reduce))
any_.register_kernel(_logical_kernel(np.logical_or.reduce))
for _op in (all_, any_):
    _op.register_meta(_logical_meta)
# all: no zero in the slice; any: some nonzero (NaN counts as true, as in PyTorch)
all_.register_decomposition(_logical_decomposition(lambda x, d, k: sum(x == 0, d, k) == 0))
any_.register_decomposition(_logical_decomposition(lambda x, d, k: sum(x != 0, d, k) > 0))


@defop(kind="reduction", differentiable=False)
def count_nonzero(self: Tensor, dim: list[int] | None = None): ...


count_nonzero.register_decomposition(lambda x, dim=None: sum(x != 0, dim))


@defop(kind="reduction")
def nansum(
    self: Tensor, dim: list[int] | None = None, keepdim: bool = False, *, dtype: DType | None = None
): ...


def _check_nansum_dtype(x, *rest) -> None:
    if x._dtype.is_complex:
        raise RuntimeError("nansum on CPU does not support complex inputs")


@nansum.register_decomposition
def _nansum_decomp(x, dim=None, keepdim=False, dtype=None):
    _check_nansum_dtype(x)
    if x.dtype.is_floating_point:
        x = where(x.isnan(), 0, x)
    return sum(x, dim, keepdim, dtype=dtype)


@nansum.register_kernel
def _nansum_kernel(x, dim=None, keepdim=False, dtype=None):
    _check_nansum_dtype(x)
    if x._dtype.is_floating_point:
        a = x._data
        x = wrap_array(np.where(np.isnan(a), a.dtype.type(0), a), x._dtype)
    return _sum_kernel(x, dim, keepdim, dtype)


nansum.register_meta(_reduce_meta(lambda x, dtype=None: sum_dtype(x, dtype)))
nansum.check_in_meta(_check_nansum_dtype)


# the incoming gradient times "not NaN" (not a selection): where it is inf (a nanmean over a
# slice of NaNs divides by a count of 0) the NaN entries get NaN, as PyTorch's
@nansum.register_derivative
def _nansum_grad(c, g):
    x, dim, keepdim = c.args[0], c.args[1], c.args[2]
    g = expand_back(g, x.shape, reduce_dims(x, dim), keepdim)
    return (g * x.isnan().logical_not() if x.dtype.is_floating_point else g,)


@defop(kind="reduction")
def nanmean(
    self: Tensor, dim: list[int] | None = None, keepdim: bool = False, *, dtype: DType | None = None
): ...


@nanmean.register_decomposition
def _nanmean_decomp(x, dim=None, keepdim=False, dtype=None):
    if not x.dtype.is_floating_point:
        raise RuntimeError(
            "nanmean(): expected input to have floating point or complex dtype but got "
            f"{torch_type_name(x.dtype)}"
        )
    return nansum(x, dim, keepdim, dtype=dtype) / sum(x.isnan().logical_not(), dim, keepdim)


def known_any(mask: Tensor) -> bool:
    """Whether any element of ``mask`` is set, for value checks (q in [0, 1], weights >= 0):
    False when it has no data (fake or meta tensors during capture), where checks are skipped."""
    flag = any_(mask)
    return flag._data is not None and flag.device.type != "meta" and bool(flag.item())
