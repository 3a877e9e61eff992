"""A compiled backward hands AccumulateGrad convolution weight gradients in the eager kernel's
(and PyTorch's) layout: row-major for a row-major layer, channels-last for a channels-last one.
The derivative's transposed view once reached the graph's outputs, so every weight's gradient
was permuted and AccumulateGrad copied it in numpy each step (resnet18: 20 weights, 11 ms of a
64 ms compiled step)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.autograd.engine as engine


@pytest.mark.parametrize(
    "shape, kernel, stride, channels_last",
    [
        ((2, 8, 6, 6), 3, 1, False),
        ((2, 16, 5, 5), 3, 2, False),
        ((2, 4, 4, 4), 1, 1, False),
        ((2, 8, 6, 6), 3, 1, True),
    ],
)
def test_compiled_weight_gradients_reach_accumulate_grad_in_the_weights_layout(
    shape, kernel, stride, channels_last, monkeypatch
):
    conv = kiln.nn.Conv2d(shape[1], 12, kernel, stride=stride, padding=kernel // 2)
    x = kiln.randn(*shape)
    if channels_last:
        conv = conv.to(memory_format=kiln.channels_last)
        x = x.to(memory_format=kiln.channels_last)

    def step(x):
        conv.zero_grad()
        loss = conv(x).relu().square().sum()
        loss.backward()
        return loss

    step(x)
    expected = conv.weight.grad.clone()
    expected_strides = conv.weight.grad.stride()
    compiled = kiln.compile(step)
    compiled(x)  # (compiles)
    handed = []
    accumulate = engine._accumulate

    def watching(leaf, g, create_graph, taken=None):
        if leaf is conv.weight:
            handed.append(g.stride())
        return accumulate(leaf, g, create_graph, taken)

    monkeypatch.setattr(engine, "_accumulate", watching)
    compiled(x)
    assert handed == [expected_strides]
    assert conv.weight.grad.stride() == expected_strides
    np.testing.assert_allclose(conv.weight.grad.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)
