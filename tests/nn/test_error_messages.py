"""The errors and warnings training scripts print, as PyTorch prints them: dtype and
shape mismatches in layers and losses, bad indices, feature dropout ranks, deprecated names."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import assert_same_error, error_of, needs_torch, torch


@needs_torch
@pytest.mark.parametrize("x_shape", [(2, 3), (3,), (4, 2, 3)])
@pytest.mark.parametrize("w_dtype", ["float64", "float16", "bfloat16"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_dtype_mismatch_message(x_shape, w_dtype, bias):
    def build(lib):
        dtype = getattr(lib, w_dtype)
        b = lib.ones(2, dtype=dtype) if bias else None
        return lambda: lib.nn.functional.linear(lib.ones(*x_shape), lib.ones(2, 3, dtype=dtype), b)

    assert_same_error(build(kiln), build(torch))


@needs_torch
def test_linear_bias_dtype_mismatch_message():
    def build(lib):
        b = lib.ones(2, dtype=lib.float64)
        return lambda: lib.nn.functional.linear(lib.ones(2, 3), lib.ones(2, 3), b)

    assert_same_error(build(kiln), build(torch))


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: (lib.nn.Conv2d(3, 4, 3), lib.float64),
        lambda lib: (lib.nn.Conv2d(3, 4, 3, bias=False), lib.float64),
        lambda lib: (lib.nn.Conv2d(3, 4, 3).double(), lib.float32),
        lambda lib: (lib.nn.Conv1d(3, 4, 3), lib.int64),
    ],
)
def test_conv_dtype_mismatch_message(make):
    def build(lib):
        conv, dtype = make(lib)
        shape = (1, 3, 6, 6) if isinstance(conv, lib.nn.Conv2d) else (1, 3, 6)
        return lambda: conv(lib.ones(*shape, dtype=dtype))

    assert_same_error(build(kiln), build(torch))


@needs_torch
@pytest.mark.parametrize(
    "kwargs", [{}, {"affine": False}, {"track_running_stats": False}, {"eval": True}]
)
def test_batchnorm_channel_mismatch_message(kwargs):
    def build(lib):
        options = dict(kwargs)
        bn = lib.nn.BatchNorm2d(4, **{k: v for k, v in options.items() if k != "eval"})
        if options.get("eval"):
            bn.eval()
        return lambda: bn(lib.ones(2, 3, 4, 4))

    assert_same_error(build(kiln), build(torch))


@needs_torch
def test_embedding_index_errors():
    for indices in ([5], [-6]):
        assert_same_error(
            lambda: kiln.nn.Embedding(5, 2)(kiln.tensor(indices)),
            lambda: torch.nn.Embedding(5, 2)(torch.tensor(indices)),
        )
    kind, text = error_of(lambda: kiln.nn.Embedding(5, 2)(kiln.tensor([1.0])))
    want = error_of(lambda: torch.nn.Embedding(5, 2)(torch.tensor([1.0])))
    assert (kind, text.replace("kiln.", "torch.")) == want


@needs_torch
@pytest.mark.parametrize(
    "shapes", [((6, 5), (6,)), ((2, 3), (4, 5)), ((3, 1, 5), (4, 6)), ((2, 1), (3, 4, 5))]
)
def test_broadcast_error_names_the_dimension_like_torch(shapes):
    a, b = shapes
    assert_same_error(
        lambda: kiln.ones(*a) + kiln.ones(*b), lambda: torch.ones(*a) + torch.ones(*b)
    )


@needs_torch
def test_class_index_loss_with_float_target_message():
    assert_same_error(
        lambda: kiln.nn.functional.cross_entropy(kiln.ones(2, 3), kiln.zeros(2)),
        lambda: torch.nn.functional.cross_entropy(torch.ones(2, 3), torch.zeros(2)),
    )


@needs_torch
@pytest.mark.parametrize(
    ("input_shape", "target"),
    [((4, 3), [0.0, 1.0]), ((2, 3, 2, 2), [0.0, 1.0, 1.0, 0.0]), ((3,), [0.0, 1.0])],
)
def test_float_target_of_another_batch_size_is_a_value_error_as_in_torch(input_shape, target):
    """PyTorch checks the rank and batch size before the target's dtype: probabilities of the
    wrong shape given to cross_entropy raise its ValueError, not the dtype's RuntimeError."""

    def call(lib):
        return lambda: lib.nn.functional.cross_entropy(lib.zeros(input_shape), lib.tensor(target))

    assert error_of(call(kiln), torch_names=True) == error_of(call(torch), torch_names=True)


@needs_torch
@pytest.mark.parametrize(
    ("input_shape", "target_shape"),
    [
        ((2, 3, 4), (2, 5)),
        ((2, 3, 4), (2,)),
        ((2, 3, 4, 5), (2, 4)),
        ((2, 3, 4, 5), (2, 4, 6)),
        ((2, 3, 4, 5, 6), (2, 4, 5, 7)),
        ((3,), (2,)),
        ((2, 3), (2, 2)),
    ],
)
def test_class_target_shape_errors_match_torch(input_shape, target_shape):
    def call(lib):
        return lambda: lib.nn.functional.nll_loss(
            lib.ones(*input_shape), lib.zeros(*target_shape, dtype=lib.long)
        )

    assert error_of(call(kiln), torch_names=True) == error_of(call(torch), torch_names=True)


@needs_torch
def test_bce_with_logits_shape_error_names_sizes_like_torch():
    def call(lib):
        return lambda: lib.nn.functional.binary_cross_entropy_with_logits(
            lib.ones(2, 1), lib.ones(2)
        )

    assert error_of(call(kiln), torch_names=True) == error_of(call(torch), torch_names=True)


def _warnings_of(fn) -> list[tuple[str, str]]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [(str(w.message).replace("kiln", "torch"), w.filename) for w in caught]


@needs_torch
@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("dropout1d", (2,)),
        ("dropout1d", (2, 3)),
        ("dropout2d", (2,)),
        ("dropout2d", (2, 3)),
        ("dropout2d", (2, 3, 4)),
        ("dropout2d", (2, 3, 4, 5, 6)),
        ("dropout3d", (2, 3)),
        ("dropout3d", (2, 3, 4, 5)),
    ],
)
def test_feature_dropout_ranks_warn_and_fail_like_torch(name, shape):
    results = []
    for lib in (kiln, torch):
        fn = getattr(lib.nn.functional, name)
        caught = []

        def call(fn=fn, caught=caught):
            caught.extend(_warnings_of(lambda: fn(lib.ones(*shape), 0.5)))

        results.append((error_of(call, torch_names=True), [message for message, _ in caught]))
    assert results[0] == results[1]
    for message, filename in _warnings_of(lambda: kiln.nn.functional.dropout2d(kiln.ones(2, 3))):
        assert filename == __file__, message  # reported at the caller, as PyTorch does


def test_size_mismatch_warning_points_at_the_loss_call():
    caught = _warnings_of(lambda: kiln.nn.functional.mse_loss(kiln.ones(2, 1), kiln.ones(2)))
    assert len(caught) == 1 and caught[0][1] == __file__


@needs_torch
@pytest.mark.parametrize("name", ["upsample", "upsample_nearest", "upsample_bilinear"])
def test_upsample_aliases_warn_that_they_are_deprecated(name):
    got = _warnings_of(lambda: getattr(kiln.nn.functional, name)(kiln.ones(1, 1, 2, 2), None, 2))
    want = _warnings_of(lambda: getattr(torch.nn.functional, name)(torch.ones(1, 1, 2, 2), None, 2))
    assert got == want and got[0][1] == __file__


_POOLS = {
    "avg_pool1d": lambda F, x: F.avg_pool1d(x, 2),
    "lp_pool1d": lambda F, x: F.lp_pool1d(x, 2, 2),
    "max_pool1d": lambda F, x: F.max_pool1d(x, 2),
    "max_pool1d-grad": lambda F, x: F.max_pool1d(x.requires_grad_(), 2),
    "max_pool1d-indices": lambda F, x: F.max_pool1d(x, 2, return_indices=True),
    "adaptive_avg_pool1d": lambda F, x: F.adaptive_avg_pool1d(x, 2),
    "adaptive_max_pool1d": lambda F, x: F.adaptive_max_pool1d(x, 2),
    "adaptive_avg_pool2d": lambda F, x: F.adaptive_avg_pool2d(x, (1, 2)),
    "adaptive_avg_pool3d": lambda F, x: F.adaptive_avg_pool3d(x, (1, 1, 2)),
    "adaptive_max_pool2d": lambda F, x: F.adaptive_max_pool2d(x, (1, 2)),
    "adaptive_max_pool3d": lambda F, x: F.adaptive_max_pool3d(x, (1, 1, 2)),
}


@needs_torch
@pytest.mark.parametrize(
    "shape",
    [(), (4,), (3, 0), (2, 0, 3), (2, 3, 0), (0, 3, 4), (2, 0, 3, 4), (0, 3, 4, 4), (3, 4, 0, 2),
     (2, 0, 3, 3, 3), (2, 3, 3, 0, 3), (1, 2, 3, 4, 5, 6)],
    ids=str,
)  # fmt: skip
@pytest.mark.parametrize("pool", sorted(_POOLS))
def test_pool_rank_and_empty_dim_errors_match_torch(pool, shape):
    """1-d pools check their rank first (max_pool1d without indices its own way), then run as
    2-d pools of a one-row image; adaptive pools name themselves and the empty dim (the 2-d
    average checks the spatial dims, the others every dim but the first); an empty batch pools
    to an empty result."""

    def outcome(lib):
        call = lambda: _POOLS[pool](lib.nn.functional, lib.ones(shape))  # noqa: E731
        error = error_of(call)
        if error != ("no error", ""):
            return error
        out = call()
        return [tuple(t.shape) for t in (out if isinstance(out, tuple) else (out,))]

    assert outcome(kiln) == outcome(torch)
