"""kiln.special and the special-function ops beyond what the sample database checks: float64
accuracy over wide ranges, edge values (poles, infinities, nan, signed zeros), derivative chains
(lgamma -> digamma -> polygamma), error types (also of the numeric ops of samples_special:
frexp, gcd, heaviside...), and capture under kiln.compile."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln.autograd import gradcheck, gradgradcheck
from tests.oracle import assert_close, needs_torch, raised_by_both, torch

NAN, INF = math.nan, math.inf

BRIEF_NAMES = """expit logit erf erfc erfcx erfinv gammaln digamma psi polygamma multigammaln xlogy
xlog1py log_softmax softmax sinc i0 i0e i1 i1e entr ndtr ndtri log_ndtr log1p expm1 exp2 logsumexp
round zeta bessel_j0 bessel_j1 spherical_bessel_j0 gammainc gammaincc
modified_bessel_i0 modified_bessel_i1 modified_bessel_k0 modified_bessel_k1 scaled_modified_bessel_k0
scaled_modified_bessel_k1 bessel_y0 bessel_y1
chebyshev_polynomial_t chebyshev_polynomial_u chebyshev_polynomial_v chebyshev_polynomial_w
shifted_chebyshev_polynomial_t shifted_chebyshev_polynomial_u shifted_chebyshev_polynomial_v
shifted_chebyshev_polynomial_w hermite_polynomial_h hermite_polynomial_he laguerre_polynomial_l
legendre_polynomial_p airy_ai""".split()


def _wide_grid(seed: int = 0) -> np.ndarray:
    """Random float64 points from -30 to 30, dense on (0, 3), and 1e-8..1e4, avoiding poles."""
    rng = np.random.default_rng(seed)
    x = np.concatenate(
        [rng.uniform(-30, 30, 3000), rng.uniform(0, 3, 1500), 10 ** rng.uniform(-8, 4, 800)]
    )
    return x[np.abs(x - np.round(x)) > 1e-6]


def _both(name_kiln, name_torch, x: np.ndarray):
    k = name_kiln(kiln.tensor(x, dtype=kiln.float64)).numpy()
    t = name_torch(torch.tensor(x, dtype=torch.float64)).numpy()
    return k, t


# ------------------------------------------------------------------------------ the namespace


def test_special_has_every_name_the_brief_lists():
    missing = [n for n in BRIEF_NAMES if not callable(getattr(kiln.special, n, None))]
    assert not missing
    assert sorted(kiln.special.__all__) == sorted(BRIEF_NAMES)


@needs_torch
def test_special_names_exist_in_torch_special():
    assert all(hasattr(torch.special, n) for n in kiln.special.__all__)


def test_shared_special_names_are_the_main_namespace_ops():
    assert kiln.special.expit is kiln.sigmoid
    assert kiln.special.gammaln is kiln.lgamma
    assert kiln.special.psi is kiln.special.digamma is kiln.digamma
    assert kiln.special.multigammaln is kiln.mvlgamma
    assert kiln.special.polygamma is kiln.polygamma


def test_special_only_ops_are_not_tensor_methods():
    assert not any(name.startswith("special") for name in dir(kiln.Tensor))


# ------------------------------------------------------------------------------ float64 accuracy

ACCURATE_IN_TORCH = {
    "lgamma": (lambda t: kiln.lgamma(t), lambda t: torch.lgamma(t), 1e-13),
    "digamma": (lambda t: kiln.digamma(t), lambda t: torch.digamma(t), 1e-12),
    "polygamma2": (lambda t: kiln.polygamma(2, t), lambda t: torch.polygamma(2, t), 1e-13),
    "polygamma5": (lambda t: kiln.polygamma(5, t), lambda t: torch.polygamma(5, t), 1e-13),
    # PyTorch's trigamma keeps only four asymptotic terms: about 1e-9 relative
    "polygamma1": (lambda t: kiln.polygamma(1, t), lambda t: torch.polygamma(1, t), 1e-9),
    "i0": (lambda t: kiln.i0(t), lambda t: torch.i0(t), 1e-13),
    "i0e": (kiln.special.i0e, torch.special.i0e, 1e-13),
    "i1": (kiln.special.i1, torch.special.i1, 1e-13),
    "i1e": (kiln.special.i1e, torch.special.i1e, 1e-13),
    "erfcx": (kiln.special.erfcx, torch.special.erfcx, 1e-13),
    "log_ndtr": (kiln.special.log_ndtr, torch.special.log_ndtr, 1e-12),
    "entr": (kiln.special.entr, torch.special.entr, 1e-14),
}


@needs_torch
@pytest.mark.parametrize("name", sorted(ACCURATE_IN_TORCH))
def test_float64_values_match_torch_to_near_machine_precision(name):
    fk, ft, rtol = ACCURATE_IN_TORCH[name]
    x = _wide_grid()
    k = fk(kiln.tensor(x, dtype=kiln.float64)).numpy()
    t = ft(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(k, t, rtol=rtol, atol=1e-300, equal_nan=True)


@needs_torch
def test_lgamma_keeps_relative_accuracy_at_its_zeros():
    x = np.array([1 - 1e-9, 1 + 1e-9, 2 - 1e-9, 2 + 1e-9, 1 + 1e-4, 2 - 1e-4, 1e-300, 0.5])
    k, t = _both(kiln.lgamma, torch.lgamma, x)
    np.testing.assert_allclose(k, t, rtol=1e-13)


@needs_torch
@pytest.mark.parametrize("name", ["erfc", "special.erfcx", "special.log_ndtr", "erf"])
def test_error_functions_of_huge_float64_arguments_match_torch(name):
    # x * x past float64's exp range: exp(-x^2) is 0 (or inf), not 0 * inf from its correction
    x = np.array([3e38, -3e38, 1e300, -1e300, 1e10, -1e10, 30.0, -30.0])
    fn = {"erf": (kiln.erf, torch.erf), "erfc": (kiln.erfc, torch.erfc)}.get(name)
    fn = fn or (getattr(kiln.special, name[8:]), getattr(torch.special, name[8:]))
    k, t = _both(*fn, x)
    np.testing.assert_allclose(k, t, rtol=1e-13, atol=0)


@needs_torch
@pytest.mark.parametrize("n", [2, 4])
def test_polygamma_of_far_negative_arguments_matches_torch(n):
    # zeta(n + 1, x) sums about |x| direct terms before its tail: a million of them, summed
    # in blocks (one at a time took seconds per element)
    x = np.array([-999_999.3, -13437.7, -1001.2, -7.25])
    k, t = _both(lambda v: kiln.polygamma(n, v), lambda v: torch.polygamma(n, v), x)
    np.testing.assert_allclose(k, t, rtol=1e-12)


# (x, digamma(x)) at and beside the positive root, from mpmath at 40 digits. PyTorch's digamma
# loses relative accuracy there (3x off at the root itself, 3e-8 at 1.46163214): not a reference
DIGAMMA_NEAR_ROOT = [
    (1.4616321449683622, -9.2412655217294275168e-17),
    (1.4616321449683625, 1.2245374622004069031e-16),
    (1.4616321449683618, -5.2214545809196433711e-16),
    (1.46163214, -4.8077462768328061139e-9),
    (1.4616322, 5.3252586982060446761e-8),
    (1.46, -0.0015805619870834521062),
    (1.47, 0.0080664890113648684423),
]


def test_digamma_keeps_relative_accuracy_at_its_positive_root():
    x, expected = np.array(DIGAMMA_NEAR_ROOT).T
    k = kiln.digamma(kiln.tensor(x, dtype=kiln.float64)).numpy()
    np.testing.assert_allclose(k, expected, rtol=1e-14)


@needs_torch
def test_digamma_matches_torch_near_its_root_to_torchs_accuracy():
    x = np.linspace(1.3, 1.6, 31)
    k, t = _both(kiln.digamma, torch.digamma, x)
    np.testing.assert_allclose(k, t, rtol=1e-12, atol=1e-15)


# (x, ndtr(x)) from mpmath at 40 digits, where 0.5 erfc(-x/sqrt 2) cancels or PyTorch drifts
NDTR_REFERENCE = [
    (-5.0, 2.8665157187919391167e-7),
    (-4.0, 3.1671241833119921254e-5),
    (-3.0, 0.0013498980316300945267),
    (-2.0, 0.0227501319481792072),
    (-1.7, 0.044565462758543043664),
    (-1.2, 0.11506967022170827665),
]


def test_ndtr_is_relatively_accurate_below_the_mean():
    x, expected = np.array(NDTR_REFERENCE).T
    k = kiln.special.ndtr(kiln.tensor(x, dtype=kiln.float64)).numpy()
    np.testing.assert_allclose(k, expected, rtol=3e-15)


@needs_torch
def test_ndtr_and_ndtri_match_torch_where_torch_is_accurate():
    # PyTorch's ndtr drifts below -4 (8e-11 relative at -5, 2e-8 at -6): compared from -4 up
    x = np.linspace(-4, 8, 481)
    k, t = _both(kiln.special.ndtr, torch.special.ndtr, x)
    np.testing.assert_allclose(k, t, rtol=1e-11)
    p = np.concatenate([np.linspace(0.001, 0.999, 499), 10.0 ** -np.arange(5, 300, 7)])
    k, t = _both(kiln.special.ndtri, torch.special.ndtri, p)
    np.testing.assert_allclose(k, t, rtol=1e-12)


@needs_torch
def test_ndtr_left_tail_is_relatively_accurate():
    # PyTorch's ndtr loses the left tail (it returns 0 below about -8.3); its log_ndtr does not
    x = -np.linspace(5, 37, 65)
    k = kiln.special.ndtr(kiln.tensor(x, dtype=kiln.float64)).numpy()
    expected = np.exp(torch.special.log_ndtr(torch.tensor(x, dtype=torch.float64)).numpy())
    np.testing.assert_allclose(k, expected, rtol=1e-11)


@needs_torch
def test_zeta_matches_torch_including_negative_q():
    rng = np.random.default_rng(3)
    s = rng.uniform(1.05, 12, 2000)
    q = rng.uniform(-6, 30, 2000)
    s[:500] = np.round(s[:500])  # integer s: negative non-integer q is allowed
    s[:500] = np.maximum(s[:500], 2)
    k = kiln.special.zeta(kiln.tensor(s), kiln.tensor(q)).numpy()
    t = torch.special.zeta(torch.tensor(s), torch.tensor(q)).numpy()
    np.testing.assert_allclose(k, t, rtol=1e-12, equal_nan=True)


# (x, J0(x), J1(x)) from mpmath at 30 digits: the series, recurrence and asymptotic ranges
BESSEL_J_REFERENCE = [
    (0.5, 0.93846980724081290423, 0.24226845767487388638),
    (2.404825557695773, -6.1087652597367303971e-17, 0.51914749728946676274),
    (5.0, -0.17759677131433830435, -0.32757913759146522204),
    (7.5, 0.26633965788037839687, 0.13524842757970550518),
    (12.0, 0.047689310796833536624, -0.22344710449062761237),
    (24.9, 0.083245968353015490053, -0.13485569953140886933),
    (25.0, 0.096266783275958116174, -0.12535024958028990465),
    (60.0, -0.091471804089061869531, 0.046598383758166317869),
    (1000.0, 0.024786686152420174561, 0.0047283119070895239176),
]


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_bessel_j_matches_reference_values_to_float64_rounding(sign):
    x, j0, j1 = np.array(BESSEL_J_REFERENCE).T
    t = kiln.tensor(sign * x, dtype=kiln.float64)
    # near a zero (the second point) the accuracy is absolute: a few ulp of J0's scale, 1
    np.testing.assert_allclose(kiln.special.bessel_j0(t).numpy(), j0, rtol=1e-14, atol=4e-16)
    np.testing.assert_allclose(kiln.special.bessel_j1(t).numpy(), sign * j1, rtol=1e-14)


@needs_torch
@pytest.mark.parametrize("name", ["bessel_j0", "bessel_j1"])
def test_bessel_j_matches_torch_to_torchs_accuracy(name):
    # PyTorch's float64 J0/J1 are off by up to 4e-7 (absolute) between 3 and 10
    x = np.linspace(-60, 60, 2401)
    k, t = _both(getattr(kiln.special, name), getattr(torch.special, name), x)
    np.testing.assert_allclose(k, t, rtol=0, atol=1e-6)
    k32 = getattr(kiln.special, name)(kiln.tensor(x, dtype=kiln.float32)).numpy()
    np.testing.assert_allclose(k32, k, rtol=0, atol=1e-6)


def test_bessel_j_edges():
    # PyTorch returns nan at +-inf; J0 and J1 decay to 0 there (J1 is odd, so -0 at -inf and -0)
    x = kiln.tensor([0.0, -0.0, INF, -INF, NAN], dtype=kiln.float64)
    j0 = kiln.special.bessel_j0(x).numpy()
    j1 = kiln.special.bessel_j1(x).numpy()
    np.testing.assert_array_equal(j0, [1.0, 1.0, 0.0, 0.0, NAN])
    np.testing.assert_array_equal(j1, [0.0, -0.0, 0.0, -0.0, NAN])
    np.testing.assert_array_equal(np.signbit(j1[:4]), [False, True, False, True])


@needs_torch
@pytest.mark.parametrize("name", ["bessel_j0", "spherical_bessel_j0"])
def test_bessel_j_has_no_derivative_like_torch(name):
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    assert not getattr(kiln.special, name)(x).requires_grad
    assert not getattr(torch.special, name)(torch.tensor([1.0], requires_grad=True)).requires_grad


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_spherical_bessel_j0_matches_torch_across_its_series_and_quotient(dtype):
    # below |x| = 1/2 both take a Taylor series, above it sin(x) / x; 0 at +-inf
    x = np.concatenate([np.linspace(-1, 1, 2001), np.linspace(-300, 300, 3001)])
    x = np.concatenate([x, [0.0, -0.0, 1e-30, 1e-310, 0.5, -0.5, INF, -INF, NAN, 3e38]])
    k = kiln.special.spherical_bessel_j0(kiln.tensor(x, dtype=getattr(kiln, dtype)))
    t = torch.special.spherical_bessel_j0(torch.tensor(x, dtype=getattr(torch, dtype)))
    eps = float(np.finfo(dtype).eps)
    assert_close(k, t, rtol=4 * eps, atol=4 * eps)


# ------------------------------------------------------------------------------ edge values

EDGES = [0.0, -0.0, -1.0, -2.0, -2.5, 1.0, 2.0, INF, -INF, NAN, 1e-310, 200.0, -200.5]

EDGE_FUNCTIONS = {
    "lgamma": (kiln.lgamma, "lgamma"),
    "digamma": (kiln.digamma, "digamma"),
    "polygamma2": (lambda t: kiln.polygamma(2, t), lambda t: torch.polygamma(2, t)),
    "polygamma3": (lambda t: kiln.polygamma(3, t), lambda t: torch.polygamma(3, t)),
    "i0e": (kiln.special.i0e, "special.i0e"),
    "i1e": (kiln.special.i1e, "special.i1e"),
    "erfcx": (kiln.special.erfcx, "special.erfcx"),
    "log_ndtr": (kiln.special.log_ndtr, "special.log_ndtr"),
    "entr": (kiln.special.entr, "special.entr"),
    "sinc": (kiln.sinc, "sinc"),
}


def _torch_fn(spec):
    if callable(spec):
        return spec
    obj = torch
    for part in spec.split("."):
        obj = getattr(obj, part)
    return obj


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(EDGE_FUNCTIONS))
def test_edge_values_match_torch(name, dtype):
    fk, spec = EDGE_FUNCTIONS[name]
    k = fk(kiln.tensor(EDGES, dtype=getattr(kiln, dtype)))
    t = _torch_fn(spec)(torch.tensor(EDGES, dtype=getattr(torch, dtype)))
    assert_close(k, t, rtol=1e-6, atol=0)
    # signs of infinities and zeros are part of the contract (digamma(+-0) = -+inf)
    numbers = ~np.isnan(t.numpy())
    np.testing.assert_array_equal(np.signbit(k.numpy())[numbers], np.signbit(t.numpy())[numbers])


@needs_torch
def test_ndtri_and_zeta_domain_edges_match_torch():
    p = [0.0, 1.0, 0.5, -0.1, 1.1, NAN, 1e-320]
    assert_close(kiln.special.ndtri(kiln.tensor(p)), torch.special.ndtri(torch.tensor(p)))
    s = [1.0, 0.5, 2.0, 2.0, 2.5, 2.0, INF, 3.0, 2.0]
    q = [1.0, 1.0, 0.0, -1.0, -1.5, -1.5, 1.0, INF, -INF]
    assert_close(
        kiln.special.zeta(kiln.tensor(s), kiln.tensor(q)),
        torch.special.zeta(torch.tensor(s), torch.tensor(q)),
    )


def test_trigamma_has_poles_at_non_positive_integers():
    # PyTorch returns huge finite values there (pi^2 / sin(pi x)^2 with sin rounded): kiln gives inf
    out = kiln.polygamma(1, kiln.tensor([0.0, -1.0, -3.0], dtype=kiln.float64))
    assert np.isposinf(out.numpy()).all()


def test_bessel_i0_and_i1_grow_to_infinity():
    # PyTorch's Chebyshev form gives nan at +-inf; the functions diverge to +inf (I1: odd)
    x = kiln.tensor([INF, -INF, 800.0])
    np.testing.assert_array_equal(kiln.i0(x).numpy(), [INF, INF, INF])
    np.testing.assert_array_equal(kiln.special.i1(x).numpy(), [INF, -INF, INF])


# ------------------------------------------------------------------------------ derivatives


def _positive(n=6):
    return kiln.tensor(np.linspace(0.3, 4.0, n), dtype=kiln.float64, requires_grad=True)


def test_lgamma_derivative_is_digamma_and_second_is_trigamma():
    x = _positive()
    (g1,) = kiln.autograd.grad(kiln.lgamma(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g1.detach().numpy(), kiln.digamma(x.detach()).numpy(), rtol=1e-14)
    (g2,) = kiln.autograd.grad(g1.sum(), x)
    np.testing.assert_allclose(g2.numpy(), kiln.polygamma(1, x.detach()).numpy(), rtol=1e-14)


@pytest.mark.parametrize(
    "fn",
    [
        kiln.lgamma,
        kiln.digamma,
        lambda t: kiln.polygamma(2, t),
        lambda t: kiln.mvlgamma(t + 1, 2),
        kiln.sinc,
        kiln.i0,
        kiln.special.i1,
        kiln.special.i1e,
        kiln.special.i0e,
        kiln.special.erfcx,
        kiln.special.log_ndtr,
        lambda t: kiln.special.ndtri(t / 5),
        lambda t: kiln.special.zeta(3.0, t),
    ],
    ids=[
        "lgamma",
        "digamma",
        "polygamma",
        "mvlgamma",
        "sinc",
        "i0",
        "i1",
        "i1e",
        "i0e",
        "erfcx",
        "log_ndtr",
        "ndtri",
        "zeta",
    ],
)
def test_second_derivatives_pass_gradgradcheck(fn):
    x = _positive(4)
    assert gradcheck(fn, (x,), eps=1e-6, atol=1e-6, rtol=1e-5)
    assert gradgradcheck(fn, (x,), eps=1e-6, atol=1e-5, rtol=1e-4)


def test_sgn_gradient_is_zero():
    x = kiln.tensor([-2.0, 0.0, 3.0], requires_grad=True)
    kiln.sgn(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])


@needs_torch
def test_xlog1py_gradients_at_zero_match_torch():
    xs, ys = [0.0, 0.0, 0.0, 2.0, -1.5], [-1.0, -2.0, 0.5, 0.25, 1.0]
    kx, ky = kiln.tensor(xs, requires_grad=True), kiln.tensor(ys, requires_grad=True)
    tx, ty = torch.tensor(xs, requires_grad=True), torch.tensor(ys, requires_grad=True)
    kiln.special.xlog1py(kx, ky).sum().backward()
    torch.special.xlog1py(tx, ty).sum().backward()
    assert_close(kx.grad, tx.grad)
    assert_close(ky.grad, ty.grad)


def test_zeta_has_no_derivative_in_s():
    s = kiln.tensor([2.0, 3.0], requires_grad=True)
    out = kiln.special.zeta(s, kiln.tensor([1.0, 2.0]))
    with pytest.raises(NotImplementedError, match="first argument"):
        out.sum().backward()


# ------------------------------------------------------------------------------ errors

ERRORS = {
    "polygamma-negative-order": (lambda lib: lib.polygamma(-1, lib.ones(2)), RuntimeError),
    "polygamma-float-order": (lambda lib: lib.polygamma(1.5, lib.ones(2)), TypeError),
    "mvlgamma-p-zero": (lambda lib: lib.mvlgamma(lib.ones(2) * 2, 0), RuntimeError),
    "polygamma_-int-tensor": (lambda lib: lib.tensor([1, 2]).polygamma_(1), RuntimeError),
    "lgamma_-int-tensor": (lambda lib: lib.tensor([1, 2]).lgamma_(), RuntimeError),
    "xlog1py-two-numbers": (lambda lib: lib.special.xlog1py(1.0, 2.0), TypeError),
    "frexp-int": (lambda lib: lib.frexp(lib.tensor([1, 2])), RuntimeError),
    "gcd-float": (lambda lib: lib.gcd(lib.ones(2), lib.ones(2)), NotImplementedError),
    "lcm-bool": (lambda lib: lib.lcm(lib.tensor([True]), lib.tensor([True])), NotImplementedError),
    "nextafter-int": (
        lambda lib: lib.nextafter(lib.tensor([1]), lib.tensor([2])),
        NotImplementedError,
    ),
    "heaviside-dtypes": (
        lambda lib: lib.heaviside(lib.ones(2), lib.ones(2).double()),
        RuntimeError,
    ),
    "heaviside-number": (lambda lib: lib.heaviside(lib.ones(2), 0.5), TypeError),
    "ldexp-number": (lambda lib: lib.ldexp(lib.ones(2), 3), TypeError),
    "float_power_-float32": (lambda lib: lib.ones(2).float_power_(2), RuntimeError),
    "positive-bool": (lambda lib: lib.positive(lib.tensor([True])), RuntimeError),
    "bessel_j0-half": (lambda lib: lib.special.bessel_j0(lib.ones(2).half()), NotImplementedError),
    "bessel_j1-bf16": (
        lambda lib: lib.special.bessel_j1(lib.ones(2, dtype=lib.bfloat16)),
        NotImplementedError,
    ),
    "spherical_bessel_j0-half": (
        lambda lib: lib.special.spherical_bessel_j0(lib.ones(2).half()),
        NotImplementedError,
    ),
}


@needs_torch
@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_have_torch_exception_types(case):
    fn, exc = ERRORS[case]
    got, expected = raised_by_both(exc, lambda: fn(kiln), lambda: fn(torch))
    if case in SAME_MESSAGE:
        assert str(got) == str(expected).replace("torch", "kiln")


SAME_MESSAGE = {
    "frexp-int",
    "gcd-float",
    "lcm-bool",
    "nextafter-int",
    "heaviside-dtypes",
    "heaviside-number",
    "ldexp-number",
    "positive-bool",
    "polygamma-negative-order",
    "bessel_j0-half",
    "bessel_j1-bf16",
    "spherical_bessel_j0-half",
}


# ------------------------------------------------------------------------------ dtypes


@needs_torch
@pytest.mark.parametrize("dtype", ["int64", "bool", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("name", ["lgamma", "digamma", "i0", "sinc", "special.ndtr", "special.i1e"])
def test_result_dtypes_follow_torch(name, dtype):
    values = [1, 0, 1] if dtype == "bool" else [1, 2, 3]
    k = _torch_fn_kiln(name)(kiln.tensor(values, dtype=getattr(kiln, dtype)))
    t = _torch_fn(name)(torch.tensor(values, dtype=getattr(torch, dtype)))
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    assert_close(k, t, rtol=1e-2 if dtype in ("float16", "bfloat16") else None)


def _torch_fn_kiln(spec):
    obj = kiln
    for part in spec.split("."):
        obj = getattr(obj, part)
    return obj


# ------------------------------------------------------------------------------ compiled


def _special_mix(x, y):
    a = kiln.lgamma(x.abs() + 0.5) + kiln.special.ndtr(x) * kiln.sinc(y)
    b = kiln.polygamma(1, x.abs() + 1) + kiln.special.entr(y.abs()) + kiln.special.i1e(x)
    b = b + kiln.special.bessel_j0(x * 10) * kiln.special.bessel_j1(y)
    c = kiln.special.xlog1py(x, y.abs()) + kiln.special.zeta(2.5, x.abs() + 1)
    return a, b, c + kiln.mvlgamma(x.abs() + 2, 3) + kiln.special.logsumexp(y, 1, keepdim=True)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_special_functions_compile_to_the_eager_values(backend):
    x, y = kiln.randn(4, 5), kiln.randn(4, 5)
    eager = _special_mix(x, y)
    compiled = kiln.compile(_special_mix, backend=backend, fullgraph=True)(x, y)
    for e, c in zip(eager, compiled):
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)


def _special_loss(x):
    return (kiln.lgamma(x) * kiln.sinc(x) + kiln.special.erfcx(x) + kiln.digamma(x)).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_special_function_gradients_compile_to_the_eager_gradients(backend):
    base = kiln.rand(7, dtype=kiln.float64) + 0.5
    x = base.clone().requires_grad_()
    (expected,) = kiln.autograd.grad(_special_loss(x), x)
    xc = base.clone().requires_grad_()
    kiln.compile(_special_loss, backend=backend)(xc).backward()
    np.testing.assert_allclose(xc.grad.numpy(), expected.numpy(), rtol=1e-10)


def _numeric_mix(x, n):
    mantissa, exponent = kiln.frexp(x)
    a = kiln.ldexp(mantissa, exponent) + kiln.float_power(x.abs(), 0.5).float()
    b = kiln.floor_divide(x, 0.3) + kiln.heaviside(x, kiln.ones(())) + kiln.sgn(x) * x.real
    c = kiln.deg2rad(kiln.rad2deg(x)) + kiln.nextafter(x, kiln.zeros(())) + kiln.positive(x)
    d = kiln.gcd(n, n + 4) + kiln.lcm(n, n.abs() + 1)
    return a, b, c, d


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_numeric_ops_compile_to_the_eager_values(backend):
    x = kiln.randn(3, 4) * 5
    n = kiln.randint(-20, 20, (3, 4))
    eager = _numeric_mix(x, n)
    compiled = kiln.compile(_numeric_mix, backend=backend, fullgraph=True)(x, n)
    for e, c in zip(eager, compiled):
        assert c.dtype is e.dtype
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-6, atol=1e-6)
