"""Containers (Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict) behave like
torch.nn's: indexing, mutation, renumbering, registration names and printed form."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from tests.oracle import needs_torch, torch


def _layers(lib, n=4):
    return [lib.nn.Linear(i + 1, i + 2) for i in range(n)]


def test_sequential_indexing_slicing_and_forward():
    layers = _layers(kiln)
    seq = nn.Sequential(*layers)
    assert seq[0] is layers[0] and seq[-1] is layers[-1] and len(seq) == 4
    part = seq[1:3]
    assert isinstance(part, nn.Sequential) and list(part) == layers[1:3]
    assert list(part._modules) == ["1", "2"]
    with pytest.raises(IndexError, match="index 4 is out of range"):
        seq[4]
    out = seq(kiln.ones(2, 1))
    assert tuple(out.shape) == (2, 5)


def test_sequential_mutation_renumbers_like_torch():
    results = []
    for lib in (kiln, torch) if torch is not None else (kiln,):
        seq = lib.nn.Sequential(*_layers(lib))
        del seq[1]
        seq.append(lib.nn.ReLU())
        seq.insert(0, lib.nn.Tanh())
        seq.extend([lib.nn.Identity()])
        popped = seq.pop(2)
        seq[0] = lib.nn.Sigmoid()
        results.append(
            ([(k, type(m).__name__) for k, m in seq._modules.items()], type(popped).__name__)
        )
    assert all(r == results[0] for r in results)
    assert results[0][0][0] == ("0", "Sigmoid")


def test_sequential_from_ordered_dict_add_and_mul():
    seq = nn.Sequential(OrderedDict([("inp", nn.Linear(2, 3)), ("act", nn.ReLU())]))
    assert list(seq._modules) == ["inp", "act"] and seq.act is seq[1]
    twice = seq * 2
    assert len(twice) == 4 and twice[2] is seq[0]
    joined = seq + nn.Sequential(nn.Tanh())
    assert len(joined) == 3 and list(joined._modules) == ["0", "1", "2"]
    with pytest.raises(ValueError, match="add operator supports only objects of Sequential"):
        seq + nn.ReLU()


def test_module_list_registration_and_mutation():
    ml = nn.ModuleList(_layers(kiln, 3))
    assert [n for n, _ in ml.named_parameters()][:2] == ["0.weight", "0.bias"]
    ml.append(nn.ReLU())
    ml.insert(1, nn.Tanh())
    ml += [nn.Identity()]
    assert [type(m).__name__ for m in ml] == [
        "Linear",
        "Tanh",
        "Linear",
        "Linear",
        "ReLU",
        "Identity",
    ]
    del ml[0]
    assert list(ml._modules) == [str(i) for i in range(5)]
    assert isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    assert type(ml.pop(-1)).__name__ == "Identity" and len(ml) == 4
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
        ml.extend(nn.ReLU())


@needs_torch
def test_module_list_repr_compresses_repeats_like_torch():
    k = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)] + [nn.ReLU(), nn.ReLU(), nn.Linear(2, 2)])
    t = torch.nn.ModuleList(
        [torch.nn.Linear(2, 2) for _ in range(3)]
        + [torch.nn.ReLU(), torch.nn.ReLU(), torch.nn.Linear(2, 2)]
    )
    assert repr(k) == repr(t)
    assert repr(nn.ModuleList()) == repr(torch.nn.ModuleList())


def test_module_dict_behaves_like_an_ordered_dict():
    md = nn.ModuleDict({"b": nn.ReLU(), "a": nn.Tanh()})
    assert list(md) == ["b", "a"] and "a" in md and len(md) == 2
    md.update([("c", nn.Identity())])
    md["d"] = nn.Linear(1, 1)
    assert list(md.keys()) == ["b", "a", "c", "d"]
    assert [n for n, _ in md.named_parameters()] == ["d.weight", "d.bias"]
    assert isinstance(md.pop("a"), nn.Tanh) and "a" not in md
    with pytest.raises(ValueError, match="element #0 has length 3; 2 is required"):
        md.update([("x", nn.ReLU(), 1)])
    md.clear()
    assert len(md) == 0


@needs_torch
def test_parameter_list_matches_torch():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 3)).astype(np.float32), np.ones(4, np.float32)]
    k = nn.ParameterList([kiln.tensor(a) for a in arrays])
    t = torch.nn.ParameterList([torch.tensor(a) for a in arrays])
    k.append(nn.Parameter(kiln.zeros(1), requires_grad=False))
    t.append(torch.nn.Parameter(torch.zeros(1), requires_grad=False))
    k.append("not a tensor")
    t.append("not a tensor")
    assert all(isinstance(p, nn.Parameter) for p in list(k)[:3])
    assert [n for n, _ in k.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert repr(k).replace("kiln.", "torch.") == repr(t)
    assert len(k[1:3]) == 2 and k[-1] == "not a tensor"
    with pytest.raises(RuntimeError, match="ParameterList should not be called."):
        k()


@needs_torch
def test_parameter_dict_matches_torch():
    k = nn.ParameterDict({"w": kiln.ones(2), "b": nn.Parameter(kiln.zeros(3))})
    t = torch.nn.ParameterDict({"w": torch.ones(2), "b": torch.nn.Parameter(torch.zeros(3))})
    k["extra"] = kiln.ones(1, 1)
    t["extra"] = torch.ones(1, 1)
    assert list(k.keys()) == list(t.keys()) and isinstance(k["w"], nn.Parameter)
    assert [n for n, _ in k.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert repr(k).replace("kiln.", "torch.") == repr(t)
    del k["w"]
    assert "w" not in k and k.get("w", 5) == 5 and k.setdefault("z", None) is None
    merged = k | nn.ParameterDict({"q": kiln.ones(1)})
    assert list(merged) == ["b", "extra", "z", "q"]
    key, value = merged.popitem()
    assert key == "q" and isinstance(value, nn.Parameter)
    with pytest.raises(TypeError, match="cannot be used as a key as it is not a string"):
        k[3] = kiln.ones(1)
