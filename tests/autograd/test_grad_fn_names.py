"""The ``grad_fn`` names reprs print, as PyTorch's: tensor methods and operators,
``nn.functional`` calls, layers and recurrent outputs. The node's class carries the name too
(``type(y.grad_fn).__name__``), as PyTorch's classes do."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import needs_torch, torch
from tests.runtime.helpers import cases

pytestmark = needs_torch


def _leaf(lib, *shape):
    return lib.ones(*shape, requires_grad=True)


GRAD_FN = {
    "t": lambda lib: _leaf(lib, 2, 3).t(),
    "t-1d": lambda lib: _leaf(lib, 3).t(),
    "transpose": lambda lib: _leaf(lib, 2, 3).transpose(0, 1),
    "mT": lambda lib: _leaf(lib, 2, 3).mT,
    "permute": lambda lib: _leaf(lib, 2, 3).permute(1, 0),
    "reshape-copy": lambda lib: _leaf(lib, 2, 3).t().reshape(6),
    "reshape-view": lambda lib: _leaf(lib, 2, 3).reshape(6),
    "sum-dim": lambda lib: _leaf(lib, 2, 3).sum(1, keepdim=True),
    "mean-dims": lambda lib: _leaf(lib, 2, 3).mean((0, 1)),
    "prod-dim": lambda lib: _leaf(lib, 2, 3).prod(0),
    "max-all": lambda lib: _leaf(lib, 2, 3).max(),
    "max-dim": lambda lib: _leaf(lib, 2, 3).max(0).values,
    "min-dim": lambda lib: _leaf(lib, 2, 3).min(1).values,
    "median-dim": lambda lib: _leaf(lib, 2, 3).median(0).values,
    "squeeze-dim": lambda lib: _leaf(lib, 1, 3).squeeze(0),
    "squeeze-dims": lambda lib: _leaf(lib, 1, 3).squeeze((0,)),
    "clamp-scalar": lambda lib: _leaf(lib, 3).clamp(0, 1),
    "clamp-tensor": lambda lib: _leaf(lib, 3).clamp(min=lib.zeros(3)),
    "clamp-min": lambda lib: _leaf(lib, 3).clamp_min(0),
    "pow-scalar": lambda lib: _leaf(lib, 3) ** 2,
    "pow-tensor": lambda lib: _leaf(lib, 3) ** _leaf(lib, 3),
    "scalar-pow": lambda lib: 2 ** _leaf(lib, 3),
    "scalar-minus": lambda lib: 1 - _leaf(lib, 3),
    "scalar-over": lambda lib: 2 / _leaf(lib, 3),
    "minus-scalar": lambda lib: _leaf(lib, 3) - 1,
    "over-scalar": lambda lib: _leaf(lib, 3) / 2,
    "square": lambda lib: _leaf(lib, 3).square(),
    "mm": lambda lib: _leaf(lib, 2, 3) @ _leaf(lib, 3, 4),
    "mv": lambda lib: _leaf(lib, 2, 3) @ _leaf(lib, 3),
    "dot": lambda lib: _leaf(lib, 3) @ _leaf(lib, 3),
    "vector-matrix": lambda lib: _leaf(lib, 3) @ _leaf(lib, 3, 2),
    "batched-matmul": lambda lib: _leaf(lib, 4, 2, 3) @ _leaf(lib, 4, 3, 2),
    "linear-bias": lambda lib: lib.nn.functional.linear(
        _leaf(lib, 2, 3), _leaf(lib, 4, 3), _leaf(lib, 4)
    ),
    "linear-3d": lambda lib: lib.nn.functional.linear(_leaf(lib, 5, 2, 3), _leaf(lib, 4, 3)),
    "nn-linear": lambda lib: lib.nn.Linear(3, 2)(lib.ones(4, 3)),
    "to-double": lambda lib: _leaf(lib, 3).double(),
    "stack": lambda lib: lib.stack([_leaf(lib, 3), _leaf(lib, 3)]),
    "split": lambda lib: _leaf(lib, 4).split(2)[0],
    "split-sizes": lambda lib: _leaf(lib, 4).split([1, 3])[1],
    "chunk": lambda lib: _leaf(lib, 4).chunk(2)[1],
    "unbind": lambda lib: _leaf(lib, 2, 3).unbind()[0],
    "repeat": lambda lib: _leaf(lib, 3).repeat(2),
    "trace": lambda lib: _leaf(lib, 3, 3).trace(),
    "layer-norm": lambda lib: lib.nn.LayerNorm(3)(lib.ones(2, 3)),
    "dropout": lambda lib: lib.nn.functional.dropout(_leaf(lib, 3), 0.5),
    "l1-loss": lambda lib: lib.nn.functional.l1_loss(_leaf(lib, 3), lib.zeros(3)),
    "max-pool-1d": lambda lib: lib.nn.functional.max_pool1d(_leaf(lib, 1, 2, 4), 2),
    "max-pool-2d": lambda lib: lib.nn.functional.max_pool2d(_leaf(lib, 1, 2, 4, 4), 2),
    "avg-pool-2d": lambda lib: lib.nn.functional.avg_pool2d(_leaf(lib, 1, 2, 4, 4), 2),
    "scatter-value": lambda lib: _leaf(lib, 2, 3).scatter(1, lib.tensor([[0], [1]]), 0.0),
    "rnn": lambda lib: lib.nn.RNN(3, 2)(lib.ones(4, 1, 3))[0],
}


def _names(node) -> tuple:
    return node.name(), type(node).__name__, type(node).__qualname__


@cases(GRAD_FN)
def test_grad_fn_names_match_torch(case):
    assert _names(case(kiln).grad_fn) == _names(case(torch).grad_fn)


def test_node_classes_are_shared_and_still_op_nodes():
    x = kiln.ones(3, requires_grad=True)
    first, second = (x * 2).grad_fn, (x * 3).grad_fn
    assert type(first) is type(second)
    assert isinstance(first, kiln.autograd.graph.OpBackward)
    assert type(x.exp().grad_fn) is not type(first)


@needs_torch
def test_leaf_accumulator_and_copy_node_classes_match_torch():
    classes = []
    for lib in (kiln, torch):
        x = lib.ones(3, requires_grad=True)
        accumulator = (x * 2).grad_fn.next_functions[0][0]
        overwritten = (x * 2).clone()
        overwritten.copy_(lib.zeros(3))  # overwritten by values that need no grad
        classes.append((type(accumulator).__name__, type(overwritten.grad_fn).__name__))
    assert classes[0] == classes[1] == ("AccumulateGrad", "CopyBackwards")


@needs_torch
def test_custom_function_node_class_matches_torch():
    names = []
    for lib in (kiln, torch):

        class Double(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        node = Double.apply(lib.ones(3, requires_grad=True)).grad_fn
        assert type(node) is Double._backward_cls
        names.append(_names(node))
    assert names[0] == names[1] == ("DoubleBackward",) * 3


def test_grad_fn_name_survives_backward():
    x = kiln.ones(2, 3, requires_grad=True)
    total = x.sum(0)
    total.backward(kiln.ones(3))
    assert repr(total) == "tensor([2., 2., 2.], grad_fn=<SumBackward1>)"
    assert type(total.grad_fn).__name__ == "SumBackward1"


_GRAD_FN_CASES = {
    "interpolate_nearest_1d": lambda F, t: F.interpolate(t["x1"], scale_factor=2),
    "interpolate_linear": lambda F, t: F.interpolate(t["x1"], scale_factor=2, mode="linear"),
    "interpolate_nearest": lambda F, t: F.interpolate(t["x"], scale_factor=2),
    "interpolate_bilinear": lambda F, t: F.interpolate(t["x"], size=(3, 5), mode="bilinear"),
    "interpolate_bicubic": lambda F, t: F.interpolate(t["x"], scale_factor=2, mode="bicubic"),
    "interpolate_exact": lambda F, t: F.interpolate(t["x"], scale_factor=2, mode="nearest-exact"),
    "interpolate_trilinear": lambda F, t: F.interpolate(t["x3"], scale_factor=2, mode="trilinear"),
    "interpolate_area": lambda F, t: F.interpolate(t["x"], size=2, mode="area"),
    "interpolate_area_1d": lambda F, t: F.interpolate(t["x1"], size=2, mode="area"),
    "adaptive_avg_global": lambda F, t: F.adaptive_avg_pool2d(t["x"], 1),
    "adaptive_avg": lambda F, t: F.adaptive_avg_pool2d(t["x"], (1, 2)),
    "adaptive_avg_3d": lambda F, t: F.adaptive_avg_pool3d(t["x3"], 2),
    "adaptive_avg_1d": lambda F, t: F.adaptive_avg_pool1d(t["x1"], 2),
    "adaptive_max": lambda F, t: F.adaptive_max_pool2d(t["x"], 1),
    "adaptive_max_1d": lambda F, t: F.adaptive_max_pool1d(t["x1"], 2),
    "pixel_shuffle": lambda F, t: F.pixel_shuffle(t["x4"], 2),
    "pixel_unshuffle": lambda F, t: F.pixel_unshuffle(t["x"], 2),
    "channel_shuffle": lambda F, t: F.channel_shuffle(t["x4"], 2),
    "grid_sample": lambda F, t: F.grid_sample(t["x"], t["grid"], align_corners=False),
    "affine_grid": lambda F, t: F.affine_grid(t["theta"], [1, 1, 2, 2], align_corners=False),
    "rms_norm": lambda F, t: F.rms_norm(t["x"], (4,)),
    "glu": lambda F, t: F.glu(t["x"], 1),
    "reflect_pad": lambda F, t: F.pad(t["x"], (1, 1, 1, 1), mode="reflect"),
    "replicate_pad_1d": lambda F, t: F.pad(t["x1"], (1, 2), mode="replicate"),
    "unfold": lambda F, t: F.unfold(t["x"], 2),
    "fold": lambda F, t: F.fold(t["cols"], (4, 4), 2, stride=2),
    "soft_margin": lambda F, t: F.soft_margin_loss(t["x"], t["x"].detach().sign()),
    "soft_target_ce": lambda F, t: F.cross_entropy(t["logits"], t["probs"]),
    "soft_target_ce_sum": lambda F, t: F.cross_entropy(t["logits"], t["probs"], reduction="sum"),
    "embedding_bag": lambda F, t: F.embedding_bag(t["idx"], t["table"], t["offsets"]),
}


def _grad_fn_inputs(lib) -> dict:
    def leaf(*shape):
        return lib.ones(*shape, requires_grad=True)

    return {
        "x1": leaf(1, 2, 4),
        "x": leaf(1, 2, 4, 4),
        "x3": leaf(1, 1, 2, 4, 4),
        "x4": leaf(1, 4, 2, 2),
        "grid": lib.zeros(1, 2, 2, 2),
        "theta": leaf(1, 2, 3),
        "cols": leaf(1, 8, 4),
        "logits": leaf(2, 4),
        "probs": lib.ones(2, 4).softmax(1),
        "idx": lib.tensor([1, 2, 4, 5]),
        "offsets": lib.tensor([0, 2]),
        "table": leaf(6, 3),
    }


@needs_torch
@pytest.mark.parametrize("case", list(_GRAD_FN_CASES))
def test_functional_grad_fn_names_print_like_torch(case):
    names = []
    for lib in (kiln, torch):
        out = _GRAD_FN_CASES[case](lib.nn.functional, _grad_fn_inputs(lib))
        names.append(_names(out.grad_fn))
    assert names[0] == names[1]


_RNN_OPTIONS = [{}, {"num_layers": 2}, {"bidirectional": True}, {"batch_first": True}]


@needs_torch
@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [("LSTM", o) for o in [*_RNN_OPTIONS, {"proj_size": 2}]] + [("GRU", o) for o in _RNN_OPTIONS],
)
def test_recurrent_output_grad_fn_names_print_like_torch(kind, kwargs):
    names = []
    for lib in (kiln, torch):
        out, _ = getattr(lib.nn, kind)(3, 4, **kwargs)(lib.ones(5, 2, 3))
        names.append(_names(out.grad_fn))
    assert names[0] == names[1]
