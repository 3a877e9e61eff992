"""Compiled stride-1 convolutions through the direct loops walking flat padded planes
(``lowering/convolution.py``'s ``_plane_forward``, ``_plane_weight_grad``): the forward pass,
the input gradient (the 64-channel one the columns took before) and the weight gradient equal
PyTorch's and eager mode's over odd sizes, padding, kernels and channel counts, with a fused
producer and consumer, under every tile kind, with infinities, for every batch size; the graphs
really take the walk (its output rows, not the rows form's, and no columns product)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.bench.dumps import observe_compiled_graphs
from kiln.inductor import config, extern_convolution
from kiln.inductor.ir import ExternBuffer
from kiln.inductor.lowering import convolution as convolution_lowering
from tests.oracle import assert_close, needs_torch, to_torch, torch

# (input shape, output channels, kernel, padding), all stride 1
CASES = {
    # the MNIST CNN's second layer: 24-column rows (the rows form computes 32)
    "mnist_conv2": ((2, 32, 26, 26), 64, 3, 0),
    # rows of 18 (the rows form 32 with 16 lanes, 24 with 8), odd channel counts
    "rounded_width": ((3, 5, 9, 18), 6, 3, 1),
    # 64 input channels: the input gradient has 64 x 9 taps, past the rows form's reach
    "many_channels": ((2, 64, 21, 19), 32, 3, 1),
    "five_by_five": ((2, 7, 17, 23), 9, 5, 2),
    "odd_everything": ((1, 3, 19, 17), 5, 3, 1),
}


@pytest.fixture(autouse=True)
def _schedules_kept(monkeypatch):
    """Graphs compiled afresh: one rebuilt from the compiled-graph cache keeps no schedule."""
    monkeypatch.setattr(config, "fx_graph_cache", False)


@pytest.fixture(params=[None, "eager", "wide"], ids=lambda k: k or "host")
def tile_knob(request, monkeypatch):
    """The lowering's tiles: the host's, eager mode's (8 lanes), AVX-512's on any host."""
    monkeypatch.setattr(convolution_lowering, "TILES", request.param)
    return request.param


def _calls(observed) -> list:
    """(extern function name, output shape) of every extern call the graphs make."""
    return [
        (step.buffer.kernel.__name__, tuple(step.buffer.layout.shape))
        for item in observed
        for step in item.graph.schedule.steps
        if isinstance(getattr(step, "buffer", None), ExternBuffer)
    ]


def _inputs(case, seed: int):
    xs, o, k, _ = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal((o, xs[1], k, k)) / k).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    return x, w, b


def _run(fn, arrays, compiled: bool, cotangent=None):
    tensors = [kiln.tensor(a, requires_grad=True) for a in arrays]
    with observe_compiled_graphs() as observed:
        out = (kiln.compile(fn, fullgraph=True) if compiled else fn)(*tensors)
        if cotangent is None:
            (out * out.detach().cos()).sum().backward()
        else:
            out.backward(kiln.tensor(cotangent))
    return out.detach(), [t.grad for t in tensors], _calls(observed)


def _plane_rows(calls, batch: int, channels: int, out_rows: int) -> list:
    """The direct loops' forward calls whose output is the plane walk's (N, O, rows, chunk),
    not an image's rows (N, O, OH, OWV)."""
    return [
        shape
        for name, shape in calls
        if name == "conv2d_direct_out" and shape[:2] == (batch, channels) and shape[2] != out_rows
    ]


@needs_torch
@pytest.mark.parametrize("name", list(CASES))
def test_plane_walk_matches_torch(name, tile_knob):
    case = CASES[name]
    xs, o, k, padding = case

    def fn(x, w, b):
        # the producer fuses into the stored plane, the consumer reads the walk's rows
        return (F.conv2d((x * 0.5 + 0.25).relu(), w, b, 1, padding) * 1.5).tanh()

    arrays = _inputs(case, sum(map(ord, name)))
    got, grads, calls = _run(fn, arrays, compiled=True)
    eager, eager_grads, _ = _run(fn, arrays, compiled=False)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in arrays)
    expected = torch.tanh(
        torch.nn.functional.conv2d(torch.relu(tx * 0.5 + 0.25), tw, tb, 1, padding) * 1.5
    )
    (expected * expected.detach().cos()).sum().backward()
    assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert_close(got, eager, rtol=1e-5, atol=1e-5)
    for g, e, t in zip(grads, eager_grads, (tx.grad, tw.grad, tb.grad)):
        assert_close(g, t, rtol=1e-4, atol=1e-4)
        assert_close(g, e, rtol=1e-4, atol=1e-4)
    names = [call[0] for call in calls]
    assert "matmul_out" not in names, calls  # no columns product anywhere
    # the forward pass and the input gradient (a forward pass over the output gradient) walk
    # planes where that computes fewer elements than the rows form (8 lanes: rows of 24 are
    # whole vectors) or the rows form cannot run the layer
    lanes = 16 if convolution_lowering._wide() else 8
    oh, ow = (s + 2 * padding - k + 1 for s in xs[2:])
    forward = convolution_lowering._plane_pays(xs[1], k * k, (oh, ow), xs[3] + 2 * padding, lanes)
    backward = convolution_lowering._plane_pays(o, k * k, xs[2:], ow + 2 * (k - 1 - padding), lanes)
    walked = _plane_rows(calls, xs[0], o, oh) + _plane_rows(calls, xs[0], xs[1], xs[2])
    assert len(walked) == (forward is not None) + (backward is not None), calls
    # the weight gradient walks planes where the forward pass does: through the channels-last
    # loops where the output channels are whole vectors
    channels_last = forward is not None and o % lanes == 0
    assert ("conv2d_weight_grad_channels_last_out" in names) == channels_last, calls
    assert ("conv2d_weight_grad_out" in names) == (not channels_last), calls
    if tile_knob != "eager" and lanes == 16:
        assert len(walked) == 2, calls


@needs_torch
def test_plane_walk_and_rows_form_agree(monkeypatch):
    """The switch off: the rows form (and the columns for the 64-channel input gradient) give
    the same values, and the walk is gone."""
    arrays = _inputs(CASES["many_channels"], 7)

    def fn(x, w, b):
        return F.conv2d(x, w, b, 1, 1).relu()

    got, grads, calls = _run(fn, arrays, compiled=True)
    kiln.dynamo.reset()
    monkeypatch.setattr(convolution_lowering, "PLANES", False)
    off, off_grads, off_calls = _run(fn, arrays, compiled=True)
    assert _plane_rows(calls, 2, 64, 21) and not _plane_rows(off_calls, 2, 64, 21)
    assert "matmul_out" in [call[0] for call in off_calls]  # the columns, before
    assert_close(got, off, rtol=1e-5, atol=1e-5)
    for g, e in zip(grads, off_grads):
        # sums of ~800 terms of size ~1 in another order (the weight gradient's are ~10)
        assert_close(g, e, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "out_rows, padded_width, lanes, walk",
    [
        (24, 26, 16, (3, 8, 208)),  # rows of 8 image rows: 13 vectors, nothing computed past
        (26, 28, 16, (1, 26, 736)),  # one row: 4-row steps would compute 784 elements
        (24, 26, 8, (6, 4, 104)),
        (9, 20, 16, (1, 9, 192)),  # one row of 12 vectors, not 3 of 5
    ],
)
def test_plane_rows_compute_the_fewest_elements(out_rows, padded_width, lanes, walk):
    assert convolution_lowering._plane_rows(out_rows, padded_width, lanes) == walk
    rows, step, chunk = walk
    assert chunk % lanes == 0 and rows * step >= out_rows


def test_rows_form_keeps_layers_whose_rows_are_whole_vectors():
    """32 columns padded to 34 (a ResNet's 32x32 layers): the rows form computes no more than
    the output, the walk would compute 34 a row; 24 columns: the walk 26, the rows form 32."""
    assert convolution_lowering._plane_pays(16, 9, (32, 32), 34, 16) is None
    assert convolution_lowering._plane_pays(32, 9, (24, 24), 26, 16) == (3, 8, 208)
    # past the walk's channel reach the columns run
    assert convolution_lowering._plane_pays(128, 9, (24, 24), 26, 16) is None


@needs_torch
def test_plane_weight_gradient_keeps_infinities_and_nans_as_torch():
    """An infinite input that the walk's columns past the output width read (wrapping into
    the next row's first columns) times their zero gradient would make NaN PyTorch never
    computes: the extern call sums the gradient again over the real columns."""
    x, w, b = _inputs(CASES["rounded_width"], 3)
    x[0, 1, 4, 0] = np.inf  # read by the wrapped columns of the row above
    x[1, 2, 0, 17] = np.nan
    cotangent = np.random.default_rng(4).standard_normal((3, 6, 9, 18)).astype(np.float32)

    def fn(x, w, b):
        return F.conv2d(x, w, b, 1, 1)

    got, grads, calls = _run(fn, (x, w, b), compiled=True, cotangent=cotangent)
    assert _plane_rows(calls, 3, 6, 9), calls
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    expected = torch.nn.functional.conv2d(tx, tw, tb, 1, 1)
    expected.backward(torch.tensor(cotangent))
    assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert np.isinf(tw.grad.numpy()).any() and np.isfinite(tw.grad.numpy()).any()
    for g, t in zip(grads, (tx.grad, tw.grad, tb.grad)):
        assert_close(g, t, rtol=1e-4, atol=1e-4)


def test_plane_weight_gradient_numpy_fallback_reads_the_exact_rows(monkeypatch):
    """Without the machine code the weight gradient's extern sums the exact gradient, whose
    rows are one input row apart (``exact_stride``), not the walk's ``step`` rows."""
    rng = np.random.default_rng(9)
    n, c, o, h, w = 2, 3, 4, 9, 18
    wp, (rows, step, chunk) = w + 2, (3, 4, 80)
    xp = np.zeros((n, c, 15, 1, wp), np.float32)
    xp[:, :, 1 : h + 1, 0, 1 : w + 1] = rng.standard_normal((n, c, h, w))
    g = rng.standard_normal((n, o, h, w)).astype(np.float32)
    flat = np.zeros((n, o, rows * step + 2, wp), np.float32)
    flat[:, :, :h, :w] = g
    flat = np.ascontiguousarray(flat.reshape(n, o, -1)[:, :, : rows * chunk]).reshape(
        n, o, rows, chunk
    )
    padded = xp[:, :, :, 0, :]
    expected = np.einsum(
        "noyx,ncyxij->cijo",
        g,
        np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, :h, :w],
    )
    got = {}
    for machine in (True, False):
        if not machine:
            monkeypatch.setattr(extern_convolution, "_kernels", lambda tiles=None: None)
        out = np.empty((c, 3, 3, o), np.float32)
        extern_convolution.conv2d_weight_grad_out(out, xp, flat, step, g, 8, 4, 3, 0, 1)
        got[machine] = out
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@needs_torch
def test_plane_walk_serves_every_batch_size():
    """The batch marked dynamic (the only symbolic size): one graph, the walk for every batch,
    equal to PyTorch at each."""
    rng = np.random.default_rng(6)
    conv = kiln.nn.Conv2d(8, 16, 3, 1, 0)
    reference = torch.nn.Conv2d(8, 16, 3, 1, 0)
    reference.load_state_dict({k: to_torch(v) for k, v in conv.state_dict().items()})

    def fn(x):
        return conv(x.relu()).tanh()

    compiled = kiln.compile(fn)
    with observe_compiled_graphs() as observed:
        for batch in (2, 3, 5):
            data = rng.standard_normal((batch, 8, 20, 20)).astype(np.float32)
            x = kiln.tensor(data, requires_grad=True)
            kiln.dynamo.mark_dynamic(x, 0)
            out = compiled(x)
            (out * out).sum().backward()
            tx = torch.tensor(data, requires_grad=True)
            expected = reference(tx.relu()).tanh()
            (expected * expected).sum().backward()
            assert_close(out, expected, rtol=1e-5, atol=1e-5)
            assert_close(x.grad, tx.grad, rtol=1e-4, atol=1e-4)
            for p, q in zip(conv.parameters(), reference.parameters()):
                assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
                p.grad, q.grad = None, None
    assert len(observed) == 2  # one forward graph and one backward graph, for every batch
    calls = _calls(observed)
    names = [call[0] for call in calls]
    assert "conv2d_weight_grad_channels_last_out" in names, names
    if convolution_lowering._wide():  # 18-column rows: 32 with 16 lanes, a plane row 20
        assert _plane_rows([c for c in calls if c[1][1] == 16], calls[0][1][0], 16, 18), calls


@needs_torch
def test_channels_last_weight_gradient_keeps_infinities_and_nans_as_torch():
    """The channels-last weight gradient visits only real output positions: an infinity and a
    NaN in the input give PyTorch's pattern with nothing summed again."""
    x, w, b = _inputs(((2, 4, 12, 20), 16, 3, 1), 5)
    x[0, 1, 4, 0] = np.inf
    x[1, 2, 0, 19] = np.nan
    cotangent = np.random.default_rng(8).standard_normal((2, 16, 12, 20)).astype(np.float32)

    def fn(x, w, b):
        return F.conv2d(x, w, b, 1, 1)

    got, grads, calls = _run(fn, (x, w, b), compiled=True, cotangent=cotangent)
    assert "conv2d_weight_grad_channels_last_out" in [call[0] for call in calls], calls
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    expected = torch.nn.functional.conv2d(tx, tw, tb, 1, 1)
    expected.backward(torch.tensor(cotangent))
    assert np.isinf(tw.grad.numpy()).any() and np.isfinite(tw.grad.numpy()).any()
    for g, t in zip(grads, (tx.grad, tw.grad, tb.grad)):
        assert_close(g, t, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tiles", [(16, 4, 6), (16, 1, 12), (8, 2, 6), (8, 1, 5)])
def test_channels_last_weight_gradient_numpy_fallback_and_tiles_agree(monkeypatch, tiles):
    """Every tile, and numpy without the machine code, give the weight gradient of the padded
    input and the channels-last output gradient (scratch rows past it zero for numpy)."""
    lanes, vectors, pairs = tiles
    rng = np.random.default_rng(11)
    n, c, o, oh, ow, k = 3, 5, lanes * vectors, 7, 17, 3
    xp = rng.standard_normal((n, c, oh + k - 1, 1, ow + k - 1)).astype(np.float32)
    g = rng.standard_normal((n, oh, ow, o)).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(xp[:, :, :, 0], (k, k), axis=(2, 3))
    expected = np.einsum("nyxo,ncyxij->cijo", g, windows)
    rows = -(-(c * k * k) // pairs) * pairs
    for machine in (True, False):
        if not machine:
            monkeypatch.setattr(extern_convolution, "_channels_last", lambda: None)
        out = np.full((rows, o), np.nan, np.float32)
        extern_convolution.conv2d_weight_grad_channels_last_out(out, xp, g, k, k, *tiles)
        got = out[: c * k * k].reshape(c, k, k, o)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@needs_torch
def test_plane_walk_of_a_channels_last_input_gives_torchs_values_and_strides():
    """A channels-last input is read through its layout into the stored plane; the output
    and the input gradient come back in PyTorch's channels-last strides."""
    x, w, b = _inputs(((3, 8, 20, 20), 16, 3, 0), 12)

    def fn(x, w, b):
        return F.conv2d(x, w, b, 1, 0)

    kx = kiln.tensor(x).contiguous(memory_format=kiln.channels_last).requires_grad_()
    kw, kb = (kiln.tensor(a, requires_grad=True) for a in (w, b))
    with observe_compiled_graphs() as observed:
        got = kiln.compile(fn, fullgraph=True)(kx, kw, kb)
        got.sum().backward()
    assert _plane_rows(_calls(observed), 3, 16, 18), _calls(observed)
    tx = torch.tensor(x).contiguous(memory_format=torch.channels_last).requires_grad_()
    tw, tb = (torch.tensor(a, requires_grad=True) for a in (w, b))
    expected = torch.nn.functional.conv2d(tx, tw, tb, 1, 0)
    expected.sum().backward()
    assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert got.stride() == expected.stride()
    assert kx.grad.stride() == tx.grad.stride()
    for g, t in zip((kx.grad, kw.grad, kb.grad), (tx.grad, tw.grad, tb.grad)):
        assert_close(g, t, rtol=1e-4, atol=1e-4)


@needs_torch
@pytest.mark.parametrize(
    "inputs, outputs, padding, size",
    [(32, 16, 1, (20, 22)), (16, 32, 0, (18, 22)), (64, 16, 1, (9, 24))],
)
def test_stride_one_transposed_convolution_walks_planes_as_torch(inputs, outputs, padding, size):
    """A stride-1 ConvTranspose2d is a forward pass over the flipped kernel: it, its input
    gradient and its weight gradient take the plane walk's loops and equal PyTorch's."""
    layer = kiln.nn.ConvTranspose2d(inputs, outputs, 3, 1, padding)
    reference = torch.nn.ConvTranspose2d(inputs, outputs, 3, 1, padding)
    reference.load_state_dict({k: to_torch(v) for k, v in layer.state_dict().items()})
    data = np.random.default_rng(13).standard_normal((2, inputs) + size).astype(np.float32)
    x, tx = kiln.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    with observe_compiled_graphs() as observed:
        got = kiln.compile(lambda x: layer(x).tanh())(x)
        got.sum().backward()
    expected = reference(tx).tanh()
    expected.sum().backward()
    names = [call[0] for call in _calls(observed)]
    assert "matmul_out" not in names and names.count("conv2d_direct_out") == 2, names
    assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert_close(x.grad, tx.grad, rtol=1e-4, atol=1e-4)
    for p, q in zip(layer.parameters(), reference.parameters()):
        assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-3)
