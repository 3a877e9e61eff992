"""Compiled small-channel convolutions through the direct loops (``extern_convolution``): the
forward pass, the input gradient (a stride-1 transposed convolution) and the weight gradient
equal PyTorch's, over the shapes where the loops apply (rounded output widths, output channels
not a multiple of the channel block, strides, padding, a fused producer, a batch norm before),
the graphs really call the loops, and the switch and the numpy fallback give the same values."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.bench.dumps import observe_compiled_graphs
from kiln.inductor import config, extern_convolution
from kiln.inductor.codegen.llvm.eager_convolution import Tiles
from kiln.inductor.ir import ExternBuffer
from kiln.inductor.lowering import convolution as convolution_lowering
from kiln.ops.nn import conv_direct
from tests.oracle import assert_close, needs_torch, to_torch, torch

# (input shape, output channels, kernel, stride, padding): direct forward everywhere, weight
# gradient too at stride 1 (a rounded output width reads the gradient zero-padded)
CASES = {
    "resnet_stem": ((2, 3, 16, 32), 16, 3, 1, 1),
    "resnet_block": ((2, 16, 16, 16), 16, 3, 1, 1),
    "strided": ((2, 8, 16, 32), 12, 3, 2, 1),
    "rounded_width": ((2, 5, 9, 18), 6, 3, 1, 1),
    "no_padding_odd_channels": ((3, 4, 12, 26), 7, 3, 1, 0),
    "five_by_five": ((2, 6, 10, 40), 8, 5, 1, 2),
}


@pytest.fixture(autouse=True)
def _schedules_kept(monkeypatch):
    """Graphs compiled afresh: one rebuilt from the compiled-graph cache keeps no schedule,
    which the tests read to see which extern calls a graph makes."""
    monkeypatch.setattr(config, "fx_graph_cache", False)


def _extern_buffers(observed) -> list:
    return [
        step.buffer
        for item in observed
        for step in item.graph.schedule.steps
        if isinstance(getattr(step, "buffer", None), ExternBuffer)
    ]


def _externs(observed) -> list:
    return [buf.kernel.__name__ for buf in _extern_buffers(observed)]


def _products(observed) -> list:
    """The shapes of the BLAS products (``matmul_out`` extern calls) the graphs make."""
    return [
        tuple(buf.layout.shape)
        for buf in _extern_buffers(observed)
        if buf.kernel.__name__ == "matmul_out"
    ]


def _inputs(case, seed: int):
    xs, o, k, _, _ = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((o, xs[1], k, k)).astype(np.float32) / k
    b = rng.standard_normal(o).astype(np.float32)
    return x, w, b


def _run_kiln(fn, arrays, compiled: bool):
    tensors = [kiln.tensor(a, requires_grad=True) for a in arrays]
    with observe_compiled_graphs() as observed:
        out = (kiln.compile(fn, fullgraph=True) if compiled else fn)(*tensors)
        (out * out.detach().cos()).sum().backward()
    return out.detach(), [t.grad for t in tensors], _externs(observed)


# the lowering's tile choice: the host's (AVX-512's 16-lane tiles there, eager's on AVX2),
# eager's everywhere, AVX-512's on any host
TILE_KNOBS = [None, "eager", "wide"]


@pytest.fixture(params=TILE_KNOBS, ids=lambda k: k or "host")
def tile_knob(request, monkeypatch):
    monkeypatch.setattr(convolution_lowering, "TILES", request.param)
    return request.param


@needs_torch
@pytest.mark.parametrize("name", list(CASES))
def test_direct_convolution_matches_torch(name, tile_knob):
    case = CASES[name]
    xs, o, k, stride, padding = case

    def fn(x, w, b):
        # the input's producer (an affine and ReLU, as a batch norm's) fuses into the loops'
        # padded copy; the output's consumer reads the loops' (maybe rounded) rows
        return (F.conv2d((x * 0.5 + 0.25).relu(), w, b, stride, padding) * 1.5).tanh()

    arrays = _inputs(case, sum(map(ord, name)))
    got, grads, externs = _run_kiln(fn, arrays, compiled=True)
    eager, eager_grads, _ = _run_kiln(fn, arrays, compiled=False)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in arrays)
    expected = torch.tanh(
        torch.nn.functional.conv2d(torch.relu(tx * 0.5 + 0.25), tw, tb, stride, padding) * 1.5
    )
    (expected * expected.detach().cos()).sum().backward()
    assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert_close(got, eager, rtol=1e-5, atol=1e-5)
    for g, e, t in zip(grads, eager_grads, (tx.grad, tw.grad, tb.grad)):
        assert_close(g, t, rtol=1e-4, atol=1e-4)
        assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert "conv2d_direct_out" in externs, externs
    # the input gradient of a stride-1 layer is a forward pass of the loops too
    assert externs.count("conv2d_direct_out") == (2 if stride == 1 else 1), externs
    # a strided layer's weight gradient takes AVX-512's tiles, not eager's
    wide = convolution_lowering._wide()
    assert ("conv2d_weight_grad_out" in externs) == (stride == 1 or wide), externs


@needs_torch
def test_direct_convolution_in_a_training_step_matches_torch(tile_knob):
    """A ResNet basic block with batch norms, trained two steps: parameters equal PyTorch's."""

    def block(lib):
        nn = lib.nn
        return nn.Sequential(
            nn.Conv2d(8, 8, 3, 1, 1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, 2, 1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, 1, 1, bias=False),
        )

    model = block(kiln)
    reference = block(torch)
    reference.load_state_dict({k: to_torch(v) for k, v in model.state_dict().items()})
    images = np.random.default_rng(1).standard_normal((4, 8, 16, 32)).astype(np.float32)
    optimizer = kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)

    @kiln.compile
    def step(x):
        optimizer.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        return loss

    with observe_compiled_graphs() as observed:
        for _ in range(2):
            loss = step(kiln.tensor(images))
            torch_optimizer.zero_grad()
            torch_loss = reference(torch.tensor(images)).square().mean()
            torch_loss.backward()
            torch_optimizer.step()
            assert_close(loss, torch_loss, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert "conv2d_weight_grad_out" in _externs(observed)


@needs_torch
def test_direct_convolution_keeps_infinities_and_nans_as_torch():
    """An infinite input next to the columns the loops compute past the output width (an
    18-wide output computed 24 wide) gives PyTorch's inf/NaN pattern, no more: the weight
    gradient, which multiplied it by a padding column's zero, is summed again exactly."""
    x, w, b = _inputs(CASES["rounded_width"], 3)
    x[0, 1, 4, -1] = np.inf
    x[1, 2, 0, 0] = np.nan
    cotangent = np.random.default_rng(4).standard_normal((2, 6, 9, 18)).astype(np.float32)

    def fn(x, w, b):
        return F.conv2d(x, w, b, 1, 1)

    tensors = [kiln.tensor(a, requires_grad=True) for a in (x, w, b)]
    with observe_compiled_graphs() as observed:
        got = kiln.compile(fn, fullgraph=True)(*tensors)
        got.backward(kiln.tensor(cotangent))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    expected = torch.nn.functional.conv2d(tx, tw, tb, 1, 1)
    expected.backward(torch.tensor(cotangent))
    externs = _externs(observed)
    assert "conv2d_direct_out" in externs and "conv2d_weight_grad_out" in externs
    assert_close(got.detach(), expected, rtol=1e-5, atol=1e-5)
    assert np.isinf(tw.grad.numpy()).any()  # the case: infinite sums, no NaN from padding
    for g, t in zip([t.grad for t in tensors], (tx.grad, tw.grad, tb.grad)):
        assert_close(g, t, rtol=1e-4, atol=1e-4)


def test_switch_off_gives_the_columns_lowering_and_the_same_values(monkeypatch):
    x, w, b = _inputs(CASES["resnet_block"], 4)

    def fn(x, w, b):
        return F.conv2d(x, w, b, 1, 1).relu()

    got, grads, externs = _run_kiln(fn, (x, w, b), compiled=True)
    monkeypatch.setattr(config, "direct_convolutions", False)
    off, off_grads, off_externs = _run_kiln(fn, (x, w, b), compiled=True)
    assert "conv2d_direct_out" in externs
    assert not [e for e in off_externs if e.startswith("conv2d")], off_externs
    assert_close(got, off, rtol=1e-5, atol=1e-5)
    for g, e in zip(grads, off_grads):
        assert_close(g, e, rtol=1e-4, atol=1e-4)


# register tiles the extern functions take (lanes, output channels, column vectors, taps): eager
# mode's, and the AVX-512 ones compiled graphs choose (any host runs them: LLVM splits the
# vectors for AVX2)
TILES = [(8, 4, 2, 3), (16, 8, 2, 3), (16, 16, 1, 3), (16, 4, 1, 6)]


@pytest.mark.parametrize("tiles", TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("stride", [1, 2])
def test_numpy_fallback_computes_the_loops_sums(monkeypatch, stride, tiles):
    """Without the machine code (LLVM failed to build it) the extern functions compute the
    same sums from the same layouts with numpy; every tile gives the same sums."""
    lanes, channels, columns, taps = tiles
    rng = np.random.default_rng(stride)
    a = rng.standard_normal((2, 5, 11, 16)).astype(np.float32)
    w = rng.standard_normal((6, 5, 3, 3)).astype(np.float32)
    out, _ = conv_direct.forward(a, w, (stride, stride), [(1, 1), (1, 1)], _out(a, stride))
    xp = _phase(a, stride, lanes)
    wb = _blocked(w, channels)
    width = -(-out.shape[3] // lanes) * lanes
    g = rng.standard_normal(out.shape[:3] + (width,)).astype(np.float32)
    g[..., out.shape[3] :] = 0
    forward = (lanes, channels, columns)
    grad = (None, lanes, channels, taps)
    machine = np.empty(g.shape, np.float32), np.empty((5, 3, 3, 6), np.float32)
    extern_convolution.conv2d_direct_out(machine[0], xp, wb, stride, *forward)
    extern_convolution.conv2d_weight_grad_out(machine[1], xp, g, stride, *grad)
    monkeypatch.setattr(extern_convolution, "_kernels", lambda tiles=None: None)
    numpy = np.empty(g.shape, np.float32), np.empty((5, 3, 3, 6), np.float32)
    extern_convolution.conv2d_direct_out(numpy[0], xp, wb, stride, *forward)
    extern_convolution.conv2d_weight_grad_out(numpy[1], xp, g, stride, *grad)
    np.testing.assert_allclose(numpy[0], machine[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(numpy[1], machine[1], rtol=1e-4, atol=1e-4)
    # every tile sums an output element's terms in eager's order: the same bits
    np.testing.assert_array_equal(machine[0][..., : out.shape[3]], out)


def _phase(a, stride: int, lanes: int) -> np.ndarray:
    """``conv_direct.phase_input``'s layout for rows rounded to ``lanes``."""
    out_spatial = _out(a, stride)
    width = -(-out_spatial[1] // lanes) * lanes
    # the padded copy of a convolution whose output is ``width`` wide reads the same pixels
    wide = conv_direct.phase_input(a, (3, 3), (stride, stride), [(1, 1), (1, 1)], out_spatial)
    rows, phases = wide.xp.shape[2:4]
    xp = np.zeros(a.shape[:2] + (rows, phases, width + 2 // stride), np.float32)
    run = min(xp.shape[4], wide.xp.shape[4])
    xp[..., :run] = wide.xp[..., :run]
    return xp


def _blocked(w: np.ndarray, block: int) -> np.ndarray:
    o = w.shape[0]
    blocks = -(-o // block)
    wb = np.zeros((blocks * block,) + w.shape[1:], np.float32)
    wb[:o] = w
    return np.ascontiguousarray(wb.reshape((blocks, block) + w.shape[1:]).transpose(0, 2, 3, 4, 1))


def _out(a, stride):
    return tuple((s + 2 - 3) // stride + 1 for s in a.shape[2:])


@needs_torch
@pytest.mark.parametrize("kernel", [1, 3])
def test_strided_weight_gradient_computes_the_kernels_taps_only(kernel):
    """A stride-2 layer's weight gradient convolves the input cropped on its far side, so the
    product computes the kernel's taps (9 for a 3x3, 1 for a 1x1), not the 16 or 4 the padded
    input gives; values (first and second derivatives) equal PyTorch's."""
    rng = np.random.default_rng(kernel)
    xn = rng.standard_normal((2, 4, 16, 16)).astype(np.float32)
    wn = rng.standard_normal((8, 4, kernel, kernel)).astype(np.float32)
    padding = kernel // 2

    def fn(x, w):
        return F.conv2d(x, w, None, 2, padding).square().sum()

    x, w = (kiln.tensor(a, requires_grad=True) for a in (xn, wn))
    with observe_compiled_graphs() as observed:
        kiln.compile(fn, fullgraph=True)(x, w).backward()
    products = _products(observed)
    assert (1, 8, 4 * kernel * kernel) in products, products
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (xn, wn))
    torch.nn.functional.conv2d(tx, tw, None, 2, padding).square().sum().backward()
    assert_close(w.grad, tw.grad, rtol=1e-4, atol=1e-4)
    assert_close(x.grad, tx.grad, rtol=1e-4, atol=1e-4)
    # the derivative's own graph (create_graph) through the cropped input
    x, w = (kiln.tensor(a.astype(np.float64), requires_grad=True) for a in (xn, wn))
    tx, tw = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in (xn, wn))
    for lib, a, b, out in ((kiln, x, w, []), (torch, tx, tw, [])):
        y = lib.nn.functional.conv2d(a, b, None, 2, padding)
        (gw,) = lib.autograd.grad(y.square().sum(), (b,), create_graph=True)
        out.extend(lib.autograd.grad(gw.sin().sum(), (a, b)))
        if lib is kiln:
            got = out
        else:
            expected = out
    for g, e in zip(got, expected):
        assert_close(g, e, rtol=1e-9, atol=1e-9)


@needs_torch
def test_direct_convolution_serves_every_image_size():
    """``dynamic=True``: one graph for every batch and image size runs the loops forward and
    for the weight gradient (zero-padded where a width is not whole vectors), equal to
    PyTorch at each size."""
    rng = np.random.default_rng(6)
    conv = kiln.nn.Conv2d(4, 8, 3, 1, 1)
    reference = torch.nn.Conv2d(4, 8, 3, 1, 1)
    reference.load_state_dict({k: to_torch(v) for k, v in conv.state_dict().items()})

    def fn(x):
        return conv(x.relu()).tanh()

    compiled = kiln.compile(fn, dynamic=True)
    with observe_compiled_graphs() as observed:
        for shape in ((2, 4, 16, 24), (3, 4, 20, 19), (1, 4, 17, 40)):
            data = rng.standard_normal(shape).astype(np.float32)
            x = kiln.tensor(data, requires_grad=True)
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
    externs = _externs(observed)
    assert "conv2d_direct_out" in externs and "conv2d_weight_grad_out" in externs, externs


@needs_torch
def test_dilated_layer_weight_gradient_is_not_taken_for_the_loops():
    """A dilated layer's weight gradient convolves with the dilation as its stride, which the
    loops' walk does not have: it must take the columns product (found by the convolution
    fuzzer: a 5x1 kernel dilated by 2 over 9x16 images got another layer's sums)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 9, 16)).astype(np.float32)
    w = rng.standard_normal((1, 1, 5, 1)).astype(np.float32)

    def fn(x, w):
        return F.conv2d(x, w, None, 1, 0, (2, 1)).tanh()

    kx, kw = (kiln.tensor(a, requires_grad=True) for a in (x, w))
    out = kiln.compile(fn, fullgraph=True)(kx, kw)
    out.sum().backward()
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    expected = torch.nn.functional.conv2d(tx, tw, None, 1, 0, (2, 1)).tanh()
    expected.sum().backward()
    assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert_close(kw.grad, tw.grad, rtol=1e-4, atol=1e-4)
    assert_close(kx.grad, tx.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", [8, 16, 24, 32, 40])
def test_weight_gradient_walks_with_unrolled_rows_give_the_same_bits(width):
    """Short rows take a weight-gradient walk with the row's vectors unrolled; its sums are
    the generic walk's, bit for bit (same order), and numpy's within rounding."""
    from kiln.runtime import machine_code

    kernels = machine_code.get("convolution")
    rng = np.random.default_rng(width)
    a = rng.standard_normal((3, 5, 7, width)).astype(np.float32)
    x = conv_direct.phase_input(a, (3, 3), (1, 1), [(1, 1), (1, 1)], (7, width))
    g = rng.standard_normal((3, 6, 7, width)).astype(np.float32)
    unrolled, generic = np.empty((5, 3, 3, 6), np.float32), np.empty((5, 3, 3, 6), np.float32)
    kernels.weight_grad(x.xp, g, unrolled, 1)
    kernels.weight_grad(x.xp, g, generic, 1, Tiles())  # eager's tile, rows in a loop
    np.testing.assert_array_equal(unrolled, generic)
    reference = np.empty_like(generic)
    for i in range(3):
        for j in range(3):
            window = extern_convolution._tap_window(x.xp, i, j, 1, (7, width))
            reference[:, i, j, :] = np.einsum("noij,ncij->co", g, window)
    np.testing.assert_allclose(unrolled, reference, rtol=1e-4, atol=1e-4)


@needs_torch
def test_transposed_convolution_that_grows_the_image_multiplies_only_landing_taps():
    """A DCGAN generator's first layer (1x1 noise to 4x4, a 4x4 kernel at stride 1): as a
    forward convolution over the flipped kernel it multiplied every tap over 3 rows and columns
    of padding zeros (16x the multiply-adds); the product then col2im computes the taps that
    land. Values and gradients equal PyTorch's."""
    rng = np.random.default_rng(8)
    z = rng.standard_normal((4, 8, 1, 1)).astype(np.float32)
    w = rng.standard_normal((8, 6, 4, 4)).astype(np.float32)

    def fn(z, w):
        return F.conv_transpose2d(z, w, None, 1, 0).relu()

    kz, kw = (kiln.tensor(a, requires_grad=True) for a in (z, w))
    with observe_compiled_graphs() as observed:
        out = kiln.compile(fn, fullgraph=True)(kz, kw)
        (out * out).sum().backward()
    tz, tw = (torch.tensor(a, requires_grad=True) for a in (z, w))
    expected = torch.nn.functional.conv_transpose2d(tz, tw, None, 1, 0).relu()
    (expected * expected).sum().backward()
    assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert_close(kz.grad, tz.grad, rtol=1e-4, atol=1e-4)
    assert_close(kw.grad, tw.grad, rtol=1e-4, atol=1e-4)
    products = _products(observed)
    # W^T z, the batch as one product (``_transposed_batch``): one column per landing tap
    assert (1, 6 * 16, 4) in products, products


@needs_torch
def test_weight_gradient_of_a_compiled_convolution_is_laid_out_as_the_weight():
    """The loops' weight gradient is a permuted view of (C, KH, KW, O); the gradient the
    parameter keeps is laid out as the parameter, as PyTorch's AccumulateGrad lays it, so
    ``p.grad.view(-1)`` (``parameters_to_vector``, gradient logging) works (probe round 7)."""
    conv = kiln.nn.Conv2d(3, 8, 3, padding=1)
    reference = torch.nn.Conv2d(3, 8, 3, padding=1)
    reference.load_state_dict({k: to_torch(v) for k, v in conv.state_dict().items()})
    data = np.random.default_rng(9).standard_normal((2, 3, 16, 24)).astype(np.float32)
    kiln.compile(lambda x: conv(x).relu().sum())(kiln.tensor(data)).backward()
    reference(torch.tensor(data)).relu().sum().backward()
    assert conv.weight.grad.stride() == reference.weight.grad.stride() == (27, 9, 3, 1)
    assert_close(conv.weight.grad.view(-1), reference.weight.grad.view(-1), rtol=1e-4, atol=1e-4)
    assert_close(
        kiln.nn.utils.parameters_to_vector(p.grad for p in conv.parameters()),
        torch.nn.utils.parameters_to_vector(p.grad for p in reference.parameters()),
        rtol=1e-4,
        atol=1e-4,
    )


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "case",
    [
        # (input shape, output channels per group, kernel, stride, padding, groups, dilation)
        ((3, 4, 1, 1), 5, 4, 1, 0, 1, 1),
        ((2, 6, 3, 2), 2, 3, 2, 1, 2, 1),
        ((4, 4, 2, 3), 3, (2, 3), (2, 1), (0, 1), 1, (1, 2)),
    ],
)
def test_transposed_convolution_of_small_inputs_as_one_product_matches_torch(case, dtype):
    """A transposed convolution with few input positions per sample multiplies the whole batch
    at once (the columns read back through a permuted view): values and gradients equal
    PyTorch's, with groups, strides, padding and dilation, in float32 and float64."""
    xs, ocg, kernel, stride, padding, groups, dilation = case
    kernel = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    rng = np.random.default_rng(xs[0])
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal((xs[1], ocg) + kernel).astype(dtype)

    def fn(x, w):
        return F.conv_transpose2d(x, w, None, stride, padding, 0, groups, dilation).tanh()

    kx, kw = (kiln.tensor(a, requires_grad=True) for a in (x, w))
    with observe_compiled_graphs() as observed:
        out = kiln.compile(fn, fullgraph=True)(kx, kw)
        (out * out).sum().backward()
    tx, tw = (torch.tensor(a, requires_grad=True) for a in (x, w))
    expected = torch.nn.functional.conv_transpose2d(
        tx, tw, None, stride, padding, 0, groups, dilation
    ).tanh()
    (expected * expected).sum().backward()
    tol = 1e-5 if dtype == np.float32 else 1e-10
    assert_close(out, expected, rtol=tol, atol=tol)
    assert_close(kx.grad, tx.grad, rtol=10 * tol, atol=10 * tol)
    assert_close(kw.grad, tw.grad, rtol=10 * tol, atol=10 * tol)
    pin = xs[2] * xs[3]
    products = _products(observed)
    assert (groups, ocg * kernel[0] * kernel[1], xs[0] * pin) in products, products


@pytest.mark.parametrize(
    "tiles", [(16, 8, 2, 3), (16, 16, 1, 3)], ids=lambda t: "x".join(map(str, t))
)
def test_whole_block_loops_give_the_general_loops_bits(tiles):
    """A compiled layer whose sizes come in whole tiles gets loops without the remainders'
    (``whole``): the same bits as the general loops, forward and weight gradient."""
    lanes, channels, columns, taps = tiles
    rng = np.random.default_rng(channels)
    a = rng.standard_normal((2, 5, 11, 32)).astype(np.float32)
    w = rng.standard_normal((16, 5, 3, 3)).astype(np.float32)
    xp = _phase(a, 1, lanes)
    wb = _blocked(w, channels)
    g = rng.standard_normal((2, 16, 11, 32)).astype(np.float32)
    results = []
    for whole in (0, 1):
        out, dw = np.empty(g.shape, np.float32), np.empty((5, 3, 3, 16), np.float32)
        extern_convolution.conv2d_direct_out(out, xp, wb, 1, lanes, channels, columns, whole)
        extern_convolution.conv2d_weight_grad_out(dw, xp, g, 1, None, lanes, channels, taps, whole)
        results.append((out, dw))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    expected = conv_direct.forward(a, w, (1, 1), [(1, 1), (1, 1)], (11, 32))[0]
    np.testing.assert_allclose(results[1][0], expected, rtol=1e-5, atol=1e-5)


def test_a_graph_of_wide_tiles_does_not_build_eager_modes_loops(monkeypatch):
    """AVX-512's tiles are kernels of their own: compiling and running a graph with them
    (forward and both gradients) never builds eager mode's module, whose every tile compiles
    at once (a second of a cold compile's critical path)."""
    from kiln.runtime import machine_code

    monkeypatch.setattr(convolution_lowering, "TILES", "wide")
    built = []
    loader = machine_code._loaders["convolution"]
    monkeypatch.setitem(machine_code._loaders, "convolution", lambda: built.append(1) or loader())
    monkeypatch.delitem(machine_code._built, "convolution", raising=False)
    case = ((2, 8, 18, 20), 16, 3, 1, 1)
    arrays = _inputs(case, 5)

    def fn(x, w, b):
        return F.conv2d(x.relu(), w, b, 1, 1).tanh()

    got, grads, externs = _run_kiln(fn, arrays, compiled=True)
    # 20-column rows: the plane walk, its weight gradient the channels-last loops
    assert "conv2d_direct_out" in externs, externs
    assert "conv2d_weight_grad_channels_last_out" in externs, externs
    assert built == []
    eager, eager_grads, _ = _run_kiln(fn, arrays, compiled=False)
    assert_close(got, eager, rtol=1e-5, atol=1e-5)
    for g, e in zip(grads, eager_grads):
        assert_close(g, e, rtol=1e-4, atol=1e-4)
