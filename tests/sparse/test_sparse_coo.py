"""Sparse COO tensors against PyTorch: construction, coalescing, conversions, arithmetic,
products with their gradients, and a GCN's training losses."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

INDICES = [[0, 1, 1, 0, 2], [2, 0, 2, 2, 1]]
VALUES = [1.0, 2.0, 3.0, 4.0, -1.5]


def _pair(requires_grad=False, shape=(3, 3)):
    k = kiln.sparse_coo_tensor(INDICES, VALUES, shape, requires_grad=requires_grad)
    t = torch.sparse_coo_tensor(INDICES, VALUES, shape, requires_grad=requires_grad)
    return k, t


def _close(k, t, tol=1e-6):
    assert (k.layout is kiln.sparse_coo) == (t.layout is torch.sparse_coo)
    if t.layout is torch.sparse_coo:
        k, t = k.to_dense(), t.to_dense()
    np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


def test_constructor_metadata_matches_pytorch():
    k, t = _pair()
    assert k.layout is kiln.sparse_coo and k.is_sparse and not kiln.ones(1).is_sparse
    assert tuple(k.shape) == tuple(t.shape) and k.dtype is kiln.float32
    assert (k.sparse_dim(), k.dense_dim(), k._nnz()) == (t.sparse_dim(), t.dense_dim(), t._nnz())
    assert k.is_coalesced() is t.is_coalesced() is False
    assert k.device == kiln.device("cpu")
    _close(k, t)


def test_size_is_inferred_from_indices_and_values():
    values = [[1.0, 2.0], [3.0, 4.0]]
    k = kiln.sparse_coo_tensor([[0, 3]], values)
    t = torch.sparse_coo_tensor([[0, 3]], values)
    assert tuple(k.shape) == tuple(t.shape) == (4, 2)
    assert (k.sparse_dim(), k.dense_dim()) == (1, 1)
    _close(k, t)


def test_coalesce_sorts_and_sums_duplicates():
    k, t = _pair()
    kc, tc = k.coalesce(), t.coalesce()
    assert kc.is_coalesced() and kc._nnz() == tc._nnz()
    np.testing.assert_array_equal(kc.indices().numpy(), tc.indices().numpy())
    np.testing.assert_allclose(kc.values().numpy(), tc.values().numpy())


def test_indices_of_an_uncoalesced_tensor_is_pytorchs_error():
    k, t = _pair()
    with pytest.raises(RuntimeError, match="uncoalesced"):
        t.indices()
    with pytest.raises(RuntimeError, match="uncoalesced"):
        k.indices()
    np.testing.assert_array_equal(k._indices().numpy(), t._indices().numpy())
    np.testing.assert_array_equal(k._values().numpy(), t._values().numpy())


def test_out_of_range_index_is_an_error():
    with pytest.raises(RuntimeError, match="size is inconsistent"):
        kiln.sparse_coo_tensor([[0, 5]], [1.0, 2.0], (3,))


def test_dense_to_sparse_and_back():
    a = np.array([[0.0, 1.5, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, -3.0]], np.float32)
    k, t = kiln.tensor(a).to_sparse(), torch.tensor(a).to_sparse()
    np.testing.assert_array_equal(k.indices().numpy(), t.indices().numpy())
    _close(k, t)
    k1, t1 = kiln.tensor(a).to_sparse(1), torch.tensor(a).to_sparse(1)
    assert (k1.sparse_dim(), k1._nnz()) == (t1.sparse_dim(), t1._nnz())
    _close(k1, t1)


def test_transpose_clone_detach_scale_and_negate():
    k, t = _pair(requires_grad=True)
    _close(k.t(), t.t())
    _close(k.clone(), t.clone())
    assert not k.detach().requires_grad and k.detach().is_sparse
    _close(k * 2.5, t * 2.5)
    _close(3 * k, 3 * t)
    _close(-k, -t)


def test_dtype_conversion_keeps_the_layout_and_passes_gradients_back():
    k, t = _pair(requires_grad=True)
    kd, td = k.double(), t.double()
    assert kd.is_sparse and kd.dtype is kiln.float64 and k.to("cpu") is k
    _close(kd, td)
    kiln.sparse.sum(kd * 3).backward()
    torch.sparse.sum(td * 3).backward()
    assert k.grad.dtype is kiln.float32
    _close(k.grad, t.grad)


def test_sum_of_two_sparse_tensors_and_with_a_dense_one():
    k, t = _pair()
    dense = np.arange(9, dtype=np.float32).reshape(3, 3)
    _close(k + k * 2, t + t * 2)
    _close(k - k * 2, t - t * 2)
    _close(kiln.add(kiln.tensor(dense), k), torch.add(torch.tensor(dense), t))
    _close(kiln.tensor(dense) + k, torch.tensor(dense) + t)
    for lib, sparse in ((torch, t), (kiln, k)):
        with pytest.raises(RuntimeError, match=r"add\(sparse, dense\) is not supported"):
            sparse + lib.tensor(dense)


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1)])
def test_sparse_sum_and_its_gradient(dim):
    k, t = _pair(requires_grad=True)
    ks = kiln.sparse.sum(k) if dim is None else kiln.sparse.sum(k, dim)
    ts = torch.sparse.sum(t) if dim is None else torch.sparse.sum(t, dim)
    _close(ks, ts)
    (ks.to_dense() * 1.5).sum().backward() if ks.is_sparse else (ks * 1.5).sum().backward()
    (ts.to_dense() * 1.5).sum().backward() if ts.is_sparse else (ts * 1.5).sum().backward()
    _close(k.grad, t.grad)


def test_repr_names_indices_values_and_layout():
    k, _ = _pair(requires_grad=True)
    text = repr(k)
    assert text.startswith("tensor(indices=tensor([[0, 1, 1, 0, 2],\n")
    assert "values=tensor([ 1.0000,  2.0000,  3.0000,  4.0000, -1.5000])" in text
    assert text.endswith("size=(3, 3), nnz=5, layout=kiln.sparse_coo, requires_grad=True)")


def test_unsupported_op_raises_not_implemented_naming_the_op():
    k, t = _pair()
    with pytest.raises(NotImplementedError):
        t.exp()
    with pytest.raises(NotImplementedError, match="'aten::exp'.*SparseCPU"):
        k.exp()
    with pytest.raises(NotImplementedError, match="sparse_coo"):
        k.numpy()


def test_legacy_float_tensor_constructor():
    k = kiln.sparse.FloatTensor(kiln.tensor(INDICES), kiln.tensor(VALUES), kiln.Size([3, 3]))
    t = torch.sparse.FloatTensor(torch.tensor(INDICES), torch.tensor(VALUES), torch.Size([3, 3]))
    _close(k, t)


def _products(sparse_module: bool):
    rng = np.random.default_rng(0)
    d = rng.standard_normal((3, 4)).astype(np.float32)
    k, t = _pair(requires_grad=True)
    kd, td = kiln.tensor(d, requires_grad=True), torch.tensor(d, requires_grad=True)
    return k, t, kd, td


@pytest.mark.parametrize("how", ["sparse.mm", "mm", "spmm", "matmul", "@"])
def test_sparse_dense_product_and_gradients(how):
    k, t, kd, td = _products(how == "sparse.mm")
    calls = {
        "sparse.mm": lambda lib, a, b: lib.sparse.mm(a, b),
        "mm": lambda lib, a, b: lib.mm(a, b),
        "spmm": lambda lib, a, b: lib.spmm(a, b),
        "matmul": lambda lib, a, b: lib.matmul(a, b),
        "@": lambda lib, a, b: a @ b,
    }
    ko, to = calls[how](kiln, k, kd), calls[how](torch, t, td)
    _close(ko, to, 1e-5)
    weights = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    (ko * kiln.tensor(weights)).sum().backward()
    (to * torch.tensor(weights)).sum().backward()
    _close(kd.grad, td.grad, 1e-5)
    assert k.grad.is_sparse == t.grad.is_sparse
    _close(k.grad, t.grad, 1e-5)


@pytest.mark.parametrize("how", ["sparse.mm", "mm", "matmul"])
def test_dense_sparse_product_and_gradients(how):
    rng = np.random.default_rng(3)
    d = rng.standard_normal((2, 3)).astype(np.float32)
    results = []
    for lib in (kiln, torch):
        sparse = lib.sparse_coo_tensor(INDICES, VALUES, (3, 3), requires_grad=True)
        dense = lib.tensor(d, requires_grad=True)
        fn = {"sparse.mm": lib.sparse.mm, "mm": lib.mm, "matmul": lib.matmul}[how]
        out = fn(dense, sparse)
        (out * lib.arange(6.0).view(2, 3)).sum().backward()
        results.append((out, dense.grad, sparse.grad))
    for ours, theirs in zip(*results):
        _close(ours, theirs, 1e-5)


def test_gradient_reaches_values_through_the_constructor():
    rng = np.random.default_rng(1)
    d = rng.standard_normal((3, 2)).astype(np.float32)
    kv = kiln.tensor(VALUES, requires_grad=True)
    tv = torch.tensor(VALUES, requires_grad=True)
    ks = kiln.sparse_coo_tensor(INDICES, kv * 2, (3, 3))
    ts = torch.sparse_coo_tensor(INDICES, tv * 2, (3, 3))
    kiln.sparse.mm(ks, kiln.tensor(d)).pow(2).sum().backward()
    torch.sparse.mm(ts, torch.tensor(d)).pow(2).sum().backward()
    _close(kv.grad, tv.grad, 1e-5)
    kv.grad = None
    tv.grad = None
    kiln.sparse_coo_tensor(INDICES, kv, (3, 3)).coalesce().to_dense().mul(
        kiln.arange(9.0).view(3, 3)
    ).sum().backward()
    torch.sparse_coo_tensor(INDICES, tv, (3, 3)).coalesce().to_dense().mul(
        torch.arange(9.0).view(3, 3)
    ).sum().backward()
    _close(kv.grad, tv.grad)


def test_sparse_gradients_accumulate_over_two_backward_passes():
    k, t, kd, td = _products(True)
    for _ in range(2):
        kiln.sparse.mm(k, kd).sum().backward()
        torch.sparse.mm(t, td).sum().backward()
    assert k.grad.is_sparse and t.grad.is_sparse
    _close(k.grad, t.grad, 1e-5)
    _close(kd.grad, td.grad, 1e-5)


def _normalized_adjacency(lib, n: int, edges: np.ndarray):
    """pygcn's D^-1 (A + I) as a sparse tensor."""
    a = np.zeros((n, n), np.float32)
    a[edges[0], edges[1]] = 1
    a = np.maximum(a, a.T) + np.eye(n, dtype=np.float32)
    a = a / a.sum(1, keepdims=True)
    rows, cols = np.nonzero(a)
    return lib.sparse.FloatTensor(
        lib.from_numpy(np.stack([rows, cols]).astype(np.int64)),
        lib.from_numpy(a[rows, cols]),
        lib.Size([n, n]),
    )


def _gcn_losses(lib, steps: int = 5) -> list[float]:
    rng = np.random.default_rng(2)
    n, features, hidden, classes = 30, 8, 16, 3
    edges = rng.integers(0, n, (2, 60))
    x = lib.from_numpy(rng.standard_normal((n, features)).astype(np.float32))
    labels = lib.from_numpy(rng.integers(0, classes, n))
    adj = _normalized_adjacency(lib, n, edges)
    w1 = lib.nn.Parameter(
        lib.from_numpy(rng.uniform(-0.3, 0.3, (features, hidden)).astype(np.float32))
    )
    w2 = lib.nn.Parameter(
        lib.from_numpy(rng.uniform(-0.3, 0.3, (hidden, classes)).astype(np.float32))
    )
    optimizer = lib.optim.Adam([w1, w2], lr=0.01, weight_decay=5e-4)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        h = lib.relu(lib.spmm(adj, lib.mm(x, w1)))
        out = lib.nn.functional.log_softmax(lib.sparse.mm(adj, h @ w2), dim=1)
        loss = lib.nn.functional.nll_loss(out, labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_gcn_training_losses_match_pytorch():
    np.testing.assert_allclose(_gcn_losses(kiln), _gcn_losses(torch), rtol=1e-5)
