"""EmbeddingBag and ``F.embedding_bag`` against torch: values, gradients of every
differentiable input, index dtypes, padding rows, max_norm, pretrained tables and argument
errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from tests.nn.helpers import Case, In, module_case_tests
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


INDICES = [1, 2, 4, 5, 4, 3, 2, 9, 0, 0]


def _both(fn, weight: np.ndarray, inputs: dict, grads: tuple = ("weight",)):
    """Run ``fn(lib, **tensors)`` with kiln and torch; return (outputs, grads) of each."""
    results = []
    for lib in (kiln, torch):
        tensors = {}
        for name, value in inputs.items():
            t = lib.tensor(value) if value is not None else None
            if name in grads:
                t.requires_grad_(True)
            tensors[name] = t
        w = lib.tensor(weight, requires_grad=True)
        out = fn(lib, w, **tensors)
        cot = np.random.default_rng(7).standard_normal(tuple(out.shape))
        (out * lib.tensor(cot, dtype=out.dtype)).sum().backward()
        named = {"weight": w, **tensors}
        results.append((out, [named[g].grad for g in grads]))
    return results


def _bag(lib, weight, **kw):
    return lib.nn.functional.embedding_bag(kw.pop("input"), weight, kw.pop("offsets", None), **kw)


BAG_CASES = {
    "mean": dict(offsets=[0, 2, 2, 5]),
    "sum": dict(offsets=[0, 2, 2, 5], mode="sum"),
    "max": dict(offsets=[0, 2, 2, 5], mode="max"),
    "empty_first_bags": dict(offsets=[0, 0, 0, 4], mode="mean"),
    "last_offset_sum": dict(offsets=[0, 3, 3, 7, 10], mode="sum", include_last_offset=True),
    "last_offset_mean": dict(offsets=[0, 3, 3, 7, 10], include_last_offset=True),
    "last_offset_max": dict(offsets=[0, 3, 3, 7, 10], mode="max", include_last_offset=True),
    "padding_sum": dict(offsets=[0, 2, 2, 5], mode="sum", padding_idx=2),
    "padding_mean_negative": dict(offsets=[0, 3, 4, 5], padding_idx=-1),
    "padding_max": dict(offsets=[0, 2, 2, 5], mode="max", padding_idx=4),
    "all_padding_bag_mean": dict(input=[2, 2, 1], offsets=[0, 2], padding_idx=2),
    "two_d_mean": dict(input=np.reshape(INDICES, (2, 5))),
    "two_d_max_padding": dict(input=np.reshape(INDICES, (5, 2)), mode="max", padding_idx=0),
    "int32": dict(
        input=np.array(INDICES, np.int32), offsets=np.array([0, 4], np.int32), mode="sum"
    ),
    # every index twice: PyTorch's CPU kernel is right only when all counts are equal
    "scale_grad_by_freq_equal_counts": dict(
        input=[5, 0, 3, 0, 5, 3], offsets=[0, 4], mode="mean", scale_grad_by_freq=True
    ),
}


@pytest.mark.parametrize("name", list(BAG_CASES))
def test_embedding_bag_matches_torch(name):
    kw = dict(BAG_CASES[name])
    indices = np.asarray(kw.pop("input", INDICES))
    offsets = kw.pop("offsets", None)
    inputs = {"input": indices, "offsets": None if offsets is None else np.asarray(offsets)}
    weight = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    (k_out, k_grads), (t_out, t_grads) = _both(
        lambda lib, w, **t: _bag(lib, w, **t, **kw), weight, inputs
    )
    assert_close(k_out, t_out, rtol=1e-5, atol=1e-6)
    assert_close(k_grads, t_grads, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("two_d", [False, True])
def test_embedding_bag_per_sample_weights_get_gradients(two_d):
    rng = np.random.default_rng(1)
    indices = np.reshape(INDICES, (2, 5)) if two_d else np.asarray(INDICES)
    inputs = {
        "input": indices,
        "offsets": None if two_d else np.array([0, 3, 8]),
        "per_sample_weights": rng.standard_normal(indices.shape).astype(np.float32),
    }
    weight = rng.standard_normal((10, 3)).astype(np.float32)
    (k_out, k_grads), (t_out, t_grads) = _both(
        lambda lib, w, **t: _bag(lib, w, mode="sum", padding_idx=0, **t),
        weight,
        inputs,
        grads=("weight", "per_sample_weights"),
    )
    assert_close(k_out, t_out, rtol=1e-5, atol=1e-6)
    assert_close(k_grads, t_grads, rtol=1e-5, atol=1e-6)


def test_embedding_bag_scale_grad_by_freq_divides_by_each_index_count():
    # PyTorch 2.13's CPU kernel divides by another index's count when counts differ
    # (pytorch/pytorch#190063); kiln divides each row by its own count, as F.embedding does
    weight = kiln.zeros(10, 2, requires_grad=True)
    indices = kiln.tensor(INDICES)
    F.embedding_bag(
        indices, weight, kiln.tensor([0, 5]), mode="sum", scale_grad_by_freq=True
    ).sum().backward()
    reference = kiln.zeros(10, 2, requires_grad=True)
    F.embedding(indices, reference, scale_grad_by_freq=True).sum().backward()
    assert_close(weight.grad, reference.grad)
    assert float(weight.grad[2, 0]) == 1.0 and float(weight.grad[7, 0]) == 0.0


def test_embedding_bag_output_dtype_follows_weight():
    weight = kiln.randn(5, 3, dtype=kiln.float64)
    out = F.embedding_bag(kiln.tensor([[0, 1]]), weight, mode="max")
    assert out.dtype is kiln.float64 and tuple(out.shape) == (1, 3)


def test_embedding_bag_swapped_arguments_warn_and_still_work():
    weight = kiln.randn(5, 3)
    indices = kiln.tensor([[0, 4]])
    with pytest.warns(UserWarning, match="Argument order of nn.functional.embedding_bag"):
        out = F.embedding_bag(weight, indices)
    assert_close(out, F.embedding_bag(indices, weight))


ERRORS = [
    (dict(input=[[0, 1]], offsets=[0]), ValueError, "if input is 2D, then offsets has to be None"),
    (dict(input=[0, 1]), ValueError, "offsets has to be a 1D Tensor but got None"),
    (dict(input=[0, 1], offsets=[[0]]), ValueError, "offsets has to be a 1D Tensor"),
    (dict(input=[[[0]]]), ValueError, "input has to be 1D or 2D Tensor"),
    (dict(input=[[0]], mode="median"), ValueError, "mode has to be one of sum, mean or max"),
    (dict(input=[[0]], mode="max", scale_grad_by_freq=True), ValueError, "max mode does not"),
    (dict(input=[0, 1], offsets=[1]), RuntimeError, r"offsets\[0\] has to be 0"),
    (dict(input=[0, 1], offsets=[0, 3]), RuntimeError, r"offsets\[-1\] can not be greater"),
    (dict(input=[[0]], padding_idx=5), RuntimeError, "padding_idx must be within the number"),
    (dict(input=[[0.5]]), RuntimeError, "Long, Int"),
    (dict(input=[[0, 1]], mode="mean", psw=True), NotImplementedError, "only supported for"),
    (dict(input=[[0, 1]], mode="sum", psw=[1.0]), ValueError, "per_sample_weights"),
    (dict(input=[0, 7], offsets=[0]), RuntimeError, r"Index 1 of input takes value 7 .* \[0, 5\)"),
    (dict(input=[0, 5], offsets=[0], mode="sum", psw=True), RuntimeError, "takes value 5"),
    (dict(input=[0, -2, 1], offsets=[0], mode="max"), RuntimeError, "found idx to be -2"),
    (dict(input=[[0, 1], [6, 0]], mode="max"), RuntimeError, "found idx to be 6"),
    (dict(input=[0, 5], offsets=[0], padding_idx=1), RuntimeError, "found idx to be 5"),
]


@pytest.mark.parametrize("case", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_embedding_bag_errors_match_torch(case):
    kw, error, message = dict(case[0]), case[1], case[2]
    for lib in (kiln, torch):
        args = dict(kw)
        indices = lib.tensor(args.pop("input"))
        offsets = args.pop("offsets", None)
        offsets = lib.tensor(offsets) if offsets is not None else None
        psw = args.pop("psw", None)
        if psw is not None:
            args["per_sample_weights"] = (
                lib.ones_like(indices, dtype=lib.float32) if psw is True else lib.tensor(psw)
            )
        with pytest.raises(error, match=message):
            lib.nn.functional.embedding_bag(indices, lib.ones(5, 2), offsets, **args)


BAG_INDICES = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 0], np.int64)


BAG_OFFSETS = np.array([0, 2, 2, 5], np.int64)


def _idx(values) -> In:
    return In(np.shape(values), "i", grad=False, values=np.asarray(values))


def _call_bag(lib, m, xs):
    return m(*xs)


BAGS = [
    Case(
        "embedding_bag_mean",
        lambda lib: lib.nn.EmbeddingBag(10, 4),
        [_idx(BAG_INDICES), _idx(BAG_OFFSETS)],
    ),
    Case(
        "embedding_bag_sum_weighted",
        lambda lib: lib.nn.EmbeddingBag(10, 4, mode="sum"),
        [_idx(BAG_INDICES), _idx(BAG_OFFSETS), In((10,))],
    ),
    Case(
        "embedding_bag_max_2d",
        lambda lib: lib.nn.EmbeddingBag(10, 3, mode="max"),
        [_idx(BAG_INDICES.reshape(2, 5))],
    ),
    Case(
        "embedding_bag_padding_mean",
        lambda lib: lib.nn.EmbeddingBag(10, 4, padding_idx=2),
        [_idx(BAG_INDICES), _idx(BAG_OFFSETS)],
    ),
    Case(
        "embedding_bag_last_offset_max",
        lambda lib: lib.nn.EmbeddingBag(10, 4, mode="max", include_last_offset=True),
        [_idx(BAG_INDICES), _idx(np.array([0, 3, 3, 7, 10]))],
    ),
]


test_forward_and_backward_match_torch, test_repr_and_state_match_torch = module_case_tests(
    BAGS, every_output_differentiable=True
)


def test_embedding_bag_padding_row_is_zero_and_from_pretrained_freezes():
    bag = kiln.nn.EmbeddingBag(5, 3, padding_idx=-1, mode="sum")
    assert bag.padding_idx == 4 and float(bag.weight[4].abs().sum()) == 0.0
    table = kiln.randn(4, 2)
    frozen = kiln.nn.EmbeddingBag.from_pretrained(table, mode="max")
    assert not frozen.weight.requires_grad and frozen.mode == "max"
    out = frozen(kiln.tensor([[0, 1], [2, 3]]))
    assert_close(out, kiln.maximum(table[[0, 2]], table[[1, 3]]))
    with pytest.raises(AssertionError, match="padding_idx must be within num_embeddings"):
        kiln.nn.EmbeddingBag(5, 3, padding_idx=5)


def test_embedding_bag_max_norm_renormalizes_the_looked_up_rows():
    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    kbag = kiln.nn.EmbeddingBag.from_pretrained(kiln.tensor(weight), max_norm=2.0)
    tbag = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(weight), max_norm=2.0)
    assert repr(kbag) == repr(tbag)
    indices = np.array([[1, 3]])
    assert_close(kbag(kiln.tensor(indices)), tbag(torch.tensor(indices)), rtol=1e-5, atol=1e-6)
    assert_close(kbag.weight, tbag.weight, rtol=1e-5, atol=1e-6)
