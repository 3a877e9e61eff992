"""``nn.utils.prune`` against PyTorch's: masks and reparametrization, global
unstructured pruning, and the errors it raises."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import error_of, needs_torch, torch

if torch is not None:
    import torch.nn.utils.prune  # noqa: F401  (PyTorch does not import it with nn.utils)


def _prunable(lib):
    nn = lib.nn
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.Flatten(), nn.Linear(16, 5))
    with lib.no_grad():
        for i, p in enumerate(model.parameters()):
            values = np.sin(np.arange(p.numel()) * 1.7 + i) * (1 + np.arange(p.numel()) / 50)
            p.copy_(lib.from_numpy(values.astype(np.float32).reshape(p.shape)))
    return model


@needs_torch
def test_pruning_masks_and_reparametrization_match_torch():
    def run(lib):
        prune = lib.nn.utils.prune
        model = _prunable(lib)
        conv, linear = model[0], model[2]
        prune.l1_unstructured(conv, "weight", amount=0.3)
        prune.ln_structured(conv, "weight", amount=1, n=2, dim=0)  # composes with the first
        prune.l1_unstructured(linear, "bias", amount=2)
        container = next(iter(conv._forward_pre_hooks.values()))
        record = [
            [n for n, _ in model.named_parameters()],
            [n for n, _ in model.named_buffers()],
            [type(m).__name__ for m in container],
            conv.weight_mask.numpy().tolist(),
            linear.bias.detach().numpy().tolist(),
        ]
        model(lib.ones(1, 2, 4, 4)).sum().backward()
        record.append(bool((conv.weight_orig.grad[conv.weight_mask == 0] == 0).all()))
        prune.remove(conv, "weight")
        record += [[n for n, _ in conv.named_parameters()], prune.is_pruned(conv)]
        record.append(prune.is_pruned(model))
        return record

    assert run(kiln) == run(torch)


@needs_torch
def test_global_unstructured_pruning_matches_torch():
    def run(lib):
        prune = lib.nn.utils.prune
        model = _prunable(lib)
        pairs = [(model[0], "weight"), (model[2], "weight")]
        prune.global_unstructured(pairs, pruning_method=prune.L1Unstructured, amount=0.4)
        return [int((m.weight == 0).sum()) for m, _ in pairs], model[2].weight_mask.tolist()

    assert run(kiln) == run(torch)


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda p, m: p.l1_unstructured(m, "weight", 1.5),
        lambda p, m: p.l1_unstructured(m, "weight", 10_000),
        lambda p, m: p.l1_unstructured(m, "weight", "half"),
        lambda p, m: p.ln_structured(m, "bias", 1, n=2, dim=0),
        lambda p, m: p.remove(m, "weight"),
    ],
)
def test_pruning_errors_match_torch(call):
    def run(lib):
        model = _prunable(lib)[2]
        kind, text = error_of(lambda: call(lib.nn.utils.prune, model))
        text = text.split(" of module")[0].replace("kiln.", "torch.")
        return kind, text, [n for n, _ in model.named_parameters()]

    assert run(kiln) == run(torch)
