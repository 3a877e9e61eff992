"""Ready-made parametrizations (``torch.nn.utils.parametrizations``): orthogonal, weight_norm,
spectral_norm.

Each registers a small module with ``parametrize.register_parametrization``, so the weight is
recomputed from the stored original(s) on each access and gradients reach the originals.
``orthogonal`` maps an unconstrained matrix to an orthogonal one (matrix exponential or Cayley
map of a skew-symmetric matrix, or a product of Householder reflectors) and, by default,
multiplies by a fixed orthogonal ``base`` so that assigning a weight needs no inverse map.
"""

from __future__ import annotations

import enum

import numpy as np

from ...autograd.grad_mode import no_grad
from ...ops import public
from ...ops.linalg import linalg_namespace as linalg
from ...ops.public import allclose, arange, cat, finfo, mv, randn, tensor, vdot, where, zeros_like
from ...runtime.tensor import Tensor
from .. import functional as F
from ..modules.module import Module
from . import parametrize
from .spectral_norm import transposed_conv_dim, weight_to_matrix
from .weight_norm import norm_except_dim, weight_norm_fn

__all__ = ["orthogonal", "weight_norm", "spectral_norm"]


def _is_orthogonal(q: Tensor) -> bool:
    n, k = q.shape[-2], q.shape[-1]
    eye = public.eye(k, dtype=q.dtype, device=q.device)
    eps = 10.0 * n * finfo(q.dtype).eps
    return allclose(q.mT @ q, eye, atol=eps)


def _make_orthogonal(a: Tensor) -> Tensor:
    """The Q factor of ``a``'s QR decomposition, signs fixed so that R has a positive diagonal."""
    q, r = linalg.qr(a)
    return q * r.diagonal(dim1=-2, dim2=-1).sign().unsqueeze(-2)


def _householder_product(a: Tensor, tau: Tensor) -> Tensor:
    """The first k columns of ``H_1 ... H_k``, ``H_i = I - tau_i v_i v_i^T`` with ``v_i`` column
    ``i`` of ``a`` below the diagonal and 1 on it (LAPACK's storage); differentiable in both."""
    n, k = a.shape[-2], a.shape[-1]
    rows = arange(n, device=a.device)
    q = public.eye(n, dtype=a.dtype, device=a.device).expand(*a.shape[:-2], n, n)
    for i in range(k):
        below = (rows > i).to(a.dtype)
        unit = (rows == i).to(a.dtype)
        v = a[..., :, i] * below + unit
        qv = (q @ v.unsqueeze(-1)).squeeze(-1)
        q = q - tau[..., i, None, None] * qv.unsqueeze(-1) * v.unsqueeze(-2)
    return q[..., :k]


def _geqrf(a: Tensor) -> tuple[Tensor, Tensor]:
    """LAPACK's compact QR of ``a``: (reflectors and R in one matrix, tau), as ``torch.geqrf``."""
    h, tau = np.linalg.qr(a.detach().cpu().numpy(), mode="raw")
    packed = tensor(np.ascontiguousarray(np.swapaxes(h, -1, -2)), dtype=a.dtype)
    return packed.to(a.device), tensor(tau, dtype=a.dtype).to(a.device)


class _OrthMaps(enum.Enum):
    matrix_exp = enum.auto()
    cayley = enum.auto()
    householder = enum.auto()


class _Orthogonal(Module):
    def __init__(self, weight: Tensor, orthogonal_map: _OrthMaps, *, use_trivialization=True):
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, x: Tensor) -> Tensor:
        n, k = x.shape[-2], x.shape[-1]
        transposed = n < k
        if transposed:
            x = x.mT
            n, k = k, n
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            x = x.tril()
            if n != k:
                x = cat([x, x.new_zeros(n, n - k).expand(*x.shape[:-2], -1, -1)], dim=-1)
            a = x - x.mT
            if self.orthogonal_map is _OrthMaps.matrix_exp:
                q = linalg.matrix_exp(a)
            else:
                eye = public.eye(n, dtype=a.dtype, device=a.device)
                q = linalg.solve(eye - 0.5 * a, eye + 0.5 * a)
            if n != k:
                q = q[..., :k]
        else:
            a = x.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (a * a).sum(dim=-2))
            q = _householder_product(a, tau)
            q = q * x.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if hasattr(self, "base"):
            q = self.base @ q
        return q.mT if transposed else q

    def right_inverse(self, q: Tensor) -> Tensor:
        with no_grad():
            return self._right_inverse(q)

    def _right_inverse(self, q: Tensor) -> Tensor:
        if q.shape != self.shape:
            raise ValueError(
                f"Expected a matrix or batch of matrices of shape {self.shape}. Got a tensor of "
                f"shape {q.shape}."
            )
        q_init = q
        n, k = q.shape[-2], q.shape[-1]
        transpose = n < k
        if transpose:
            q = q.mT
            n, k = k, n
        if not hasattr(self, "base"):
            if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                raise NotImplementedError(
                    "It is not possible to assign to the matrix exponential or the Cayley "
                    "parametrizations when use_trivialization=False."
                )
            a, tau = _geqrf(q)
            # the diagonal carries the sign of each reflector's column (forward reads it as int)
            sign = a.diagonal(dim1=-2, dim2=-1).sign() * where(tau == 0.0, -1.0, 1.0)
            eye = public.eye(n, k, dtype=a.dtype, device=a.device)
            a = a * (1 - eye) + eye * sign.unsqueeze(-2)
            return a.mT if transpose else a
        if n == k:
            q = q.clone() if _is_orthogonal(q) else _make_orthogonal(q)
        else:
            extra = randn(*q.shape[:-2], n, n - k, dtype=q.dtype, device=q.device)
            q = _make_orthogonal(cat([q, extra], dim=-1))
        self.base = q
        neg_eye = zeros_like(q_init)
        neg_eye.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
        return neg_eye


def orthogonal(
    module: Module,
    name: str = "weight",
    orthogonal_map: str | None = None,
    *,
    use_trivialization: bool = True,
) -> Module:
    """Constrain ``module.<name>`` (a matrix or batch of matrices) to be orthogonal (or to have
    orthonormal rows/columns when not square). ``orthogonal_map``: "matrix_exp" (default for
    square), "cayley" or "householder" (default otherwise)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(
            f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions."
        )
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError(
            'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". Got: '
            f"{orthogonal_map}"
        )
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module


class _WeightNorm(Module):
    """``weight = g * v / ||v||`` from ``original0 = g`` and ``original1 = v``."""

    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_norm_fn(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalization as a parametrization: ``module.parametrizations.<name>.original0``
    holds the magnitude ``g`` and ``original1`` the direction ``v``."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


class _SpectralNorm(Module):
    """``weight / sigma(weight)``, sigma estimated by power iteration on buffers ``_u``/``_v``
    (updated in training mode on each evaluation)."""

    def __init__(
        self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12
    ) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got "
                f"{dim})"
            )
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but got "
                f"n_power_iterations={n_power_iterations}"
            )
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            weight_mat = weight_to_matrix(weight, self.dim)
            h, w = weight_mat.shape
            options = {"dtype": weight.dtype, "device": weight.device}
            self.register_buffer("_u", F.normalize(randn(h, **options), dim=0, eps=eps))
            self.register_buffer("_v", F.normalize(randn(w, **options), dim=0, eps=eps))
            self._power_method(weight_mat, 15)

    def _power_method(self, weight_mat: Tensor, n_power_iterations: int) -> None:
        with no_grad():
            for _ in range(n_power_iterations):
                F.normalize(mv(weight_mat, self._v), dim=0, eps=self.eps, out=self._u)
                F.normalize(mv(weight_mat.t(), self._u), dim=0, eps=self.eps, out=self._v)

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = weight_to_matrix(weight, self.dim)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        u = self._u.clone()
        v = self._v.clone()
        sigma = vdot(u, mv(weight_mat, v))
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(
    module: Module,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
) -> Module:
    """Spectral normalization as a parametrization (the power-iteration state lives in
    ``module.parametrizations.<name>[0]._u`` and ``._v``)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = transposed_conv_dim(module)
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps)
    )
    return module
