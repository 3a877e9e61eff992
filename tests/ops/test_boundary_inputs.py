"""Inputs at the edges of ops' domains, against PyTorch: empty reductions' gradients, 0-d
tensors, ``dim=()``, ``range`` indices, in-place shifts, scalar writes that wrap or overflow,
and gradients PyTorch defines at a domain's boundary (copysign, logit)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _both(fn):
    return fn(kiln), fn(torch)


def _assert_same(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, torch.Tensor):
            assert tuple(g.shape) == tuple(w.shape)
            assert str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1]
            g, w = g.detach().numpy(), w.detach().numpy()
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, equal_nan=True)


def test_copysign_gradients():
    def fn(lib):
        x = lib.tensor([1.5, -2.0, 0.0, -0.0, 3.0], requires_grad=True)
        s = lib.tensor([-1.0, -1.0, 1.0, -1.0, 2.0], requires_grad=True)
        y = lib.copysign(x, s)
        y.sum().backward()
        z = lib.tensor([1.5, -2.0], requires_grad=True)
        w = lib.copysign(z, -1.0)
        w.sum().backward()
        return x.grad, s.grad, z.grad, y.grad_fn.name(), w.grad_fn.name()

    (*got, gn0, gn1), (*want, wn0, wn1) = _both(fn)
    _assert_same(got, want)
    assert (gn0, gn1) == (wn0, wn1)


def test_mean_over_an_empty_dim_has_an_empty_gradient():
    def fn(lib):
        x = lib.ones(3, 4, requires_grad=True)
        x[:, :0].mean(-1).sum().backward()
        return x.grad

    _assert_same(*_both(fn))


@pytest.mark.parametrize("eps", [None, 0.1])
def test_logit_gradient_at_and_beyond_the_boundary(eps):
    def fn(lib):
        x = lib.tensor([-0.2, 0.0, 0.05, 0.5, 1.0, 1.3], requires_grad=True)
        y = lib.logit(x, eps)
        y.sum().backward()
        return y, x.grad

    _assert_same(*_both(fn))


def test_zero_dim_activations_and_shapes():
    def fn(lib):
        F = lib.nn.functional
        x = lib.tensor(-2.0)
        return (
            F.leaky_relu(x),
            lib.nn.LeakyReLU(0.3)(x),
            F.prelu(x, lib.tensor([0.25])),
            x.movedim(0, 0),
            lib.moveaxis(x, -1, 0),
        )

    _assert_same(*_both(fn))
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError, match="0-dim"):
            lib.tensor(1.0).narrow(0, 0, 1)


def test_all_any_with_no_dims_reduce_nothing():
    def fn(lib):
        a = lib.tensor([[1.0, 0.0], [2.0, 3.0]])
        return (a > 0).all(dim=()), lib.any(a, dim=()), lib.all(a, dim=[]), a.all(), a.any(1)

    _assert_same(*_both(fn))
    f = kiln.compile(lambda a: a.all(dim=()))
    a = kiln.tensor([[1.0, 0.0], [2.0, 3.0]])
    assert f(a).tolist() == [[True, False], [True, True]]


def test_range_indices_and_inplace_shifts():
    def fn(lib):
        a = lib.arange(20.0).reshape(4, 5)
        b = a.clone()
        b[range(2)] = 0
        x = lib.tensor([1, 2, 3])
        view = x[1:]
        x <<= 1
        x >>= 0
        return a[range(2)], a[:, range(1, 5, 2)], a[range(2), range(2)], b, view

    _assert_same(*_both(fn))


@pytest.mark.parametrize(
    "dtype,value",
    [("uint8", -1), ("uint8", -129), ("uint8", 255.7), ("int8", 300), ("int64", float("nan"))],
)
def test_scalar_writes_convert_as_fill(dtype, value):
    results = []
    for lib in (kiln, torch):
        a = lib.zeros(3, dtype=getattr(lib, dtype))
        try:
            a[0] = value
            a[1:] = value
            results.append(a.tolist())
        except RuntimeError as error:
            results.append(("RuntimeError", str(error)))
    assert results[0] == results[1]


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_compiled_linspace_of_one_step_and_clamp_bounds(backend):
    f = kiln.compile(lambda: (kiln.linspace(0, 3, 1), kiln.linspace(3, 100, 1)), backend=backend)
    assert [t.tolist() for t in f()] == [[0.0], [3.0]]
    g = kiln.compile(lambda a: a.to(kiln.int8).clamp(-200, 200), backend=backend)
    with pytest.raises(RuntimeError, match="int8_t without overflow"):
        g(kiln.tensor([0, 1, 2]))


def test_complex_nan_to_num_fixes_each_part():
    def fn(lib):
        inf, nan = float("inf"), float("nan")
        z = lib.tensor([complex(inf, 1), complex(-inf, nan), complex(2, -inf), complex(nan, nan)])
        return lib.view_as_real(z.nan_to_num()), lib.view_as_real(z.nan_to_num(0.5, 9.0, -9.0))

    _assert_same(*_both(fn))


def test_lgamma_and_digamma_of_tiny_negative_numbers():
    def fn(lib):
        x = lib.tensor([-1e-40, -1e-20, -1e-12, -1e-10, -2.5, -7.25], dtype=lib.float64)
        return lib.lgamma(x), lib.digamma(x), lib.lgamma(x.float())

    _assert_same(*_both(fn))


def test_sinc_gradient_at_tiny_arguments_is_finite():
    def fn(lib):
        x = lib.tensor([1e-30, 1e-20, 0.0, 0.5, -1.25], requires_grad=True)
        lib.sinc(x).sum().backward()
        return x.grad

    got, want = _both(fn)
    assert np.isfinite(got.numpy()).all()
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)


def test_xlogy_takes_a_number_input():
    _assert_same(*_both(lambda lib: lib.xlogy(2, lib.tensor([1.0, 2.0, 0.0]))))


def test_module_to_channels_last_lays_out_4d_parameters():
    for lib in (kiln, torch):
        lib.manual_seed(0)
        conv = lib.nn.Conv2d(3, 4, 3).to(memory_format=lib.channels_last)
        assert conv.weight.is_contiguous(memory_format=lib.channels_last)
        assert conv.bias.is_contiguous()


_REFUSED = {
    "index_select-list": lambda lib: lib.arange(5.0).index_select(0, [1, 2]),
    "gather-list": lambda lib: lib.arange(5.0).gather(0, [1]),
    "stack-generator": lambda lib: lib.stack(lib.ones(1) for _ in range(2)),
    "index_select-out-of-range": lambda lib: lib.zeros(4, 5).index_select(1, lib.tensor([-1])),
    "heaviside-number": lambda lib: lib.heaviside(1, lib.ones(2)),
    "isclose-number": lambda lib: lib.isclose(1.0, lib.ones(2)),
    "ldexp-number": lambda lib: lib.ldexp(1.0, lib.ones(2)),
}


@pytest.mark.parametrize("case", sorted(_REFUSED))
def test_refused_inputs_raise_torchs_exception_type(case):
    raised = []
    for lib in (kiln, torch):
        with pytest.raises(Exception) as info:
            _REFUSED[case](lib)
        raised.append(info.type)
    assert raised[0] is raised[1]


def test_float_copied_into_bool_is_nonzero():
    # fuzz seed 90043: copy_ truncated 0.1886 to 0 before the bool conversion
    def fn(lib):
        values = [0.1886, 0.0, -0.3, float("nan"), -0.0]
        b = lib.zeros(5, dtype=lib.bool)
        b.copy_(lib.tensor(values, dtype=lib.float16))
        c = lib.zeros(5, dtype=lib.bool)
        c[:] = lib.tensor(values)
        d = lib.zeros((), dtype=lib.bool)
        d.copy_(lib.tensor(0.25, dtype=lib.float16))
        return b, c, d

    _assert_same(*_both(fn))


def _float64(lib, *shape):
    values = np.arange(float(np.prod(shape))).reshape(shape) % 7
    return lib.tensor(values, dtype=lib.float64, requires_grad=True)


# an empty batch (or no channels): the result and the gradients are empty, not a reshape error
EMPTY_BATCHES = {
    "group_norm": lambda lib, F: F.group_norm(_float64(lib, 0, 4, 3), 2, _float64(lib, 4)),
    "group_norm-2d": lambda lib, F: F.group_norm(_float64(lib, 0, 2), 1),
    "instance_norm": lambda lib, F: F.instance_norm(_float64(lib, 0, 3, 4)),
    "batch_norm-no-channels": lambda lib, F: F.batch_norm(
        _float64(lib, 2, 0, 3), lib.zeros(0, dtype=lib.float64), None, training=True
    ),
    "unfold": lambda lib, F: F.unfold(_float64(lib, 0, 1, 5, 5), 2),
    "lu_solve": lambda lib, F: lib.linalg.lu_solve(
        _float64(lib, 0, 3, 3), lib.ones(0, 3, dtype=lib.int32), _float64(lib, 0, 3, 2)
    ),
    "cdist-mm-backward": lambda lib, F: lib.cdist(
        _float64(lib, 0, 5), _float64(lib, 4, 5), compute_mode="use_mm_for_euclid_dist"
    ),
}


@pytest.mark.parametrize("name", sorted(EMPTY_BATCHES))
def test_empty_batches_give_empty_results_and_gradients(name):
    def fn(lib):
        out = EMPTY_BATCHES[name](lib, lib.nn.functional)
        out.sum().backward()
        return out

    _assert_same(*_both(fn))


def _integers(lib):
    return lib.tensor([[3, 0, -7], [0, 2, 5]])


# an integer divisor with zeros divides nothing when the broadcast is empty: no error
EMPTY_INTEGER_DIVISIONS = {
    "floor_divide": lambda lib: _integers(lib)[:0] // _integers(lib)[:1],
    "remainder": lambda lib: _integers(lib)[:0] % _integers(lib)[:1],
    "remainder-number": lambda lib: lib.remainder(_integers(lib)[:0], 0),
    "fmod": lambda lib: lib.fmod(_integers(lib)[:0], _integers(lib)[1:]),
    "div-trunc": lambda lib: lib.div(_integers(lib)[:, :0], 0, rounding_mode="trunc"),
}


@pytest.mark.parametrize("name", sorted(EMPTY_INTEGER_DIVISIONS))
def test_empty_integer_divisions_by_zero_do_not_raise(name):
    _assert_same(*_both(EMPTY_INTEGER_DIVISIONS[name]))
