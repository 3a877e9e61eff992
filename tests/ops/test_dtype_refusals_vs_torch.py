"""Inputs whose dtype PyTorch's CPU kernels refuse, or compute in a dtype of their own, compared
with PyTorch eagerly and compiled: kiln raises PyTorch's exception type (message naming the
dtype) where it computed before, and computes where PyTorch does.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.ops.dtype_sweep import assert_agrees_with_torch
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

_DTYPES = ("float16", "bfloat16", "float64", "int64", "int16", "uint8", "bool", "complex64")


def _operands(dtype: str, *shapes, low: int = -3):
    """Tensors of ``shapes`` in ``dtype``, values in [low, 3] (from 0 for uint8)."""
    rng = np.random.default_rng(len(shapes))
    low = 0 if dtype == "uint8" else low
    arrays = [rng.integers(low, 4, size=s) + (0.25 if "float" in dtype else 0) for s in shapes]
    return lambda lib: tuple(lib.tensor(a).to(getattr(lib, dtype)) for a in arrays)


def _f(name: str, *args, **kwargs):
    return lambda lib, *xs: getattr(lib.nn.functional, name)(*xs, *args, **kwargs)


CASES = {
    "kl_div": (((3, 4), (3, 4)), _f("kl_div", reduction="sum")),
    "kl_div-log-target": (((3, 4), (3, 4)), _f("kl_div", reduction="none", log_target=True)),
    "soft_margin_loss": (((4,), (4,)), _f("soft_margin_loss")),
    "normalize": (((3, 4),), _f("normalize")),
    "cosine_similarity": (((2, 3, 4), (1, 3, 4)), _f("cosine_similarity", dim=-1)),
    "prelu": (((2, 3),), lambda lib, x: lib.nn.functional.prelu(x, x[0])),
    "prelu-float32-weight": (((3,),), lambda lib, x: lib.nn.functional.prelu(x, lib.ones(1))),
    "celu": (((3, 4),), _f("celu", alpha=2.0)),
    "glu": (((3, 4),), _f("glu")),
    "threshold": (((3, 5),), _f("threshold", 0.5, -2.0)),
    "threshold-int-value": (((3, 5),), _f("threshold", -0.5, -1)),
    "threshold-overflowing-value": (((3, 5),), _f("threshold", 1, 300)),
    "pdist-one-row": (((1, 3),), lambda lib, x: lib.pdist(x)),
    "pdist-functional-one-row": (((1, 3),), _f("pdist")),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shapes,call", list(CASES.values()), ids=list(CASES))
def test_ops_refuse_the_dtypes_pytorch_refuses(shapes, call, dtype):
    """kl_div refuses integer, bool and complex operands; soft_margin_loss refuses the integer
    result of its in-place exp; normalize and cosine_similarity refuse non-float
    dtypes; prelu, celu and glu have float kernels only (prelu refuses mixed dtypes first);
    threshold refuses bools and complex numbers and a value its dtype cannot hold, and
    truncates a float threshold for integers; pdist of one row runs no kernel, so 16-bit floats
    pass."""
    assert_agrees_with_torch(_operands(dtype, *shapes), call, compiled=True)


GAUSSIAN = {
    "gaussian_nll_loss": (((4,), (4,), (4,)), _f("gaussian_nll_loss", reduction="sum")),
    "gaussian_nll_loss-float-var": (((4,), (4,)), _f("gaussian_nll_loss", 1.5)),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shapes,call", list(GAUSSIAN.values()), ids=list(GAUSSIAN))
def test_gaussian_nll_loss_refuses_integer_variances(shapes, call, dtype):
    """PyTorch clamps a copy of var in place by a float eps: an integer or bool var is refused
    (its C type named); a number var times ones like the input is float32 for integer inputs.
    (Nonnegative variances: compiled code does not check their sign, a data-dependent check.)"""
    assert_agrees_with_torch(_operands(dtype, *shapes, low=0), call, compiled=True)


RESAMPLING = {
    "nearest-1d": ((2, 3, 5), {"scale_factor": 2}),
    "nearest-2d-size": ((2, 3, 5, 4), {"size": (7, 3)}),
    "nearest-exact-2d": ((2, 3, 5, 4), {"scale_factor": 1.5, "mode": "nearest-exact"}),
    "nearest-3d": ((1, 2, 3, 4, 2), {"scale_factor": (2, 1.5, 1)}),
    "linear": ((2, 3, 6), {"size": 4, "mode": "linear"}),
    "bilinear": ((1, 2, 5, 4), {"size": (3, 7), "mode": "bilinear"}),
    "bicubic-antialias": ((1, 2, 6, 6), {"size": (4, 3), "mode": "bicubic", "antialias": True}),
    "trilinear": ((1, 2, 3, 4, 2), {"scale_factor": 2, "mode": "trilinear"}),
    "area": ((1, 2, 6, 6), {"size": 3, "mode": "area"}),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shape,kwargs", list(RESAMPLING.values()), ids=list(RESAMPLING))
def test_interpolate_computes_the_dtypes_pytorchs_kernels_take(shape, kwargs, dtype):
    """Upsampling kernels take floats, and uint8 in the nearest, bilinear and bicubic modes
    (antialiased ones no 16-bit floats); other dtypes raise NotImplementedError naming PyTorch's
    kernel, whole-factor nearest upsampling (a repeat) included. (uint8 images are compared
    with low values: PyTorch's fixed-point weights can round a large one differently.)"""
    call = _f("interpolate", **kwargs)
    assert_agrees_with_torch(_operands(dtype, shape, low=0), call, compiled=True)


@pytest.mark.parametrize("kwargs", [{"size": 3}, {"scale_factor": 2}, {"size": (3, 4)}])
def test_interpolate_of_a_0d_input_raises_pytorchs_error(kwargs):
    """Without spatial dims the size arguments are checked first (a size list of the wrong
    length: ValueError), then NotImplementedError, as PyTorch's function does."""
    call = _f("interpolate", mode="bilinear", **kwargs)
    assert_agrees_with_torch(lambda lib: (lib.tensor(1.5),), call, compiled=True)


def _sorted(lib, x):
    return lib.sort(x.flatten())[0]


UNSORTED_KERNELS = {
    "searchsorted": (((5,), (2, 3)), lambda lib, s, v: lib.searchsorted(_sorted(lib, s), v)),
    "searchsorted-float-values": (
        ((5,),),
        lambda lib, s: lib.searchsorted(_sorted(lib, s), lib.tensor([0.5, 1.5])),
    ),
    "bucketize": (((2, 3), (4,)), lambda lib, v, b: lib.bucketize(v, _sorted(lib, b))),
    "topk": (((3, 4),), lambda lib, x: lib.topk(x, 2)),
    "trace": (((3, 3),), lambda lib, x: lib.trace(x)),
    "isin": (((3, 4), (5,)), lambda lib, x, t: lib.isin(x, t)),
    "isin-bool-number": (((3, 4),), lambda lib, x: lib.isin(x, True)),
    "isin-complex-number": (((3, 4),), lambda lib, x: lib.isin(x, 1j)),
    "nansum": (((3, 4),), lambda lib, x: lib.nansum(x, 1)),
    "nanmean": (((3, 4),), lambda lib, x: lib.nanmean(x)),
    "erfcx": (((3, 4),), lambda lib, x: lib.special.erfcx(x)),
    "ndtri": (((3, 4),), lambda lib, x: lib.special.ndtri(x)),
    "log_ndtr": (((3, 4),), lambda lib, x: lib.special.log_ndtr(x)),
    "zeta": (((3, 4), (3, 4)), lambda lib, x, q: lib.special.zeta(x, q)),
    "zeta-number": (((3, 4),), lambda lib, q: lib.special.zeta(2.0, q)),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shapes,call", list(UNSORTED_KERNELS.values()), ids=list(UNSORTED_KERNELS))
def test_sorting_and_special_ops_refuse_pytorchs_missing_kernels(shapes, call, dtype):
    """searchsorted/bucketize refuse a bool or complex common dtype, topk and trace bools, isin
    bool and complex operands (numbers too), nansum/nanmean complex inputs; erfcx, ndtri,
    log_ndtr and zeta have no 16-bit float kernels (zeta no complex one either)."""
    assert_agrees_with_torch(_operands(dtype, *shapes), call, compiled=True)


PADDINGS = {
    "reflect-1d": ((2, 3, 6), (2, 1), "reflect"),
    "replicate-2d-unbatched": ((3, 4, 5), (1, 2, 0, 1), "replicate"),
    "reflect-3d": ((1, 2, 3, 3, 3), (1, 1, 0, 1, 1, 0), "reflect"),
    "circular-1d": ((2, 3, 6), (2, 1), "circular"),
    "reflect-1d-input": ((6,), (1, 1), "reflect"),
    "replicate-0d": ((), (1, 1), "replicate"),
    "reflect-odd-padding": ((2, 3, 6), (1, 1, 1), "reflect"),
    "reflect-empty-channels": ((2, 0, 6), (1, 1), "reflect"),
    "replicate-empty-batch": ((0, 3, 6), (1, 1), "replicate"),
    "replicate-empty-unbatched": ((0, 6), (1, 1), "replicate"),
    "circular-empty-channels": ((2, 0, 6), (1, 1), "circular"),
}


@pytest.mark.parametrize("dtype", ("float32", "int64", "bool", "complex64"))
@pytest.mark.parametrize("shape,pad,mode", list(PADDINGS.values()), ids=list(PADDINGS))
def test_non_constant_padding_checks_as_pytorch(shape, pad, mode, dtype):
    """F.pad's checks in PyTorch's order: an odd padding length, more padding than twice the
    input's dims, an unsupported size for the dims (NotImplementedError), an empty dim besides
    the batch for reflection and replication, then their kernels' missing bool version."""
    call = _f("pad", pad, mode=mode)
    assert_agrees_with_torch(_operands(dtype, shape), call, compiled=True)


LOSSES_AND_SOFTMAX = {
    "mse_loss-weight-mean": (((3, 4), (3, 4), (3, 4)), _f("mse_loss", reduction="mean")),
    "mse_loss-weight-none": (
        ((3, 4), (3, 4), (3, 4)),
        lambda lib, x, t, w: lib.nn.functional.mse_loss(x, t, reduction="none", weight=w),
    ),
    "softmax-empty": (((0, 3),), _f("softmax", dim=0)),
    "log_softmax-empty": (((2, 0),), _f("log_softmax", dim=1)),
    "softmin-empty": (((0, 3),), _f("softmin", dim=1)),
    "softmax-to-float64": (
        ((3, 4),),
        lambda lib, x: lib.nn.functional.softmax(x, 1, dtype=lib.float64),
    ),
    "log_softmax-to-complex128": (
        ((3, 4),),
        lambda lib, x: lib.nn.functional.log_softmax(x, 1, dtype=lib.complex128),
    ),
    "cross_entropy-probabilities": (((3, 4), (3, 4)), _f("cross_entropy")),
    "cross_entropy-0d": (((), ()), _f("cross_entropy")),
    "cross_entropy-probabilities-ignore-index": (
        ((3, 4), (3, 4)),
        _f("cross_entropy", ignore_index=1),
    ),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize(
    "shapes,call", list(LOSSES_AND_SOFTMAX.values()), ids=list(LOSSES_AND_SOFTMAX)
)
def test_losses_and_softmax_follow_pytorchs_dtype_paths(shapes, call, dtype):
    """A weighted mse_loss is PyTorch's pow(input - target, 2) * weight in any dtype (was
    refused for integers and complex numbers); softmax of an empty input returns it whatever
    its dtype, and a ``dtype=`` argument casts first (a complex input to float64 computes);
    cross_entropy checks a probability target's dtype (and ignore_index) before any kernel,
    0-d inputs included."""
    assert_agrees_with_torch(_operands(dtype, *shapes), call, compiled=True)


def _index(*values):
    return lambda lib: lib.tensor(list(values))


INDEXING = {
    "index_select-0d-two-indices": (lambda lib, x: lib.index_select(x[0, 0], 0, _index(0, 0)(lib))),
    "index_select-empty-rows": (lambda lib, x: x[:0].index_select(0, _index(1)(lib))),
    "index_select-empty-rows-no-index": (lambda lib, x: x[:0].index_select(0, _index(1)(lib)[:0])),
    "embedding-0d-weight": (lambda lib, x: lib.nn.functional.embedding(_index(0)(lib), x[0, 0])),
    "embedding-empty-weight": (lambda lib, x: lib.nn.functional.embedding(_index(1)(lib), x[:0])),
    "embedding-max-norm-0d-weight": (
        lambda lib, x: lib.nn.functional.embedding(_index(0)(lib), x[0, 0], max_norm=1.0)
    ),
    "embedding-freq": (
        lambda lib, x: lib.nn.functional.embedding(_index(0, 2, 0)(lib), x, scale_grad_by_freq=True)
    ),
    "mv-0d-matrix": (lambda lib, x: lib.mv(x[0, 0], x[0])),
    "index_add-0d-two-indices": (lambda lib, x: x[0, 0].index_add(0, _index(0, 0)(lib), x[1, 1])),
    "scatter_reduce-mean": (
        lambda lib, x: x.scatter_reduce(0, _index([0, 1], [0, 0])(lib), x[:2], "mean")
    ),
    "scatter_reduce-amax": (
        lambda lib, x: x.scatter_reduce(0, _index([0, 1], [0, 0])(lib), x[:2], "amax")
    ),
    "index_reduce-matrix-mean": (
        lambda lib, x: x.index_reduce(0, _index(0, 2)(lib), x[:2], "mean")
    ),
    "index_reduce-matrix-amin": (
        lambda lib, x: x.index_reduce(0, _index(0, 2)(lib), x[:2], "amin")
    ),
    "index_reduce-matrix-prod-without-self": (
        lambda lib, x: x.index_reduce(0, _index(0, 2)(lib), x[:2], "prod", include_self=False)
    ),
    "index_reduce-vector-prod": (
        lambda lib, x: x[0].index_reduce(0, _index(0, 0)(lib), x[1, :2], "prod")
    ),
    "mvlgamma": (lambda lib, x: lib.mvlgamma(x, 1)),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("call", list(INDEXING.values()), ids=list(INDEXING))
def test_indexing_errors_and_dtypes_follow_pytorch(call, dtype):
    """index_select of a scalar by several indices, or of an empty matrix's axis, raises
    RuntimeError (was IndexError); embedding checks a 2-D weight (and embedding_renorm_'s),
    then an empty table, and keeps an integer table's dtype under scale_grad_by_freq when
    compiled; mv of a 0-d matrix and index_add of a 0-d source by several indices raise
    IndexError; scatter_reduce has no bool mean and no complex amax/amin (a complex mean
    divides), index_reduce refuses bools and complex numbers by PyTorch's path; mvlgamma
    refuses bools."""
    assert_agrees_with_torch(_operands(dtype, (3, 3), low=1), call, compiled=True)


COMPOSITE_IN_PLACE = {
    "rad2deg_": lambda lib, x: x.clone().rad2deg_(),
    "deg2rad_": lambda lib, x: x.clone().deg2rad_(),
    "rad2deg_-of-a-view": lambda lib, x: x.clone()[1:].rad2deg_(),
}


@pytest.mark.parametrize("dtype", ("float32", "float16", "int16", "int64", "uint8"))
@pytest.mark.parametrize("call", list(COMPOSITE_IN_PLACE.values()), ids=list(COMPOSITE_IN_PLACE))
def test_in_place_composites_refuse_results_their_input_cannot_hold(call, dtype):
    """An in-place composite op (one defined by its decomposition, without a meta) checks its
    result against ``self`` when captured too: its decomposition runs over metas, so a compiled
    ``rad2deg_`` of an int16 tensor raises as eager does instead of writing truncated values."""
    assert_agrees_with_torch(_operands(dtype, (3, 4)), call, compiled=True)


IN_PLACE_WITH_GRAD = {
    "sub_-0d-float64": lambda lib, x: x.clone().sub_(
        lib.tensor(1.5, dtype=lib.float64, requires_grad=True)
    ),
    "isub-0d-float64": lambda lib, x: x.clone().__isub__(lib.tensor(-2.0, requires_grad=True)),
    "mul_-float32": lambda lib, x: x.clone().mul_(lib.full((3, 4), 0.5, requires_grad=True)),
    "add_-of-a-view": lambda lib, x: x.clone()[1:].add_(lib.ones(4, requires_grad=True)),
}


@pytest.mark.parametrize("dtype", ("int16", "int64", "uint8", "bool", "float16", "float64"))
@pytest.mark.parametrize("call", list(IN_PLACE_WITH_GRAD.values()), ids=list(IN_PLACE_WITH_GRAD))
def test_in_place_ops_with_an_operand_that_requires_grad_refuse_unsafe_casts(call, dtype):
    """An integer or bool tensor's in-place op with a float operand that requires grad raises
    PyTorch's cast error, as it does without grad (autograd's in-place path wrote the float
    result through a cast and gave the integer tensor a grad_fn); float targets compute."""
    assert_agrees_with_torch(_operands(dtype, (3, 4)), call, compiled=True)


ROUNDING_DIVISIONS = {
    "floor_divide-by-True": lambda lib, x: lib.floor_divide(x, True),
    "floordiv-of-itself": lambda lib, x: x // x,
    "div-trunc-by-a-bool-0d": lambda lib, x: lib.div(x, lib.tensor(True), rounding_mode="trunc"),
    "div-floor-of-a-number": lambda lib, x: lib.div(x, 2, rounding_mode="floor"),
    "div-unknown-mode": lambda lib, x: lib.div(x, 2, rounding_mode="round"),
}


@pytest.mark.parametrize("dtype", ("bool", "uint8", "int64", "float16"))
@pytest.mark.parametrize("call", list(ROUNDING_DIVISIONS.values()), ids=list(ROUNDING_DIVISIONS))
def test_rounding_divisions_refuse_bools_compiled_too(call, dtype):
    """A rounding division (``//``, floor_divide, div with rounding_mode) of a bool result raises
    NotImplementedError, and an unknown mode RuntimeError, from the meta as from the kernel:
    compiled code computed a bool floor_divide that eager and PyTorch refuse."""
    low = 1 if dtype != "bool" else 0
    assert_agrees_with_torch(_operands(dtype, (3, 4), low=low), call, compiled=True)


LINALG_AND_RANDOM = {
    "triangular_solve-float32-coefficients": (
        ((3, 2),),
        lambda lib, b: lib.triangular_solve(b, lib.eye(3) * 2),
    ),
    "cdist": (((3, 2), (4, 2)), lambda lib, a, b: lib.cdist(a, b, p=1.0)),
    "cdist-empty": (((0, 2), (4, 2)), lambda lib, a, b: lib.cdist(a, b)),
    "cdist-products": (
        ((30, 3), (28, 3)),
        lambda lib, a, b: lib.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
    ),
    "bernoulli-of-probabilities": (((3, 4),), lambda lib, x: (x * 0).bernoulli()),
    "bernoulli-certain-p": (((3, 4),), lambda lib, x: lib.bernoulli(x, 1.0)),
    "bernoulli_-certain-p": (((3, 4),), lambda lib, x: x.clone().bernoulli_(0.0)),
    "bernoulli_-tensor-p": (((3, 4),), lambda lib, x: x.clone().bernoulli_(lib.ones(3, 4))),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize(
    "shapes,call", list(LINALG_AND_RANDOM.values()), ids=list(LINALG_AND_RANDOM)
)
def test_linalg_and_random_dtypes_follow_pytorch(shapes, call, dtype):
    """The old triangular_solve refuses b and A of different dtypes; cdist's direct kernel has
    no 16-bit floats (an empty side runs none), its product form computes them with PyTorch's
    roundings (bfloat16 raised a numpy TypeError); bernoulli of probabilities takes floats
    only, bernoulli with a number any real dtype, and no form takes complex numbers. (16-bit
    floats are compared eagerly: compiled code keeps float32 between the product form's steps,
    where PyTorch and the eager kernel round each one.)"""
    compiled = dtype not in ("float16", "bfloat16")
    assert_agrees_with_torch(_operands(dtype, *shapes), call, compiled=compiled)


@pytest.mark.parametrize("dtype", ("int64", "uint8", "bool"))
def test_bernoulli_of_an_integer_tensor_draws_with_the_given_probability(dtype):
    """``bernoulli(x, p)`` of an integer tensor draws 1 with probability p, as PyTorch's: the
    probability was converted to the integer dtype first (0.3 became 0: never a 1)."""
    kiln.manual_seed(0)
    draws = kiln.bernoulli(kiln.zeros(20000, dtype=getattr(kiln, dtype)), 0.3)
    want = torch.bernoulli(torch.zeros(20000, dtype=getattr(torch, dtype)), 0.3)
    assert str(draws.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert abs(draws.float().mean().item() - 0.3) < 0.02
    assert abs(want.float().mean().item() - 0.3) < 0.02


MORE_LINALG = {
    "tensordot-size-one-broadcasts": (
        ((1, 2, 3), (2, 2, 2)),
        lambda lib, a, b: lib.tensordot(a, b, dims=([0, 1], [2, 0])),
    ),
    "tensordot-dims-beyond-ndim": (((), ()), lambda lib, a, b: lib.tensordot(a, b, dims=2)),
    "dist": (((3, 4), (4,)), lambda lib, a, b: lib.dist(a, b, 3.0)),
    "histogram-bin-count": (((20,),), lambda lib, x: tuple(lib.histogram(x, 5))),
    "histogram-range": (((20,),), lambda lib, x: tuple(lib.histogram(x, 4, range=(0.0, 3.0)))),
    "histogram-empty": (((0,),), lambda lib, x: tuple(lib.histogram(x, 4))),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shapes,call", list(MORE_LINALG.values()), ids=list(MORE_LINALG))
def test_more_linalg_dtypes_follow_pytorch(shapes, call, dtype):
    """tensordot sums a dim broadcast against a size-1 one in its own dtype (an int16 sum
    became int64, and the product refused the mixed pair) and checks dims against both ranks;
    dist takes complex differences; histogram refuses 16-bit floats only where the edges come
    from the data."""
    assert_agrees_with_torch(_operands(dtype, *shapes, low=0), call, compiled=True)


@pytest.mark.parametrize("dtype", ("float64", "int64", "int16", "uint8", "bool"))
def test_the_old_cholesky_refuses_integers_as_its_kernel_does(dtype):
    """torch.cholesky has no dtype check of its own: integers reach its kernel, which raises
    NotImplementedError ("cholesky_cpu"), not linalg.cholesky's RuntimeError. (Complex
    factorizations are not implemented in kiln.)"""
    call = lambda lib, a: lib.cholesky(a + a.mT + lib.eye(3) * 9)  # noqa: E731
    assert_agrees_with_torch(_operands(dtype, (3, 3), low=0), call, compiled=True)


SCALAR_DIMS_AND_KERNELS = {
    "argmax-0d-dim-1": (((),), lambda lib, x: lib.argmax(x, 1)),
    "argmin-0d-dim--2": (((),), lambda lib, x: lib.argmin(x, -2, keepdim=True)),
    "argmax-0d-dim-0": (((),), lambda lib, x: lib.argmax(x, 0)),
    "flip-0d-dim-1": (((),), lambda lib, x: lib.flip(x, [1])),
    "flip-0d-repeated": (((),), lambda lib, x: lib.flip(x, [0, -1])),
    "flip-0d": (((),), lambda lib, x: lib.flip(x, [0])),
    "roll-0d-dim": (((),), lambda lib, x: lib.roll(x, 1, 0)),
    "roll-0d-no-dims": (((),), lambda lib, x: lib.roll(x, 1)),
    "cross": (((4, 3), (4, 3)), lambda lib, a, b: lib.cross(a, b, dim=1)),
    "mode": (((2, 7),), lambda lib, x: tuple(lib.mode(x, 1))),
    "mode-0d": (((),), lambda lib, x: tuple(lib.mode(x))),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize(
    "shapes,call", list(SCALAR_DIMS_AND_KERNELS.values()), ids=list(SCALAR_DIMS_AND_KERNELS)
)
def test_scalar_dims_and_kernel_dtypes_follow_pytorch(shapes, call, dtype):
    """A scalar's dim arguments are checked (argmax/argmin, flip: -1 and 0 only, once; roll
    reads its size: IndexError); cross has no bool kernel; mode no complex one, though a
    scalar is its own mode."""
    assert_agrees_with_torch(_operands(dtype, *shapes), call, compiled=True)


CONVERTED_NUMBERS = {
    "histc-negative-range": (((4, 6),), lambda lib, x: lib.histc(x, 7, -1, 1)),
    "histc-range-beyond-int8": (((4, 6),), lambda lib, x: lib.histc(x, 3, 0, 300)),
    "histc-empty": (((0,),), lambda lib, x: lib.histc(x, 3)),
    "scatter_-negative-value": (
        ((2, 4),),
        lambda lib, x: x.clone().scatter_(1, lib.tensor([[0, 2]]), value=-1.0),
    ),
    "scatter_-fractional-value": (
        ((2, 4),),
        lambda lib, x: x.clone().scatter_(1, lib.tensor([[0, 2]]), value=2.7),
    ),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize(
    "shapes,call", list(CONVERTED_NUMBERS.values()), ids=list(CONVERTED_NUMBERS)
)
def test_numbers_converted_to_the_input_dtype_are_checked(shapes, call, dtype):
    """histc converts its range to the input's dtype for the bin edges before its float-only
    kernel refuses integers (an out-of-range number raises RuntimeError; an empty input's
    range is widened to [-1, 1] first; bools have no linspace); scatter_'s value is checked
    as PyTorch converts a number (-1.0 into uint8 raises, 2.7 into an integer truncates)."""
    assert_agrees_with_torch(_operands(dtype, *shapes, low=0), call, compiled=True)


MARGIN_LOSSES = {
    "multi_margin_loss": (
        lambda lib, x: lib.nn.functional.multi_margin_loss(x, lib.tensor([0, 2, 1, 0]))
    ),
    "multilabel_margin_loss": (
        lambda lib, x: lib.nn.functional.multilabel_margin_loss(x, lib.tensor([[0, 1, -1]] * 4))
    ),
}


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("call", list(MARGIN_LOSSES.values()), ids=list(MARGIN_LOSSES))
def test_margin_losses_refuse_16_bit_floats(call, dtype):
    """The multi-class margin losses' CPU kernels compute float32/float64 only: 16-bit floats
    raise NotImplementedError (they computed), except over an empty batch, which runs none."""
    assert_agrees_with_torch(_operands(dtype, (4, 3)), call, compiled=True)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float64"))
def test_margin_loss_of_an_empty_batch_runs_no_kernel(dtype):
    """An empty batch's multi_margin_loss is computed whatever its float dtype."""

    def call(lib, x):
        target = lib.tensor([0, 2, 1, 0])[:0]
        return lib.nn.functional.multi_margin_loss(x[:0], target, reduction="none")

    assert_agrees_with_torch(_operands(dtype, (4, 3)), call, compiled=True)


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shape", [(3,), (), (2, 3)], ids=str)
def test_linalg_vander_refuses_bools_and_16_bit_floats(shape, dtype):
    """linalg.vander checks its dtype before anything else: floats of 32 bits up, complex
    numbers and integers only (kiln.vander, the old function, takes them all)."""
    call = lambda lib, x: lib.linalg.vander(x)  # noqa: E731
    assert_agrees_with_torch(_operands(dtype, shape), call, compiled=True)


@pytest.mark.parametrize("shape", [(4,), (), (0,)], ids=str)
@pytest.mark.parametrize("dim", [None, 0])
def test_unique_consecutive_refuses_complex_inputs(shape, dim):
    """unique_consecutive has no complex kernel in PyTorch, empty and 0-d inputs included:
    kiln compared complex numbers by numpy's rules."""
    call = lambda lib, x: lib.unique_consecutive(x, dim=dim)  # noqa: E731
    assert_agrees_with_torch(_operands("complex64", shape), call, compiled=True)


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("shape", [(2, 4, 3, 3), (2, 4, 5)], ids=str)
def test_local_response_norm_averages_with_pytorchs_pool_dtypes(shape, dtype):
    """PyTorch averages a 4-D or wider input's squares with avg_pool3d (float32, float64 and
    int64 only) and a 3-D one's with avg_pool2d: the same dtypes are refused."""
    call = _f("local_response_norm", 3)
    assert_agrees_with_torch(_operands(dtype, shape), call, compiled=True)


@pytest.mark.parametrize("dtype", ("int64", "uint8", "bool", "float16"))
@pytest.mark.parametrize(
    "call",
    [
        _f("logsigmoid"),
        lambda lib, x: lib.nn.functional.multilabel_soft_margin_loss(x, (x > 1).float()),
    ],
    ids=["logsigmoid", "multilabel_soft_margin_loss"],
)
def test_compiled_log_sigmoid_refuses_integers_as_eager_does(call, dtype):
    """log_sigmoid's float-only check runs in front of its meta too: compiled code computed
    integer inputs that eager kiln and PyTorch refuse."""
    assert_agrees_with_torch(_operands(dtype, (3, 4)), call, compiled=True)


# integer beta/alpha are cast to the tensors' dtype, as PyTorch's (-1 wraps for uint8)
SCALED_PRODUCTS = {
    "addmm": (((3, 4), (3, 2), (2, 4)), lambda lib, *xs: lib.addmm(*xs, beta=-1, alpha=2)),
    "baddbmm": (
        ((1, 4), (2, 3, 5), (2, 5, 4)),
        lambda lib, *xs: lib.baddbmm(*xs, beta=-1, alpha=2),
    ),
    "addmv": (((3,), (3, 4), (4,)), lambda lib, *xs: lib.addmv(*xs, beta=3, alpha=-2)),
}


@pytest.mark.parametrize("dtype", ("uint8", "int8", "int16", "int64"))
@pytest.mark.parametrize("shapes,call", list(SCALED_PRODUCTS.values()), ids=list(SCALED_PRODUCTS))
def test_integer_products_take_negative_scales_in_their_dtype(shapes, call, dtype):
    assert_agrees_with_torch(_operands(dtype, *shapes, low=0), call, compiled=True)


@pytest.mark.parametrize("input_dtype", ("float16", "bfloat16", "float32", "float64"))
@pytest.mark.parametrize("param_dtype", ("float16", "bfloat16", "float32", "float64"))
@pytest.mark.parametrize("with_weight", [False, True], ids=["stats", "stats-and-weight"])
def test_batch_norm_mixes_dtypes_only_as_pytorchs_cpu_kernels(
    input_dtype, param_dtype, with_weight
):
    """A half or bfloat16 input takes float32 parameters; any other mix is refused."""
    rng = np.random.default_rng(0)
    x, stats = rng.standard_normal((5, 3, 3)), rng.uniform(0.5, 1.5, (3, 3))

    def operands(lib):
        xs = [lib.tensor(x).to(getattr(lib, input_dtype))]
        return tuple(xs + [lib.tensor(s).to(getattr(lib, param_dtype)) for s in stats])

    def call(lib, x, mean, var, weight):
        return lib.nn.functional.batch_norm(x, mean, var, weight if with_weight else None)

    assert_agrees_with_torch(operands, call, compiled=True)
