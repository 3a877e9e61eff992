"""Views against PyTorch: shared storage both ways, sizes/strides/offsets, view-vs-copy, versions."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch

# each chain takes (lib, base) where base is arange(2*3*4*5) shaped (4, 5, 6) and returns a view
CHAINS = {
    "transpose": lambda lib, x: x.transpose(0, 2),
    "permute": lambda lib, x: x.permute(2, 0, 1),
    "slice-steps": lambda lib, x: x[1::2, ::3, 1:5:2],
    "slice-out-of-range": lambda lib, x: x[-10:10, 3:100],
    "select": lambda lib, x: x.select(1, -2),
    "int-index": lambda lib, x: x[2, :, 1],
    "narrow": lambda lib, x: x.narrow(2, 1, 3),
    "expand": lambda lib, x: x[:, :1, :].expand(4, 3, 6),
    "expand-new-dims": lambda lib, x: x[0, 0].expand(2, 3, 6),
    "unsqueeze-none": lambda lib, x: x[None, :, None, 1],
    "squeeze": lambda lib, x: x[:, 1:2].squeeze(1),
    "unflatten": lambda lib, x: x.unflatten(2, (2, 3)),
    "flatten-contiguous": lambda lib, x: x.flatten(1),
    "view-infer": lambda lib, x: x.view(-1, 6),
    "diagonal": lambda lib, x: x.diagonal(0, 0, 1),
    "diagonal-offset": lambda lib, x: x.diagonal(-1, 2, 0),
    "unfold": lambda lib, x: x.unfold(2, 2, 3),
    "unfold-overlap-step": lambda lib, x: x.unfold(2, 3, 2),
    "unfold-overlap": lambda lib, x: x.transpose(0, 1).unfold(1, 2, 1),
    "movedim": lambda lib, x: x.movedim(0, -1),
    "mT-slice": lambda lib, x: x.mT[1:, ::2],
    "split-piece": lambda lib, x: x.split(2, dim=1)[1],
    "chunk-piece": lambda lib, x: x.chunk(3, dim=-1)[2],
    "tensor-split-piece": lambda lib, x: lib.tensor_split(x, [1, 3], dim=0)[1],
    "unbind-piece": lambda lib, x: x.unbind(2)[4],
    "as_strided": lambda lib, x: x.as_strided((3, 2), (7, 2), 5),
    "broadcast_to": lambda lib, x: x[:, 0, :1].broadcast_to((5, 4, 3)),
    "chain": lambda lib, x: x.transpose(1, 2)[::2, 1:].unsqueeze(0).narrow(3, 1, 3),
    "reshape-contiguous": lambda lib, x: x.reshape(20, 6),
    "alias": lambda lib, x: x[...],
}


def _base(lib):
    return lib.arange(120.0).reshape(4, 5, 6)


@pytest.mark.parametrize("name", CHAINS)
def test_view_metadata_matches_torch(name):
    """Sizes, strides, storage offset and contiguity of each view chain equal PyTorch's."""
    k = CHAINS[name](kiln, _base(kiln))
    t = CHAINS[name](torch, _base(torch))
    assert tuple(k.shape) == tuple(t.shape)
    assert k.stride() == t.stride()
    assert k.storage_offset() == t.storage_offset()
    assert k.is_contiguous() == t.is_contiguous()
    assert k._base is not None
    assert_close(k, t)


@pytest.mark.parametrize("name", [n for n in CHAINS if "expand" not in n and "broadcast" not in n])
def test_writes_through_a_view_reach_the_base_and_back(name):
    """A write into the view shows in the base; a write into the base shows in the view."""
    results = []
    for lib in (kiln, torch):
        base = _base(lib)
        view = CHAINS[name](lib, base)
        if "overlap" in name:
            view[..., 0] = -1.0  # overlapping windows: write one element per window
        else:
            view.mul_(-1)
        base.add_(1000)
        results.append((base.clone(), view.clone()))
    assert_close(list(results[0]), list(results[1]))


def test_expanded_view_rejects_inplace_writes():
    x = kiln.zeros(3, 1).expand(3, 4)
    with pytest.raises(RuntimeError, match="single memory location"):
        x.add_(1)


VIEW_SHAPES = [
    ("transposed-flat", lambda x: x.t(), (-1,)),
    ("strided-flat", lambda x: x[:, ::2], (-1,)),
    ("transposed-split-last", lambda x: x.t(), (2, 3, 4)),
    ("expanded-flat", lambda x: x[:, :1].expand(6, 3), (18,)),
    ("expanded-split", lambda x: x[:, :1].expand(6, 4), (3, 2, 4)),
    ("strided-keep-rows", lambda x: x[:, ::2], (3, 2, 2)),
    ("transposed-merge-ok", lambda x: x.t()[:1], (2, 3)),
]


@pytest.mark.parametrize("name, make, shape", VIEW_SHAPES, ids=[v[0] for v in VIEW_SHAPES])
def test_view_of_non_viewable_layouts_raises_like_torch(name, make, shape):
    """``view`` succeeds exactly when PyTorch's does (same strides), else raises RuntimeError."""
    k_src = make(kiln.arange(24.0).reshape(6, 4))
    t_src = make(torch.arange(24.0).reshape(6, 4))
    try:
        t_out = t_src.view(shape)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            k_src.view(shape)
        return
    k_out = k_src.view(shape)
    assert k_out.stride() == t_out.stride()
    assert_close(k_out, t_out)


def _shares(a, b) -> bool:
    if isinstance(a, kiln.Tensor):
        return np.shares_memory(a.numpy(), b.numpy())
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


RESHAPES = [
    ("contiguous", lambda x: x, (4, 6)),
    ("transposed", lambda x: x.t(), (24,)),
    ("transposed-keeps-dims", lambda x: x.t(), (4, 1, 6)),
    ("sliced-rows", lambda x: x[::2], (12,)),
    ("sliced-cols", lambda x: x[:, ::2], (3, 2, 2)),
    ("sliced-cols-flat", lambda x: x[:, ::2], (-1,)),
]


@pytest.mark.parametrize("name, make, shape", RESHAPES, ids=[r[0] for r in RESHAPES])
def test_reshape_copies_only_when_a_view_is_impossible(name, make, shape):
    k_src = make(kiln.arange(24.0).reshape(6, 4))
    t_src = make(torch.arange(24.0).reshape(6, 4))
    k_out, t_out = k_src.reshape(shape), t_src.reshape(shape)
    assert _shares(k_out, k_src) == _shares(t_out, t_src)
    assert_close(k_out, t_out)


def test_contiguous_returns_self_or_a_compact_copy():
    x = kiln.arange(6.0).reshape(2, 3)
    assert x.contiguous() is x
    y = x.t().contiguous()
    assert y.is_contiguous() and not _shares(y, x)
    assert y.stride() == (2, 1)


def test_version_counter_is_shared_across_views_and_bumped_by_inplace_ops():
    versions = []
    for lib in (kiln, torch):
        x = lib.zeros(3, 4)
        row = x[1]
        col = x.t()[2]
        seen = [(x._version, row._version, col._version)]
        row.add_(1)
        seen.append((x._version, row._version, col._version))
        x.mul_(2)
        seen.append((x._version, row._version, col._version))
        x[0, 0] = 5.0
        seen.append((x._version, row._version, col._version))
        col[lib.tensor([0, 2])] = 1.0
        seen.append((x._version, row._version, col._version))
        versions.append(seen)
    k, t = versions
    for (kx, kr, kc), (tx, tr, tc) in zip(k, t):
        assert kx == kr == kc
        assert tx == tr == tc
    assert [v[0] for v in k] == sorted(v[0] for v in k) and len({v[0] for v in k}) == len(k)


def test_modifying_a_saved_view_in_place_is_caught_by_autograd():
    x = kiln.randn(3, requires_grad=True)
    y = x * 1
    v = y[1:]
    out = (v * v).sum()
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_inplace_on_a_view_routes_gradients_like_torch():
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
        y = x * 1
        y[:, 1:].mul_(y[:, :2] * 3)
        y.t()[0].exp_()
        (y * lib.tensor([[1.0, -2.0, 3.0], [0.5, 1.0, 2.0]])).sum().backward()
        grads.append(x.grad)
    assert_close(grads[0], grads[1])


def test_view_as_other_dtype_shares_storage():
    x = kiln.tensor([1.0, -2.0])
    bits = x.view(kiln.int32)
    assert bits.dtype is kiln.int32
    assert_close(bits, torch.tensor([1.0, -2.0]).view(torch.int32))
    bits[0] = 0
    assert x[0].item() == 0.0


INPLACE_VIEWS = {
    "t_": lambda x: x.t_(),
    "transpose_": lambda x: x.transpose_(0, 2),
    "unsqueeze_": lambda x: x.unsqueeze_(-1),
    "squeeze_": lambda x: x.squeeze_(1),
    "swapdims_": lambda x: x.swapdims_(1, 0),
}


@pytest.mark.parametrize("name", INPLACE_VIEWS)
def test_inplace_view_methods_change_metadata_like_torch(name):
    shape = (3, 4) if name == "t_" else (2, 1, 3)
    k = kiln.arange(float(np.prod(shape))).reshape(shape)
    t = torch.arange(float(np.prod(shape))).reshape(shape)
    k_view, t_view = k[:], t[:]
    assert INPLACE_VIEWS[name](k_view) is k_view
    INPLACE_VIEWS[name](t_view)
    assert tuple(k_view.shape) == tuple(t_view.shape)
    assert k_view.stride() == t_view.stride()
    k_view.mul_(-1)
    t_view.mul_(-1)
    assert_close(k, t)


def test_inplace_view_method_keeps_autograd_history():
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        y = x * 2
        y.t_()
        y.unsqueeze_(0)
        (y * lib.tensor([[[1.0, 2.0], [3.0, 4.0]]])).sum().backward()
        grads.append(x.grad)
    assert_close(grads[0], grads[1])


def test_inplace_view_method_on_a_leaf_that_requires_grad_raises():
    x = kiln.zeros(3, 1, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x.squeeze_()


def test_broadcast_shapes_and_tensors_match_torch():
    assert kiln.broadcast_shapes((3, 1), 4, (2, 1, 1)) == torch.broadcast_shapes(
        (3, 1), 4, (2, 1, 1)
    )
    with pytest.raises(RuntimeError):
        kiln.broadcast_shapes((2, 3), (4, 3))
    k = kiln.broadcast_tensors(kiln.ones(3, 1), kiln.zeros(4))
    t = torch.broadcast_tensors(torch.ones(3, 1), torch.zeros(4))
    for a, b in zip(k, t):
        assert tuple(a.shape) == tuple(b.shape) and a.stride() == b.stride()
        assert a._base is not None


VIEWS = {
    "write-element-of-expanded": lambda lib: _write(lib.zeros(3, 1).expand(3, 3), (0, 0), 5.0),
    "write-row-of-expanded": lambda lib: _write(lib.zeros(3, 1).expand(3, 3), 0, 5.0),
    "write-column-of-expanded": lambda lib: _write(
        lib.zeros(3, 1).expand(3, 3), (slice(None), 0), lib.tensor([7.0, 8, 9])
    ),
    "fill-row-of-expanded": lambda lib: _base_after(lib.zeros(3, 1), lambda e: e[1].fill_(2)),
    "add-to-column-of-expanded": lambda lib: _base_after(
        lib.zeros(3, 1), lambda e: e[:, 0].add_(1)
    ),
    "view-of-transposed": lambda lib: lib.zeros(3, 4).t().view(12),
    "reshape-zero-infer": lambda lib: lib.zeros(0, 3).reshape(0, -1),
    "setitem-does-not-broadcast": lambda lib: _write(lib.zeros(3, 4), 0, lib.ones(3)),
    "is-view": lambda lib: (lib.zeros(2, 2).t()._is_view(), lib.zeros(2)._is_view()),
    "setitem-more-dims": lambda lib: _write(lib.zeros(3, 4), 0, lib.ones(2, 4)),
    "copy-mismatch": lambda lib: lib.zeros(3).copy_(lib.ones(2)),
    "copy-broadcasts-larger": lambda lib: lib.zeros(3).copy_(lib.ones(2, 3)),
    "binary-mismatch-reports-last-dim": lambda lib: lib.ones(2, 3) + lib.ones(4, 5),
    "slice-step-zero": lambda lib: lib.arange(5)[::0],
    "slice-step-negative": lambda lib: lib.arange(5)[::-1],
    "take-along-dim-broadcasts": lambda lib: lib.take_along_dim(
        lib.tensor([[10, 30, 20]]), lib.tensor([[2, 0]]), dim=1
    ),
}


def _write(x, index, value):
    x[index] = value
    return x


def _base_after(base, fn):
    fn(base.expand(3, 3))
    return base


@cases(VIEWS)
def test_views_match_torch(case):
    same_as_torch(case)
