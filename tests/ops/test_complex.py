"""Complex tensors against PyTorch: dtypes and promotion, printing, creation, the views between
complex and real layouts, eager ops and the ones PyTorch refuses, casts, autograd under PyTorch's
conjugate-Wirtinger convention, and complex graphs under kiln.compile."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.runtime import dtypes as dt
from tests.oracle import needs_torch, torch

RNG = np.random.default_rng(0)
Z_VALUES = (RNG.standard_normal((3, 4)) + 1j * RNG.standard_normal((3, 4))).astype(np.complex64)
W_VALUES = RNG.standard_normal((3, 4)).astype(np.float32)


def _lib_tensor(lib, values, **kwargs):
    return lib.tensor(np.array(values), **kwargs)


def _numpy(t) -> np.ndarray:
    if torch is not None and isinstance(t, torch.Tensor):
        return t.detach().resolve_conj().numpy()
    return t.detach().numpy()


def _assert_same(got, expected, rtol=1e-5, atol=1e-6) -> None:
    """Same dtype name, shape and values (complex compared part by part, nan where nan)."""
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _assert_same(g, e, rtol, atol)
        return
    if expected is None:
        assert got is None
        return
    if not hasattr(expected, "dtype"):
        assert type(got) is type(expected) and np.allclose(got, expected, rtol, atol)
        return
    assert str(got.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
    np.testing.assert_allclose(_numpy(got), _numpy(expected), rtol, atol, equal_nan=True)


# ------------------------------------------------------------------------------ dtypes


def test_complex_dtypes_and_aliases():
    assert kiln.cfloat is kiln.complex64 and kiln.cdouble is kiln.complex128
    assert kiln.complex64.is_complex and not kiln.complex64.is_floating_point
    assert kiln.complex64.is_signed and kiln.complex128.itemsize == 16
    assert kiln.complex64.to_real() is kiln.float32 and kiln.float64.to_complex() is kiln.complex128
    assert kiln.float32.to_real() is kiln.float32 and kiln.complex64.to_complex() is kiln.complex64
    with pytest.raises(RuntimeError, match="Unknown Complex ScalarType for Long"):
        kiln.int64.to_complex()
    with pytest.raises(AttributeError, match="complex32"):
        kiln.complex32  # noqa: B018
    with pytest.raises(AttributeError, match="chalf"):
        kiln.chalf  # noqa: B018
    assert repr(kiln.finfo(kiln.complex64)) == repr(kiln.finfo(kiln.float32))
    assert kiln.finfo(kiln.cdouble).eps == np.finfo(np.float64).eps


PROMOTION_DTYPES = ["bool", "int64", "float16", "float32", "float64", "complex64", "complex128"]


@needs_torch
@pytest.mark.parametrize("a", PROMOTION_DTYPES)
@pytest.mark.parametrize("b", ["complex64", "complex128"])
def test_promote_types_matches_torch(a, b):
    got = kiln.promote_types(getattr(kiln, a), getattr(kiln, b))
    expected = torch.promote_types(getattr(torch, a), getattr(torch, b))
    if expected is torch.complex32:
        pytest.skip("kiln has no complex32")
    assert got.name == str(expected).split(".")[-1]


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.ones(2) * 1j,
        lambda lib: lib.ones(2, dtype=lib.float64) * 1j,
        lambda lib: lib.ones(2, dtype=lib.int64) * (1 + 2j),
        lambda lib: lib.ones(2) + lib.tensor(1j, dtype=lib.complex128),
        lambda lib: lib.ones(2, dtype=lib.float64) + lib.tensor(1j),
        lambda lib: lib.tensor([1j, 2]) + lib.ones(2, dtype=lib.float64),
        lambda lib: lib.tensor(2.0, dtype=lib.float64) * lib.tensor([1j]),
        lambda lib: lib.tensor([1 + 2j]),
        lambda lib: lib.tensor(3j),
        lambda lib: lib.tensor([[1, 2.5], [3j, 4]]),
        lambda lib: lib.tensor([1, 2], dtype=lib.cdouble),
        lambda lib: lib.full((2,), 1 - 1j),
        lambda lib: lib.zeros(2, dtype=lib.cfloat) + 1,
    ],
)
def test_type_promotion_and_inference_match_torch(make):
    _assert_same(make(kiln), make(torch))


def test_result_type_and_is_complex():
    z = kiln.tensor([1j])
    assert kiln.result_type(kiln.ones(2), 1j) is kiln.complex64
    assert z.is_complex() and kiln.is_complex(z) and z.dtype.is_complex
    assert not kiln.ones(2).is_complex() and not z.is_floating_point()
    assert kiln.can_cast(kiln.float64, kiln.complex64)
    assert not kiln.can_cast(kiln.complex64, kiln.float64)


def test_default_complex_dtype_follows_the_default_float_dtype():
    kiln.set_default_dtype(kiln.float64)
    try:
        assert kiln.tensor(1j).dtype is kiln.complex128
        assert (kiln.ones(2, dtype=kiln.int32) * 1j).dtype is kiln.complex128
        assert repr(kiln.tensor([1j])) == "tensor([0.+1.j])"
    finally:
        kiln.set_default_dtype(kiln.float32)


# ------------------------------------------------------------------------------ printing

PRINTED = [
    "lib.tensor([1 + 2j, 3 - 4j])",
    "lib.tensor([1.5 + 2j, 3 - 4j], dtype=lib.complex128)",
    "lib.tensor(1 + 2j)",
    "lib.tensor([1e-5 + 2j, 3e5 - 4j])",
    "lib.zeros(2, 3, dtype=lib.complex64)",
    "lib.tensor([], dtype=lib.complex64)",
    "lib.tensor([1.5], dtype=lib.complex64)",
    "lib.tensor([float('nan') + 1j, float('inf') - 2j, 0.25 - 0.0j])",
    "lib.tensor([[1 + 1j] * 20])",
    "lib.tensor([1e10 + 1j, 1 - 1e-10j])",
    "lib.tensor([0.1 + 0.2j, 123.456 - 0.001j], requires_grad=True)",
    "lib.tensor(np.arange(2000).astype(np.complex64) * (1 - 0.5j))",
    "lib.tensor([[0.5 - 2j, 3j], [-1.25, 7 + 7j]]).t()",
    "lib.tensor(Z_VALUES)",
]


@needs_torch
@pytest.mark.parametrize("expr", PRINTED)
def test_printing_matches_torch(expr):
    scope = {"np": np, "Z_VALUES": Z_VALUES}
    got = repr(eval(expr, dict(scope, lib=kiln)))
    expected = repr(eval(expr, dict(scope, lib=torch)))
    assert got.replace("kiln.", "torch.") == expected


# ------------------------------------------------------------------------------ creation


def test_creation_with_complex_dtypes():
    assert kiln.zeros(2, dtype=kiln.cfloat).dtype is kiln.complex64
    assert kiln.ones(2, 2, dtype=kiln.cdouble).tolist() == [[1 + 0j, 1 + 0j]] * 2
    assert kiln.full((2,), 2j, dtype=kiln.complex128).tolist() == [2j, 2j]
    assert kiln.zeros_like(kiln.tensor([1j])).dtype is kiln.complex64
    assert kiln.empty(3, dtype=kiln.cfloat).shape == (3,)


SPACED = [
    "lib.linspace(-2, -3, 50, dtype=lib.complex64)",
    "lib.linspace(1 + 2j, -3, 7)",
    "lib.linspace(0.5, 4j, 6, dtype=lib.complex128)",
    "lib.logspace(0, -3, 5, dtype=lib.complex64)",
    "lib.logspace(1j, 2, 3)",
    "lib.logspace(0, 4, 3, base=2, dtype=lib.complex128)",
]


@needs_torch
@pytest.mark.parametrize("expr", SPACED)
def test_complex_linspace_and_logspace_match_torch(expr):
    _assert_same(eval(expr, {"lib": kiln}), eval(expr, {"lib": torch}))


def test_randn_complex_splits_unit_variance_between_the_parts():
    kiln.manual_seed(0)
    z = kiln.randn(200_000, dtype=kiln.cfloat)
    assert z.dtype is kiln.complex64
    parts = kiln.view_as_real(z).numpy()
    np.testing.assert_allclose(parts.var(0), [0.5, 0.5], atol=0.01)
    np.testing.assert_allclose(parts.mean(0), [0.0, 0.0], atol=0.01)
    assert abs(float(np.corrcoef(parts.T)[0, 1])) < 0.01
    np.testing.assert_allclose(float((z.abs() ** 2).mean()), 1.0, atol=0.01)


def test_rand_complex_draws_each_part_uniformly():
    u = kiln.view_as_real(kiln.rand(50_000, dtype=kiln.complex128)).numpy()
    assert u.min() >= 0 and u.max() < 1
    np.testing.assert_allclose(u.mean(0), [0.5, 0.5], atol=0.01)
    assert kiln.randn_like(kiln.zeros(3, dtype=kiln.cdouble)).dtype is kiln.complex128


# ------------------------------------------------------------------------------ views


@needs_torch
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_view_as_real_and_parts_have_torch_layouts(layout):
    def make(lib):
        z = lib.tensor(Z_VALUES)
        return {"contiguous": z, "transposed": z.t(), "strided": z[:, ::2]}[layout]

    for fn in (
        lambda lib, z: lib.view_as_real(z),
        lambda lib, z: z.real,
        lambda lib, z: z.imag,
        lambda lib, z: lib.view_as_complex(lib.view_as_real(z)),
    ):
        got, expected = fn(kiln, make(kiln)), fn(torch, make(torch))
        _assert_same(got, expected)
        assert got.stride() == expected.stride()
        assert got.storage_offset() == expected.storage_offset()


def test_views_share_memory_both_ways():
    z = kiln.tensor([1 + 2j, 3 - 4j])
    r = kiln.view_as_real(z)
    r[0, 1] = 10.0
    assert z[0].item() == 1 + 10j
    z.real.mul_(2)
    z.imag[1] = 0.5
    assert z.tolist() == [2 + 10j, 6 + 0.5j]
    x = kiln.tensor([[1.0, 2.0], [3.0, 4.0]])
    c = kiln.view_as_complex(x)
    c.mul_(1j)
    assert x.tolist() == [[-2.0, 1.0], [-4.0, 3.0]]
    assert c._base is x and kiln.view_as_real(c)._base is x


def test_setting_real_and_imag():
    z = kiln.zeros(3, dtype=kiln.cfloat)
    z.real = kiln.tensor([1.0, 2.0, 3.0])
    z.imag = 5
    assert z.tolist() == [1 + 5j, 2 + 5j, 3 + 5j]
    x = kiln.ones(2)
    assert x.real is x and kiln.real(x) is x
    with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex"):
        x.imag  # noqa: B018


@needs_torch
@pytest.mark.parametrize(
    "fn",
    [
        lambda lib: lib.view_as_complex(lib.ones(3, 4, 2).transpose(0, 1)),
        lambda lib: lib.view_as_complex(lib.ones(3, 4, 2)[..., :1]),
        lambda lib: lib.view_as_complex(lib.ones(3, 2, dtype=lib.long)),
        lambda lib: lib.view_as_complex(lib.ones(8).reshape(4, 2)[1:3]),
        lambda lib: lib.view_as_complex(lib.ones(7)[1:7].view(3, 2)),
        lambda lib: lib.view_as_complex(lib.ones(3, 3)[:, :2]),
        lambda lib: lib.view_as_real(lib.ones(3)),
        lambda lib: lib.complex(lib.ones(2), lib.ones(2, dtype=lib.float64)),
        lambda lib: lib.complex(lib.ones(2, dtype=lib.long), lib.ones(2, dtype=lib.long)),
        lambda lib: lib.complex(lib.ones(2), 1.0),
        lambda lib: lib.polar(lib.ones(2), lib.ones(2, dtype=lib.float64)),
    ],
)
def test_view_and_construction_errors_match_torch(fn):
    try:
        expected = fn(torch)
    except Exception as e:
        with pytest.raises(type(e)) as info:
            fn(kiln)
        assert str(info.value).replace("kiln", "torch") == str(e)
    else:
        _assert_same(fn(kiln), expected)


# ------------------------------------------------------------------------------ eager ops

OPS = {
    "abs": lambda lib, z, w: z.abs(),
    "angle": lambda lib, z, w: (z.angle(), w.angle(), lib.angle(lib.tensor([-1, 0, 2]))),
    "sgn": lambda lib, z, w: (z.sgn(), lib.sgn(z * 0)),
    "conj": lambda lib, z, w: (z.conj(), lib.conj_physical(z), z.resolve_conj(), w.conj()),
    "parts": lambda lib, z, w: (z.real, z.imag, lib.real(z), lib.imag(z)),
    "complex": lambda lib, z, w: lib.complex(w, w * 2),
    "polar": lambda lib, z, w: lib.polar(w.abs(), w),
    "arith": lambda lib, z, w: (z + w, z - 1, 2 - z, z * w, z * 2.5, z / (w + 3), 1 / z),
    "scalars": lambda lib, z, w: (z / 1j, 1j * w, w + (2 - 1j), z**2, 2**z, z**-1, -z),
    "pow": lambda lib, z, w: (z**0.5, z**z, w.abs() ** (1j + 0.5), lib.pow(z, w)),
    "unary": lambda lib, z, w: (z.exp(), z.log(), z.sqrt(), z.sin(), z.cos(), z.tanh()),
    "unary2": lambda lib, z, w: (z.sigmoid(), z.rsqrt(), z.log1p(), z.expm1(), z.reciprocal()),
    "reductions": lambda lib, z, w: (z.sum(), z.sum(0), z.mean(), z.mean(1, True), z.prod(1)),
    "statistics": lambda lib, z, w: (z.var(), z.std(0), z.norm(), lib.linalg.vector_norm(z, 1)),
    "scans": lambda lib, z, w: (z.cumsum(1), z.cumprod(0)),
    "matmul": lambda lib, z, w: (z @ z.t(), z.mH @ z, lib.matmul(z, w.t().to(lib.cfloat))),
    "vectors": lambda lib, z, w: (lib.dot(z[0], z[1]), lib.vdot(z[0], z[1]), z.H, z.adjoint()),
    "compare": lambda lib, z, w: (z == z, z != 1j, lib.isclose(z, z + 1e-9), z.eq(z.conj())),
    "isclose_imag": lambda lib, z, w: (
        lib.isclose(z, z + 1e-3j),
        lib.isclose(z, z + 1e-7j),
        lib.isclose(z * (w > 0), z * 0 + complex("nan+1j"), equal_nan=True),
    ),
    "predicates": lambda lib, z, w: (z.isnan(), z.isfinite(), lib.isreal(z), lib.isreal(w)),
    "casts": lambda lib, z, w: (z.to(lib.complex128), w.to(lib.cfloat), z.to(lib.bool)),
    "shape": lambda lib, z, w: (z.t(), z[:, 1], z.flatten(), lib.cat([z, z]), z.flip(0)),
    "where": lambda lib, z, w: (lib.where(w > 0, z, 0), lib.where(w > 0, z, w)),
}


@needs_torch
@pytest.mark.parametrize("name", list(OPS))
def test_eager_ops_match_torch(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = OPS[name](kiln, kiln.tensor(Z_VALUES), kiln.tensor(W_VALUES))
        expected = OPS[name](torch, torch.tensor(Z_VALUES), torch.tensor(W_VALUES))
    _assert_same(got, expected, rtol=2e-5, atol=2e-5)


def test_conj_of_a_real_tensor_is_the_tensor():
    x = kiln.ones(2)
    assert x.conj() is x and x.resolve_conj() is x and not x.is_conj()
    z = kiln.tensor([1j])
    assert not z.conj().is_conj() and not kiln.is_conj(z) and not z.is_neg()


def test_python_conversions():
    z = kiln.tensor([1 + 2j, 3.5 + 0j])
    assert z[0].item() == 1 + 2j and complex(z[0]) == 1 + 2j
    assert z.tolist() == [1 + 2j, 3.5 + 0j]
    assert float(z[1]) == 3.5 and int(z[1]) == 3
    with pytest.raises(RuntimeError, match="value cannot be converted to type double"):
        float(z[0])
    with pytest.raises(RuntimeError, match="value cannot be converted to type int64_t"):
        int(z[0])
    a = z.numpy()
    assert a.dtype == np.complex64 and a[0] == 1 + 2j
    b = np.array([1 - 1j, 2j])
    shared = kiln.from_numpy(b)
    b[0] = 5
    assert shared.dtype is kiln.complex128 and shared[0].item() == 5
    assert z.type() == "kiln.ComplexFloatTensor"


REFUSED = {
    "lt": lambda lib, z: z < z,
    "gt_scalar": lambda lib, z: z > 1,
    "max": lambda lib, z: z.max(),
    "max_dim": lambda lib, z: z.max(0),
    "amax": lambda lib, z: z.amax(),
    "argmax": lambda lib, z: z.argmax(),
    "maximum": lambda lib, z: lib.maximum(z, z),
    "clamp": lambda lib, z: z.clamp(0, 1),
    "relu": lambda lib, z: lib.relu(z),
    "functional_relu": lambda lib, z: lib.nn.functional.relu(z),
    "sign": lambda lib, z: z.sign(),
    "sort": lambda lib, z: z.sort(),
    "topk": lambda lib, z: z.topk(1),
    "floor": lambda lib, z: z.floor(),
    "round": lambda lib, z: z.round(),
    "atan2": lambda lib, z: lib.atan2(z, z),
    "remainder": lambda lib, z: z % 2,
    "floordiv": lambda lib, z: z // 2,
    "erf": lambda lib, z: z.erf(),
    "softmax": lambda lib, z: z.softmax(0),
    "heaviside": lambda lib, z: lib.heaviside(z, z),
    "invert": lambda lib, z: ~z,
    "index": lambda lib, z: [1, 2][z[0]],
}


@needs_torch
@pytest.mark.parametrize("name", list(REFUSED))
def test_ops_torch_refuses_for_complex_raise_its_error(name):
    fn = REFUSED[name]
    with pytest.raises(Exception) as expected:
        fn(torch, torch.tensor([1 + 2j, 3 - 4j]))
    with pytest.raises(type(expected.value)) as got:
        fn(kiln, kiln.tensor([1 + 2j, 3 - 4j]))
    assert str(got.value).replace("kiln", "torch") == str(expected.value)


@needs_torch
@pytest.mark.parametrize("name", ["lt", "sort", "floordiv", "softmax"])
def test_ops_torch_refuses_for_complex_refuse_fake_tensors_too(name):
    """The refusal is part of the op's record: its meta function refuses as its kernel does, so
    tracing a graph (meta tensors) fails the way eager does."""
    fn = REFUSED[name]
    with pytest.raises(Exception) as expected:
        fn(torch, torch.tensor([1 + 2j, 3 - 4j]))
    with pytest.raises(type(expected.value)) as got:
        fn(kiln, kiln.empty(2, dtype=kiln.complex64, device="meta"))
    assert str(got.value).replace("kiln", "torch") == str(expected.value)


def test_casting_complex_to_real_warns_and_keeps_the_real_part():
    z = kiln.tensor([1.5 + 2j, -3 - 1j])
    with pytest.warns(UserWarning, match="Casting complex values to real discards the imaginary"):
        x = z.to(kiln.float32)
    assert x.tolist() == [1.5, -3.0]
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        assert z.long().tolist() == [1, -3]
    target = kiln.zeros(2)
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        target.copy_(z)
    assert target.tolist() == [1.5, -3.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert z.bool().tolist() == [True, True]
        assert kiln.tensor([1.0, 2.0]).to(kiln.cfloat).tolist() == [1 + 0j, 2 + 0j]
        complex_target = kiln.zeros(2, dtype=kiln.cfloat)
        complex_target.copy_(kiln.tensor([0.5, 1.5]))
        assert complex_target.tolist() == [0.5 + 0j, 1.5 + 0j]


def test_inplace_complex_result_into_real_tensor_is_refused():
    x = kiln.zeros(2)
    with pytest.raises(RuntimeError, match="ComplexFloat can't be cast to the desired output type"):
        x += kiln.tensor([1j, 2j])


# ------------------------------------------------------------------------------ autograd

LOSSES = {
    "abs_mul": lambda lib, x, w: (x * w).abs().sum(),
    "real": lambda lib, x, w: (x * w).real.sum(),
    "imag": lambda lib, x, w: (x * w).imag.pow(2).sum(),
    "angle": lambda lib, x, w: (x * w).angle().sum(),
    "div": lambda lib, x, w: (x / (w + 3)).abs().sum() + (w / x).real.sum(),
    "conj": lambda lib, x, w: (x.conj() * x * w).real.sum(),
    "view_as_real": lambda lib, x, w: lib.view_as_real(x * w).pow(3).sum(),
    "view_as_complex": lambda lib, x, w: (
        lib.view_as_complex(lib.stack([w, w * 2], -1)).mul(x).abs().sum()
    ),
    "matmul": lambda lib, x, w: (x @ w.t().to(lib.complex128)).abs().sum(),
    "mm_complex": lambda lib, x, w: lib.mm(x, x.mH).abs().sum(),
    "exp": lambda lib, x, w: (x.exp() * w).abs().sum(),
    "mean": lambda lib, x, w: (x * w).mean().abs(),
    "sum_dim": lambda lib, x, w: (x * w).sum(0).abs().sum(),
    "sqrt_log": lambda lib, x, w: x.sqrt().abs().sum() + x.log().real.sum(),
    "pow": lambda lib, x, w: (x**3).abs().sum() + (x ** (w + 1j)).real.sum(),
    "trig": lambda lib, x, w: (x.tanh() * x.sin() * x.cos()).abs().sum(),
    "sgn": lambda lib, x, w: (x.sgn() * w).real.sum(),
    "polar": lambda lib, x, w: lib.polar(w.abs(), w).mul(x).imag.sum(),
    "prod": lambda lib, x, w: (x[:, :2] * w[:, :2]).prod().abs(),
    "complex": lambda lib, x, w: lib.complex(w, w * w).mul(x).abs().sum(),
    "to_complex": lambda lib, x, w: (w.to(lib.complex128) * x).abs().sum(),
    "var_norm": lambda lib, x, w: x.var() + x.norm() + lib.linalg.vector_norm(x * w, 1),
    "reciprocal": lambda lib, x, w: (x.reciprocal() * 1j + x.rsqrt()).abs().sum(),
}


@needs_torch
@pytest.mark.parametrize("name", list(LOSSES))
def test_gradients_of_real_losses_through_complex_values_match_torch(name):
    z = Z_VALUES.astype(np.complex128)
    w = W_VALUES.astype(np.float64)
    grads = []
    for lib in (kiln, torch):
        x_t = lib.tensor(z, requires_grad=True)
        w_t = lib.tensor(w, requires_grad=True)
        LOSSES[name](lib, x_t, w_t).backward()
        grads.append((x_t.grad, w_t.grad))
    for got, expected in zip(*grads):
        _assert_same(got, expected, rtol=1e-9, atol=1e-12)


@needs_torch
def test_printed_gradients_keep_torch_signed_zeros():
    outputs = []
    for lib in (kiln, torch):
        x = lib.tensor(Z_VALUES, requires_grad=True)
        w = lib.tensor(W_VALUES)
        (x * w).real.sum().backward()
        outputs.append(repr(x.grad))
    assert outputs[0] == outputs[1]


def test_complex_leaves_require_grad_and_integers_do_not():
    z = kiln.zeros(2, dtype=kiln.cfloat, requires_grad=True)
    assert z.requires_grad
    with pytest.raises(RuntimeError, match="floating point and complex dtype"):
        kiln.zeros(2, dtype=kiln.int64, requires_grad=True)


@needs_torch
def test_backward_with_a_complex_gradient_argument():
    results = []
    for lib in (kiln, torch):
        x = lib.tensor(Z_VALUES.astype(np.complex128), requires_grad=True)
        y = x.exp() * 2
        y.backward(lib.tensor(np.conj(Z_VALUES).astype(np.complex128)))
        results.append(x.grad)
    _assert_same(*results, rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------------------ compile


def _signal_loss(x, w):
    z = kiln.complex(x, w)
    y = (z * z.conj() + 1j * z).exp() / (2 + z)
    return y.abs().sum() + y.real.mean() + kiln.view_as_real(z * w).sum() + z.angle().sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_complex_graphs_compile_to_eager_results_and_gradients(backend):
    x_values = RNG.standard_normal((4, 3)).astype(np.float32)
    w_values = RNG.standard_normal((4, 3)).astype(np.float32)
    eager_x, eager_w = (kiln.tensor(v, requires_grad=True) for v in (x_values, w_values))
    compiled_x, compiled_w = (kiln.tensor(v, requires_grad=True) for v in (x_values, w_values))
    expected = _signal_loss(eager_x, eager_w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "backend failed" fallback warning
        got = kiln.compile(_signal_loss, backend=backend)(compiled_x, compiled_w)
    np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-5)
    expected.backward()
    got.backward()
    np.testing.assert_allclose(compiled_x.grad.numpy(), eager_x.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(compiled_w.grad.numpy(), eager_w.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_complex_inputs_and_outputs_compile(backend):
    def fn(z, w):
        mixed = z * w + z.real - 1j * z.imag
        return mixed.conj() @ z.t(), mixed.abs().max(), kiln.polar(w.abs(), w)

    z = kiln.tensor(Z_VALUES)
    w = kiln.tensor(W_VALUES)
    for got, expected in zip(kiln.compile(fn, backend=backend)(z, w), fn(z, w)):
        assert got.dtype is expected.dtype
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_inductor_logs_why_a_complex_graph_runs_eagerly(capsys):
    from kiln.runtime import logs as klog

    klog.set_logs(graph_breaks=True)
    try:
        out = kiln.compile(lambda z: (z * 2).real + 1, backend="inductor")(kiln.tensor([1j, 2]))
    finally:
        klog.set_logs(graph_breaks=False)
    assert out.tolist() == [1.0, 5.0]
    assert "complex values" in capsys.readouterr().err


def test_dtype_promotion_table_is_symmetric():
    for a in dt.all_dtypes:
        for b in dt.all_dtypes:
            assert dt.promote_types(a, b) is dt.promote_types(b, a)


def test_testing_assert_close_compares_complex_values():
    z = kiln.tensor([1 + 2j, 3j])
    kiln.testing.assert_close(z, z.clone())
    with pytest.raises(AssertionError, match="Greatest absolute difference: 1.0 at index"):
        kiln.testing.assert_close(z, z + 1j)


def _write_through_views(z):
    out = z.clone()
    out.real.mul_(2)
    pairs = kiln.view_as_real(out)
    pairs[..., 1] += 1
    kiln.view_as_complex(pairs).mul_(1j)
    return out * 1j, pairs


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_inplace_writes_through_complex_views_compile(backend):
    z_values = np.array([1 + 2j, 3 - 1j, -0.5j], dtype=np.complex64)
    eager_z = kiln.tensor(z_values, requires_grad=True)
    compiled_z = kiln.tensor(z_values, requires_grad=True)
    expected = _write_through_views(eager_z)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # functionalized, not a fallback
        got = kiln.compile(_write_through_views, backend=backend)(compiled_z)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=1e-6)
    (expected[0].abs().sum() + expected[1].sum()).backward()
    (got[0].abs().sum() + got[1].sum()).backward()
    np.testing.assert_allclose(compiled_z.grad.numpy(), eager_z.grad.numpy(), rtol=1e-5)


@needs_torch
def test_second_order_gradients_through_complex_values_match_torch():
    z_values = Z_VALUES[0].astype(np.complex128)
    w_values = W_VALUES[0].astype(np.float64)
    results = []
    for lib in (kiln, torch):
        z = lib.tensor(z_values, requires_grad=True)
        w = lib.tensor(w_values, requires_grad=True)
        loss = (z * w).exp().abs().sum() + (z.conj() * z * w).real.sum()
        loss = loss + lib.fft.rfft(w * z.angle()).abs().sum()
        gz, gw = lib.autograd.grad(loss, (z, w), create_graph=True)
        results.append(lib.autograd.grad((gz.abs() ** 2).sum() + gw.pow(2).sum(), (z, w)))
    _assert_same(results[0], results[1], rtol=1e-9, atol=1e-10)
