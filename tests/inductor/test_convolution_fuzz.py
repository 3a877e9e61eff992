"""Random convolution geometries, compiled forward and backward against PyTorch.

The op fuzzer's programs are too small to reach the convolution lowering's choices (the direct
loops need rows of 16 outputs or more), so this draws whole layers: batch, channels, image
and kernel sizes, stride, padding, dilation, groups, bias, plain or transposed, an input
layout, and a producer before and a consumer after the convolution, which fuse into the
lowering's copies. Each draw is
compiled (fresh, no compiled-graph cache) and its output and the gradients of input, weight and
bias are compared with PyTorch's. ``KILN_CONV_FUZZ_EXAMPLES`` sets how many draws (a campaign:
``KILN_CONV_FUZZ_EXAMPLES=500 KILN_CONV_FUZZ_SEED=7 python -m pytest
tests/inductor/test_convolution_fuzz.py``; without a seed the draws are the same every run).
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import kiln
from kiln.inductor import config
from tests.oracle import assert_close, needs_torch, torch

EXAMPLES = int(os.environ.get("KILN_CONV_FUZZ_EXAMPLES", "12"))
# a campaign's own draws (the suite's are the same every run)
SEED = os.environ.get("KILN_CONV_FUZZ_SEED")


@st.composite
def layers(draw):
    groups = draw(st.sampled_from((1, 1, 1, 2)))
    channels = groups * draw(st.integers(1, 8))
    outputs = groups * draw(st.integers(1, 10))
    kernel = (draw(st.sampled_from((1, 2, 3, 3, 5))), draw(st.sampled_from((1, 3, 3, 4))))
    stride = (draw(st.sampled_from((1, 1, 2))), draw(st.sampled_from((1, 1, 2, 3))))
    dilation = (draw(st.sampled_from((1, 1, 1, 2))), draw(st.sampled_from((1, 1, 1, 2))))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    reach = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    height = draw(st.integers(max(1, reach[0] - 2 * padding[0]), 20))
    width = draw(st.integers(max(1, reach[1] - 2 * padding[1], 16), 41))
    transposed = draw(st.sampled_from((False, False, True)))
    if transposed:  # its output, (size - 1) * stride - 2 * padding + reach, must not be empty
        padding = tuple(
            min(p, ((size - 1) * s + r - 1) // 2)
            for p, size, s, r in zip(padding, (height, width), stride, reach)
        )
    return {
        "batch": draw(st.integers(1, 3)),
        "channels": channels,
        "outputs": outputs,
        "image": (height, width),
        "kernel": kernel,
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "groups": groups,
        "bias": draw(st.booleans()),
        "transposed": transposed,
        "output_padding": (draw(st.integers(0, 1)), draw(st.integers(0, 1))),
        "layout": draw(st.sampled_from(("contiguous", "channels_last", "sliced"))),
        "producer": draw(st.sampled_from(("none", "relu", "affine"))),
        "seed": draw(st.integers(0, 2**16)),
    }


def _layer_input(lib, data: np.ndarray, layout: str):
    t = lib.tensor(data)
    if layout == "channels_last":
        t = t.contiguous(memory_format=lib.channels_last)
    elif layout == "sliced":  # every other image of a batch twice as long
        t = lib.cat([t, t], 0)[::2]
    return t.detach().requires_grad_(True)


def _run(lib, layer, arrays):
    x = _layer_input(lib, arrays[0], layer["layout"])
    w = lib.tensor(arrays[1]).requires_grad_(True)
    b = lib.tensor(arrays[2]).requires_grad_(True) if layer["bias"] else None
    producer = layer["producer"]

    def fn(x, w, b):
        if producer == "relu":
            x = x.relu()
        elif producer == "affine":
            x = x * 0.75 - 0.25
        nnf = lib.nn.functional
        if layer["transposed"]:
            out = nnf.conv_transpose2d(
                x, w, b, layer["stride"], layer["padding"], _output_padding(layer),
                layer["groups"], layer["dilation"],
            )  # fmt: skip
        else:
            out = nnf.conv2d(
                x, w, b, layer["stride"], layer["padding"], layer["dilation"], layer["groups"]
            )
        return out.tanh()

    if lib is kiln:
        fn = kiln.compile(fn, fullgraph=True)
    out = fn(x, w, b)
    (out * lib.tensor(arrays[3][: out.numel()].reshape(tuple(out.shape)))).sum().backward()
    grads = [x.grad, w.grad] + ([b.grad] if b is not None else [])
    return out.detach(), grads


def _output_padding(layer) -> tuple:
    """The drawn output padding where it is allowed (below the stride or the dilation)."""
    return tuple(
        p if p < max(s, d) else 0
        for p, s, d in zip(layer["output_padding"], layer["stride"], layer["dilation"])
    )


@needs_torch
@seed(int(SEED or 0))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=SEED is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(layers())
def test_random_convolutions_compiled_match_torch(layer):
    rng = np.random.default_rng(layer["seed"])
    n, c, o, g = layer["batch"], layer["channels"], layer["outputs"], layer["groups"]
    kh, kw = layer["kernel"]
    x = rng.standard_normal((n, c) + layer["image"]).astype(np.float32)
    shape = (c, o // g, kh, kw) if layer["transposed"] else (o, c // g, kh, kw)
    w = (rng.standard_normal(shape) / np.sqrt(c // g * kh * kw)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    # enough for any drawn output (a transposed layer's is at most 48 x 128)
    cotangent = rng.standard_normal(n * o * 128 * 128).astype(np.float32)
    arrays = (x, w, b, cotangent)
    expected, expected_grads = _run(torch, layer, arrays)
    previous = config.fx_graph_cache
    config.fx_graph_cache = False
    try:
        got, grads = _run(kiln, layer, arrays)
    finally:
        config.fx_graph_cache = previous
    assert_close(got, expected, rtol=1e-4, atol=1e-4)
    for name, mine, theirs in zip(("input", "weight", "bias"), grads, expected_grads):
        assert mine is not None, name
        assert_close(mine, theirs, rtol=2e-4, atol=2e-4)
