"""Eager edge cases where kiln once differed from PyTorch: the sign of NaN, products with
zero-sized dims, lerp's refusal to promote, meta tensors mixed with CPU ones, interpolate's size
checks, permute/movedim/expand argument errors and factory sizes too large to store. Each case runs the
same code on both libraries and compares values, or exception types and messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

NAN, INF = math.nan, math.inf


def _outcome(lib, fn):
    """(result, None) or (None, (exception type name, message))."""
    try:
        return fn(lib), None
    except Exception as e:  # noqa: BLE001 - the exception itself is what is compared
        message = str(e)
        if "\nException raised from" in message:  # PyTorch's C++ backtrace inside the message
            head, _, tail = message.partition("\nException raised from")
            message = head + ('"' if tail.endswith('"') else "")
        return None, (type(e).__name__, message)


def _assert_same_error(fn, match_message=True):
    k_out, k_err = _outcome(kiln, fn)
    t_out, t_err = _outcome(torch, fn)
    assert t_err is not None, "the case must make PyTorch raise"
    assert k_err is not None, f"kiln returned {k_out!r} where PyTorch raised {t_err}"
    if match_message:
        assert k_err == t_err
    else:
        assert k_err[0] == t_err[0], (k_err, t_err)


# ------------------------------------------------------------------------------ sign of NaN


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("op", ["sign", "sgn"])
def test_sign_of_nan_is_zero(op, dtype):
    values = [NAN, -INF, -2.0, -0.0, 0.0, 3.0, INF]
    k = getattr(kiln, op)(kiln.tensor(values, dtype=getattr(kiln, dtype)))
    t = getattr(torch, op)(torch.tensor(values, dtype=getattr(torch, dtype)))
    assert_close(k, t, equal_nan=False)


def test_sign_of_a_nan_scalar_and_of_integers():
    assert kiln.sign(kiln.tensor(NAN)).item() == 0.0
    assert_close(kiln.sign(kiln.tensor([-3, 0, 2])), torch.sign(torch.tensor([-3, 0, 2])))


# ------------------------------------------------------------------------------ atan2 at the origin


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_atan2_gradient_where_the_squared_radius_is_zero(dtype):
    """PyTorch counts 1 / (a**2 + b**2) as 0 where the sum is 0: the gradient at (0, 0) and where
    the squares underflow is 0, an inf or NaN operand or upstream gradient still gives NaN, and
    a reciprocal overflowing a tiny nonzero sum stays inf (float16 near 0, float32 at 1e-20)."""
    a_values = [0.0, -0.0, 1e-30, 0.0, 0.0, NAN, INF, 3.0, 0.0018, 1e-20, 1e-20]
    b_values = [0.0, 0.0, 0.0, 1e-30, 0.0, 0.0, 0.0, -4.0, 0.0018, 1e-20, 0.0]
    upstream = [1.0, 2.0, 1.0, 1.0, INF, 1.0, 1.0, 1.0, -2.0, 1.0, 1.0]
    grads = []
    for lib in (kiln, torch):
        kind = getattr(lib, dtype)
        a = lib.tensor(a_values, dtype=kind, requires_grad=True)
        b = lib.tensor(b_values, dtype=kind, requires_grad=True)
        lib.atan2(a, b).backward(lib.tensor(upstream, dtype=kind))
        grads.append((a.grad, b.grad))
    assert_close(grads[0], grads[1], equal_nan=True)


# ------------------------------------------------------------------------------ clamp at a bound

CLAMPS = {
    "min-zero": lambda t: t.clamp(min=0.0),
    "max-zero": lambda t: t.clamp(max=0),
    "both-zero-max": lambda t: t.clamp(min=-0.5, max=0.0),
    "both-zero-min": lambda t: t.clamp(min=0.0, max=1.0),
    "min-above-max": lambda t: t.clamp(min=-1.0, max=-2.0),
    "nan-min": lambda t: t.clamp(min=NAN),
    "neg-zero-min": lambda t: t.clamp(min=-0.0),
    "nan-max-inf-min": lambda t: t.clamp(min=-INF, max=NAN),
    "relu": lambda t: t.relu(),
    "tensor-bounds": lambda t: t.nan_to_num(0.5).clamp(  # (PyTorch's NaN sign varies here)
        t.new_tensor([-0.5, -0.0, -1.0, 0.0, 0.0, -2.0, 1.0, -0.0]),
        t.new_tensor([0.5, 0.0, -0.0, 0.0, 1.0, -1.0, 0.5, 0.25]),
    ),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(CLAMPS))
def test_clamp_with_number_bounds_keeps_the_input_where_equal(name, dtype):
    """-0.0 clamped at 0.0 stays -0.0 and NaN stays NaN even when min > max, as in PyTorch."""
    values = [-0.0, 0.0, -1.0, 2.0, NAN, -INF, INF, 0.25]
    results = []
    for lib in (kiln, torch):
        out = CLAMPS[name](lib.tensor(values, dtype=getattr(lib, dtype)))
        results.append((out, lib.copysign(lib.ones(len(values)), out.float())))
    assert_close(results[0], results[1], equal_nan=True)


# ------------------------------------------------------------------------------ half-type layouts

HALF_MATH = {
    "exp": lambda lib, a: lib.exp(a),
    "sigmoid": lambda lib, a: lib.sigmoid(a),
    "gelu": lambda lib, a: lib.nn.functional.gelu(a),
    "silu": lambda lib, a: lib.nn.functional.silu(a),
    "i0e": lambda lib, a: lib.special.i0e(a),
    "softmax": lambda lib, a: lib.softmax(a, -1),
    "mul-scalar": lambda lib, a: a * 2.5,
    "atan2": lambda lib, a: lib.atan2(a, a),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("strides", [(0, 1), (1, 0), (0, 0)])
@pytest.mark.parametrize("name", sorted(HALF_MATH))
def test_half_math_of_a_broadcast_input_is_row_major(name, strides, dtype):
    """Half types compute in float32: the upcast of a stride-0 input must not turn the result
    column-major (numpy's astype order 'K' did; PyTorch and the op's meta are row-major)."""
    results = []
    for lib in (kiln, torch):
        base = lib.arange(6.0).to(getattr(lib, dtype))
        results.append(HALF_MATH[name](lib, base.as_strided((2, 3), strides)))
    assert results[0].stride() == results[1].stride()
    assert_close(results[0], results[1])


# ------------------------------------------------------------------------------ copies of non-dense layouts

NOT_DENSE = [
    ((3, 3, 2), (0, 0, 0)),
    ((2, 3), (0, 1)),
    ((2, 3), (1, 0)),
    ((2, 2), (1, 1)),
    ((2, 3, 4), (0, 1, 3)),
    ((2, 2, 2, 2), (0, 1, 0, 0)),
    ((2, 2, 2), (1, 2, 0)),
    ((2, 3), (1, 4)),
]
LAYOUT_COPIES = {
    "to-bfloat16": lambda lib, a: a.to(lib.bfloat16),
    "to-float64": lambda lib, a: a.to(lib.float64),
    "to-int32": lambda lib, a: a.to(lib.int32),
    "clone": lambda lib, a: a.clone(),
    "empty_like": lambda lib, a: lib.empty_like(a),
}


@pytest.mark.parametrize("shape,strides", NOT_DENSE)
@pytest.mark.parametrize("name", sorted(LAYOUT_COPIES))
def test_copies_of_a_non_dense_layout_keep_its_dim_order(name, shape, strides):
    """A copy that preserves the layout of an expand or a slice is dense in the input's dim order,
    broadcast dims keeping their row-major place (PyTorch's infer_dense_strides)."""
    results = []
    for lib in (kiln, torch):
        a = lib.arange(24.0).as_strided(shape, strides)
        results.append(LAYOUT_COPIES[name](lib, a))
    assert results[0].stride() == results[1].stride()
    if name != "empty_like":
        assert_close(results[0], results[1])


# ------------------------------------------------------------------------------ zero-sized products


def _r(lib, *shape):
    values = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) * 0.1 + 1.0
    return lib.tensor(values, requires_grad=True)


PRODUCTS = {
    "matmul-batch-times-matrix-k0": ((2, 3, 0), (0, 4), lambda lib, a, b: a @ b),
    "matmul-transposed-batch-k0": ((2, 0, 3), (0, 4), lambda lib, a, b: a.transpose(1, 2) @ b),
    "matmul-m0": ((0, 3), (3, 4), lambda lib, a, b: a @ b),
    "matmul-n0": ((2, 3), (3, 0), lambda lib, a, b: a @ b),
    "matmul-k0": ((2, 0), (0, 4), lambda lib, a, b: a @ b),
    "matmul-dot-k0": ((0,), (0,), lambda lib, a, b: a @ b),
    "matmul-mv-k0": ((3, 0), (0,), lambda lib, a, b: a @ b),
    "matmul-vm-k0": ((0,), (0, 3), lambda lib, a, b: a @ b),
    "matmul-batch0": ((0, 2, 3), (0, 3, 4), lambda lib, a, b: a @ b),
    "matmul-broadcast-k0": ((2, 1, 3, 0), (4, 0, 5), lambda lib, a, b: a @ b),
    "matmul-broadcast-batch0": ((0, 1, 3, 2), (4, 2, 5), lambda lib, a, b: a @ b),
    "mm-k0": ((2, 0), (0, 4), lambda lib, a, b: lib.mm(a, b)),
    "bmm-k0": ((3, 2, 0), (3, 0, 4), lambda lib, a, b: lib.bmm(a, b)),
    "bmm-batch0": ((0, 2, 3), (0, 3, 4), lambda lib, a, b: lib.bmm(a, b)),
    "addmm-k0": ((2, 4), (2, 0), lambda lib, c, a: lib.addmm(c, a, lib.zeros(0, 4), beta=0.5)),
    "addmv-k0": ((3,), (3, 0), lambda lib, c, a: lib.addmv(c, a, lib.zeros(0))),
    "baddbmm-k0": ((2, 3, 4), (2, 3, 0), lambda lib, c, a: lib.baddbmm(c, a, lib.zeros(2, 0, 4))),
    "addbmm-batch0": ((3, 4), (0, 3, 2), lambda lib, c, a: lib.addbmm(c, a, lib.zeros(0, 2, 4))),
    "linear-in0": ((2, 3, 0), (4, 0), lambda lib, x, w: lib.nn.functional.linear(x, w)),
    "linear-in0-bias": (
        (2, 0),
        (4, 0),
        lambda lib, x, w: lib.nn.functional.linear(x, w, lib.ones(4)),
    ),
    "linear-out0": ((2, 3, 3), (0, 3), lambda lib, x, w: lib.nn.functional.linear(x, w)),
    "linear-vector-weight-in0": ((2, 0), (0,), lambda lib, x, w: lib.nn.functional.linear(x, w)),
    "einsum-k0": ((2, 0), (0, 4), lambda lib, a, b: lib.einsum("ik,kj->ij", a, b)),
    "einsum-batch0": ((0, 2), (0, 2), lambda lib, a, b: lib.einsum("bi,bi->b", a, b)),
    "einsum-batched-k0": ((3, 2, 0), (3, 0, 4), lambda lib, a, b: lib.einsum("bik,bkj->bij", a, b)),
    "tensordot-k0": ((2, 0), (0, 3), lambda lib, a, b: lib.tensordot(a, b, 1)),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_products_over_zero_sized_dims_match_pytorch(name):
    """An empty contraction sums nothing: zeros of the output shape, and empty gradients."""
    shape_a, shape_b, fn = PRODUCTS[name]
    results = []
    for lib in (kiln, torch):
        a, b = _r(lib, *shape_a), _r(lib, *shape_b)
        y = fn(lib, a, b)
        (y * 2).sum().backward()
        results.append((y.detach(), a.grad, b.grad))
    assert_close(results[0], results[1])


# ------------------------------------------------------------------------------ lerp dtypes

LERP = {
    "end-double": lambda lib: lib.lerp(lib.zeros(3), lib.ones(3, dtype=lib.float64), 0.5),
    "self-double": lambda lib: lib.lerp(lib.zeros(3, dtype=lib.float64), lib.ones(3), 0.5),
    "end-half": lambda lib: lib.lerp(lib.zeros(3), lib.ones(3, dtype=lib.float16), 0.5),
    "end-0d-double": lambda lib: lib.lerp(lib.zeros(3), lib.ones(()).double(), 0.5),
    "weight-double": lambda lib: lib.lerp(lib.zeros(3), lib.ones(3), lib.full((3,), 0.5).double()),
    "inplace-end-double": lambda lib: lib.zeros(3).lerp_(lib.ones(3, dtype=lib.float64), 0.5),
    "method-end-double": lambda lib: lib.zeros(3).lerp(lib.ones(3, dtype=lib.float64), 0.5),
    "int-end-long": lambda lib: lib.lerp(lib.zeros(3, dtype=lib.int32), lib.ones(3).long(), 0.5),
    "long-scalar-weight": lambda lib: lib.lerp(lib.zeros(3).long(), lib.ones(3).long(), 0.5),
    "long-tensor-weight": lambda lib: lib.lerp(
        lib.zeros(3).long(), lib.ones(3).long(), lib.ones(3).long()
    ),
}


@pytest.mark.parametrize("name", sorted(LERP))
def test_lerp_refuses_mixed_dtypes_like_pytorch(name):
    _assert_same_error(LERP[name])


LERP_OK = {
    "0d-double-weight": lambda lib: lib.lerp(lib.zeros(3), lib.ones(3), lib.tensor(0.25).double()),
    "half": lambda lib: lib.lerp(lib.zeros(3).half(), lib.ones(3).half(), 0.5),
    "tensor-weight": lambda lib: lib.lerp(lib.zeros(3), lib.ones(3), lib.full((3,), 0.75)),
}


@pytest.mark.parametrize("name", sorted(LERP_OK))
def test_lerp_accepts_what_pytorch_accepts(name):
    assert_close(LERP_OK[name](kiln), LERP_OK[name](torch))


TENSORS_ONLY = {
    f"{name}-{form}": (lambda lib, name=name, call=call: call(lib, name))
    for name in ("atan2", "hypot", "maximum", "minimum", "fmax", "fmin")
    for form, call in {
        "number-other": lambda lib, n: getattr(lib, n)(lib.ones(3), 2.0),
        "number-input": lambda lib, n: getattr(lib, n)(2.0, lib.ones(3)),
        "in-place-number": lambda lib, n: getattr(lib.ones(3), n + "_")(2),
    }.items()
    if form != "in-place-number" or name in ("atan2", "hypot")  # (PyTorch has no maximum_)
}


@pytest.mark.parametrize("name", sorted(TENSORS_ONLY))
def test_tensor_only_binary_ops_refuse_python_numbers(name):
    """PyTorch's signatures of atan2 and hypot take tensors only (a TypeError, not a result)."""
    ours, theirs = _outcome(kiln, TENSORS_ONLY[name]), _outcome(torch, TENSORS_ONLY[name])
    assert ours[0] is None and theirs[0] is None
    assert ours[1][0] == theirs[1][0] == "TypeError"
    assert "must be Tensor, not" in ours[1][1]


BINARY_DTYPES = {
    "fmod-bool": lambda lib: lib.fmod(lib.ones(2, dtype=lib.bool), lib.ones(2, dtype=lib.bool)),
    "remainder-bool": lambda lib: lib.remainder(
        lib.ones(2, dtype=lib.bool), lib.ones(2, dtype=lib.bool)
    ),
    "remainder-bool-in-place": lambda lib: lib.ones(2, dtype=lib.bool).remainder_(
        lib.ones(2, dtype=lib.bool)
    ),
    "hypot-long": lambda lib: lib.hypot(lib.ones(2, dtype=lib.long), lib.ones(2, dtype=lib.long)),
    "hypot-bool": lambda lib: lib.hypot(lib.ones(2, dtype=lib.bool), lib.ones(2, dtype=lib.bool)),
}
BINARY_DTYPES_OK = {
    "fmod-bool-by-int": lambda lib: lib.fmod(lib.ones(2, dtype=lib.bool), 2),
    "remainder-bool-by-int": lambda lib: lib.remainder(lib.ones(2, dtype=lib.bool), 2),
    "hypot-long-float": lambda lib: lib.hypot(lib.ones(2, dtype=lib.long), lib.full((2,), 2.0)),
    "hypot-half": lambda lib: lib.hypot(lib.ones(2).half(), lib.ones(2).half()),
}


@pytest.mark.parametrize("name", sorted(BINARY_DTYPES))
def test_binary_ops_refuse_the_dtypes_pytorch_has_no_kernel_for(name):
    """These used to return values computed in another type (hypot of longs held floats)."""
    _assert_same_error(BINARY_DTYPES[name])


@pytest.mark.parametrize("name", sorted(BINARY_DTYPES_OK))
def test_binary_ops_promote_out_of_the_refused_dtypes_like_pytorch(name):
    ours, theirs = BINARY_DTYPES_OK[name](kiln), BINARY_DTYPES_OK[name](torch)
    assert str(ours.dtype).replace("kiln.", "torch.") == str(theirs.dtype)
    assert_close(ours, theirs)


# ------------------------------------------------------------------------------ meta tensors


def _m(lib):
    return lib.zeros(3, device="meta")


META_ERRORS = {
    "meta-plus-cpu": lambda lib: _m(lib) + lib.ones(3),
    "cpu-plus-meta": lambda lib: lib.ones(3) - _m(lib),
    "meta-0d-times-cpu": lambda lib: lib.zeros((), device="meta") * lib.ones(3),
    "where": lambda lib: lib.where(_m(lib) > 0, lib.ones(3), _m(lib)),
    "where-cpu-0d-condition": lambda lib: lib.where(lib.tensor(True), lib.ones(3), _m(lib)),
    "cat": lambda lib: lib.cat([_m(lib), lib.ones(3)]),
    "cat-cpu-first": lambda lib: lib.cat([lib.ones(3), _m(lib)]),
    "stack": lambda lib: lib.stack([_m(lib), lib.ones(3)]),
    "lerp": lambda lib: lib.lerp(_m(lib), lib.ones(3), 0.5),
    "addcmul": lambda lib: lib.addcmul(_m(lib), lib.ones(3), lib.ones(3)),
    "clamp": lambda lib: lib.clamp(_m(lib), lib.ones(3), lib.ones(3)),
    "maximum": lambda lib: lib.maximum(_m(lib), lib.ones(3)),
    "eq": lambda lib: _m(lib) == lib.ones(3),
    "atan2": lambda lib: lib.atan2(_m(lib), lib.ones(3)),
    "pow": lambda lib: lib.pow(_m(lib), lib.ones(3)),
    "isclose": lambda lib: lib.isclose(_m(lib), lib.ones(3)),
}


@pytest.mark.parametrize("name", sorted(META_ERRORS))
def test_meta_and_cpu_tensors_do_not_mix(name):
    _assert_same_error(META_ERRORS[name])


META_OK = {
    "cpu-scalar-tensor-first": lambda lib: lib.tensor(1.0) + _m(lib),
    "cpu-scalar-tensor-second": lambda lib: _m(lib) * lib.tensor(2.0),
    "python-number": lambda lib: _m(lib) + 1,
    "inplace-from-cpu": lambda lib: _m(lib).add_(lib.ones(3)),
    "masked_fill-cpu-0d-mask": lambda lib: _m(lib).masked_fill(lib.tensor(True), 1.0),
}


@pytest.mark.parametrize("name", sorted(META_OK))
def test_cpu_scalars_join_meta_computations(name):
    k, t = META_OK[name](kiln), META_OK[name](torch)
    assert (k.device.type, tuple(k.shape)) == (t.device.type, tuple(t.shape))


# ------------------------------------------------------------------------------ interpolate


def _interp(shape, **kwargs):
    return lambda lib: lib.nn.functional.interpolate(lib.ones(*shape), **kwargs)


INTERPOLATE_ERRORS = {
    "nearest-size0": _interp((1, 1, 4), size=0),
    "linear-size0": _interp((1, 1, 4), size=0, mode="linear"),
    "nearest-exact-size0": _interp((1, 1, 4), size=0, mode="nearest-exact"),
    "negative-size": _interp((1, 1, 4), size=-1),
    "scale-to-zero": _interp((1, 1, 4), scale_factor=0.1, mode="linear"),
    "input-width0": _interp((1, 1, 0), size=3),
    "bilinear-width0": _interp((1, 1, 4, 4), size=(2, 0), mode="bilinear"),
    "nearest-height0": _interp((1, 1, 4, 4), size=(0, 2)),
    "bicubic-width0": _interp((1, 1, 4, 4), size=(2, 0), mode="bicubic"),
    "trilinear-height0": _interp((1, 1, 4, 4, 4), size=(2, 0, 2), mode="trilinear"),
    "no-channels": _interp((1, 0, 4), size=3),
    "no-channels-bilinear": _interp((1, 0, 4, 4), size=(3, 3), mode="bilinear"),
    "upsample-module": lambda lib: lib.nn.Upsample(size=0)(lib.ones(1, 1, 4)),
}


@pytest.mark.parametrize("name", sorted(INTERPOLATE_ERRORS))
def test_interpolate_refuses_empty_sizes_like_pytorch(name):
    _assert_same_error(INTERPOLATE_ERRORS[name])


INTERPOLATE_OK = {
    "empty-batch": _interp((0, 1, 4), size=3),
    "empty-batch-bilinear": _interp((0, 2, 4, 4), size=(3, 3), mode="bilinear"),
    "area-to-zero": _interp((1, 1, 4), size=0, mode="area"),
    "area-no-channels": _interp((1, 0, 4), size=3, mode="area"),
    "adaptive-max-to-zero": lambda lib: lib.nn.functional.adaptive_max_pool2d(
        lib.ones(1, 1, 4, 4), (0, 2)
    ),
}


@pytest.mark.parametrize("name", sorted(INTERPOLATE_OK))
def test_resampling_to_and_from_empty_shapes_matches_pytorch(name):
    assert_close(INTERPOLATE_OK[name](kiln), INTERPOLATE_OK[name](torch))


# ------------------------------------------------------------------------------ permute / movedim


def _m23(lib):
    return lib.zeros(2, 3)


PERMUTE_ERRORS = {
    "too-few-dims": lambda lib: _m23(lib).permute(0),
    "duplicate-dims": lambda lib: _m23(lib).permute(0, 0),
    "too-many-dims": lambda lib: _m23(lib).permute(0, 1, 2),
    "too-many-dims-list": lambda lib: _m23(lib).permute([1, 0, 0]),
    "out-of-range": lambda lib: _m23(lib).permute(2, 0),
    "negative-out-of-range": lambda lib: _m23(lib).permute(-3, 0),
    "function": lambda lib: lib.permute(_m23(lib), (0,)),
    "scalar-given-a-dim": lambda lib: lib.tensor(1.0).permute(0),
    "no-dims": lambda lib: lib.tensor(1.0).permute(),
    "movedim-repeated-source": lambda lib: lib.zeros(2, 3, 4).movedim((0, 0), (0, 1)),
    "movedim-repeated-negative": lambda lib: lib.zeros(2, 3, 4).movedim((0, -3), (0, 1)),
    "movedim-repeated-destination": lambda lib: lib.zeros(2, 3, 4).movedim((0, 1), (2, 2)),
    "movedim-lengths-differ": lambda lib: lib.zeros(2, 3, 4).movedim((0,), (0, 1)),
    "movedim-out-of-range": lambda lib: lib.zeros(2, 3, 4).movedim(3, 0),
    "reshape-negative": lambda lib: _m23(lib).reshape(2, -3),
    # the last mismatching dim is named, as PyTorch walks the dims from the end
    "expand-two-mismatches": lambda lib: _m23(lib).expand(4, 2),
    "expand-with-a-new-dim": lambda lib: _m23(lib).expand(5, 4, 2),
    "expand-negative-new-dim": lambda lib: _m23(lib).expand(-1, 2, 3),
}


@pytest.mark.parametrize("name", sorted(PERMUTE_ERRORS))
def test_permute_argument_errors_match_pytorch(name):
    _assert_same_error(PERMUTE_ERRORS[name])


def test_permute_of_a_scalar_with_no_dims_is_allowed():
    assert kiln.tensor(1.0).permute(()).shape == torch.tensor(1.0).permute(()).shape


# ------------------------------------------------------------------------------ factory sizes

BIG = 2**62

FACTORY_ERRORS = {
    "zeros-overflow": lambda lib: lib.zeros(BIG),
    "zeros-overflow-2d": lambda lib: lib.zeros(2**40, 2**40),
    "zeros-overflow-bool": lambda lib: lib.zeros(BIG, 4, dtype=lib.bool),
    "empty-overflow": lambda lib: lib.empty(BIG),
    "empty-overflow-int8": lambda lib: lib.empty(BIG, 2, dtype=lib.int8),
    "ones-overflow": lambda lib: lib.ones(2, BIG),
    "full-overflow": lambda lib: lib.full((2**61, 8), 1.0),
    "randn-overflow": lambda lib: lib.randn(BIG),
    "rand-overflow": lambda lib: lib.rand(2**40, 2**40),
    "randint-overflow": lambda lib: lib.randint(0, 5, (BIG,)),
    "randperm-overflow": lambda lib: lib.randperm(BIG),
    "arange-overflow": lambda lib: lib.arange(0, BIG),
    "linspace-overflow": lambda lib: lib.linspace(0, 1, BIG),
    "empty_strided-overflow": lambda lib: lib.empty_strided((BIG,), (1,)),
    "new_zeros-overflow": lambda lib: lib.zeros(2).new_zeros((BIG,)),
    "new_empty-overflow": lambda lib: lib.zeros(2).new_empty(BIG),
    "meta-overflow": lambda lib: lib.zeros(BIG, device="meta"),
    "eye-overflow": lambda lib: lib.eye(2**31),
    "eye-numel-overflow": lambda lib: lib.eye(3, BIG),
    "zeros-beyond-int64": lambda lib: lib.zeros(2**63),
    "ones-beyond-int64": lambda lib: lib.ones((2**64,)),
    "zeros-below-int64": lambda lib: lib.zeros(-(2**63) - 1),
    "zeros-negative": lambda lib: lib.zeros(2, -1),
    "zeros-negative-before-overflow": lambda lib: lib.zeros(-1, BIG),
    "ones-negative": lambda lib: lib.ones(-3),
    "empty-negative": lambda lib: lib.empty(2, -1),
    "full-negative": lambda lib: lib.full((2, -1), 1.0),
    "randn-negative": lambda lib: lib.randn(-3),
    "randint-negative": lambda lib: lib.randint(0, 5, (-2,)),
    "randperm-negative": lambda lib: lib.randperm(-1),
    "new_zeros-negative": lambda lib: lib.zeros(2).new_zeros((-1,)),
    "eye-negative": lambda lib: lib.eye(-1),
    "eye-negative-columns": lambda lib: lib.eye(3, -1),
}


@pytest.mark.parametrize("name", sorted(FACTORY_ERRORS))
def test_factories_refuse_sizes_like_pytorch(name):
    _assert_same_error(FACTORY_ERRORS[name])


def test_random_factories_refuse_before_advancing_the_generator():
    kiln.manual_seed(0)
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        kiln.randn(BIG)
    after_failure = kiln.rand(3)
    kiln.manual_seed(0)
    assert_close(after_failure, kiln.rand(3))


# ------------------------------------------------------------------------------ interpolate: NaN/inf

# (mode, input shape, output size): sizes that grow, shrink and keep a dim (PyTorch copies a
# dim that keeps its size in the linear modes, so a neighbour's inf * 0 does not reach it)
INTERPOLATE_SPECIAL = [
    ("linear", (2, 3, 8), (5,)),
    ("linear", (2, 3, 8), (13,)),
    ("linear", (2, 3, 8), (8,)),
    ("bilinear", (1, 2, 4, 5), (7, 6)),
    ("bilinear", (1, 2, 4, 5), (4, 9)),
    ("bilinear", (1, 2, 4, 5), (3, 2)),
    ("bicubic", (1, 2, 4, 5), (7, 6)),
    ("bicubic", (1, 2, 4, 5), (4, 5)),
    ("trilinear", (1, 1, 3, 4, 5), (5, 4, 7)),
]


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode,shape,size", INTERPOLATE_SPECIAL)
def test_interpolate_spreads_nan_and_inf_like_pytorch(mode, shape, size, align_corners):
    """A NaN/inf input reaches only the outputs whose taps read it (each tap's weight multiplies
    it, 0 included), in the values and in the gradient; kiln once contracted with a dense weight
    matrix, so one NaN made whole rows NaN. Compiled equals eager."""
    rng = np.random.default_rng(len(shape) * 10 + size[0])
    values = rng.normal(size=shape).astype(np.float32)
    flat = values.reshape(-1)
    flat[rng.choice(flat.size, 3, replace=False)] = [NAN, INF, -INF]
    upstream = None

    def run(lib, fn=None):
        nonlocal upstream
        x = lib.from_numpy(values.copy()).requires_grad_(True)
        out = (fn or interpolate(lib))(x)
        if upstream is None:
            upstream = rng.normal(size=tuple(out.shape)).astype(np.float32)
        out.backward(lib.from_numpy(upstream.copy()))
        return out.detach(), x.grad

    def interpolate(lib):
        return lambda x: lib.nn.functional.interpolate(
            x, size=size, mode=mode, align_corners=align_corners
        )

    expected = run(torch)
    eager = run(kiln)
    assert_close(eager, expected)
    compiled = run(kiln, kiln.compile(interpolate(kiln)))
    assert_close(compiled, eager)


@needs_torch
def test_compiled_einsum_with_a_permuted_result_reshaped_compiles_and_matches_torch():
    """einsum's result is contiguous eagerly; its decomposition must give the same strides, or
    a ``reshape`` captured as a ``view`` fails when the graph is traced (and the compile fell
    back to eager with a warning)."""
    import warnings

    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((6, 5)).astype(np.float32)
    v_np = rng.standard_normal((3, 5, 4)).astype(np.float32)

    def f(lib, a, v):
        return (lib.einsum("ik,jkd->jid", a, v).reshape(6, -1) ** 2).sum()

    a, v = kiln.tensor(a_np, requires_grad=True), kiln.tensor(v_np, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = kiln.compile(lambda a, v: f(kiln, a, v))(a, v)
        out.backward()
    ta, tv = torch.tensor(a_np, requires_grad=True), torch.tensor(v_np, requires_grad=True)
    expected = f(torch, ta, tv)
    expected.backward()
    np.testing.assert_allclose(out.item(), expected.item(), rtol=1e-5)
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-4, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("equation", ["ij,jk->ik", "bij,bjk->bik", "ij,ij->i", "i,j->ij"])
def test_einsum_gradients_of_complex_operands_match_torch(equation):
    """A holomorphic op's gradient is conjugated (PyTorch's convention) for every operand,
    einsum's list of operands included."""
    rng = np.random.default_rng(3)
    shapes = {
        "ij,jk->ik": [(2, 3), (3, 4)],
        "bij,bjk->bik": [(2, 2, 3), (2, 3, 2)],
        "ij,ij->i": [(3, 4), (3, 4)],
        "i,j->ij": [(3,), (4,)],
    }[equation]
    data = [rng.standard_normal(s) + 1j * rng.standard_normal(s) for s in shapes]
    ours = [kiln.tensor(d.astype(np.complex64), requires_grad=True) for d in data]
    theirs = [torch.tensor(d.astype(np.complex64), requires_grad=True) for d in data]
    (kiln.einsum(equation, *ours) * (1 + 2j)).real.sum().backward()
    (torch.einsum(equation, *theirs) * (1 + 2j)).real.sum().backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------ number conversions

NUMBER_ERRORS = {
    "clamp-uint8-above-range": lambda lib: lib.tensor([0, 3, 255], dtype=lib.uint8).clamp(-5, 300),
    "clamp-int8-both-out": lambda lib: lib.tensor([1, -2], dtype=lib.int8).clamp(-200, 200),
    "pad-uint8-negative-float": lambda lib: lib.nn.functional.pad(
        lib.tensor([1, 3], dtype=lib.uint8), (1, 1), value=-1
    ),
    "hardtanh-uint8-negative-limits": lambda lib: lib.nn.functional.hardtanh(
        lib.tensor([0, 3], dtype=lib.uint8), -1.5, 2.7
    ),
    "hardtanh-min-above-max": lambda lib: lib.nn.functional.hardtanh(lib.ones(2), 1.0, 0.0),
    "shift-of-bools": lambda lib: lib.bitwise_left_shift(
        lib.tensor([True, False]), lib.tensor([True, True])
    ),
}


@pytest.mark.parametrize("name", list(NUMBER_ERRORS))
def test_numbers_out_of_a_type_raise_like_pytorch(name):
    _assert_same_error(NUMBER_ERRORS[name])


NUMBER_OK = {
    "clamp-uint8-negative-wraps": lambda lib: lib.tensor([0, 3, 255], dtype=lib.uint8).clamp(-5),
    "index-fill-uint8-minus-one": lambda lib: lib.tensor([1, 2], dtype=lib.uint8).index_fill(
        0, lib.tensor([0]), -1
    ),
    "hardtanh-ints-truncate-limits": lambda lib: lib.nn.functional.hardtanh(
        lib.tensor([-3, 0, 1, 5]), -1.5, 2.7
    ),
    "relu6-ints": lambda lib: lib.nn.functional.relu6(lib.tensor([-3, 4, 9])),
    "erfinv-0d": lambda lib: lib.erfinv(lib.tensor(0.7)),
    "erf-0d-float64": lambda lib: lib.erf(lib.tensor(0.7, dtype=lib.float64)),
}


@pytest.mark.parametrize("name", list(NUMBER_OK))
def test_number_conversions_pytorch_accepts(name):
    assert_close(NUMBER_OK[name](kiln), NUMBER_OK[name](torch))


# ------------------------------------------------------------------------------ integer images


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("how", ["up2", "down-odd", "size-corners", "antialias"])
def test_uint8_images_resample_like_pytorch(mode, how):
    # PyTorch filters uint8 images in two rounded passes with fixed-point weights: kiln's float
    # weights may land one step away, never further
    x = np.random.default_rng(5).integers(0, 256, (2, 3, 9, 11)).astype(np.uint8)
    kwargs = {
        "up2": {"scale_factor": 2},
        "down-odd": {"scale_factor": (0.7, 1.3)},
        "size-corners": {"size": (5, 4), "align_corners": True},
        "antialias": {"size": (4, 5), "antialias": True},
    }[how]
    got = kiln.nn.functional.interpolate(kiln.tensor(x), mode=mode, **kwargs)
    want = torch.nn.functional.interpolate(torch.tensor(x), mode=mode, **kwargs)
    assert got.dtype == kiln.uint8 and tuple(got.shape) == tuple(want.shape)
    step = np.abs(got.numpy().astype(int) - want.numpy().astype(int))
    assert step.max() <= 1 and (step > 0).mean() < 0.25


INTEGER_RESAMPLING = {
    "linear-uint8": lambda lib: lib.nn.functional.interpolate(
        lib.zeros(1, 1, 4, dtype=lib.uint8), scale_factor=2, mode="linear"
    ),
    "bilinear-int64": lambda lib: lib.nn.functional.interpolate(
        lib.zeros(1, 2, 4, 4, dtype=lib.int64), scale_factor=2, mode="bilinear"
    ),
    "bicubic-int32": lambda lib: lib.nn.functional.interpolate(
        lib.zeros(1, 2, 4, 4, dtype=lib.int32), scale_factor=2, mode="bicubic"
    ),
    "area-uint8": lambda lib: lib.nn.functional.interpolate(
        lib.zeros(1, 2, 4, 4, dtype=lib.uint8), scale_factor=0.5, mode="area"
    ),
}


@pytest.mark.parametrize("name", list(INTEGER_RESAMPLING))
def test_integer_resampling_pytorch_has_no_kernel_for(name):
    _assert_same_error(INTEGER_RESAMPLING[name])


# ------------------------------------------------------------------------------ NaN-steered searches


def test_mode_replays_pytorchs_sort_with_nans_and_long_tied_rows():
    rng = np.random.default_rng(11)
    for n in (4, 16, 17, 40):
        a = rng.integers(0, 4, (6, n)).astype(np.float32)
        a[::2][rng.random((3, n)) < 0.3] = np.nan
        got, want = kiln.mode(kiln.tensor(a), 1), torch.mode(torch.tensor(a), 1)
        assert_close(got.values, want.values, equal_nan=True)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_bisects_like_pytorch_around_nans(right, compiled):
    rng = np.random.default_rng(12)
    search = kiln.searchsorted
    if compiled:  # the decomposition bisects as the kernel does
        search = kiln.compile(lambda s, v, right: kiln.searchsorted(s, v, right=right))
    for n in (1, 3, 8, 21):
        seq = np.sort(rng.integers(0, 6, (2, n)).astype(np.float32), 1)
        seq[1, n // 2 :] = np.nan  # NaNs sorted last, as sort leaves them
        values = rng.integers(-1, 8, (2, 6)).astype(np.float32)
        values[0, :2] = (np.nan, np.inf)
        for s, v in ((seq, values), (seq[1], values[0])):
            got = search(kiln.tensor(s), kiln.tensor(v), right=right)
            want = torch.searchsorted(torch.tensor(s), torch.tensor(v), right=right)
            np.testing.assert_array_equal(got.numpy(), want.numpy())


SMALL_FIXES = {
    "index-select-of-a-scalar": lambda lib: lib.index_select(lib.tensor(3.0), 0, lib.tensor([0])),
    "float-power-complex": lambda lib: lib.float_power(
        lib.tensor([1 + 1j, -2 + 0.5j]), lib.tensor([0.5 + 0j, 2 - 1j])
    ),
    "float-power-complex-exponent": lambda lib: lib.float_power(lib.tensor([1.0, 2.0]), 1 + 2j),
}


@pytest.mark.parametrize("name", list(SMALL_FIXES))
def test_small_results_match_pytorch(name):
    got, want = SMALL_FIXES[name](kiln), SMALL_FIXES[name](torch)
    assert tuple(got.shape) == tuple(want.shape)
    assert_close(got, want)


# ------------------------------------------------------------------------------ calling conventions


@pytest.mark.parametrize(
    "op", ["eq", "lt", "floor_divide", "pow", "logaddexp", "heaviside", "nextafter", "fmod"]
)
def test_shapes_that_do_not_broadcast_raise_pytorchs_runtime_error(op):
    _assert_same_error(lambda lib: getattr(lib, op)(lib.ones(3), lib.ones(4)))


INPUT_KEYWORD = {
    "sum": lambda lib, x: lib.sum(input=x, dim=1),
    "clamp": lambda lib, x: lib.clamp(input=x, min=0),
    "matmul": lambda lib, x: lib.matmul(input=x, other=x),
    "exp": lambda lib, x: lib.exp(input=x),
    "mul": lambda lib, x: lib.mul(input=x, other=2),
    "softmax": lambda lib, x: lib.softmax(input=x, dim=0),
    "transpose": lambda lib, x: lib.transpose(input=x, dim0=0, dim1=1),
}


@pytest.mark.parametrize("name", list(INPUT_KEYWORD))
def test_the_tensor_argument_may_be_named_input(name):
    values = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)
    got = INPUT_KEYWORD[name](kiln, kiln.tensor(values))
    assert_close(got, INPUT_KEYWORD[name](torch, torch.tensor(values)))


FLOAT_ONLY_ACTIVATIONS = {
    name: (lambda f: lambda lib: getattr(lib.nn.functional, f)(lib.tensor([1, 2, 3, 4])))(name)
    for name in (
        "elu", "selu", "celu", "gelu", "silu", "mish", "softplus", "leaky_relu", "hardsigmoid",
        "hardswish", "hardshrink", "glu",
    )
}  # fmt: skip


@pytest.mark.parametrize("name", list(FLOAT_ONLY_ACTIVATIONS))
def test_float_only_activations_refuse_integers_like_pytorch(name):
    _assert_same_error(FLOAT_ONLY_ACTIVATIONS[name])


INTEGERS_REFUSED = {
    "frac": lambda lib: lib.frac(lib.tensor([1, 2, 3])),
    "addcdiv-integer-quotient": lambda lib: lib.addcdiv(
        lib.ones(3), lib.tensor([1, 2, 3]), lib.tensor([2, 2, 2])
    ),
    "round-decimals": lambda lib: lib.round(lib.tensor([1, 2]), decimals=1),
}


@pytest.mark.parametrize("name", list(INTEGERS_REFUSED))
def test_integer_inputs_refused_like_pytorch(name):
    _assert_same_error(INTEGERS_REFUSED[name])


# ------------------------------------------------------------------------------ sweep findings


def test_nextafter_gradient_and_node_follow_torch():
    """PyTorch differentiates nextafter as the identity in its input where it moves (0 where the
    two are equal) and 0 in the direction."""
    results = []
    for lib in (kiln, torch):
        a = lib.tensor([1.0, 2.0, -0.0, 4.0, 3.0], requires_grad=True)
        b = lib.tensor([[2.0, 0.0, 0.0, 4.0, NAN]], requires_grad=True)
        y = lib.nextafter(a, b)
        (y * lib.tensor([[3.0, 5.0, 7.0, 11.0, 13.0]])).sum().backward()
        name = y.grad_fn.name() if lib is kiln else type(y.grad_fn).__name__
        results.append((y.detach(), a.grad, b.grad, name))
    assert_close(results[0][:3], results[1][:3])
    assert results[0][3] == results[1][3]


def test_sinc_of_complex_numbers_stays_complex():
    data = [0.5 + 1j, 1e-6 + 0j, 2 - 1j, 0j]
    got = kiln.sinc(kiln.tensor(data, dtype=kiln.complex64))
    want = torch.sinc(torch.tensor(data, dtype=torch.complex64))
    assert got.dtype is kiln.complex64
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_ldexp_records_its_own_node():
    for lib in (kiln, torch):
        y = lib.ldexp(lib.ones(2, requires_grad=True), lib.tensor([1, 2]))
        name = y.grad_fn.name() if lib is kiln else type(y.grad_fn).__name__
        assert name == "LdexpBackward0"


@pytest.mark.parametrize("mode", ["eager", "static", "dynamic"])
def test_ldexp_of_an_integer_exponent_is_exact_as_torchs(mode):
    """PyTorch runs std::ldexp for a float input and an integer exponent: exact where the
    power alone would overflow the input's dtype (2**20 in float16, 2**130 in float32), 0 for
    0 times any power, the exponent read as a C int (an int64 wraps); a float exponent forms
    the power in its own dtype (2.0**200 overflows float32 before the float64 product)."""
    cases = [
        (lambda lib: lib.tensor([2.0**-10, 3.0]).half(), lambda lib: lib.tensor([20, -30])),
        (
            lambda lib: lib.tensor([2.0**-10, 0.0, 3.0]),
            lambda lib: lib.tensor([130, 10**12, -(10**12)]),
        ),
        (lambda lib: lib.tensor([2.0**-1000], dtype=lib.float64), lambda lib: lib.tensor([1500])),
        (lambda lib: lib.ones(2, dtype=lib.float64), lambda lib: lib.tensor([200.0, -3.0])),
    ]
    fn = kiln.ldexp if mode == "eager" else kiln.compile(kiln.ldexp, dynamic=mode == "dynamic")
    for x, e in cases:
        got, want = fn(x(kiln), e(kiln)), torch.ldexp(x(torch), e(torch))
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_array_equal(got.double().numpy(), want.double().numpy())


_COMPLEX_REFUSERS = {
    "lgamma": lambda lib, x: lib.lgamma(x),
    "digamma": lambda lib, x: lib.digamma(x),
    "i0": lambda lib, x: lib.i0(x),
    "special.i0e": lambda lib, x: lib.special.i0e(x),
    "special.i1": lambda lib, x: lib.special.i1(x),
    "special.ndtri": lambda lib, x: lib.special.ndtri(x),
    "special.erfcx": lambda lib, x: lib.special.erfcx(x),
    "special.entr": lambda lib, x: lib.special.entr(x),
    "polygamma-1": lambda lib, x: lib.polygamma(1, x),
    "polygamma-3": lambda lib, x: lib.polygamma(3, x),
    "mvlgamma": lambda lib, x: lib.mvlgamma(x, 2),
}


@pytest.mark.parametrize("name", list(_COMPLEX_REFUSERS))
def test_real_special_functions_refuse_complex_inputs(name):
    """PyTorch's CPU kernels of these functions have no complex types: they raise, where numpy
    kernels would drop the imaginary part (a silent wrong answer)."""
    fn = _COMPLEX_REFUSERS[name]
    outcomes = [
        _outcome(lib, lambda lib: fn(lib, lib.tensor([1 + 1j, 2.0 + 0j]))) for lib in (kiln, torch)
    ]
    assert outcomes[0][1] is not None and outcomes[0][1] == outcomes[1][1]


def test_scatter_reduce_takes_max_and_min_for_amax_and_amin():
    """PyTorch's forward takes "max" and "min" (its backward then refuses them; kiln's
    differentiates them as "amax" and "amin")."""
    results = []
    for lib in (kiln, torch):
        x = lib.zeros(4)
        index = lib.tensor([0, 0, 3])
        src = lib.tensor([1.0, 2.0, -5.0])
        out = lib.scatter_reduce(x, 0, index, src, "max") + x.scatter_reduce(0, index, src, "min")
        inplace = lib.ones(4).scatter_reduce_(0, index, src, "min", include_self=False)
        results.append((out, inplace))
    assert_close(results[0], results[1])
    grads = []
    for low, high in (("min", "max"), ("amin", "amax")):
        src = kiln.tensor([1.0, 2.0, -5.0], requires_grad=True)
        x = kiln.zeros(4)
        (x.scatter_reduce(0, kiln.tensor([0, 0, 3]), src, high) * 2).sum().backward()
        x.scatter_reduce(0, kiln.tensor([0, 0, 3]), src, low).sum().backward()
        grads.append(src.grad)
    assert_close(grads[0], grads[1])


# ------------------------------------------------------------------------------ out= dtypes

# ops whose out= must have the result's dtype in PyTorch (others cast into a wider out)
EXACT_OUT_OPS = ["abs", "neg", "floor", "ceil", "trunc", "frac", "sign", "sgn", "round"]


@pytest.mark.parametrize("out_dtype", ["float64", "float16"])
@pytest.mark.parametrize(
    "name", EXACT_OUT_OPS + ["conj_physical", "nan_to_num", "isposinf", "isneginf", "signbit"]
)
def test_out_of_another_dtype_is_refused_where_pytorch_refuses_it(name, out_dtype):
    def fn(lib):
        out = lib.empty(0, dtype=getattr(lib, out_dtype))
        return getattr(lib, name)(lib.tensor([-1.5, 2.5]), out=out)

    _assert_same_error(fn, match_message=False)


@pytest.mark.parametrize(
    "fn",
    [
        lambda lib: lib.bitwise_not(lib.tensor([1, 2]), out=lib.empty(0, dtype=lib.int32)),
        lambda lib: lib.abs(lib.tensor([1, -2]), out=lib.empty(0)),
    ],
    ids=["bitwise_not-int32", "abs-int-into-float"],
)
def test_integer_out_of_another_dtype_is_refused_too(fn):
    _assert_same_error(fn, match_message=False)


def test_out_of_the_same_dtype_and_wider_casting_ops_still_write():
    for lib in (kiln, torch):
        same, wider = lib.empty(0), lib.empty(0, dtype=lib.float64)
        lib.floor(lib.tensor([-1.5, 2.5]), out=same)
        lib.sin(lib.tensor([0.5]), out=wider)
        assert same.tolist() == [-2.0, 2.0] and wider.dtype == lib.float64


NARROW_ERRORS = {
    "start-past-end": lambda lib: lib.ones(10).narrow(0, 11, 0),
    "start-before-begin": lambda lib: lib.ones(10).narrow(0, -11, 1),
    "too-long": lambda lib: lib.ones(10).narrow(0, 5, 6),
    "negative-length": lambda lib: lib.ones(10).narrow(0, 3, -1),
}


@pytest.mark.parametrize("name", sorted(NARROW_ERRORS))
def test_narrow_argument_errors_match_pytorch(name):
    _assert_same_error(NARROW_ERRORS[name])


# Python complex numbers for a real dtype: Python's TypeError (bool takes their truth), not
# numpy's silent loss of the imaginary part
COMPLEX_NUMBERS_FOR_REAL_DTYPES = {
    "tensor-float64": lambda lib: lib.tensor([1j, 2], dtype=lib.float64),
    "tensor-scalar-float32": lambda lib: lib.tensor(1 + 1j, dtype=lib.float32),
    "as_tensor-int32": lambda lib: lib.as_tensor([[1 + 1j]], dtype=lib.int32),
    "asarray-float16": lambda lib: lib.asarray([2, 1j], dtype=lib.float16),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_NUMBERS_FOR_REAL_DTYPES))
def test_complex_numbers_for_a_real_dtype_are_refused(name):
    _assert_same_error(COMPLEX_NUMBERS_FOR_REAL_DTYPES[name])


# a complex fill value for a real tensor: PyTorch's checked Scalar conversion (a zero imaginary
# part converts)
COMPLEX_FILLS = {
    "masked_fill": lambda lib: lib.zeros(2).masked_fill(lib.tensor(True), 1j),
    "full": lambda lib: lib.full((2,), 1 - 1j, dtype=lib.float32),
    "fill_": lambda lib: lib.zeros(2, dtype=lib.int64).fill_(2j),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_FILLS))
def test_complex_fill_values_for_real_tensors_are_refused(name):
    _assert_same_error(COMPLEX_FILLS[name])


@pytest.mark.parametrize(
    "fn",
    [
        lambda lib: lib.full((2,), 2 + 0j, dtype=lib.float32),
        lambda lib: lib.zeros(3).masked_fill(lib.tensor([True, False, True]), -1 + 0j),
        lambda lib: lib.zeros(2, dtype=lib.bool).fill_(1j),
    ],
    ids=["full-real-complex", "masked_fill-real-complex", "fill_-bool"],
)
def test_complex_fill_values_that_convert_match_pytorch(fn):
    assert_close(fn(kiln), fn(torch))


def test_complex_numbers_for_bool_take_their_truth():
    assert kiln.tensor([1j, 0j], dtype=kiln.bool).tolist() == [True, False]
