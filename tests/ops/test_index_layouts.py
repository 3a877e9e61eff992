"""Advanced indexing lays its result out as PyTorch's ``index`` does: a TensorIterator over the
source restrided with stride 0 along the indexed dims and the broadcast index tensors, so the
kept dims follow the source's order (``x.permute(2, 0, 1)[:, :, i]`` is not row-major) and the
indexed dims follow the index tensors'. Eager kernels and the meta a compiled graph is traced
with agree, so views of such a result behave alike in both."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _draw(rng: np.random.Generator):
    """A source shape, a permutation of its dims and one item per dim (at least one of them an
    integer tensor, possibly 2-d and transposed, or a boolean mask)."""
    while True:
        rank = int(rng.integers(2, 5))
        shape = [int(s) for s in rng.integers(1, 5, rank)]
        perm = [int(d) for d in rng.permutation(rank)]
        items = []
        for d in range(rank):
            n = shape[perm[d]]
            r = rng.random()
            if r < 0.35:
                ishape = [(int(rng.integers(1, 4)),), (2, int(rng.integers(1, 4))), (1,)][
                    int(rng.integers(0, 3))
                ]
                values = rng.integers(0, n, ishape)
                items.append(("tensor", values, len(ishape) == 2 and bool(rng.random() < 0.5)))
            elif r < 0.45:
                mask = rng.random(n) < 0.7
                mask[int(rng.integers(0, n))] = True  # (never empty: its strides are moot)
                items.append(("mask", mask, False))
            elif r < 0.55:
                items.append(("int", int(rng.integers(0, n)), False))
            elif r < 0.65:
                items.append(("slice", slice(0, max(1, n - 1)), False))
            else:
                items.append(("slice", slice(None), False))
        if any(kind in ("tensor", "mask") for kind, _, _ in items):
            return shape, perm, items


def _build(lib, shape, perm, items):
    x = lib.arange(float(np.prod(shape))).reshape(shape).permute(*perm)
    index = []
    for kind, value, transposed in items:
        if kind == "tensor":
            index.append(lib.tensor(value.T.copy()).t() if transposed else lib.tensor(value))
        elif kind == "mask":
            index.append(lib.tensor(value))
        else:
            index.append(value)
    return x, tuple(index)


def _cases(count: int):
    rng = np.random.default_rng(18)
    return [_draw(rng) for _ in range(count)]


@needs_torch
@pytest.mark.parametrize("case", range(40))
def test_eager_indexing_has_torchs_strides(case):
    shape, perm, items = _cases(40)[case]
    tx, ti = _build(torch, shape, perm, items)
    try:
        want = tx[ti]
    except IndexError:  # index tensors that do not broadcast: kiln's message is tested elsewhere
        with pytest.raises(IndexError):
            kx, ki = _build(kiln, shape, perm, items)
            kx[ki]
        return
    kx, ki = _build(kiln, shape, perm, items)
    got = kx[ki]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert got.stride() == want.stride(), (shape, perm, items)


@needs_torch
def test_permuted_source_keeps_its_order_and_views_like_torch():
    tx = torch.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1)
    kx = kiln.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1)
    ti, ki = torch.tensor([0, 2, 1]), kiln.tensor([0, 2, 1])
    for fn in (
        lambda x, i: x[:, :, i],
        lambda x, i: x[:, i[:2] // 2],
        lambda x, i: x[i, :, 0],
        lambda x, i: x[i.view(3, 1), :, i[1:]],  # separated: the indexed dims move to the front
    ):
        want, got = fn(tx, ti), fn(kx, ki)
        assert got.stride() == want.stride()
        assert got.is_contiguous() == want.is_contiguous()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    # a view PyTorch refuses over such a result is refused alike
    with pytest.raises(RuntimeError):
        tx[:, :, ti].view(-1)
    with pytest.raises(RuntimeError, match="view"):
        kx[:, :, ki].view(-1)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_indexing_lays_out_as_eager(backend, dynamic):
    """Symbolic sizes and strides (``dynamic``) are ordered as static ones: a permuted source
    keeps its order rather than coming out row-major."""

    def f(x, i):
        return (
            x[:, :, i] * 2,
            x[:, i],
            x[i],
            x[:, :, i].reshape(-1),
            (x + 1)[..., kiln.tensor([0])],
            x[i.view(2, 1), :, i],
        )

    x = kiln.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1)
    i = kiln.tensor([1, 0])
    eager = f(x, i)
    compiled = kiln.compile(f, backend=backend, dynamic=dynamic)(x, i)
    for e, c in zip(eager, compiled):
        assert c.stride() == e.stride()
        np.testing.assert_array_equal(c.numpy(), e.numpy())


@needs_torch
@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize(
    "source",
    [((1, 2, 1), (3, 2, 3), None), ((3, 1, 1), (3, 2, 3), None), ((1, 1, 3), (2, 4, 3), (2, 1, 0))],
    ids=["expanded-middle", "expanded-first", "expanded-transposed"],
)
def test_out_of_place_index_put_lays_out_as_torch(source, accumulate):
    """index_put clones its input preserving the layout: an expanded (not dense) input gives
    dense strides in its dims' order, broadcast dims keeping their row-major place (numpy's
    order-"K" copy ordered them otherwise: (3, 9, 1) where PyTorch gives (6, 3, 1)); compiled
    code gives the same strides."""
    stored, shape, perm = source

    def run(lib, compiled=False):
        x = lib.arange(float(np.prod(stored))).reshape(stored).expand(shape)
        x = x if perm is None else x.permute(*perm)
        f = lambda x, v: x.index_put((lib.tensor([0]),), v, accumulate=accumulate)  # noqa: E731
        f = kiln.compile(f, backend="inductor", dynamic=False) if compiled else f
        return f(x, lib.ones(tuple(x.shape[1:])))

    want = run(torch)
    for got in (run(kiln), run(kiln, compiled=True)):
        assert got.stride() == want.stride()
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def _writes_into_a_copy(lib) -> dict:
    i = lib.tensor([[[2], [0]], [[0], [1]]])
    rows = lib.tensor([2, 0])
    return {
        "scatter": lambda x, v: x.scatter(1, i, v),
        "scatter-value": lambda x, v: x.scatter(1, i, 2.0),
        "index_add": lambda x, v: x.index_add(1, rows, v.expand(2, 2, 2)),
        "index_copy": lambda x, v: x.index_copy(1, rows, v.expand(2, 2, 2)),
        "index_select": lambda x, v: x.index_select(0, lib.tensor([0, 0])),
    }


@needs_torch
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("op", sorted(_writes_into_a_copy(kiln)))
def test_scatter_index_add_copy_and_select_are_row_major_compiled_too(op, backend, dynamic):
    """PyTorch's scatter, index_add, index_copy and index_select make a row-major result
    whatever the input's layout, as eager kiln does; their decompositions (an index_put into
    a clone, an index, that keep the input's layout) gave a transposed input's order when
    compiled."""

    def inputs(lib):
        rng = np.random.default_rng(0)
        x = lib.tensor(rng.standard_normal((2, 2, 3)).astype(np.float32)).transpose(1, 2)
        return x, lib.tensor(rng.standard_normal((2, 2, 1)).astype(np.float32))

    want = _writes_into_a_copy(torch)[op](*inputs(torch))
    compiled = kiln.compile(_writes_into_a_copy(kiln)[op], backend=backend, dynamic=dynamic)
    for got in (_writes_into_a_copy(kiln)[op](*inputs(kiln)), compiled(*inputs(kiln))):
        assert got.stride() == want.stride()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
