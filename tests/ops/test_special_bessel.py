"""kiln.special's Bessel functions of the second kind (bessel_y0/y1), the modified Bessel
functions K0/K1 (plain and scaled), modified_bessel_i0/i1 and the Airy function airy_ai: float64
against PyTorch and against high-precision values, float32, edge values, dtypes and the missing
derivative."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from tests.ops.samples_special import BESSEL_AIRY
from tests.oracle import needs_torch, raised_by_both, torch

NAN, INF = math.nan, math.inf
NAMES = list(BESSEL_AIRY)
# PyTorch's float64 kernels for these are good to about 1e-6 absolute only
TORCH_APPROXIMATE = ["bessel_y0", "bessel_y1", "airy_ai"]


def _call(lib, name, x, dtype="float64"):
    return getattr(lib.special, name)(lib.tensor(x, dtype=getattr(lib, dtype))).numpy()


def _grid() -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.concatenate(
        [
            np.linspace(-60, 60, 4801),
            10 ** rng.uniform(-300, 2.8, 2000),
            rng.uniform(1.9, 2.1, 300),
            rng.uniform(24.9, 25.1, 300),
        ]
    )


@needs_torch
@pytest.mark.parametrize("name", sorted(set(NAMES) - set(TORCH_APPROXIMATE)))
def test_float64_values_match_torch(name):
    x = _grid()
    np.testing.assert_allclose(
        _call(kiln, name, x), _call(torch, name, x), rtol=1e-13, atol=1e-300, equal_nan=True
    )


@needs_torch
@pytest.mark.parametrize("name", TORCH_APPROXIMATE)
def test_values_match_torch_to_torchs_accuracy(name):
    # PyTorch's float64 Y0/Y1 are off by up to 1e-6 absolute (4e-5 relative) between 2 and 25,
    # its Ai by up to 3e-6 absolute (6e-7 near its first zero, -2.338)
    x = _grid()
    k, t = _call(kiln, name, x), _call(torch, name, x)
    np.testing.assert_allclose(k, t, rtol=1e-6, atol=5e-6, equal_nan=True)


# (x, Y0, Y1, exp(x) K0, exp(x) K1) from mpmath at 30 digits
REFERENCE = [
    (1e-300, -439.83516362276533175, -6.3661977236758134308e299, 690.89145941387211765, 1e300),
    (1e-5, -7.4031602837019701326, -63661.977275365485157, 11.628973270095616524, 100000.99994435512532),
    (0.5, -0.44451873350670655715, -1.4714723926702430692, 1.52410938577390953, 2.7310097082117857054),
    (1.9999, 0.51036496658709797245, -0.10708882173811194711, 0.84158740659860283202, 1.0335093314872252548),
    (2.0, 0.5103756726497451196, -0.10703243154093754689, 0.84156821507077141792, 1.0334768470686885732),
    (3.7, 0.10607431532035418428, 0.41667437268380749445, 0.63221805919874068696, 0.71300650104957614301),
    (8.9357696627916752, 0.2561396422026504942, 0.088748116762244979165, 0.41373732954365006631, 0.43630237980301209807),
    (24.999, -0.12734820056741020553, -0.098706616767517162698, 0.24944154544738964861, 0.25438256407167357051),
    (25.0, -0.12724943226800613783, -0.098829964783237410053, 0.24943660457559668687, 0.25437732954208525059),
    (60.0, 0.047358952209449399203, 0.091869609369866895264, 0.16146817823629392565, 0.16280823094404427103),
    (1e3, 0.0047159179776228133998, -0.024784331292351778915, 0.039628321600754217115, 0.03964813081296021048),
    (1e10, -7.6765081757929366905e-6, -2.1755917506307171357e-6, 1.2533141372998338245e-5, 1.2533141373624995314e-5),
    (700.0, 0.029494308180893819487, 0.0063093414214525600221, 0.047362369454613572112, 0.047396187653494544137),
]  # fmt: skip


@pytest.mark.parametrize(
    "column, name",
    [
        (1, "bessel_y0"),
        (2, "bessel_y1"),
        (3, "scaled_modified_bessel_k0"),
        (4, "scaled_modified_bessel_k1"),
    ],
)
def test_float64_values_match_high_precision_references(column, name):
    table = np.array(REFERENCE)
    np.testing.assert_allclose(_call(kiln, name, table[:, 0]), table[:, column], rtol=1e-13)


# (x, Ai(x)) from mpmath at 30 digits: the asymptotic form (x < -7), the power series, K_1/3
AIRY_REFERENCE = [
    (-500.0, 0.072590120104041139612),
    (-30.0, -0.087968188456842162833),
    (-7.5, 0.32177571638064787527),
    (-6.5, -0.23802030199711580359),
    (-1.0, 0.5355608832923521188),
    (1e-300, 0.35502805388781723926),
    (0.5, 0.23169360648083348977),
    (2.0999, 0.029957248029783383951),
    (2.1001, 0.029947956830954314036),
    (5.0, 0.00010834442813607441735),
    (25.0, 8.1160268246913866838e-38),
    (100.0, 2.6344821520881844896e-291),
]


def test_airy_matches_high_precision_references():
    # relative to Ai's scale: the phase 2/3 |x|^(3/2) at x = -500 carries its own rounding
    x, expected = np.array(AIRY_REFERENCE).T
    np.testing.assert_allclose(_call(kiln, "airy_ai", x), expected, rtol=1e-12)
    # at the first zero the accuracy is absolute
    assert abs(_call(kiln, "airy_ai", [-2.338107410459767])[0]) < 1e-14


@pytest.mark.parametrize("order", [0, 1])
def test_k_is_scaled_k_times_exp_minus_x(order):
    x = np.concatenate([np.linspace(0.01, 700, 3001), [1e-300, 2.0]])
    plain = _call(kiln, f"modified_bessel_k{order}", x)
    scaled = _call(kiln, f"scaled_modified_bessel_k{order}", x)
    np.testing.assert_allclose(plain, scaled * np.exp(-x), rtol=1e-14)


@needs_torch
@pytest.mark.parametrize("name", NAMES)
def test_float32_values_match_torch(name):
    # both round to float32 (PyTorch computes in float32: about 1e-6 absolute for Y); its Ai
    # loses the phase below x = -10 (5e-6 absolute at -41, where kiln's is right)
    x = np.linspace(-10 if name == "airy_ai" else -60, 60, 4801).astype(np.float32)
    k, t = _call(kiln, name, x, "float32"), _call(torch, name, x, "float32")
    assert k.dtype == np.float32
    atol = 5e-6 if name in TORCH_APPROXIMATE else 2e-6
    np.testing.assert_allclose(k, t, rtol=2e-6, atol=atol, equal_nan=True)


# below 1e300 and 700: PyTorch's I overflows to inf from 709.8 where I(710) = 3.3e306 is finite
# (kiln keeps it, as kiln.i0 does), and its Y at 1e300 loses the phase of x (kiln's does not)
EDGES = [0.0, -0.0, -1.0, -2.5, -1e-300, INF, -INF, NAN, 1e-300, 1e-310, 2.0, 25.0, 700.0, 800.0]
EDGES += [-800.0, -7.0, 2.1]


@needs_torch
@pytest.mark.parametrize("name", NAMES)
def test_edge_values_match_torch(name):
    # (at -800 Ai's phase, 2/3 800^(3/2), has rounding errors of 1e-12 in either)
    atol = 5e-6 if name in TORCH_APPROXIMATE else 0.0
    np.testing.assert_allclose(
        _call(kiln, name, EDGES), _call(torch, name, EDGES), rtol=1e-9, atol=atol, equal_nan=True
    )


@needs_torch
@pytest.mark.parametrize("name", NAMES)
def test_integers_promote_and_results_never_require_grad(name):
    k = getattr(kiln.special, name)(kiln.tensor([1, 2, 3]))
    t = getattr(torch.special, name)(torch.tensor([1, 2, 3]))
    assert k.dtype == kiln.float32 and t.dtype == torch.float32
    np.testing.assert_allclose(k.numpy(), t.numpy(), rtol=1e-6)
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    assert not getattr(kiln.special, name)(x).requires_grad


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "complex64"])
@pytest.mark.parametrize("name", NAMES)
def test_dtypes_torch_refuses_are_refused(name, dtype):
    def run(lib):
        return getattr(lib.special, name)(lib.ones(2, dtype=getattr(lib, dtype)))

    got, expected = raised_by_both(NotImplementedError, lambda: run(kiln), lambda: run(torch))
    assert str(got) == str(expected)
