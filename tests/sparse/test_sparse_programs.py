"""Third-party sparse code against PyTorch: pyGAT's sparse attention layer (SpGAT), whose
custom Function builds a sparse tensor in forward and reads ``_indices()`` in backward."""

from __future__ import annotations

import numpy as np

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _special_spmm(lib):
    class SpecialSpmmFunction(lib.autograd.Function):
        """pyGAT's: sparse region, backward to the values at the edges only."""

        @staticmethod
        def forward(ctx, indices, values, shape, b):
            a = lib.sparse_coo_tensor(indices, values, shape)
            ctx.save_for_backward(a, b)
            ctx.N = shape[0]
            return lib.matmul(a, b)

        @staticmethod
        def backward(ctx, grad_output):
            a, b = ctx.saved_tensors
            grad_values = grad_b = None
            if ctx.needs_input_grad[1]:
                grad_a_dense = grad_output.matmul(b.t())
                edge_idx = a._indices()[0, :] * ctx.N + a._indices()[1, :]
                grad_values = grad_a_dense.view(-1)[edge_idx]
            if ctx.needs_input_grad[3]:
                grad_b = a.t().matmul(grad_output)
            return None, grad_values, None, grad_b

    return SpecialSpmmFunction


def _sparse_attention(lib):
    rng = np.random.default_rng(0)
    n, features = 6, 4
    edge = lib.from_numpy(np.array([[0, 1, 2, 3, 4, 5, 0, 2], [1, 0, 3, 2, 5, 4, 2, 0]]))
    h = lib.from_numpy(rng.standard_normal((n, features)).astype(np.float32)).requires_grad_()
    a = lib.from_numpy(rng.standard_normal((1, 2 * features)).astype(np.float32))
    a.requires_grad_()
    spmm = _special_spmm(lib)
    edge_h = lib.cat((h[edge[0, :], :], h[edge[1, :], :]), dim=1).t()
    edge_e = lib.exp(-lib.nn.functional.leaky_relu(a.mm(edge_h).squeeze(), 0.2))
    rowsum = spmm.apply(edge, edge_e, lib.Size([n, n]), lib.ones(n, 1))
    out = spmm.apply(edge, edge_e, lib.Size([n, n]), h).div(rowsum + 1e-9)
    out.pow(2).sum().backward()
    return out.detach().numpy(), h.grad.numpy(), a.grad.numpy()


def test_pygat_sparse_attention_forward_and_gradients():
    # (float32 sums in another order: the attention weights' gradient differs by up to 2e-6 on
    # this AMD host, next to entries of 0.006-0.8)
    for ours, theirs in zip(_sparse_attention(kiln), _sparse_attention(torch)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
