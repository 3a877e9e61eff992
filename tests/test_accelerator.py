"""kiln.accelerator: PyTorch's device-agnostic API, with no accelerator (PyTorch's answers on a
CPU-only machine) and with a CUDA device (the host-memory stand-in driver)."""

from __future__ import annotations

import gc

import pytest

import kiln
from tests.oracle import needs_torch, torch


@needs_torch
@pytest.mark.skipif(torch is not None and torch.accelerator.is_available(), reason="CPU-only torch")
def test_without_an_accelerator_answers_like_cpu_only_torch(no_driver):
    for lib in (kiln, torch):
        acc = lib.accelerator
        assert acc.is_available() is False and acc.device_count() == 0
        assert acc.current_accelerator() is None and acc.current_accelerator(True) is None
        with pytest.raises(RuntimeError, match="Cannot access accelerator device when none"):
            acc.current_device_index()
        with acc.device_index(None):
            pass
    assert kiln.accelerator.memory_stats() == {}
    kiln.accelerator.empty_cache()


def test_with_a_cuda_device_the_accelerator_is_cuda(gpu):
    acc = kiln.accelerator
    assert acc.is_available() and acc.device_count() == 2
    assert acc.current_accelerator() == kiln.device("cuda")
    assert acc.current_device_index() == acc.current_device_idx() == 0
    with acc.device_index(1):
        assert acc.current_device_index() == 1 == kiln.cuda.current_device()
    assert acc.current_device_index() == 0
    acc.set_device_index("cuda:1")
    assert acc.current_device_index() == 1
    acc.set_device_idx(0)
    with pytest.raises(ValueError, match="doesn't match the current accelerator"):
        acc.set_device_index("cpu")
    acc.synchronize()
    assert kiln.float32 in acc.get_device_capability()["supported_dtypes"]
    free, total = acc.get_memory_info()
    assert 0 < free <= total


def test_memory_counters_follow_the_caching_allocator(gpu):
    acc = kiln.accelerator
    acc.reset_peak_memory_stats()
    x = kiln.ones(1024, device="cuda")
    y = kiln.ones(8192, device="cuda")
    peak = acc.max_memory_allocated()
    assert acc.memory_allocated() >= 4 * (1024 + 8192) and peak >= acc.memory_allocated()
    assert acc.memory_reserved() >= acc.memory_allocated()
    del x, y
    gc.collect()
    assert acc.max_memory_allocated() == peak and acc.memory_allocated() <= peak
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == acc.memory_allocated()
    stats = acc.memory_stats()
    assert stats["allocated_bytes.all.current"] == acc.memory_allocated()
    assert list(stats) == sorted(stats) and stats["allocation.all.allocated"] >= 1
    acc.reset_accumulated_memory_stats()
    assert acc.memory_stats()["allocation.all.allocated"] == 0
    acc.empty_cache()
    acc.empty_host_cache()


def test_device_agnostic_training_script_runs(gpu):
    """The mnist / DCGAN idiom: pick the accelerator if there is one, else the CPU."""
    device = kiln.accelerator.current_accelerator(check_available=True) or kiln.device("cpu")
    model = kiln.nn.Linear(3, 2).to(device)
    out = model(kiln.ones(4, 3, device=device))
    assert out.device.type == "cuda" and out.is_cuda and not out.is_xpu and not out.is_mps
    assert kiln.get_device_module(device) is kiln.cuda and out.get_device() == 0


@needs_torch
def test_cpu_streams_and_events_serve_device_agnostic_code_like_torch():
    """``get_device_module("cpu").stream(s)`` and its kin exist for code written once for every
    device; on the CPU they only track which stream is current."""
    for lib in (kiln, torch):
        cpu = lib.get_device_module("cpu")
        default = cpu.current_stream()
        side = cpu.Stream()
        with cpu.stream(side):
            assert cpu.current_stream() is side
            side.wait_stream(default)
            event = cpu.Event()
            event.record()
            assert event.query() is True
        assert cpu.current_stream() is default
        with cpu.stream(None):
            assert cpu.current_stream() is default
        assert cpu.is_initialized() is True
