"""The numpy convolution kernels (``kiln.ops.nn.conv_kernels``) against PyTorch.

Each forward convolution picks one of three column layouts and each transposed one a gathering
or a scattering (col2im) form by cost; the tests force every layout and every form on the same
cases, so each path is checked on strides, padding, dilation, groups, depthwise weights, 1-3
spatial dims and float64, not only where the cost model would send a case. Gradients go through
the same kernels (the input gradient is a transposed convolution, the weight gradient an
ordinary one), so values and all three gradients are compared. A plain backward computes the
input and weight gradients in numpy (the weight gradient from the forward's columns); one that
records a graph (``create_graph``) runs them as convolutions through kiln ops: both are checked.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.nn import conv_direct, conv_kernels
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

_TOL = {"float32": (2e-5, 2e-4), "float64": (1e-10, 1e-10)}


def _case(spatial, transposed=False, n=2, cg=3, og=2, kernel=3, stride=1, padding=0,
          dilation=1, groups=1, output_padding=0, dtype="float32"):  # fmt: skip
    k = len(spatial)

    def per_dim(v):
        return list(v) if isinstance(v, (tuple, list)) else [v] * k

    return {
        "spatial": list(spatial),
        "transposed": transposed,
        "n": n,
        "cg": cg,
        "og": og,
        "kernel": per_dim(kernel),
        "stride": per_dim(stride),
        "padding": per_dim(padding),
        "dilation": per_dim(dilation),
        "groups": groups,
        "output_padding": per_dim(output_padding),
        "dtype": dtype,
    }


FORWARD = {
    "3x3-same": _case((9, 8), padding=1),
    "strided-odd": _case((11, 7), kernel=(3, 2), stride=(2, 3), padding=(1, 0)),
    "dilated": _case((10, 9), kernel=3, dilation=(2, 1), padding=(2, 1)),
    "groups": _case((7, 6), cg=2, og=3, groups=3, stride=2, padding=1),
    "depthwise": _case((8, 7), cg=1, og=1, groups=4, padding=1),
    "depthwise-multiplier": _case((6, 6), cg=1, og=3, groups=2, stride=2),
    "wide-kernel": _case((6, 12), kernel=(2, 9), padding=(0, 3)),
    "many-channels": _case((4, 4), cg=24, og=5, kernel=2),
    "1x1-strided": _case((9, 9), cg=5, og=4, kernel=1, stride=2),
    "1d": _case((13,), kernel=4, stride=2, padding=2),
    "3d": _case((4, 5, 3), kernel=(2, 3, 2), padding=(1, 0, 1), groups=2),
    "float64": _case((7, 7), stride=2, padding=1, dtype="float64"),
    "one-position": _case((3, 3), kernel=3),
    # the only window is the whole input: a product, no columns
    "whole-window-groups": _case((4, 5), cg=3, og=2, kernel=(4, 5), groups=2, stride=3),
    "whole-window-1d-strided": _case((6,), cg=4, og=1, kernel=6, stride=2),
    "whole-window-3d-dilated-ones": _case((3, 1, 2), kernel=(3, 1, 2), dilation=(1, 3, 1)),
    # stride 1 in every dim: the wide form's cases (odd sizes, uneven padding reaching past
    # the kernel, groups, dilation in both dims, few and many channels, 1-d and 3-d)
    "wide-odd-groups-dilated": _case(
        (9, 11), n=3, cg=4, og=5, groups=2, kernel=(3, 2), padding=(2, 1), dilation=(2, 3)
    ),  # fmt: skip
    "wide-5x5-one-channel-pair": _case((7, 6), cg=2, og=3, kernel=5, padding=2),
    "wide-1x1": _case((5, 7), n=3, cg=6, og=4, kernel=1),
    "wide-1d-many-channels": _case((17,), cg=20, og=3, kernel=3, padding=1, dilation=2),
    "wide-3d-last-dim-shifts": _case((3, 4, 5), cg=12, og=2, kernel=(2, 1, 3), padding=(1, 0, 1)),
    "wide-2d-last-dim-shifts": _case((6, 5), cg=16, og=3, kernel=3, padding=1),
    # images so small that most kernel taps read only padding: the kernel is trimmed to the
    # taps that read the input (one pixel, groups; a dilation that leaves the live tap past
    # the padding, so the trimmed convolution crops; 1-d and 3-d)
    "trimmed-one-pixel": _case((1, 1), cg=6, og=5, kernel=3, padding=1),
    "trimmed-one-pixel-groups": _case((1, 1), cg=2, og=3, groups=2, kernel=(3, 5), padding=(1, 2)),
    "trimmed-strided-to-one-pixel": _case(
        (2, 1), cg=4, og=3, kernel=(5, 3), stride=2, padding=(2, 1)
    ),
    "trimmed-dilated-crop": _case((3, 3), cg=3, og=4, kernel=3, dilation=2, padding=1),
    "trimmed-1d": _case((1,), n=3, cg=5, og=2, kernel=5, padding=2),
    "trimmed-3d": _case((1, 1, 2), cg=3, og=2, kernel=3, padding=1),
    "trimmed-float64": _case((1, 1), cg=3, og=4, kernel=3, padding=1, dtype="float64"),
    # more weight than columns: "taps" columns, the weight read as it is
    "weight-heavy": _case((2, 2), n=1, cg=8, og=20, kernel=3, padding=1),
    "weight-heavy-strided": _case((3, 2), n=1, cg=9, og=10, kernel=3, stride=2, padding=1),
}

TRANSPOSED = {
    "stride1": _case((7, 6), transposed=True, padding=1),
    "stride2": _case((5, 4), transposed=True, kernel=4, stride=2, padding=1),
    "stride-odd-kernel": _case(
        (6, 5), transposed=True, kernel=3, stride=2, padding=1, output_padding=1
    ),  # fmt: skip
    "stride3-kernel2": _case((4, 5), transposed=True, kernel=2, stride=3),  # phases without taps
    "dilated-stride1": _case((6, 6), transposed=True, dilation=2, output_padding=1),
    "dilated-and-strided": _case((4, 4), transposed=True, stride=2, dilation=2, padding=1),
    "large-padding": _case((8, 7), transposed=True, kernel=2, padding=2),  # input cropped
    "groups": _case((5, 5), transposed=True, cg=2, og=3, groups=2, stride=2, padding=1),
    "depthwise": _case((5, 6), transposed=True, cg=1, og=1, groups=3, stride=2),
    # one input channel per group, outputs added per kernel offset: a multiplier, dilation,
    # padding that crops and an output padding
    "depthwise-multiplier-dilated": _case(
        (6, 5),
        transposed=True,
        cg=1,
        og=2,
        groups=3,
        kernel=(3, 2),
        stride=(2, 1),
        dilation=(1, 2),
        padding=(2, 1),
        output_padding=(1, 0),
    ),  # fmt: skip
    "one-pixel-input": _case((1, 1), transposed=True, cg=6, og=4, kernel=4),
    "one-pixel-cropped-and-padded": _case(
        (1, 1), transposed=True, kernel=(4, 3), stride=3, padding=1, output_padding=(2, 1)
    ),  # fmt: skip
    "one-pixel-groups-dilated": _case(
        (1, 1, 1), transposed=True, cg=2, og=3, groups=2, kernel=(3, 1, 2), dilation=(1, 2, 1)
    ),  # fmt: skip
    "one-pixel-past-the-kernel": _case(
        (1,), transposed=True, kernel=2, stride=4, padding=1, output_padding=3
    ),  # fmt: skip
    "1d": _case((6,), transposed=True, kernel=5, stride=2, padding=2, output_padding=1),
    "3d": _case((3, 2, 3), transposed=True, kernel=2, stride=(2, 1, 2), padding=(0, 1, 0)),
    "float64": _case((4, 5), transposed=True, stride=2, kernel=3, dtype="float64"),
    # taps whose every product lands in the cropped padding are left out
    "trimmed-one-pixel": _case((1, 1), transposed=True, cg=4, og=3, kernel=3, padding=1),
    "trimmed-groups-output-padding": _case(
        (1, 1),
        transposed=True,
        cg=2,
        og=3,
        groups=2,
        kernel=(5, 3),
        stride=2,
        padding=(2, 1),
        output_padding=(1, 0),
    ),  # fmt: skip
    "weight-heavy": _case((2, 2), transposed=True, n=1, cg=10, og=9, kernel=3, padding=1),
}


def _arrays(case, rng):
    channels = case["cg"] * case["groups"]
    outputs = case["og"] * case["groups"]
    x = rng.standard_normal([case["n"], channels] + case["spatial"])
    if case["transposed"]:
        w = rng.standard_normal([channels, case["og"]] + case["kernel"])
    else:
        w = rng.standard_normal([outputs, case["cg"]] + case["kernel"])
    b = rng.standard_normal(outputs)
    return [a.astype(case["dtype"]) for a in (x, w, b)]


def _convolve(lib, case, x, w, b):
    args = (case["stride"], case["padding"], case["dilation"], case["transposed"])
    args += (case["output_padding"], case["groups"])
    if lib is torch:
        return torch.ops.aten.convolution(x, w, b, *args)
    return kiln.ops.convolution(x, w, b, *args)


def _run(lib, case, arrays, layout=None, create_graph=False):
    """Output and input/weight/bias gradients; ``layout(lib, t)`` rearranges the input."""
    leaves = [lib.tensor(a, requires_grad=True) for a in arrays]
    x = leaves[0] if layout is None else layout(lib, leaves[0])
    y = _convolve(lib, case, x, leaves[1], leaves[2])
    g = np.cos(np.arange(y.numel())).reshape(tuple(y.shape)).astype(case["dtype"])
    grads = lib.autograd.grad(y, leaves, lib.tensor(g), create_graph=create_graph)
    return [y.detach().numpy()] + [t.detach().numpy() for t in grads]


def _check(case, layout=None, create_graph=False):
    arrays = _arrays(case, np.random.default_rng(0))
    rtol, atol = _TOL[case["dtype"]]
    expected = _run(torch, case, arrays, layout)
    got_all = _run(kiln, case, arrays, layout, create_graph)
    for name, got, want in zip(("out", "grad_x", "grad_w", "grad_b"), got_all, expected):
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol, atol, err_msg=name)


def _force_direct(monkeypatch) -> None:
    """Every float32 2-d convolution the machine-code loops can compute runs through them
    (forward, stride-1 input gradient, weight gradient), whatever its size."""
    for name, value in (("MIN_TAPS", 1), ("MIN_WIDTH", 1), ("MAX_CHANNEL_TAPS", 1 << 30)):
        monkeypatch.setattr(conv_direct, name, value)


@pytest.fixture(params=["chosen", "positions", "taps", "channels", "wide", "direct"])
def column_layout(request, monkeypatch):
    """Every forward convolution (the weight gradient's too) in the given column layout;
    "wide": every stride-1 one in the wide form (the others as chosen); "direct": every one
    the machine-code loops compute through them (the numpy layouts run without them)."""
    if request.param == "direct":
        _force_direct(monkeypatch)
        return request.param
    if request.param != "chosen":
        monkeypatch.setattr(conv_direct, "_kernels", lambda: None)
    if request.param == "wide":
        monkeypatch.setattr(conv_kernels, "_wide_pays", lambda *_: True)
    elif request.param != "chosen":
        monkeypatch.setattr(conv_kernels, "_wide_pays", lambda *_: False)
        monkeypatch.setattr(conv_kernels, "_column_layout", lambda *_: request.param)
    return request.param


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_convolution_and_its_gradients_match_torch(name, column_layout):
    _check(FORWARD[name])


@pytest.mark.parametrize("form", ["chosen", "gather", "col2im"])
@pytest.mark.parametrize("name", sorted(TRANSPOSED))
def test_transposed_convolution_and_its_gradients_match_torch(
    name, form, column_layout, monkeypatch
):
    """The gathering form convolves each phase in the forced column layout too."""
    if form != "chosen":
        monkeypatch.setattr(conv_kernels, "_gather_pays", lambda *_: form == "gather")
    _check(TRANSPOSED[name])


@pytest.mark.parametrize("name", sorted(FORWARD) + [f"T-{n}" for n in sorted(TRANSPOSED)])
def test_gradients_recorded_as_convolutions_match_torch(name):
    """``create_graph``: the derivative runs as kiln-op convolutions, not numpy."""
    case = TRANSPOSED[name[2:]] if name.startswith("T-") else FORWARD[name]
    _check(case, create_graph=True)


@pytest.mark.parametrize("form", ["gather", "col2im"])
def test_input_gradient_of_ordinary_convolution_in_both_forms(form, monkeypatch):
    """The input gradient of a convolution is a transposed convolution: both forms agree."""
    monkeypatch.setattr(conv_kernels, "_gather_pays", lambda *_: form == "gather")
    _check(_case((9, 10), cg=4, og=5, stride=2, padding=1))
    _check(_case((9, 10), cg=4, og=5, padding=1))


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize(
    "layout",
    ["transposed", "channels_last", "strided"],
)
def test_non_contiguous_inputs_match_torch(layout, wide, monkeypatch):
    monkeypatch.setattr(conv_kernels, "_wide_pays", lambda *_: wide)
    rearrange = {
        "transposed": lambda lib, t: t.transpose(-1, -2),
        "channels_last": lambda lib, t: t.contiguous(memory_format=lib.channels_last),
        "strided": lambda lib, t: t[..., ::2],
    }[layout]
    _check(_case((8, 10), cg=4, og=3, stride=(1, 2), padding=1), rearrange)
    _check(_case((8, 10), cg=4, og=3, padding=(1, 2)), rearrange)  # stride 1: may run wide
    _check(_case((8, 10), transposed=True, cg=4, og=3, stride=2, padding=1), rearrange)


def test_output_padding_of_a_stride_or_more_has_the_input_gradient_of_torch():
    """Output padding below the dilation but not the stride: the input gradient keeps the
    input's size (the convolution back reaches past it)."""
    _check(_case((5, 4), transposed=True, stride=(1, 2), dilation=(3, 1), output_padding=(2, 1)))


def test_empty_batch():
    for case in (_case((5, 5), n=0, padding=1), _case((4, 4), transposed=True, n=0, stride=2)):
        arrays = _arrays(case, np.random.default_rng(0))
        got = _convolve(kiln, case, *(kiln.tensor(a) for a in arrays))
        want = _convolve(torch, case, *(torch.tensor(a) for a in arrays))
        assert tuple(got.shape) == tuple(want.shape)


def _count_columns(monkeypatch) -> list:
    """Count ``_columns`` calls (im2col copies) from here on."""
    calls = []
    real = conv_kernels._columns

    def counting(*args):
        calls.append(args[-1])
        return real(*args)

    monkeypatch.setattr(conv_kernels, "_columns", counting)
    return calls


@pytest.mark.parametrize("name", ["3x3-same", "strided-odd", "groups", "3d", "float64"])
def test_weight_gradient_reuses_the_forward_columns(name, column_layout, monkeypatch):
    """A plain backward takes the weight gradient from the columns the forward copied: one
    im2col (or, wide or direct, one padded copy of the input: the input gradient's is of the
    output gradient, whose channels differ here) for the pair, and gradients equal to
    PyTorch's."""
    calls = _count_columns(monkeypatch)
    case = FORWARD[name]
    wide_inputs = []
    real = conv_kernels._wide_buffer

    def counting(a, plan):
        if a.shape[1] == case["cg"] * case["groups"]:
            wide_inputs.append(a.shape)
        return real(a, plan)

    monkeypatch.setattr(conv_kernels, "_wide_buffer", counting)
    for name in ("phase_input", "_plane_input"):  # the direct loops' rows or flat planes
        real_phases = getattr(conv_direct, name)

        def counting_phases(a, *args, _real=real_phases):
            if a.shape[1] == case["cg"] * case["groups"]:
                wide_inputs.append(a.shape)
            return _real(a, *args)

        monkeypatch.setattr(conv_direct, name, counting_phases)
    _check(case)
    assert len(calls) + len(wide_inputs) == 1


def test_columns_over_the_size_limit_are_copied_again(monkeypatch):
    from kiln.ops.nn import conv

    monkeypatch.setattr(conv, "_KEEP_COLUMNS_BYTES", 0)
    calls = _count_columns(monkeypatch)
    _check(FORWARD["3x3-same"])
    assert len(calls) == 2


def test_kept_columns_serve_a_retained_graph_twice():
    """``retain_graph``: the second backward reads the same kept columns (gradients add up)."""
    case = FORWARD["strided-odd"]
    arrays = _arrays(case, np.random.default_rng(1))
    got = {}
    for lib in (torch, kiln):
        x, w, b = (lib.tensor(a, requires_grad=True) for a in arrays)
        y = _convolve(lib, case, x, w, b)
        g = lib.tensor(np.sin(np.arange(y.numel())).reshape(tuple(y.shape)).astype("float32"))
        y.backward(g, retain_graph=True)
        first = w.grad.clone()
        y.backward(g)
        got[lib] = [first.numpy(), w.grad.numpy(), x.grad.numpy()]
    for mine, want in zip(got[kiln], got[torch]):
        np.testing.assert_allclose(mine, want, 2e-5, 2e-4)


def test_frozen_weight_keeps_no_columns_and_gives_the_input_gradient(monkeypatch):
    """No weight gradient to come: the forward keeps no columns."""
    from kiln.ops.nn import conv

    def refuse(*_):
        raise AssertionError("columns kept for a weight that needs no gradient")

    monkeypatch.setattr(conv, "conv_forward_keeping_columns", refuse)
    case = FORWARD["3x3-same"]
    arrays = _arrays(case, np.random.default_rng(2))
    got = {}
    for lib in (torch, kiln):
        x = lib.tensor(arrays[0], requires_grad=True)
        y = _convolve(lib, case, x, lib.tensor(arrays[1]), None)
        (y * y).sum().backward()
        got[lib] = (y.detach().numpy(), x.grad.numpy())
    for mine, want in zip(got[kiln], got[torch]):
        np.testing.assert_allclose(mine, want, 2e-5, 2e-4)


@pytest.mark.parametrize("form", ["columns", "wide", "direct"])
def test_infinite_input_weight_gradient_matches_torch(form, monkeypatch):
    """An infinite input pixel: the wide form's dropped positions, and the direct loops'
    columns past the output width (rounded up to a vector), multiply it by zero (NaN where
    PyTorch never reads it), so its weight gradient falls back to im2col columns."""
    if form == "direct":
        _force_direct(monkeypatch)
    else:
        monkeypatch.setattr(conv_direct, "_kernels", lambda: None)
        monkeypatch.setattr(conv_kernels, "_wide_pays", lambda *_: form == "wide")
    case = _case((6, 7), cg=4, og=3, padding=1)
    x, w, b = _arrays(case, np.random.default_rng(3))
    x[1, 2, 3, 6] = np.inf  # the last column: the first kernel column never reads it
    got = {}
    for lib in (torch, kiln):
        leaves = [lib.tensor(a, requires_grad=True) for a in (x, w, b)]
        y = _convolve(lib, case, *leaves)
        g = np.cos(np.arange(y.numel())).reshape(tuple(y.shape)).astype("float32")
        got[lib] = lib.autograd.grad(y, leaves[1], lib.tensor(g))[0].numpy()
    assert np.isfinite(got[torch][:, :, :, 0]).all()
    np.testing.assert_allclose(got[kiln], got[torch], 2e-5, 2e-4)


def test_wide_form_runs_where_it_pays(monkeypatch):
    """Without the machine-code loops, the ResNet step's 16-channel 3x3 layer at 8x32x32 runs
    wide: shifted copies kept for the weight gradient instead of im2col columns; a strided one
    does not."""
    monkeypatch.setattr(conv_direct, "_kernels", lambda: None)
    x = np.random.default_rng(4).standard_normal((8, 16, 32, 32)).astype("float32")
    w = np.random.default_rng(5).standard_normal((16, 16, 3, 3)).astype("float32")
    pads = [(1, 1), (1, 1)]
    _, cols = conv_kernels.conv_forward_keeping_columns(x, w, (1, 1), pads, (1, 1), 1, (32, 32))
    assert isinstance(cols, conv_kernels.WideColumns)
    _, cols = conv_kernels.conv_forward_keeping_columns(x, w, (2, 2), pads, (1, 1), 1, (16, 16))
    assert isinstance(cols, np.ndarray)


def test_direct_loops_run_where_they_pay():
    """The ResNet step's 3x3 layers run through the machine-code loops, each keeping its padded
    input for a weight gradient in the loops too; a 1x1 layer (a plain product) stays in
    numpy."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((8, 16, 32, 32)).astype("float32")
    w3 = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    pads = [(1, 1), (1, 1)]
    _, kept = conv_kernels.conv_forward_keeping_columns(
        x, w3[:16], (1, 1), pads, (1, 1), 1, (32, 32)
    )
    assert isinstance(kept, conv_direct.PhaseInput)
    calls = []
    real = conv_direct.forward
    conv_direct.forward = lambda *args: calls.append(args) or real(*args)
    try:
        _, kept = conv_kernels.conv_forward_keeping_columns(
            x, w3, (2, 2), pads, (1, 1), 1, (16, 16)
        )
        assert isinstance(kept, conv_direct.PhaseInput) and len(calls) == 1
        w1 = rng.standard_normal((32, 16, 1, 1)).astype("float32")
        conv_kernels.conv_forward(x, w1, (2, 2), [(0, 0), (0, 0)], (1, 1), 1, (16, 16))
        assert len(calls) == 1
    finally:
        conv_direct.forward = real


@pytest.mark.parametrize("forced", [False, True])
@pytest.mark.parametrize(
    "shape, outputs, kernel, stride, padding",
    [
        ((8, 16, 32, 32), 16, 3, 1, 1),  # the ResNet step's layers
        ((8, 16, 32, 32), 32, 3, 2, 1),
        ((8, 3, 32, 32), 16, 3, 1, 1),
        ((3, 5, 13, 21), 6, (5, 3), (2, 1), (2, 1)),  # a last block of 2 outputs, width 21
        ((2, 7, 9, 30), 9, 4, (1, 3), (0, 2)),  # stride 3 across the rows
    ],
)
def test_direct_loops_match_torch_with_threads(shape, outputs, kernel, stride, padding, forced,
                                               monkeypatch):  # fmt: skip
    """Model-sized layers through ``F.conv2d`` and backward, as chosen and forced through the
    loops, on two threads (rows shared by the pool) and one."""
    if forced:
        _force_direct(monkeypatch)
    kernel = (kernel, kernel) if isinstance(kernel, int) else kernel
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype("float32")
    w = (rng.standard_normal((outputs, shape[1]) + kernel) * 0.2).astype("float32")
    before = kiln.get_num_threads()
    try:
        for threads in (2, 1):
            kiln.set_num_threads(threads)
            got, want = [], []
            for lib, out in ((kiln, got), (torch, want)):
                xt, wt = lib.tensor(x, requires_grad=True), lib.tensor(w, requires_grad=True)
                y = lib.nn.functional.conv2d(xt, wt, stride=stride, padding=padding)
                g = np.cos(np.arange(y.numel())).reshape(tuple(y.shape)).astype("float32")
                y.backward(lib.tensor(g))
                out += [y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()]
            for name, mine, theirs in zip(("out", "grad_x", "grad_w"), got, want):
                np.testing.assert_allclose(mine, theirs, 1e-4, 2e-3, err_msg=name)
    finally:
        kiln.set_num_threads(before)


def test_taps_reading_only_padding_are_left_out(monkeypatch):
    """A 3x3 layer over 1x1 images (ResNet-18's last stage) multiplies by its centre tap alone:
    forward, input and weight gradient run as 1x1 products."""
    kernels = []
    for name in ("_dense_forward", "_dense_transposed"):
        real = getattr(conv_kernels, name)

        def recording(a, w, *args, _real=real):
            kernels.append(tuple(w.shape[2:]))
            return _real(a, w, *args)

        monkeypatch.setattr(conv_kernels, name, recording)
    _check(_case((1, 1), n=3, cg=16, og=16, kernel=3, padding=1))
    assert kernels and set(kernels) == {(1, 1)}


def test_trimmed_weight_gradient_of_an_infinite_output_gradient_matches_torch():
    """An infinite output gradient at a model's sizes (PyTorch's oneDNN kernels): the left-out
    taps' gradient stays zero, the live tap's is infinite."""
    case = _case((1, 1), n=3, cg=16, og=16, kernel=3, padding=1)
    x, w, _ = _arrays(case, np.random.default_rng(8))
    got = {}
    for lib in (torch, kiln):
        leaves = [lib.tensor(a, requires_grad=True) for a in (x, w)]
        y = _convolve(lib, case, *leaves, None)
        g = np.ones(tuple(y.shape), "float32")
        g[1, 2] = np.inf
        got[lib] = [t.numpy() for t in lib.autograd.grad(y, leaves, lib.tensor(g))]
    assert (got[torch][1][2, :, 0, 0] == 0).all() and np.isinf(got[torch][1][2, :, 1, 1]).all()
    for mine, want in zip(got[kiln], got[torch]):
        np.testing.assert_allclose(mine, want, 2e-5, 2e-4)


def test_infinite_weight_at_a_tap_reading_only_padding_leaves_the_output_finite():
    """PyTorch's forward skips the padding: an infinite weight at a tap that reads nothing but
    padding does not reach the output (columns of zeros would make it NaN)."""
    case = _case((1, 1), cg=3, og=4, kernel=3, padding=1)
    x, w, b = _arrays(case, np.random.default_rng(9))
    w[1, 2, 0, 0] = np.inf
    got = {lib: _convolve(lib, case, lib.tensor(x), lib.tensor(w), lib.tensor(b)).numpy()
           for lib in (torch, kiln)}  # fmt: skip
    assert np.isfinite(got[torch]).all()
    np.testing.assert_allclose(got[kiln], got[torch], 2e-5, 2e-4)


@pytest.mark.parametrize(
    "batch, image, channels, outputs, layout",
    [
        (8, 8, 64, 64, "channels"),  # ResNet-18's first stage: columns outweigh the weight
        (8, 4, 128, 128, "channels"),  # its second: as many elements
        (8, 2, 256, 256, "taps"),  # its third: the weight eight times the columns
        (8, 1, 512, 512, "taps"),
        (8, 2, 256, 256 * 4, "taps"),
    ],
)
def test_column_layout_weighs_the_weight_copy(batch, image, channels, outputs, layout):
    """ "channels" columns copy the weight with its taps moved: chosen only where the columns
    hold more elements than that copy."""
    got = conv_kernels._column_layout((image, image), (3, 3), channels, batch, outputs)
    assert got == layout
