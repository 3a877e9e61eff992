"""Result strides of ops on channels-last and transposed inputs: PyTorch's, and the meta's the
same as the kernel's (a compiled graph plans with the meta's; a later ``view`` of a result works
or fails by its strides, as a ViT's ``cat((cls, patches.transpose(1, 2)))...view()`` does)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _ops(lib):
    F = lib.nn.functional

    def long_zeros(v):
        return lib.zeros_like(v, dtype=lib.long)

    return {
        "softmax": lambda v: v.softmax(-1),
        "softmax-dim1": lambda v: v.softmax(1),
        "log_softmax": lambda v: F.log_softmax(v, -1),
        "layer_norm": lambda v: F.layer_norm(v, v.shape[-1:]),
        "rms_norm": lambda v: F.rms_norm(v, v.shape[-1:]),
        "relu": lambda v: F.relu(v),
        "masked_fill": lambda v: v.masked_fill(v > 0, 0.0),
        "cummax": lambda v: v.cummax(1),
        "cummin": lambda v: v.cummin(1),
        "cumsum": lambda v: v.cumsum(1),
        "tril": lambda v: v.tril(),
        "triu": lambda v: v.triu(1),
        "masked_scatter": lambda v: v.masked_scatter(v > 0, lib.zeros(v.numel())),
        "gather": lambda v: v.gather(1, long_zeros(v)),
        "cat": lambda v: lib.cat([v, v], 1),
        "cat-mixed": lambda v: lib.cat([v, v.contiguous()], 0),
        "stack-contiguous": lambda v: lib.stack([v.contiguous(), v.contiguous()]),
        "where": lambda v: lib.where(v > 0, v, 0.0),
        "add": lambda v: v + 1,
        "clone": lambda v: v.clone(),
        "gelu": lambda v: F.gelu(v),
        "batch_norm": lambda v: F.batch_norm(v, None, None, training=True),
        "group_norm": lambda v: F.group_norm(v, 3),
        "scatter": lambda v: v.scatter(1, long_zeros(v), 1.0),
        "renorm": lambda v: v.renorm(2, 1, 1.0),
        "put": lambda v: v.put(lib.tensor([1, 4]), lib.ones(2)),
        "put-accumulate": lambda v: v.put(lib.tensor([1, 1]), lib.ones(2), accumulate=True),
    }


def _inputs(lib):
    lib.manual_seed(0)
    return {
        "channels-last": lib.randn(2, 3, 4, 6).to(memory_format=lib.channels_last),
        "transposed": lib.randn(2, 6, 3).transpose(1, 2),
    }


def _strides(result):
    results = result if isinstance(result, tuple) else (result,)
    return [r.stride() for r in results]


@pytest.mark.parametrize("layout", ["channels-last", "transposed"])
@pytest.mark.parametrize("op", sorted(_ops(kiln)))
def test_strides_match_torch_and_the_meta(op, layout):
    x = _inputs(kiln)[layout]
    eager = _strides(_ops(kiln)[op](x))
    assert eager == _strides(_ops(torch)[op](_inputs(torch)[layout]))
    assert _strides(_ops(kiln)[op](x.to("meta"))) == eager


def test_view_of_cat_of_transposed_patches_compiles():
    # the ViT patch-embedding pattern under aot_eager, which plans with the metas' strides
    def embed(cls, patches):
        tokens = kiln.cat([cls, patches.flatten(2).transpose(1, 2)], 1)
        return tokens.view(-1, tokens.shape[-1])

    cls, patches = kiln.randn(2, 1, 8), kiln.randn(2, 8, 3, 3)
    expected = embed(cls, patches)
    got = kiln.compile(embed, backend="aot_eager")(cls, patches)
    assert got.shape == expected.shape
    assert kiln.equal(got, expected)


_VIEWED_AFTER = {
    "softmax": lambda v: kiln.softmax(v, 0),
    "log_softmax": lambda v: kiln.nn.functional.log_softmax(v, 0),
    "layer_norm": lambda v: kiln.nn.functional.layer_norm(v, v.shape[-1:]),
    "masked_fill": lambda v: v.masked_fill(v > 0, 0.0),
    "cummax": lambda v: v.cummax(0).values,
    "tril": lambda v: v.tril(),
    "gather": lambda v: v.gather(1, kiln.zeros(v.shape, dtype=kiln.long)),
}


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
@pytest.mark.parametrize("op", sorted(_VIEWED_AFTER))
def test_compiled_view_of_a_result_from_a_permuted_input(op, backend):
    # compiled graphs decompose these ops into pointwise parts that keep the input's layout:
    # their results are laid out as the op's (else ``view`` fails where eager works)
    fn = _VIEWED_AFTER[op]
    x = kiln.randn(3, 4).t().requires_grad_()
    expected = fn(x).view(-1)
    got = kiln.compile(lambda v: fn(v).view(-1), backend=backend)(x)
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
    got.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


# ops returning positions (and what they are chosen from): PyTorch's results are row-major
# whatever the input's layout (reductions, topk, kthvalue, mode), laid out like the input (sort,
# argsort, msort, flip), or column by column (nonzero: its ``as_tuple`` columns are
# contiguous), so ``topk(x, 2).indices.view(-1)`` works as it does there


def _selection_ops(lib):
    return {
        "topk-dim0": lambda v: v.topk(2, 0),
        "topk-dim1": lambda v: v.topk(2, 1),
        "topk-last-smallest": lambda v: v.topk(2, -1, largest=False),
        "topk-unsorted": lambda v: lib.topk(v, 1, 1, sorted=False),
        "kthvalue": lambda v: v.kthvalue(2, -1),
        "kthvalue-keepdim": lambda v: v.kthvalue(2, 1, keepdim=True),
        "sort": lambda v: v.sort(1),
        "sort-stable-descending": lambda v: v.sort(dim=0, descending=True, stable=True),
        "argsort": lambda v: v.argsort(-1),
        "msort": lambda v: lib.msort(v),
        "max-dim": lambda v: v.max(1),
        "min-dim-keepdim": lambda v: v.min(-1, keepdim=True),
        "argmax": lambda v: v.argmax(1),
        "amax-keepdim": lambda v: v.amax(1, keepdim=True),
        "aminmax": lambda v: lib.aminmax(v, dim=-1),
        "median-dim": lambda v: v.median(1),
        "nanmedian-dim": lambda v: v.nanmedian(-1),
        "mode": lambda v: v.mode(1),
        "cummax": lambda v: v.cummax(-1),
        "sum": lambda v: v.sum(1),
        "sum-keepdim": lambda v: v.sum(-1, keepdim=True),
        "prod": lambda v: v.prod(1),
        "mean": lambda v: v.mean(-1),
        "var": lambda v: v.var(1),
        "std-keepdim": lambda v: v.std(-1, keepdim=True),
        "logsumexp": lambda v: v.logsumexp(1),
        "norm": lambda v: lib.linalg.vector_norm(v, dim=-1),
        "all": lambda v: (v > 0).all(1),
        "any-keepdim": lambda v: (v > 0).any(-1, keepdim=True),
        "flip": lambda v: v.flip(1),
    }


def _data_dependent_ops(lib):
    return {
        "nonzero": lambda v: (v > 0).nonzero(),
        "nonzero-as-tuple": lambda v: (v > 0).nonzero(as_tuple=True),
        "where-condition": lambda v: lib.where(v > 0),
        "argwhere": lambda v: lib.argwhere(v > 0),
        "unique_consecutive-dim": lambda v: lib.unique_consecutive(
            (v > 0).long(), dim=-1, return_inverse=True, return_counts=True
        ),
    }


def _selection_inputs(lib, layout):
    data = np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)
    if layout == "contiguous":
        return lib.tensor(data[0])
    if layout == "transposed":
        return lib.tensor(data[0]).t()
    if layout == "permuted":
        return lib.tensor(data).permute(2, 0, 1)
    if layout == "sliced":
        return lib.tensor(data)[:, :, ::2]
    # numpy's big sums take another path than its small ones
    big = np.random.default_rng(1).standard_normal((30, 50, 40)).astype(np.float32)
    return lib.tensor(big).permute(2, 0, 1)


def _results(result):
    return list(result) if isinstance(result, tuple) else [result]


def _assert_like_torch(got, expected):
    got, expected = _results(got), _results(expected)
    assert [r.stride() for r in got] == [r.stride() for r in expected]
    assert [r.is_contiguous() for r in got] == [r.is_contiguous() for r in expected]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)


_LAYOUTS = ["contiguous", "transposed", "permuted", "sliced", "big-permuted"]


@pytest.mark.parametrize("layout", _LAYOUTS)
@pytest.mark.parametrize("op", sorted(_selection_ops(kiln)))
def test_selection_results_have_the_strides_of_torch_and_the_meta(op, layout):
    x = _selection_inputs(kiln, layout)
    eager = _selection_ops(kiln)[op](x)
    _assert_like_torch(eager, _selection_ops(torch)[op](_selection_inputs(torch, layout)))
    meta = _selection_ops(kiln)[op](x.to("meta"))
    assert [r.stride() for r in _results(meta)] == [r.stride() for r in _results(eager)]


@pytest.mark.parametrize("layout", _LAYOUTS[:4])
@pytest.mark.parametrize("op", sorted(_data_dependent_ops(kiln)))
def test_positions_of_nonzero_elements_have_the_strides_of_torch(op, layout):
    got = _data_dependent_ops(kiln)[op](_selection_inputs(kiln, layout))
    _assert_like_torch(got, _data_dependent_ops(torch)[op](_selection_inputs(torch, layout)))


@pytest.mark.parametrize("value", [True, False])
def test_nonzero_of_a_0d_tensor_has_the_strides_of_torch(value):
    got, expected = kiln.tensor(value).nonzero(), torch.tensor(value).nonzero()
    assert (tuple(got.shape), got.stride()) == (tuple(expected.shape), expected.stride())


def test_topk_indices_view_as_one_row():
    # the reported case: the positions were a slice of the whole sort, strides (4, 1)
    x = kiln.randn(6, 4)
    indices = kiln.topk(x, 2).indices
    assert indices.stride() == (2, 1)
    assert kiln.equal(indices.view(-1), indices.reshape(-1))


_EINSUM_VIEWS = {
    "bij->bji": (2, 3, 4),
    "...ij->...ji": (2, 3, 4),
    "ij->ij": (3, 4),
    "ij": (3, 4),
    "ji": (3, 4),
    "ii->i": (4, 4),
    "iij->ji": (3, 3, 2),
}


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("equation", sorted(_EINSUM_VIEWS))
def test_einsum_of_one_operand_without_sums_is_a_view(equation, transposed):
    shape = _EINSUM_VIEWS[equation]
    if transposed:  # made in the other order, then transposed to ``shape``
        shape = shape[:-2] + shape[:-3:-1]
    data = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x, t = kiln.tensor(data), torch.tensor(data)
    if transposed:
        x, t = x.transpose(-1, -2), t.transpose(-1, -2)
    got, expected = kiln.einsum(equation, x), torch.einsum(equation, t)
    _assert_like_torch(got, expected)
    assert got._base is (x if x._base is None else x._base)
    got[(0,) * got.ndim] = 7.0  # written through to the operand, as PyTorch's view is
    assert x[(0,) * x.ndim].item() == 7.0


def test_einsum_view_keeps_its_gradient():
    x = kiln.randn(2, 3, 4, requires_grad=True)
    kiln.einsum("bij->bji", x).mul(kiln.arange(12.0).reshape(3, 4).t()).sum().backward()
    assert kiln.equal(x.grad, kiln.arange(12.0).reshape(3, 4).expand(2, 3, 4))


_COMPILED_SELECTIONS = {
    "topk-indices": lambda v: v.topk(2, 1).indices.view(-1),
    "kthvalue-indices": lambda v: v.kthvalue(2, 0).indices.view(-1),
    "sort": lambda v: v.sort(1),
    "argsort": lambda v: v.argsort(0),
    "max-dim": lambda v: v.max(0, keepdim=True),
    "amax": lambda v: v.amax(1, keepdim=True).view(-1),
}


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
@pytest.mark.parametrize("op", sorted(_COMPILED_SELECTIONS))
def test_compiled_selections_have_the_eager_strides(op, backend):
    fn = _COMPILED_SELECTIONS[op]
    x = kiln.randn(4, 6).t()
    expected = _results(fn(x))
    got = _results(kiln.compile(fn, backend=backend)(x))
    assert [r.stride() for r in got] == [r.stride() for r in expected]
    for g, e in zip(got, expected):
        assert kiln.equal(g, e)


@pytest.mark.parametrize(
    "shape, size",
    [
        ((), (1, 1)),
        ((5,), (1, 5)),
        ((1, 5), (1, 1, 5)),
        ((5,), (3, 1, 5)),
        ((5,), (1, 3, 5)),
        ((2, 1), (1, 2, 4)),
        ((2, 3), (1, 1, 2, 3)),
    ],
)
def test_expand_lays_out_new_dims_as_pytorch(shape, size):
    """A new dim of size 1 steps over the dims after it (``(1, 5)`` expanded to ``(1, 1, 5)``
    has strides ``(5, 5, 1)``), a broadcast one is 0: eager, and compiled through the meta."""
    expected = torch.ones(shape).expand(*size).stride()
    assert kiln.ones(shape).expand(*size).stride() == expected
    assert kiln.compile(lambda x: x.expand(*size) * 1)(kiln.ones(shape)).shape == size
    assert kiln.compile(lambda x: x.expand(*size))(kiln.ones(shape)).stride() == expected


def test_in_place_ops_on_an_expanded_view_write_through_or_refuse_as_pytorch():
    """A new size-1 dim keeps the view writable through its owner (PyTorch writes the base);
    a broadcast dim makes elements share memory, which PyTorch refuses to write."""
    ours, theirs = kiln.arange(5.0), torch.arange(5.0)
    ours.expand(1, 5).mul_(2)
    theirs.expand(1, 5).mul_(2)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError, match="single memory location"):
            lib.ones(1, 5).expand(3, 1, 5).mul_(2)


def _view_scatters(lib):
    def ones_of(view):
        return lib.ones(tuple(view.shape))

    return {
        "slice_scatter": lambda v: lib.slice_scatter(v, ones_of(v[:, :, 1:3]), 2, 1, 3),
        "select_scatter": lambda v: lib.select_scatter(v, ones_of(v.select(1, 0)), 1, 0),
        "diagonal_scatter": lambda v: lib.diagonal_scatter(
            v, ones_of(v.diagonal(0, 1, 2)), 0, 1, 2
        ),
        # (which elements a strided view reaches depends on the result's layout)
        "as_strided_scatter": lambda v: lib.as_strided_scatter(v, lib.ones(2, 2), (2, 2), (1, 2)),
    }


def _laid_out_inputs(lib):
    rng = np.random.default_rng(0)
    image = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    rows = rng.standard_normal((2, 6, 3)).astype(np.float32)
    wide = rng.standard_normal((2, 8, 5)).astype(np.float32)
    return {
        "channels-last": lib.tensor(image).contiguous(memory_format=lib.channels_last),
        "transposed": lib.tensor(rows).transpose(1, 2),
        # not dense: the copy keeps the gaps (clone_preserve_strides), its offset aside
        "sliced": lib.tensor(image)[..., ::2],
        "transposed-sliced": lib.tensor(wide).transpose(1, 2)[:, 1:, ::2],
        # overlapping: the copy is clone's, dense
        "expanded": lib.tensor(rows[:, :1]).expand(2, 6, 3),
    }


@pytest.mark.parametrize("mode", ["eager", "meta", "aot_eager", "inductor"])
@pytest.mark.parametrize(
    "layout", ["channels-last", "transposed", "sliced", "transposed-sliced", "expanded"]
)
@pytest.mark.parametrize("op", sorted(_view_scatters(kiln)))
def test_view_scatters_keep_the_input_layout_as_torch(op, layout, mode):
    fn = _view_scatters(kiln)[op]
    x = _laid_out_inputs(kiln)[layout]
    want = _view_scatters(torch)[op](_laid_out_inputs(torch)[layout])
    if mode == "meta":
        assert fn(x.to("meta")).stride() == want.stride()
        return
    got = (fn if mode == "eager" else kiln.compile(fn, backend=mode))(x)
    assert got.stride() == want.stride()
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def _window_readers(lib):
    return {
        "slice_scatter": lambda w: lib.slice_scatter(
            w, lib.ones(w.shape[0], 1, w.shape[2]), 1, 0, 1
        ),
        "clone": lambda w: w.clone(),
        "contiguous-channels": lambda w: w.transpose(0, 1).contiguous(),
    }


# (reader, window size, step); not a view scatter of overlapping windows, whose copy keeps
# overlapping strides (clone_preserve_strides) that no gather reproduces
_WINDOW_CASES = [
    (reader, size, step)
    for reader in sorted(_window_readers(kiln))
    for size, step in ((1, 1), (2, 2), (3, 1))
    if not (reader == "slice_scatter" and step < size)
]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(("reader", "size", "step"), _WINDOW_CASES)
def test_compiled_unfold_is_laid_out_like_the_eager_view(reader, size, step, backend):
    """A compiled graph gathers ``unfold``'s windows into a copy; the copy takes the view's
    dim order, so an op that keeps its input's layout gives eager's and PyTorch's strides
    (a view scatter of a transposed input's windows was row-major)."""
    rows = np.arange(18, dtype=np.float32).reshape(6, 3)

    def program(lib):
        return lambda x: _window_readers(lib)[reader](x.unfold(1, size, step))

    want = program(torch)(torch.tensor(rows).t())
    eager = program(kiln)(kiln.tensor(rows).t())
    got = kiln.compile(program(kiln), backend=backend)(kiln.tensor(rows).t())
    assert eager.stride() == want.stride()
    assert got.stride() == want.stride()
    np.testing.assert_array_equal(got.numpy(), want.numpy())
