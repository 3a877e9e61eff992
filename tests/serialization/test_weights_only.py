"""weights_only loading as PyTorch's: which checkpoints load and which are refused (with its
message), the safe-globals allowlist (add/get/clear, the context manager, named pairs) and the
scan for the globals a checkpoint would need."""

from __future__ import annotations

import argparse
import io
import pickle

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _saved_and_loaded(lib, obj, **load_kwargs):
    buf = io.BytesIO()
    lib.save(obj, buf)
    buf.seek(0)
    return lib.load(buf, **load_kwargs)


def _load_outcome(lib, obj, **load_kwargs) -> str:
    """What a script would print after loading ``obj`` back: the value, or the error's first line."""
    try:
        value = _saved_and_loaded(lib, obj, **load_kwargs)
    except pickle.UnpicklingError as error:
        return "UnpicklingError: " + str(error).splitlines()[0]
    return repr(value)


@pytest.fixture
def clean_safe_globals():
    yield
    kiln.serialization.clear_safe_globals()
    if torch is not None:
        torch.serialization.clear_safe_globals()


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: {"args": argparse.Namespace(lr=0.1, epochs=3), "w": lib.ones(2)},
        lambda lib: {"best": np.float32(1.5), "step": np.int64(3)},
        lambda lib: np.float64(2.5),
        lambda lib: {"a": np.arange(3)},
        lambda lib: bytearray(b"ab"),
        lambda lib: {"s": {1, 2}, "c": 1 + 2j, "b": b"\x00"},
        lambda lib: {"slice": slice(1, 2)},
    ],
    ids=["namespace", "numpy_scalars", "numpy_float64", "numpy_array", "bytearray", "builtins",
         "slice"],
)  # fmt: skip
@pytest.mark.parametrize("weights_only", [None, False])
def test_weights_only_load_accepts_and_refuses_like_torch(make, weights_only, clean_safe_globals):
    kwargs = {} if weights_only is None else {"weights_only": weights_only}
    got = _load_outcome(kiln, make(kiln), **kwargs)
    want = _load_outcome(torch, make(torch), **kwargs)
    assert got.replace("kiln", "torch") == want


@needs_torch
def test_add_safe_globals_lets_a_namespace_checkpoint_load(clean_safe_globals):
    for lib in (kiln, torch):
        lib.serialization.add_safe_globals([argparse.Namespace])
        assert argparse.Namespace in lib.serialization.get_safe_globals()
    obj = {"args": argparse.Namespace(lr=0.1), "epoch": 3}
    assert _load_outcome(kiln, obj) == _load_outcome(torch, obj) != ""
    for lib in (kiln, torch):
        lib.serialization.clear_safe_globals()
        assert lib.serialization.get_safe_globals() == []
    assert _load_outcome(kiln, obj).startswith("UnpicklingError: Weights only load failed.")


def test_safe_globals_context_and_named_pairs(clean_safe_globals):
    obj = {"args": argparse.Namespace(lr=0.1)}
    with kiln.serialization.safe_globals([(argparse.Namespace, "argparse.Namespace")]):
        assert _saved_and_loaded(kiln, obj)["args"].lr == 0.1
    assert kiln.serialization.get_safe_globals() == []
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL argparse.Namespace was not an"):
        _saved_and_loaded(kiln, obj)
    with pytest.raises(ValueError, match="Expected tuple of length 2"):
        kiln.serialization.add_safe_globals([(argparse.Namespace,)])


@needs_torch
def test_whole_module_loads_once_its_classes_are_allowlisted(clean_safe_globals):
    def build(lib):
        nn = lib.nn
        return nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.BatchNorm1d(3))

    unsafe = {}
    for lib in (kiln, torch):
        buf = io.BytesIO()
        lib.save(build(lib), buf)
        buf.seek(0)
        unsafe[lib] = sorted(lib.serialization.get_unsafe_globals_in_checkpoint(buf))
    assert [name.replace("kiln", "torch") for name in unsafe[kiln]] == unsafe[torch]
    nn = kiln.nn
    with kiln.serialization.safe_globals([nn.Sequential, nn.Linear, nn.ReLU, nn.BatchNorm1d]):
        model = _saved_and_loaded(kiln, build(kiln))
    assert isinstance(model[0].weight, nn.Parameter) and model[2].running_var.tolist() == [1.0] * 3


def test_unsafe_globals_are_found_with_any_pickle_protocol():
    obj = {"args": argparse.Namespace(x=1), "t": kiln.ones(1)}
    for protocol in (2, 4, 5):
        buf = io.BytesIO()
        kiln.save(obj, buf, pickle_protocol=protocol)
        buf.seek(0)
        assert kiln.serialization.get_unsafe_globals_in_checkpoint(buf) == ["argparse.Namespace"]
    buf = io.BytesIO()
    kiln.save({"w": kiln.ones(2)}, buf)
    buf.seek(0)
    assert kiln.serialization.get_unsafe_globals_in_checkpoint(buf) == []
