"""Eager fast paths of the per-call overhead work (issue 18, round 2): ``cross_entropy`` of 2-d
scores as one op and one node (``ops/nn/cross_entropy_rows.py``), and the softmax family's
machine-code backward reached by a gradient that is not C-contiguous. Each is compared with
PyTorch and, bit for bit, with the general path it stands in for."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.nn import losses
from tests.oracle import needs_torch, torch

_DTYPES = {"float32": np.float32, "float64": np.float64}


def _scores(rows, classes, dtype, seed=0, special=False):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, classes)) * 3).astype(dtype)
    if special and rows >= 4 and classes >= 2:
        x[0, 0] = np.nan
        x[1, 1] = np.inf
        x[2, :] = -np.inf
        x[3, 0] = -np.inf
    return x


def _targets(rows, classes, seed=0, ignore=None):
    t = np.random.default_rng(seed + 1).integers(0, classes, rows)
    if ignore is not None:
        t[::3] = ignore
    return t


def _loss_and_grads(lib, x, t, cotangent=None, transposed=False, **kwargs):
    """(loss, d loss / d scores) of ``cross_entropy`` with ``kwargs``; the scores a transposed
    view when ``transposed``."""
    leaf = lib.tensor(x.T.copy() if transposed else x, requires_grad=True)
    scores = leaf.t() if transposed else leaf
    loss = lib.nn.functional.cross_entropy(scores, lib.tensor(t), **kwargs)
    g = lib.tensor(np.ones(()) if cotangent is None else cotangent, dtype=loss.dtype)
    loss.backward(g if loss.ndim else None)
    grad = leaf.grad.T if transposed else leaf.grad
    return loss.detach().numpy(), np.asarray(grad.numpy())


def _composite(monkeypatch, fn):
    """``fn()`` with ``cross_entropy`` kept to its two-op composite."""
    with monkeypatch.context() as m:
        m.setattr(losses, "_rows_op_serves", lambda *args: False)
        return fn()


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


_CASES = [
    # rows, classes, kwargs, special values
    (8, 16, {}, False),
    (8, 16, {"reduction": "sum"}, False),
    (8, 16, {"reduction": "none"}, False),
    (1, 1, {}, False),
    (300, 7, {}, True),
    (700, 1000, {}, False),
    (9, 5, {"ignore_index": 2}, False),
    (12, 6, {"reduction": "none"}, True),
]


@needs_torch
@pytest.mark.parametrize("dtype", list(_DTYPES))
@pytest.mark.parametrize("case", _CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[2]}-{c[3]}")
def test_cross_entropy_rows_match_torch_and_the_composite_bit_for_bit(case, dtype, monkeypatch):
    rows, classes, kwargs, special = case
    x = _scores(rows, classes, _DTYPES[dtype], special=special)
    t = _targets(rows, classes, ignore=kwargs.get("ignore_index"))
    cot = None
    if kwargs.get("reduction") == "none":
        cot = np.random.default_rng(5).standard_normal(rows).astype(_DTYPES[dtype])
        cot[0] = 0.0
    got = _loss_and_grads(kiln, x, t, cot, **kwargs)
    want = _loss_and_grads(torch, x, t, cot, **kwargs)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
    for a, b in zip(
        got, _composite(monkeypatch, lambda: _loss_and_grads(kiln, x, t, cot, **kwargs))
    ):
        _same_bits(a, b)


def test_cross_entropy_rows_take_strided_scores_and_ignored_targets(monkeypatch):
    x = _scores(10, 6, np.float32, seed=3)
    t = _targets(10, 6, seed=3, ignore=-100)
    got = _loss_and_grads(kiln, x, t, transposed=True)
    want = _composite(monkeypatch, lambda: _loss_and_grads(kiln, x, t, transposed=True))
    for a, b in zip(got, want):
        _same_bits(a, b)


def test_cross_entropy_rows_all_ignored_mean_is_nan_with_zero_gradient():
    x = _scores(4, 3, np.float32)
    loss, grad = _loss_and_grads(kiln, x, np.full(4, -100))
    assert np.isnan(loss) and not grad.any()


@needs_torch
def test_cross_entropy_rows_refuse_a_target_out_of_range_as_torch():
    x = kiln.tensor(_scores(4, 3, np.float32), requires_grad=True)
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        kiln.nn.functional.cross_entropy(x, kiln.tensor([0, 7, 1, 2]))
    with pytest.raises(IndexError):
        torch.nn.functional.cross_entropy(torch.zeros(4, 3), torch.tensor([0, 7, 1, 2]))


def test_cross_entropy_rows_record_one_nll_loss_node():
    x = kiln.tensor(_scores(4, 3, np.float32), requires_grad=True)
    loss = kiln.nn.functional.cross_entropy(x, kiln.tensor([0, 2, 1, 2]))
    assert loss.grad_fn.name() == "NllLossBackward0"
    assert type(loss.grad_fn).__name__ == "NllLossBackward0"
    assert loss.grad_fn.op is kiln.ops._cross_entropy_rows
    assert loss.grad_fn.next_functions[0][0].variable is x  # (no LogSoftmaxBackward0 between)


@needs_torch
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_rows_double_backward_matches_torch(reduction, monkeypatch):
    x = _scores(5, 4, np.float64, seed=7)
    t = _targets(5, 4, seed=7)

    def second(lib):
        leaf = lib.tensor(x, requires_grad=True)
        loss = lib.nn.functional.cross_entropy(leaf * 1.5, lib.tensor(t), reduction=reduction)
        if loss.ndim:
            loss = (loss * lib.arange(1.0, 6.0, dtype=lib.float64)).sum()
        (g,) = lib.autograd.grad(loss, leaf, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), leaf)
        return g.detach().numpy(), gg.numpy()

    got = second(kiln)
    for a, b in zip(got, second(torch)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(got, _composite(monkeypatch, lambda: second(kiln))):
        _same_bits(a, b)


def test_cross_entropy_rows_under_saved_tensor_hooks_take_the_composite():
    x = kiln.tensor(_scores(6, 5, np.float32), requires_grad=True)
    packed = []

    def pack(t):
        packed.append(t)
        return t

    with kiln.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = kiln.nn.functional.cross_entropy(x, kiln.tensor(_targets(6, 5)))
    loss.backward()
    assert packed and loss.grad_fn is not None and x.grad is not None


@needs_torch
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("gradient", ["expanded", "transposed"])
def test_softmax_family_backward_of_a_strided_gradient(name, gradient):
    x = _scores(8, 16, np.float32, seed=2)
    g_rows = np.random.default_rng(9).standard_normal((16, 8)).astype(np.float32)

    def grads(lib, contiguous):
        leaf = lib.tensor(x, requires_grad=True)
        y = getattr(lib.nn.functional, name)(leaf, -1)
        if gradient == "expanded":
            g = lib.tensor(np.float32(0.75)).expand(8, 16)
        else:
            g = lib.tensor(g_rows).t()
        y.backward(g.contiguous() if contiguous else g)
        return leaf.grad.numpy()

    got = grads(kiln, contiguous=False)
    np.testing.assert_allclose(got, grads(torch, contiguous=False), rtol=1e-5, atol=1e-6)
    _same_bits(got, grads(kiln, contiguous=True))


def _eight_lane_sums(rows: np.ndarray) -> np.ndarray:
    """Each row's float32 sum in the row kernels' order: eight running lane sums over whole
    vectors of eight, folded lane 0 to 7, then the tail element by element."""
    sums = []
    for row in rows:
        whole = len(row) // 8 * 8
        lanes = np.zeros(8, np.float32)
        for k in range(0, whole, 8):
            lanes = lanes + row[k : k + 8]
        total = lanes[0]
        for v in list(lanes[1:]) + list(row[whole:]):
            total = np.float32(total + v)
        sums.append(total)
    return np.array(sums, np.float32)


@pytest.mark.parametrize("n", [7, 8, 15, 16, 17, 24, 31, 33, 100, 1000])
def test_row_kernels_sum_their_wide_exps_in_the_eight_lane_order(n):
    # the exp passes run 16 lanes wide; their sums must stay the 8-lane loop's
    x = kiln.tensor(_scores(3, n, np.float32, seed=n))
    _, (exps, totals) = kiln.ops.log_softmax.recording_kernel(x, 1, None)
    _same_bits(totals.reshape(-1), _eight_lane_sums(exps))
