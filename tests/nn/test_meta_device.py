"""Models built on the meta device: the device context as factory default, memory
given by ``to_empty`` before initialising, and state dicts loaded with ``assign``."""

from __future__ import annotations

import kiln
from tests.oracle import needs_torch, torch


def test_device_context_sets_the_factory_default_and_nests():
    with kiln.device("meta"):
        model = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.BatchNorm1d(4))
        with kiln.device("cpu"):
            assert kiln.ones(1).device == kiln.device("cpu")
        assert kiln.zeros(2).device == kiln.device("meta")
    assert kiln.ones(1).device == kiln.device("cpu")
    assert model[0].weight.device == kiln.device("meta") and model[1].running_mean.is_meta


@needs_torch
def test_meta_model_gets_memory_with_to_empty_then_initialises():
    results = []
    for lib in (kiln, torch):
        nn = lib.nn
        with lib.device("meta"):
            model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
        assert model.to_empty(device="cpu") is model

        def init(m, nn=nn):
            if isinstance(m, nn.Linear):
                nn.init.constant_(m.weight, 0.5)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm1d):
                m.reset_parameters()

        model.apply(init)
        model.eval()
        out = model(lib.linspace(0, 1, 6).reshape(2, 3))
        weight = model[0].weight
        results.append(
            (
                out.tolist(),
                str(weight.device),
                type(weight).__name__,
                weight.requires_grad,
                str(model[1].num_batches_tracked.dtype).split(".")[-1],
            )
        )
    assert results[0] == results[1]


@needs_torch
def test_meta_model_loads_a_state_dict_with_assign():
    for lib in (kiln, torch):
        with lib.device("meta"):
            model = lib.nn.Linear(3, 4)
        state = lib.nn.Linear(3, 4).state_dict()
        assert str(model.load_state_dict(state, assign=True)) == "<All keys matched successfully>"
        assert model.weight.device == lib.device("cpu") and lib.equal(model.weight, state["weight"])
        assert isinstance(model.weight, lib.nn.Parameter)
