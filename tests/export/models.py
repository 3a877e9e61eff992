"""Small modules the export tests share, written once against a torch-like library."""

from __future__ import annotations

import functools
from types import SimpleNamespace


@functools.cache
def export_models(lib) -> SimpleNamespace:
    nn = lib.nn

    class WithBuffers(nn.Module):
        """Parameters, persistent and non-persistent buffers, and a BatchNorm that updates its
        running statistics in training mode."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)
            self.bn = nn.BatchNorm1d(3)
            self.register_buffer("scale", lib.ones(3) * 2)
            self.register_buffer("shift", lib.zeros(3) + 0.5, persistent=False)

        def forward(self, x):
            h = self.bn(self.lin(x)) * self.scale + self.shift
            return h.relu(), h.sum()

    class Branchy(nn.Module):
        """``kiln.cond`` on a tensor predicate; the branches read a parameter."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            def positive(x):
                return (self.lin(x).relu(), x.sum())

            def negative(x):
                return (x * -2.0, x.mean())

            y, s = lib.cond(x.sum() > 0, positive, negative, (x,))
            return y + s

    return SimpleNamespace(WithBuffers=WithBuffers, Branchy=Branchy)
