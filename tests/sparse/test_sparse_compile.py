"""Sparse tensors under ``kiln.compile``: no graph op takes one, so code that reads a sparse
tensor breaks the graph and runs eagerly; the dense parts around it are still compiled, and
values and gradients equal eager ones."""

from __future__ import annotations

import warnings

import numpy as np

import kiln

INDICES = [[0, 1, 2, 2, 0], [1, 0, 2, 0, 1]]
VALUES = [0.5, 0.5, 1.0, 0.25, 2.0]


def _adjacency():
    return kiln.sparse_coo_tensor(INDICES, VALUES, (3, 3))


class _GCNLayer(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = kiln.nn.Linear(4, 2)

    def forward(self, x, adj):
        return kiln.log_softmax(kiln.spmm(adj, self.linear(x)).relu(), 1)


def _compiled_without_internal_errors(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a capture failure warns
        return kiln.compile(fn)(*args)


def test_sparse_argument_breaks_the_graph_and_gradients_match_eager():
    kiln.manual_seed(0)
    layer, x, adj = _GCNLayer(), kiln.randn(3, 4), _adjacency()
    eager = layer(x, adj)
    eager.sum().backward()
    eager_grad = layer.linear.weight.grad.clone()
    layer.zero_grad()
    compiled = _compiled_without_internal_errors(layer, x, adj)
    compiled.sum().backward()
    np.testing.assert_allclose(compiled.detach().numpy(), eager.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(layer.linear.weight.grad.numpy(), eager_grad.numpy(), rtol=1e-5)


def test_sparse_tensor_built_inside_a_compiled_function():
    def build(indices, values, x):
        adj = kiln.sparse_coo_tensor(indices, values * 2, (3, 3))
        return kiln.sparse.mm(adj, x).relu() + 1

    args = (kiln.tensor(INDICES), kiln.tensor(VALUES), kiln.randn(3, 4))
    compiled = _compiled_without_internal_errors(build, *args)
    np.testing.assert_array_equal(compiled.numpy(), build(*args).numpy())
    explanation = kiln._dynamo.explain(build)(*args)
    assert explanation.graph_break_count >= 1 and explanation.graph_count >= 1


def test_sparse_global_read_by_compiled_code():
    adj = _adjacency()

    def propagate(x):
        return kiln.sparse.mm(adj, x * 2) + 1

    x = kiln.randn(3, 4)
    compiled = _compiled_without_internal_errors(propagate, x)
    np.testing.assert_allclose(compiled.numpy(), propagate(x).numpy(), rtol=1e-6)


class _SparseLookups(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = kiln.nn.Embedding(10, 4, sparse=True)
        self.bag = kiln.nn.EmbeddingBag(10, 4, sparse=True)
        self.linear = kiln.nn.Linear(4, 2)

    def forward(self, lookups):
        rows = self.embedding(lookups).relu() + self.bag(lookups)[:, None]
        return self.linear(rows).sum()


def _dense(grad):
    return (grad.to_dense() if grad.is_sparse else grad).numpy()


def test_sparse_embedding_gradients_of_a_compiled_module_equal_eager():
    kiln.manual_seed(0)
    model, lookups = _SparseLookups(), kiln.tensor([[1, 2, 3], [4, 1, 9]])
    model(lookups).backward()
    eager = {name: _dense(p.grad).copy() for name, p in model.named_parameters()}
    model.zero_grad()
    _compiled_without_internal_errors(model, lookups).backward()
    for name, param in model.named_parameters():
        assert param.grad.is_sparse == (name != "linear.weight" and name != "linear.bias")
        np.testing.assert_allclose(_dense(param.grad), eager[name], rtol=1e-6)


def test_compiled_sparse_adam_step_equals_eager():
    weights = []
    for compiled in (False, True):
        kiln.manual_seed(0)
        model = _SparseLookups()
        optimizer = kiln.optim.SparseAdam([model.embedding.weight, model.bag.weight], lr=0.1)
        step = _compiled_step(optimizer) if compiled else optimizer.step
        for lookups in ([[1, 2, 3]], [[4, 1, 9]], [[2, 2, 5]]):
            optimizer.zero_grad()
            model(kiln.tensor(lookups)).backward()
            step()
        weights.append(model.embedding.weight.detach().numpy())
    np.testing.assert_allclose(weights[1], weights[0], rtol=1e-6)


def _compiled_step(optimizer):
    compiled = kiln.compile(optimizer.step)

    def step():
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            return compiled()

    return step
