"""The linear algebra names PyTorch keeps outside ``torch.linalg``: ``kiln.det``,
``kiln.svd`` (with ``V``, not ``Vh``), ``kiln.qr(some=)``, ``kiln.triangular_solve(B, A)``,
``kiln.cholesky_solve``, ``kiln.lu``, ``kiln.geqrf``/``orgqr``/``ormqr`` ... and their ``Tensor``
methods, over the same ops.
"""

# PyTorch's keyword names (A, B, LU, UPLO) and the formulas' matrix names are upper case
# ruff: noqa: N803

from __future__ import annotations

import math

from ..core.common import Tensor, tensor_sequence
from ..core.out_arguments import writes_out
from ..core.registry import return_type, tensor_method, torch_function
from ..creation.api import zeros
from ..pointwise.unary_binary import where
from ..reductions.reduce import torch_type_name
from . import factorizations as dec
from . import lu as lu_ops
from . import spectral as spec
from .linalg_namespace import (
    householder_product,
    matrix_norm,
    matrix_power,
    multi_dot,
    ormqr,
    vector_norm,
)

__all__: list[str] = []


@torch_function("det")
@tensor_method("det")
def _det(input: Tensor) -> Tensor:
    return dec.det(input)


_SLOGDET = return_type("slogdet", ("sign", "logabsdet"))


@torch_function("slogdet")
@tensor_method("slogdet")
def _slogdet(input: Tensor):
    return _SLOGDET(*dec.slogdet(input))


@torch_function("logdet")
@tensor_method("logdet")
def _logdet(input: Tensor) -> Tensor:
    """log(det): NaN for a negative determinant, -inf for a zero one; for complex matrices
    log(sign) + log|det| (PyTorch's principal branch)."""
    sign, logabsdet = dec.slogdet(input)
    if sign.dtype.is_complex:
        return sign.log() + logabsdet
    return where(sign < 0, math.nan, logabsdet)


@torch_function("inverse")
@writes_out
@tensor_method("inverse")
def _inverse(input: Tensor) -> Tensor:
    return dec.inv(input)


@torch_function("cholesky")
@writes_out
@tensor_method("cholesky")
def _cholesky(input: Tensor, upper: bool = False) -> Tensor:
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        # the old function has no dtype check of its own: its kernel refuses
        raise NotImplementedError(
            f"\"cholesky_cpu\" not implemented for '{torch_type_name(input.dtype)}'"
        )
    return dec.cholesky(input, upper=upper)


@torch_function("cholesky_solve")
@writes_out
@tensor_method("cholesky_solve")
def _cholesky_solve(input: Tensor, input2: Tensor, upper: bool = False) -> Tensor:
    """``A^{-1} B`` for ``A = L L^T`` (``U^T U`` when upper) given its Cholesky factor."""
    return dec.cholesky_solve(input, input2, upper)


@torch_function("cholesky_inverse")
@writes_out
@tensor_method("cholesky_inverse")
def _cholesky_inverse(input: Tensor, upper: bool = False) -> Tensor:
    """``A^{-1}`` for ``A = L L^T`` (``U^T U`` when upper) given its Cholesky factor."""
    return dec.cholesky_inverse(input, upper)


_SVD = return_type("svd", ("U", "S", "V"))


@torch_function("svd")
@tensor_method("svd")
def _svd(input: Tensor, some: bool = True, compute_uv: bool = True):
    """The old ``torch.svd``: returns ``V`` (not ``Vh``); without ``compute_uv`` U and V are
    zero-filled square matrices."""
    if input.ndim < 2:
        raise RuntimeError(
            f"linalg.svd: input should have at least 2 dimensions, but has {input.ndim} "
            "dimensions instead"
        )
    if not compute_uv:
        m, n = input.shape[-2:]
        batch = tuple(input.shape[:-2])
        S = spec.svdvals(input)
        U = zeros(batch + (m, m), dtype=input.dtype, device=input.device)
        V = zeros(batch + (n, n), dtype=input.dtype, device=input.device)
        return _SVD(U, S, V)
    U, S, Vh = spec.svd(input, not some)
    return _SVD(U, S, Vh.mT)


_QR = return_type("qr", ("Q", "R"))


@torch_function("qr")
@tensor_method("qr")
def _qr(input: Tensor, some: bool = True):
    return _QR(*spec.qr(input, "reduced" if some else "complete"))


@torch_function("pinverse")
@tensor_method("pinverse")
def _pinverse(input: Tensor, rcond: float = 1e-15, hermitian: bool = False) -> Tensor:
    return spec.pinv(input, None, rcond, hermitian)


@torch_function("matrix_power")
@writes_out
@tensor_method("matrix_power")
def _matrix_power(input: Tensor, n: int) -> Tensor:
    return matrix_power(input, n)


@torch_function("matrix_exp")
@tensor_method("matrix_exp")
def _matrix_exp(input: Tensor) -> Tensor:
    return spec.matrix_exp(input)


_TRIANGULAR_SOLVE = return_type("triangular_solve", ("solution", "cloned_coefficient"))


@torch_function("triangular_solve")
@tensor_method("triangular_solve")
def _triangular_solve(
    input: Tensor,
    A: Tensor,
    upper: bool = True,
    transpose: bool = False,
    unitriangular: bool = False,
):
    """The old ``torch.triangular_solve(B, A)``: ``(X, A)`` with ``op(A) X = B``."""
    for t, which in ((input, "b"), (A, "A")):
        if t.ndim < 2:
            raise RuntimeError(
                f"torch.triangular_solve: Expected {which} to have at least 2 dimensions, but it "
                f"has {t.ndim} dimensions instead"
            )
    if input.dtype is not A.dtype:  # (the old function promotes nothing)
        raise RuntimeError(
            f"Expected b and A to have the same dtype, but found b of type "
            f"{torch_type_name(input.dtype)} and A of type {torch_type_name(A.dtype)} instead."
        )
    coefficient = A.mT if transpose else A
    X = dec.solve_triangular(
        coefficient, input, upper=upper != transpose, unitriangular=unitriangular
    )
    batch = tuple(X.shape[:-2])
    return _TRIANGULAR_SOLVE(X, A.expand(batch + tuple(A.shape[-2:])).clone())


@torch_function("lu")
@tensor_method("lu")
def _lu(A: Tensor, pivot: bool = True, get_infos: bool = False):
    """The old ``torch.lu``: ``(LU, pivots)``, plus ``info`` with get_infos (never raises)."""
    LU, pivots, info = lu_ops.lu_factor_ex(A, pivot=pivot)
    return (LU, pivots, info) if get_infos else (LU, pivots)


@torch_function("lu_solve")
@writes_out
@tensor_method("lu_solve")
def _lu_solve(input: Tensor, LU_data: Tensor, LU_pivots: Tensor) -> Tensor:
    return lu_ops.lu_solve(LU_data, LU_pivots, input)


_LU_UNPACK = return_type("lu_unpack", ("P", "L", "U"))


@torch_function("lu_unpack")
@writes_out
def _lu_unpack(
    LU_data: Tensor, LU_pivots: Tensor, unpack_data: bool = True, unpack_pivots: bool = True
):
    return _LU_UNPACK(*lu_ops.unpack_lu(LU_data, LU_pivots, unpack_data, unpack_pivots))


@torch_function("chain_matmul")
@writes_out
def _chain_matmul(*matrices: Tensor) -> Tensor:
    tensor_sequence(matrices, "chain_matmul")
    if len(matrices) == 1:
        return matrices[0].clone()
    return multi_dot(list(matrices))


@torch_function("nuclear_norm")
def _nuclear_norm(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    if isinstance(dim, bool):
        dim, keepdim = None, dim
    return matrix_norm(input, "nuc", (-2, -1) if dim is None else dim, keepdim)


@torch_function("frobenius_norm")
def _frobenius_norm(input: Tensor, dim=(-2, -1), keepdim: bool = False) -> Tensor:
    return vector_norm(input, 2, dim, keepdim)


@torch_function("geqrf")
@tensor_method("geqrf")
def _geqrf(input: Tensor):
    return spec.geqrf(input)


@torch_function("orgqr")
@tensor_method("orgqr")
def _orgqr(input: Tensor, input2: Tensor) -> Tensor:
    return householder_product(input, input2)


@torch_function("ormqr")
@writes_out
@tensor_method("ormqr")
def _ormqr(
    input: Tensor, input2: Tensor, input3: Tensor, left: bool = True, transpose: bool = False
) -> Tensor:
    return ormqr(input, input2, input3, left, transpose)
