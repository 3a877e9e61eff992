"""Module state dicts as PyTorch writes and reads them: per-module version metadata,
``_load_from_state_dict`` overrides, state-dict and load hooks, extra state, and metadata kept
through ``save``/``load``."""

from __future__ import annotations

import io
import warnings
from collections import OrderedDict

import pytest

import kiln
from kiln.nn.modules import utils as module_utils
from tests.oracle import needs_torch, torch


def _norm_net(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.BatchNorm1d(3), nn.ReLU()))


@needs_torch
def test_state_dict_metadata_records_each_module_version():
    got = _norm_net(kiln).state_dict()._metadata
    want = _norm_net(torch).state_dict()._metadata
    assert isinstance(got, OrderedDict) and dict(got) == dict(want)


@needs_torch
@pytest.mark.parametrize("with_metadata", [True, False])
def test_batchnorm_missing_num_batches_tracked_depends_on_version(with_metadata):
    def result(lib):
        state = _norm_net(lib).state_dict()
        del state["1.0.num_batches_tracked"]
        if not with_metadata:
            state = dict(state)
        return repr(_norm_net(lib).load_state_dict(state, strict=False))

    assert result(kiln) == result(torch)


def _renaming_module(lib, seen):
    class Legacy(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lib.nn.Linear(2, 2)
            self.register_buffer("running", lib.zeros(2))

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args):
            seen.append((prefix, dict(local_metadata)))
            if prefix + "old_running" in state_dict:
                state_dict[prefix + "running"] = state_dict.pop(prefix + "old_running")
            super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    wrapper = lib.nn.Module()
    wrapper.legacy = Legacy()
    return wrapper


@needs_torch
def test_load_from_state_dict_override_sees_metadata_and_renames_keys():
    def run(lib):
        seen = []
        model = _renaming_module(lib, seen)
        state = model.state_dict()
        user_state = OrderedDict((k.replace("running", "old_running"), v) for k, v in state.items())
        user_state._metadata = state._metadata
        result = model.load_state_dict(user_state)
        return repr(result), seen, list(user_state)  # the caller's dict is not edited

    assert run(kiln) == run(torch)


@needs_torch
def test_state_dict_and_load_hooks_run_like_torch():
    def run(lib):
        log = []
        model = _norm_net(lib)
        model[0].register_state_dict_pre_hook(lambda m, p, kv: log.append(("pre", p, kv)))

        def post(module, state, prefix, meta):
            log.append(("post", prefix, dict(meta)))
            state[prefix + "extra"] = lib.zeros(1)

        model[0].register_state_dict_post_hook(post)
        keys = list(model.state_dict(prefix="m."))

        def load_pre(module, state, prefix, meta, strict, missing, unexpected, errors):
            log.append(("load_pre", type(module).__name__, prefix, strict))
            state.pop(prefix + "junk", None)

        def load_post(module, incompatible):
            log.append(("load_post", list(incompatible.missing_keys)))
            incompatible.missing_keys.clear()

        model[0].register_load_state_dict_pre_hook(load_pre)
        model.register_load_state_dict_post_hook(load_post)
        state = model.state_dict()
        state["0.junk"] = lib.ones(1)
        del state["0.extra"], state["1.0.bias"]
        return keys, log, repr(model.load_state_dict(state))

    assert run(kiln) == run(torch)


@needs_torch
def test_private_state_dict_hook_result_replaces_the_dict():
    def keys(lib):
        model = lib.nn.Linear(2, 2)
        model._register_state_dict_hook(
            lambda m, state, prefix, meta: {"renamed." + k: v for k, v in state.items()}
        )
        return list(model.state_dict())

    assert keys(kiln) == keys(torch)


@needs_torch
def test_extra_state_without_setter_is_an_unexpected_key():
    def result(lib):
        state = lib.nn.Linear(1, 1).state_dict()
        state["_extra_state"] = 3
        return repr(lib.nn.Linear(1, 1).load_state_dict(state, strict=False))

    assert result(kiln) == result(torch)


def test_saved_state_dict_keeps_its_metadata():
    buffer = io.BytesIO()
    kiln.save(_norm_net(kiln).state_dict(), buffer)
    buffer.seek(0)
    loaded = kiln.load(buffer)
    assert dict(loaded._metadata) == {
        "": {"version": 1},
        "0": {"version": 1},
        "1": {"version": 1},
        "1.0": {"version": 2},
        "1.1": {"version": 1},
    }


def test_no_warning_for_plain_state_dict_round_trip():
    model = _norm_net(kiln)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert repr(model.load_state_dict(model.state_dict())) == "<All keys matched successfully>"


def _wrapped(lib):
    """The model under ``module``, as DataParallel and DDP hold it."""
    outer = lib.nn.Module()
    outer.module = _norm_net(lib)
    return outer


@needs_torch
@pytest.mark.parametrize("prefix", ["module.", "module.1."])
def test_consume_prefix_strips_wrapper_keys_and_metadata_like_pytorch(prefix):
    got, want = _wrapped(kiln).state_dict(), _wrapped(torch).state_dict()
    module_utils.consume_prefix_in_state_dict_if_present(got, prefix)
    torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(want, prefix)
    assert list(got.keys()) == list(want.keys())
    assert dict(got._metadata) == dict(want._metadata)
    if prefix == "module.":  # the stripped dict loads into the unwrapped model
        _norm_net(kiln).load_state_dict(got)


@needs_torch
def test_layer_argument_helpers_match_pytorch():
    theirs = torch.nn.modules.utils
    for value in (3, (1, 2), [4, 5, 6], kiln.Size([7, 8])):
        for name in ("_single", "_pair", "_triple", "_quadruple"):
            assert getattr(module_utils, name)(value) == getattr(theirs, name)(value), name
    assert module_utils._reverse_repeat_tuple((1, 2), 2) == theirs._reverse_repeat_tuple((1, 2), 2)
    defaults = [1, 2, 7, 8]
    assert module_utils._list_with_default([None, 3], defaults) == [7, 3]
    assert theirs._list_with_default([None, 3], defaults) == [7, 3]
