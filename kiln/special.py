"""``kiln.special``: PyTorch's ``torch.special`` namespace.

Each name is an op (or a thin argument-parsing wrapper around one) defined in ``kiln.ops``: the
functions ``torch.special`` shares with the main namespace are the same ops (``special.expit`` is
``kiln.sigmoid``), and the ones only ``torch.special`` has are the ``special_*`` ops of
``kiln.ops.special.functions``.
"""

from __future__ import annotations

from .ops.core.out_arguments import writes_out
from .ops.core.registry import OPS
from .runtime.tensor import Tensor

__all__ = [
    "airy_ai",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfcx",
    "erfinv",
    "exp2",
    "expit",
    "expm1",
    "gammainc",
    "gammaincc",
    "gammaln",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
    "log1p",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "modified_bessel_i0",
    "modified_bessel_i1",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "multigammaln",
    "ndtr",
    "ndtri",
    "polygamma",
    "psi",
    "round",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "sinc",
    "softmax",
    "spherical_bessel_j0",
    "xlog1py",
    "xlogy",
    "zeta",
]

digamma = psi = OPS["digamma"]
gammaln = OPS["lgamma"]
polygamma = OPS["polygamma"]
multigammaln = OPS["mvlgamma"]
erf = OPS["erf"]
erfc = OPS["erfc"]
erfinv = OPS["erfinv"]
erfcx = OPS["special_erfcx"]
expit = OPS["sigmoid"]
logit = OPS["logit"]
exp2 = OPS["exp2"]
expm1 = OPS["expm1"]
log1p = OPS["log1p"]
sinc = OPS["sinc"]
i0 = OPS["i0"]
i0e = OPS["special_i0e"]
i1 = OPS["special_i1"]
i1e = OPS["special_i1e"]
ndtr = OPS["special_ndtr"]
ndtri = OPS["special_ndtri"]
log_ndtr = OPS["special_log_ndtr"]
entr = OPS["special_entr"]
xlog1py = OPS["special_xlog1py"]
zeta = OPS["special_zeta"]
bessel_j0 = OPS["special_bessel_j0"]
bessel_j1 = OPS["special_bessel_j1"]
spherical_bessel_j0 = OPS["special_spherical_bessel_j0"]
gammainc = OPS["igamma"]
gammaincc = OPS["igammac"]
modified_bessel_i0 = OPS["special_modified_bessel_i0"]
modified_bessel_i1 = OPS["special_modified_bessel_i1"]
modified_bessel_k0 = OPS["special_modified_bessel_k0"]
modified_bessel_k1 = OPS["special_modified_bessel_k1"]
scaled_modified_bessel_k0 = OPS["special_scaled_modified_bessel_k0"]
scaled_modified_bessel_k1 = OPS["special_scaled_modified_bessel_k1"]
bessel_y0 = OPS["special_bessel_y0"]
bessel_y1 = OPS["special_bessel_y1"]
airy_ai = OPS["special_airy_ai"]
chebyshev_polynomial_t = OPS["special_chebyshev_polynomial_t"]
chebyshev_polynomial_u = OPS["special_chebyshev_polynomial_u"]
chebyshev_polynomial_v = OPS["special_chebyshev_polynomial_v"]
chebyshev_polynomial_w = OPS["special_chebyshev_polynomial_w"]
shifted_chebyshev_polynomial_t = OPS["special_shifted_chebyshev_polynomial_t"]
shifted_chebyshev_polynomial_u = OPS["special_shifted_chebyshev_polynomial_u"]
shifted_chebyshev_polynomial_v = OPS["special_shifted_chebyshev_polynomial_v"]
shifted_chebyshev_polynomial_w = OPS["special_shifted_chebyshev_polynomial_w"]
hermite_polynomial_h = OPS["special_hermite_polynomial_h"]
hermite_polynomial_he = OPS["special_hermite_polynomial_he"]
laguerre_polynomial_l = OPS["special_laguerre_polynomial_l"]
legendre_polynomial_p = OPS["special_legendre_polynomial_p"]


@writes_out
def xlogy(input, other) -> Tensor:  # noqa: A002
    """``input * log(other)``, 0 where ``input`` is 0; ``input`` may be a Python number."""
    if not isinstance(input, Tensor):
        if not isinstance(other, Tensor):
            raise TypeError("xlogy(): expected at least one of input and other to be a Tensor")
        input = other.new_full((), input, dtype=_scalar_dtype(input, other))  # noqa: A001
    return OPS["xlogy"](input, other)


def _scalar_dtype(value, other: Tensor):
    from .ops.core.common import result_dtype, to_float_dtype

    return to_float_dtype(result_dtype(value, other))


def softmax(input: Tensor, dim: int, *, dtype=None) -> Tensor:  # noqa: A002
    """Softmax along ``dim`` (computed in ``dtype`` when one is given)."""
    return OPS["softmax"](input, dim, dtype)


def log_softmax(input: Tensor, dim: int, *, dtype=None) -> Tensor:  # noqa: A002
    """log(softmax) along ``dim``, computed stably."""
    return OPS["log_softmax"](input, dim, dtype)


@writes_out
def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:  # noqa: A002
    """log(sum(exp(input))) over ``dim``, computed stably."""
    return OPS["logsumexp"](input, [dim] if isinstance(dim, int) else list(dim), keepdim)


@writes_out
def round(input: Tensor, *, decimals: int = 0) -> Tensor:  # noqa: A001,A002
    """Round half to even, to ``decimals`` decimal places."""
    return OPS["round"](input, decimals=decimals)
