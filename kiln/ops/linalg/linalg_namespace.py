"""``kiln.linalg.*``: the factorization ops of ``linalg_decomp``, ``linalg_spectral`` and
``linalg_lu`` under PyTorch's names, and the composites built from them: norms, condition
numbers, ranks, powers, least squares, chained products, products of Householder reflectors.
Composites are plain kiln code, so autograd and graph capture see their parts.
``linalg_compat`` has the ``kiln.*`` names.
"""

# PyTorch's keyword names (A, B, LU, UPLO) and the formulas' matrix names are upper case
# ruff: noqa: N803

from __future__ import annotations

import math
import numbers

import numpy as np

from ...amp.autocast_mode import autocast_policy
from ...runtime import dtypes as dt
from ...runtime.symbolic import sym_max
from ..core.common import Tensor, tensor_sequence, wrap_dim
from ..core.out_arguments import writes_out
from ..core.registry import OPS, return_type
from ..creation.api import eye, full, zeros
from ..pointwise.unary_binary import maximum, where
from ..reductions.reduce import amax, amin, sum, torch_type_name
from ..reductions.vector_norm import vector_norm as _vector_norm_op
from . import factorizations as dec
from . import ldl as ldl_ops
from . import lu as lu_ops
from . import spectral as spec
from .matmul import cross as _cross
from .matmul import matmul, mm

__all__ = [
    "LinAlgError",
    "det",
    "slogdet",
    "inv",
    "inv_ex",
    "solve",
    "solve_ex",
    "solve_triangular",
    "cholesky",
    "cholesky_ex",
    "qr",
    "eigh",
    "eigvalsh",
    "svd",
    "svdvals",
    "pinv",
    "matrix_exp",
    "matrix_power",
    "matrix_rank",
    "matrix_norm",
    "vector_norm",
    "norm",
    "cond",
    "lstsq",
    "multi_dot",
    "cross",
    "vecdot",
    "diagonal",
    "tensorinv",
    "tensorsolve",
    "vander",
    "lu_factor",
    "lu_factor_ex",
    "ldl_factor",
    "ldl_factor_ex",
    "ldl_solve",
    "lu",
    "lu_solve",
    "matmul",
    "eig",
    "eigvals",
    "householder_product",
    "ormqr",
]

LinAlgError = dec.LinAlgError
_INF = math.inf

# ------------------------------------------------------------------------------ factorizations

# the ops themselves have PyTorch's signatures
det = dec.det
slogdet = dec.slogdet
inv = dec.inv
inv_ex = dec.inv_ex
solve = dec.solve
solve_ex = dec.solve_ex
solve_triangular = dec.solve_triangular
cholesky = dec.cholesky
cholesky_ex = dec.cholesky_ex
qr = spec.qr
eigh = spec.eigh
eigvalsh = spec.eigvalsh
eig = spec.eig
eigvals = spec.eigvals
matrix_exp = spec.matrix_exp
lu_factor = lu_ops.lu_factor
lu_factor_ex = lu_ops.lu_factor_ex
lu_solve = lu_ops.lu_solve
ldl_factor = ldl_ops.ldl_factor
ldl_factor_ex = ldl_ops.ldl_factor_ex
ldl_solve = ldl_ops.ldl_solve


def _check_driver(name: str, driver) -> None:
    if driver is not None:
        raise RuntimeError(
            f"torch.linalg.{name}: keyword argument `driver=` is only supported on CUDA inputs "
            "with cuSOLVER backend."
        )


def svd(A: Tensor, full_matrices: bool = True, *, driver: str | None = None):
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, singular values descending."""
    _check_driver("svd", driver)
    return spec.svd(A, full_matrices)


@writes_out
def svdvals(A: Tensor, *, driver: str | None = None) -> Tensor:
    _check_driver("svdvals", driver)
    return spec.svdvals(A)


@writes_out
def pinv(input: Tensor, rcond=None, hermitian: bool = False, *, atol=None, rtol=None) -> Tensor:
    """Moore-Penrose pseudo-inverse; ``rcond`` is the older name of ``rtol``."""
    A = input  # PyTorch's keyword names; the formulas' matrix names
    if rcond is not None:
        if rtol is not None:
            raise RuntimeError("linalg.pinv: cannot pass both rcond and rtol")
        rtol = rcond
    return spec.pinv(A, atol, rtol, hermitian)


# ------------------------------------------------------------------------------ LU


_LU = return_type("linalg_lu", ("P", "L", "U"))


@writes_out
def lu(A: Tensor, *, pivot: bool = True):
    """``(P, L, U)`` with ``A = P L U``."""
    LU, pivots, _ = lu_ops.lu_factor_ex(A, pivot=pivot)
    return _LU(*lu_ops.unpack_lu(LU, pivots))


# ------------------------------------------------------------------------------ norms


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The ``ord``-norm of ``x`` over ``dim`` (all elements by default), as a flat vector."""
    if not isinstance(ord, numbers.Number):
        raise TypeError(
            f"linalg_vector_norm(): argument 'ord' must be Number, not {type(ord).__name__}"
        )
    if isinstance(dim, int):
        dim = [dim]
    return _vector_norm_op(x, ord, None if dim is None else list(dim), keepdim, dtype=dtype)


def _matrix_dims(A: Tensor, dim) -> tuple[int, int]:
    name = "linalg.matrix_norm"
    if isinstance(dim, int) or len(dim) != 2:
        shown = dim if isinstance(dim, int) else " ".join(map(str, dim))
        raise RuntimeError(f"{name}: dim must be a 2-tuple. Got {shown}")
    d0, d1 = wrap_dim(dim[0], A.ndim), wrap_dim(dim[1], A.ndim)
    if d0 == d1:
        raise RuntimeError(f"{name}: dims must be different. Got ({dim[0]}, {dim[1]})")
    return d0, d1


def _keep_two(r: Tensor, d0: int, d1: int, keepdim: bool) -> Tensor:
    """Re-insert the two reduced dims (as size 1) when ``keepdim``."""
    if keepdim:
        for d in sorted((d0, d1)):
            r = r.unsqueeze(d)
    return r


@writes_out
def matrix_norm(
    input: Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None
) -> Tensor:
    """Frobenius, nuclear, and the operator norms (1, -1, 2, -2, inf, -inf) over two dims."""
    A = input  # PyTorch's keyword names; the formulas' matrix names
    name = "linalg.matrix_norm"
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions.")
    if not (A.dtype.is_floating_point or A.dtype.is_complex):
        raise RuntimeError(
            f"{name}: Expected a floating point or complex tensor as input. Got "
            f"{torch_type_name(A.dtype)}"
        )
    if dtype is not None and A.dtype.is_complex and not dtype.is_complex:
        raise RuntimeError(
            f"{name}: dtype should be complex for complex inputs, but got {torch_type_name(dtype)}"
        )
    d0, d1 = _matrix_dims(A, dim)
    if ord not in ("fro", "nuc", 1, -1, 2, -2, _INF, -_INF):
        raise RuntimeError(f"{name}: Order {ord} not supported.")
    if dtype is not None:
        A = A.to(dtype)
    if ord == "fro":
        return _vector_norm_op(A, 2, [d0, d1], keepdim)
    if ord in ("nuc", 2, -2):
        if A.dtype in (dt.float16, dt.bfloat16):
            raise RuntimeError(
                f"{name}: Low precision dtypes not supported. Got {torch_type_name(A.dtype)}"
            )
        s = spec.svdvals(A.movedim((d0, d1), (-2, -1)))
        if ord == "nuc":
            r = sum(s, -1)
        else:
            r = (amax if ord == 2 else amin)(s, -1)
        return _keep_two(r, d0, d1, keepdim)
    # operator norms of 1 (max column sum) and inf (max row sum)
    sum_dim, pick_dim = (d0, d1) if abs(ord) == 1 else (d1, d0)
    pick = amax if ord > 0 else amin
    r = pick(sum(A.abs(), sum_dim, True), pick_dim, True)
    if not keepdim:
        r = r.squeeze(max(d0, d1)).squeeze(min(d0, d1))
    return r


@writes_out(records_write=True)
def norm(input: Tensor, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """A vector norm over one dim (or all), a matrix norm over two; a string ord is a matrix one."""
    A = input  # PyTorch's keyword names; the formulas' matrix names
    if dim is not None:
        dim = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(dim) not in (1, 2):
            raise RuntimeError(
                f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dim)}"
            )
    elif ord is not None:
        if A.ndim not in (1, 2):
            raise RuntimeError(
                "linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                f"Got {A.ndim}D."
            )
        dim = tuple(range(A.ndim))
    if isinstance(ord, str) or (dim is not None and len(dim) == 2):
        if isinstance(ord, str) and dim is not None and len(dim) == 1:
            raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {dim[0]}")
        return matrix_norm(A, "fro" if ord is None else ord, dim or (-2, -1), keepdim, dtype=dtype)
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


@writes_out
def cond(input: Tensor, p=None) -> Tensor:
    """Condition number: from singular values for p in (None, 2, -2), else
    ``norm(A) * norm(A^{-1})`` (inf for singular matrices)."""
    A = input  # PyTorch's keyword names; the formulas' matrix names
    if A.ndim < 2:
        raise RuntimeError("linalg.cond: The input tensor must have at least 2 dimensions.")
    if p not in (None, "fro", "nuc", 1, -1, 2, -2, _INF, -_INF):
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    if p in (None, 2, -2):
        s = spec.svdvals(A)
        if s.shape[-1] == 0:
            return zeros(A.shape[:-2], dtype=s.dtype, device=A.device)
        big, small = s[..., 0], s[..., -1]
        return big / small if p != -2 else small / big
    dec.check_matrix(f"linalg.cond(ord={p})", A, dtype_check=False)
    if A.numel() == 0:
        return zeros(A.shape[:-2], dtype=A.dtype.to_real(), device=A.device)
    inverse, info = dec.inv_ex(A)
    r = matrix_norm(A, p) * matrix_norm(inverse, p)
    return where(info > 0, _INF, r)


def _rank_tolerance(A: Tensor, s_max: Tensor, atol, rtol) -> Tensor:
    """max(atol, rtol * largest singular value), rtol defaulting as in PyTorch."""
    eps = float(np.finfo(A.dtype.np).eps) * max(A.shape[-2:])
    if rtol is None:
        if atol is None:
            rtol = eps
        elif isinstance(atol, Tensor):
            rtol = where(atol > 0, 0.0, eps)
        else:
            rtol = 0.0 if atol > 0 else eps
    tol = s_max * rtol
    if atol is not None:
        real = A.dtype.to_real()  # singular values (and tolerances) are real
        tol = maximum(tol, atol if isinstance(atol, Tensor) else full((), atol, dtype=real))
    return tol


@writes_out(differentiable=False)
def matrix_rank(
    input: Tensor, *, atol=None, rtol=None, hermitian: bool = False, tol=None
) -> Tensor:
    """Number of singular values above the tolerance (int64); ``tol`` is the older ``atol``."""
    A = input  # PyTorch's keyword names; the formulas' matrix names
    if A.ndim < 2:
        raise RuntimeError(
            "torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions."
        )
    if A.dtype not in _LAPACK_DTYPES:
        raise RuntimeError("This function doesn't handle types other than float and double")
    if tol is not None:
        atol, rtol = tol, 0.0
    s = spec.eigvalsh(A).abs() if hermitian else spec.svdvals(A)
    if s.shape[-1] == 0:
        return zeros(A.shape[:-2], dtype=dt.int64, device=A.device)
    tolerance = _rank_tolerance(A, amax(s, -1), atol, rtol)
    return sum(s > tolerance.unsqueeze(-1), -1)


# ------------------------------------------------------------------------------ composites


@writes_out
def matrix_power(input: Tensor, n: int) -> Tensor:
    """``A^n`` by repeated squaring; n = 0 gives identities, n < 0 powers of the inverse."""
    A = input  # PyTorch's keyword names; the formulas' matrix names
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(
            f"linalg_matrix_power(): argument 'n' (position 2) must be int, not {type(n).__name__}"
        )
    dec.check_matrix("linalg.matrix_power", A, dtype_check=False)
    if n == 0:  # identities that still hang off A's graph (zero gradient), as in PyTorch
        identity = eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(A.shape)
        return where(full(A.shape, True, device=A.device), identity, A)
    if n < 0:
        A = dec.inv(A)
        n = -n
    result = None
    base = A
    while True:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if not n:
            break
        base = matmul(base, base)
    return result.clone() if result is A else result


def _chain_order(dims: list[int]) -> list[list[int]]:
    """Matrix-chain dynamic programme: split[i][j] is where to cut the product of i..j."""
    count = len(dims) - 1
    cost = [[0] * count for _ in range(count)]
    split = [[0] * count for _ in range(count)]
    for length in range(1, count):
        for i in range(count - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


@writes_out
def multi_dot(tensors) -> Tensor:
    """The product of a chain of matrices, multiplied in the cheapest order; the first may be a
    row vector and the last a column vector (1-D)."""
    tensors = tensor_sequence(tensors, "linalg_multi_dot")
    n = len(tensors)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    first, last = tensors[0], tensors[-1]
    for t, which in ((first, "first"), (last, "last")):
        if t.ndim not in (1, 2):
            raise RuntimeError(
                f"multi_dot(): the {which} tensor must be 1D or 2D but got {t.ndim}D"
            )
    for i, t in enumerate(tensors[1:-1], 1):
        if t.ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
    for i, t in enumerate(tensors[1:], 1):
        if t.dtype is not first.dtype:
            raise RuntimeError(
                "multi_dot(): all tensors must have be the same dtype but tensor 0 is "
                f"{first.dtype.name} and tensor {i} {t.dtype.name}"
            )
    mats = list(tensors)
    if first.ndim == 1:
        mats[0] = first.unsqueeze(0)
    if last.ndim == 1:
        mats[-1] = last.unsqueeze(-1)
    for i in range(n - 1):
        if mats[i].shape[-1] != mats[i + 1].shape[0]:
            raise RuntimeError(
                f"multi_dot(): tensors {i} and {i + 1} with shapes {list(tensors[i].shape)} "
                f"and {list(tensors[i + 1].shape)} cannot be multiplied"
            )
    split = _chain_order([m.shape[0] for m in mats] + [mats[-1].shape[1]])

    def product(i: int, j: int) -> Tensor:
        if i == j:
            return mats[i]
        k = split[i][j]
        return mm(product(i, k), product(k + 1, j))

    out = product(0, n - 1)
    if first.ndim == 1:
        out = out.squeeze(0)
    if last.ndim == 1:
        out = out.squeeze(-1)
    return out


@writes_out
def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """Cross product of 3-vectors along ``dim`` (-1 by default, unlike ``kiln.cross``)."""
    if input.ndim != other.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    d = wrap_dim(dim, input.ndim)
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(
            f"linalg.cross: inputs dimension {dim} must have length 3. Got {input.shape[d]} and "
            f"{other.shape[d]}"
        )
    return _cross(input, other, dim)


@writes_out
@autocast_policy(cpu="lower", cuda="lower")
def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """Dot products along ``dim`` of broadcast ``x`` and ``y``, ``x`` conjugated (as PyTorch)."""
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        raise RuntimeError(
            "linalg.vecdot: Expected a floating point or complex tensor as input. Got "
            f"{torch_type_name(x.dtype)}"
        )
    if x.dtype is not y.dtype:
        raise RuntimeError(
            "linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
            f"{torch_type_name(x.dtype)} and y of type {torch_type_name(y.dtype)} instead"
        )
    return sum((x.conj() if x.dtype.is_complex else x) * y, dim)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    return OPS["diagonal"](A, offset, dim1, dim2)


@writes_out
def tensorinv(input: Tensor, ind: int = 2) -> Tensor:
    """The inverse of ``A`` seen as a linear map from its last dims to its first ``ind`` dims."""
    A = input  # PyTorch's keyword names; the formulas' matrix names
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = math.prod(A.shape[:ind]), math.prod(A.shape[ind:])
    if rows != cols:
        raise RuntimeError(
            "Expected self to satisfy the requirement prod(self.shape[ind:]) == "
            f"prod(self.shape[:ind]), but got {cols} != {rows}"
        )
    out_shape = tuple(A.shape[ind:]) + tuple(A.shape[:ind])
    return dec.inv(A.reshape(rows, cols)).reshape(out_shape)


@writes_out
def tensorsolve(input: Tensor, other: Tensor, dims=None) -> Tensor:
    """``X`` with ``tensordot(A, X, X.ndim) = B``; ``dims`` of ``A`` are moved to the end first."""
    A, B = input, other  # PyTorch's keyword names; the formulas' matrix names
    if dims is not None:
        dims = [wrap_dim(d, A.ndim) for d in dims]
        A = A.movedim(dims, list(range(A.ndim - len(dims), A.ndim)))
    result_shape = tuple(A.shape[B.ndim :])
    rows, cols = math.prod(A.shape[: B.ndim]), math.prod(result_shape)
    if rows != cols:
        raise RuntimeError(
            "Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
            f"prod(self.shape[:other.ndim]), but got {cols} != {rows}"
        )
    return dec.solve(A.reshape(rows, cols), B.reshape(rows)).reshape(result_shape)


def vander(x: Tensor, *, N: int | None = None) -> Tensor:
    """Rows ``1, x, x^2, ..., x^(N-1)`` (increasing powers, unlike ``kiln.vander``)."""
    if x.dtype in (dt.bool_, dt.float16, dt.bfloat16):  # (PyTorch's check: no 16-bit floats)
        raise RuntimeError(
            "linalg.vander supports floating point, complex, and integer tensors, but got "
            f"{dt.torch_type_name(x.dtype)}"
        )
    n = x.shape[-1] if x.ndim else 1
    N = n if N is None else N
    if N <= 1:
        raise RuntimeError("N must be greater than 1.")
    if x.ndim == 0:  # one point, as PyTorch takes it: one row
        x = x.unsqueeze(0)
    powers = x.unsqueeze(-1).expand(tuple(x.shape) + (N - 1,))
    ones = full(tuple(x.shape) + (1,), 1, dtype=x.dtype, device=x.device)
    return OPS["cumprod"](OPS["cat"]([ones, powers], -1), -1)


# ------------------------------------------------------------------------------ Householder products


def _check_reflectors(name: str, input: Tensor, tau: Tensor) -> None:
    if input.ndim < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if tau.ndim != input.ndim - 1:
        raise RuntimeError(
            f"{name}: Expected tau to have one dimension less than input, but got tau.ndim equal "
            f"to {tau.ndim} and input.ndim is equal to {input.ndim}"
        )
    if tuple(tau.shape[:-1]) != tuple(input.shape[:-2]):
        raise RuntimeError(
            f"{name}: Expected batch dimensions of tau to be equal to input.shape[:-2], but got "
            f"{list(tau.shape[:-1])}"
        )


def _reflect(X: Tensor, v: Tensor, t: Tensor, left: bool) -> Tensor:
    """``H X`` (or ``X H``) for ``H = I - t v v^H``, without forming ``H``."""
    if left:
        return X - (t * v) @ (v.mH @ X)
    return X - (X @ v) @ (t * v.mH)


def _apply_reflectors(input: Tensor, tau: Tensor, X: Tensor, left: bool, order) -> Tensor:
    """Apply the reflectors ``H_i`` (vector: column i of ``input`` below the diagonal, with a
    unit diagonal) to ``X`` one at a time, in the given order of indices."""
    rows = input.shape[-2]
    vectors = input.tril(-1) + eye(rows, input.shape[-1], dtype=input.dtype, device=input.device)
    for i in order:
        v = vectors[..., :, i : i + 1]
        X = _reflect(X, v, tau[..., i : i + 1].unsqueeze(-1), left)
    return X


@writes_out
def householder_product(input: Tensor, tau: Tensor) -> Tensor:
    """The first ``n`` columns of ``H_1 ... H_k`` (LAPACK's orgqr): ``Q`` from ``geqrf``'s
    packed output. A composite of rank-one updates, so autograd sees its parts."""
    A = input  # PyTorch's keyword names; the formulas' matrix names
    name = "torch.linalg.householder_product"
    _check_reflectors(name, A, tau)
    m, n = A.shape[-2:]
    if m < n:
        raise RuntimeError(
            f"{name}: input.shape[-2] must be greater than or equal to input.shape[-1]"
        )
    if n < tau.shape[-1]:
        raise RuntimeError(
            f"{name}: input.shape[-1] must be greater than or equal to tau.shape[-1]"
        )
    if tau.dtype is not A.dtype:
        raise RuntimeError(
            f"{name}: tau dtype {torch_type_name(tau.dtype)} does not match input dtype "
            f"{torch_type_name(A.dtype)}"
        )
    dec.check_lapack_dtype(A, "orgqr_cpu", complex_ok=True)
    identity = eye(m, n, dtype=A.dtype, device=A.device).expand(A.shape)
    # Q I = H_1 (H_2 (... (H_k I))): the last reflector acts first
    return _apply_reflectors(A, tau, identity, True, range(tau.shape[-1] - 1, -1, -1))


def ormqr(
    input: Tensor, tau: Tensor, other: Tensor, left: bool = True, transpose: bool = False
) -> Tensor:
    """``op(Q) C`` (or ``C op(Q)``) with ``Q = H_1 ... H_k`` given as reflectors, never formed."""
    name = "torch.ormqr"
    if input.ndim < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if other.ndim != input.ndim:
        raise RuntimeError(
            f"{name}: Expected other to have the same number of dimensions as input, but got "
            f"other.ndim equal to {other.ndim} and input.ndim is equal to {input.ndim}"
        )
    _check_reflectors(name, input, tau)
    if tuple(other.shape[:-2]) != tuple(input.shape[:-2]):
        raise RuntimeError(
            f"{name}: Expected batch dimensions of other to be equal to input.shape[:-2], but got "
            f"{list(other.shape[:-2])}"
        )
    for which, t in (("other", other), ("tau", tau)):
        if t.dtype is not input.dtype:
            raise RuntimeError(
                f"{name}: Expected input and {which} to have the same dtype, but input has dtype"
                f"{torch_type_name(input.dtype)} and {which} has dtype {torch_type_name(t.dtype)}"
            )
    side = -2 if left else -1
    if other.shape[side] != input.shape[-2]:
        raise RuntimeError(f"{name}: other.shape[{side}] must be equal to input.shape[-2]")
    if tau.shape[-1] != min(other.shape[side], input.shape[-1]):
        raise RuntimeError(
            f"{name}: tau.shape[-1] must be equal to min(other.shape[{side}], input.shape[-1])"
        )
    dec.check_lapack_dtype(input, "ormqr_cpu", complex_ok=True)
    k = tau.shape[-1]
    if transpose:  # Q^H: each H_i^H = I - conj(tau_i) v v^H
        tau = tau.conj()
    # Q C applies H_k first; Q^T C and C Q apply H_1 first; C Q^T applies H_k first
    forward = left == transpose
    order = range(k) if forward else range(k - 1, -1, -1)
    return _apply_reflectors(input, tau, other, left, order)


# the dtypes PyTorch's LAPACK-backed rank and least-squares routines take
_LAPACK_DTYPES = (dt.float32, dt.float64, dt.complex64, dt.complex128)
_LSTSQ = return_type("linalg_lstsq", ("solution", "residuals", "rank", "singular_values"))
_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(input: Tensor, b: Tensor, rcond: float | None = None, *, driver: str | None = None):
    """Least-squares solution of ``A X = B`` through the pseudo-inverse (the minimum-norm one
    for rank-deficient ``A``, as the SVD drivers give); rank, residuals and singular values are
    returned for the drivers that compute them on the CPU."""
    A, B = input, b  # PyTorch's keyword names; the formulas' matrix names
    name = "torch.linalg.lstsq"
    if A.ndim < 2:
        raise RuntimeError(f"{name}: input must have at least 2 dimensions.")
    if B.ndim < 1:
        raise RuntimeError(f"{name}: other must have at least 1 dimension.")
    if A.dtype is not B.dtype:
        raise RuntimeError(
            f"{name}: Expected input and other to have the same dtype, but got input's dtype "
            f"{torch_type_name(A.dtype)} and other's dtype {torch_type_name(B.dtype)}"
        )
    if A.dtype not in _LAPACK_DTYPES:
        raise RuntimeError("This function doesn't handle types other than float and double")
    if not (A.ndim >= B.ndim and A.ndim - B.ndim <= 1):
        raise RuntimeError(
            f"{name}: input.dim() must be greater or equal to other.dim() and "
            "(input.dim() - other.dim()) <= 1"
        )
    driver = "gelsy" if driver is None else driver
    if driver not in _DRIVERS:
        raise RuntimeError(
            f"{name}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)"
        )
    vector = B.ndim == A.ndim - 1
    B2 = B.unsqueeze(-1) if vector else B
    m, n = A.shape[-2:]
    if B2.shape[-2] != m:
        raise RuntimeError(f"{name}: input.size(-2) should match other.size(-2)")
    if rcond is None:  # a tensor: m or n may be a symbolic size, and max() would pin it
        eps = float(np.finfo(A.dtype.np).eps)
        rcond = A.new_full((), eps, dtype=A.dtype.to_real()) * sym_max(m, n)
    solution = matmul(spec.pinv(A, None, rcond, False), B2)
    # PyTorch's empty residuals still belong to the graph; its singular values do not; both
    # are real for complex matrices
    empty = solution.reshape(-1)[:0]
    if empty.dtype.is_complex:
        empty = empty.abs()
    singular_values = (
        spec.svdvals(A).detach()
        if driver in ("gelsd", "gelss")
        else A.new_empty((0,), dtype=A.dtype.to_real())
    )
    if driver == "gels":
        rank = A.new_empty((0,), dtype=dt.int64)
    else:
        s = singular_values if driver != "gelsy" else spec.svdvals(A)
        rank = (
            sum(s > rcond * amax(s, -1, True), -1)
            if s.shape[-1]
            else zeros(A.shape[:-2], dtype=dt.int64)
        )
    residuals = empty
    if driver != "gelsy" and m > n:
        full_rank = driver == "gels" or bool((rank == min(m, n)).all())
        if full_rank:
            error = matmul(A, solution) - B2
            residuals = sum((error.abs() if error.dtype.is_complex else error) ** 2, -2)
    if vector:
        solution = solution.squeeze(-1)
        if residuals.numel():
            residuals = residuals.squeeze(-1)
    return _LSTSQ(solution, residuals, rank, singular_values)
