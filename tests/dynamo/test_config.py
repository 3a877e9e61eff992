"""``torch._dynamo.config`` and ``torch._inductor.config`` as kiln reads them: the same
knobs with PyTorch's defaults, imported by PyTorch's names, and taking effect."""

from __future__ import annotations

import pytest

import kiln
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch

from .helpers import same_as_torch

_KNOBS = [
    "verbose", "automatic_dynamic_shapes", "assume_static_by_default", "capture_scalar_outputs",
    "capture_dynamic_output_shape_ops", "optimize_ddp", "accumulated_cache_size_limit",
    "accumulated_recompile_limit", "specialize_int", "specialize_float", "guard_nn_modules",
    "skip_nnmodule_hook_guards", "force_parameter_static_shapes", "error_on_recompile",
    "dynamic_shapes", "cache_size_limit", "recompile_limit", "disable", "allow_rnn",
]  # fmt: skip


@needs_torch
def test_config_knobs_read_like_torch():
    same_as_torch(lambda lib: [getattr(lib._dynamo.config, n) for n in _KNOBS])


def test_config_disable_and_error_on_recompile_take_effect(default_stance):
    config = kiln._dynamo.config
    counter = CompileCounter("eager")
    fn = kiln.compile(lambda x: x * 2, backend=counter)
    config.disable = True
    try:
        assert fn(kiln.ones(1)).tolist() == [2.0] and counter.frame_count == 0
    finally:
        config.disable = False
    fn(kiln.ones(1))
    assert counter.frame_count == 1
    config.error_on_recompile = True
    try:
        with pytest.raises(RuntimeError, match="Detected recompile"):
            fn(kiln.ones(2))
    finally:
        config.error_on_recompile = False


def _flagged(x, flag):
    return x + 1 if flag == "a" else x - 1


@needs_torch
def test_recompile_limit_counts_entries_like_torch():
    def snippet(lib):
        from importlib import import_module

        config = lib._dynamo.config
        old = config.cache_size_limit
        config.cache_size_limit = 2
        try:
            counter = import_module(f"{lib.__name__}._dynamo.testing").CompileCounter()
            fn = lib.compile(_flagged, backend=counter, dynamic=False)
            counts = []
            for flag in ["a", "b", "c", "d", "a", "b", "e"]:
                fn(lib.ones(1), flag)
                counts.append(counter.frame_count)
            return counts
        finally:
            config.cache_size_limit = old

    with pytest.warns(RuntimeWarning):
        same_as_torch(snippet)


def test_config_modules_imported_by_their_torch_names_are_the_ones_kiln_reads():
    import importlib

    from kiln.dynamo import eval_frame

    dynamo_config = importlib.import_module("kiln._dynamo.config")
    inductor_config = importlib.import_module("kiln._inductor.config")
    assert dynamo_config is eval_frame.config
    assert inductor_config is kiln._inductor.config
    inductor_config.coordinate_descent_tuning = True
    inductor_config.triton.unique_kernel_names = True
    inductor_config.coordinate_descent_tuning = False


def test_the_collector_is_paused_while_capturing_only():
    import gc

    seen = []

    def backend(gm, example_inputs):
        seen.append(gc.isenabled())
        return gm.forward

    assert gc.isenabled()
    fn = kiln.compile(lambda x: x.sin() * 2, backend=backend)
    assert_close = kiln.testing.assert_close
    assert_close(fn(kiln.ones(2)), kiln.ones(2).sin() * 2)
    assert seen == [False] and gc.isenabled()
    kiln._dynamo.config.pause_gc_while_compiling = False
    try:
        kiln.compile(lambda x: x.cos(), backend=backend)(kiln.ones(2))
    finally:
        kiln._dynamo.config.pause_gc_while_compiling = True
    assert seen == [False, True] and gc.isenabled()


def test_the_collector_comes_back_on_when_capture_fails():
    import gc

    from kiln.dynamo import GraphBreakError

    def with_print(x):
        print("side effect")
        return x + 1

    with pytest.raises(GraphBreakError):
        kiln.compile(with_print, fullgraph=True)(kiln.ones(2))
    assert gc.isenabled()
