"""Small modules for the ir tests, written with ops only (independent of kiln.nn's layers)."""

from __future__ import annotations

import kiln


class Affine(kiln.nn.Module):
    """``x @ weight.T + bias``, as nn.Linear computes it."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = kiln.nn.Parameter(kiln.randn(n_out, n_in) * 0.5)
        self.bias = kiln.nn.Parameter(kiln.randn(n_out) * 0.1)

    def forward(self, x):
        return x @ self.weight.t() + self.bias


class MLP(kiln.nn.Module):
    """Two affine layers with a ReLU between them."""

    def __init__(self, n_in: int, n_hidden: int, n_out: int):
        super().__init__()
        self.fc1 = Affine(n_in, n_hidden)
        self.fc2 = Affine(n_hidden, n_out)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())
