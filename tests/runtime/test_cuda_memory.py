"""The caching device allocator and streams/events, on the host-memory CUDA stand-in.

Accounting follows PyTorch's allocator: blocks rounded up to 512 bytes, small requests (up to
1 MiB) cut from 2 MiB segments, up to 10 MiB from 20 MiB segments, larger ones their own segment
rounded to 2 MiB; ``memory_allocated`` counts blocks, ``memory_reserved`` segments. On the
stand-in, work runs when queued, so streams are idle and events complete when recorded.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
from kiln.runtime import cuda

MiB = 1 << 20


def _floats(n: int):
    return kiln.empty(n, device="cuda")


def test_blocks_round_to_512_bytes_and_share_a_small_segment(gpu):
    a = _floats(1000)  # 4000 bytes -> 4096
    assert kiln.cuda.memory_allocated() == 4096
    assert kiln.cuda.memory_reserved() == 2 * MiB
    b = _floats(300)  # 1200 -> 1536, cut from the same segment
    assert kiln.cuda.memory_allocated() == 4096 + 1536
    assert kiln.cuda.memory_reserved() == 2 * MiB and gpu.allocations == 1
    assert b.data_ptr() == a.data_ptr() + 4096
    del a
    assert kiln.cuda.memory_allocated() == 1536
    c = _floats(1000)  # the freed block comes back: no driver call
    assert gpu.allocations == 1 and kiln.cuda.memory_allocated() == 4096 + 1536
    del b, c


def test_medium_and_large_requests_get_their_segment_sizes(gpu):
    medium = _floats(3 * MiB // 4)  # 3 MiB -> a 20 MiB segment
    assert kiln.cuda.memory_reserved() == 20 * MiB
    large = _floats(18 * MiB // 4 + 1)  # just over 18 MiB: not in the 17 MiB left, a 20 MiB one
    assert kiln.cuda.memory_reserved() == 40 * MiB
    fits = _floats(12 * MiB // 4)  # cut from the first segment's free 17 MiB
    assert kiln.cuda.memory_reserved() == 40 * MiB
    assert kiln.cuda.memory_allocated() == 3 * MiB + 18 * MiB + 512 + 12 * MiB
    del medium, large, fits


def test_freed_neighbours_merge_into_one_block(gpu):
    a, b, c = _floats(128), _floats(128), _floats(128)  # 512 bytes each, adjacent
    base = a.data_ptr()
    assert (b.data_ptr(), c.data_ptr()) == (base + 512, base + 1024)
    del b, a  # a and b merge (c stays allocated)
    d = _floats(256)  # 1024 bytes fit the merged block at a's address
    assert d.data_ptr() == base
    del c, d


def test_peaks_and_their_reset(gpu):
    kiln.cuda.reset_peak_memory_stats()
    a = _floats(10_000)
    b = _floats(10_000)
    peak = kiln.cuda.memory_allocated()
    del a, b
    assert kiln.cuda.max_memory_allocated() == peak > kiln.cuda.memory_allocated()
    kiln.cuda.reset_peak_memory_stats()
    assert kiln.cuda.max_memory_allocated() == kiln.cuda.memory_allocated()
    assert kiln.cuda.max_memory_reserved() == kiln.cuda.memory_reserved()


def test_empty_cache_returns_only_wholly_free_segments(gpu):
    keep = _floats(100)
    spare = _floats(3 * MiB // 4)
    del spare
    assert kiln.cuda.memory_reserved() == 22 * MiB
    kiln.cuda.empty_cache()
    assert kiln.cuda.memory_reserved() == 2 * MiB  # the small segment still holds ``keep``
    del keep
    kiln.cuda.empty_cache()
    assert kiln.cuda.memory_reserved() == 0 and kiln.cuda.memory_allocated() == 0


def test_memory_stats_and_summary(gpu):
    kiln.cuda.reset_accumulated_memory_stats()
    a = _floats(1000)
    stats = kiln.cuda.memory_stats()
    assert stats["allocated_bytes.all.current"] == 4096
    assert stats["reserved_bytes.all.current"] == 2 * MiB
    assert stats["allocation.all.allocated"] == 1 and stats["segment.all.current"] == 1
    assert stats == kiln.accelerator.memory_stats()
    summary = kiln.cuda.memory_summary()
    assert "Allocated memory" in summary and "4.00 KiB" in summary and "2.00 MiB" in summary
    del a


def test_out_of_memory_retries_after_emptying_the_cache():
    cuda.use_driver(cuda.HostMemoryDriver(memory=24 * MiB))
    try:
        spare = _floats(3 * MiB // 4)  # a 20 MiB segment
        del spare
        big = _floats(22 * MiB // 4)  # 22 MiB: only after the cached segment is given back
        stats = kiln.cuda.memory_stats()
        assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0
        with pytest.raises(kiln.cuda.OutOfMemoryError, match="CUDA out of memory"):
            _floats(22 * MiB // 4)
        assert kiln.cuda.memory_stats()["num_ooms"] == 1
        del big
    finally:
        cuda.use_driver(None)


def test_blocks_are_reused_on_their_own_stream_only(gpu):
    s = kiln.cuda.Stream()
    with kiln.cuda.stream(s):
        a = _floats(1000)
    ptr = a.data_ptr()
    del a
    b = _floats(1000)  # the default stream does not take s's block
    assert b.data_ptr() != ptr
    with kiln.cuda.stream(s):
        c = _floats(1000)
    assert c.data_ptr() == ptr
    del b, c


def test_record_stream_holds_a_block_until_the_stream_passes_the_free(gpu, monkeypatch):
    s = kiln.cuda.Stream()
    a = _floats(1000)
    ptr = a.data_ptr()
    a.record_stream(s)
    monkeypatch.setattr(gpu, "event_query", lambda event: False)  # s is still busy
    del a
    b = _floats(1000)
    assert b.data_ptr() != ptr
    monkeypatch.setattr(gpu, "event_query", lambda event: True)  # s has caught up
    c = _floats(1000)
    assert c.data_ptr() == ptr
    del b, c


def test_values_survive_block_reuse(gpu):
    x = kiln.randn(64, 33)
    for _ in range(3):
        y = (x.cuda() * 2).cpu()
        np.testing.assert_array_equal(y.numpy(), (x * 2).numpy())


# ------------------------------------------------------------------------------ streams, events


def test_current_stream_is_the_default_until_one_is_set(gpu):
    default = kiln.cuda.current_stream()
    assert default == kiln.cuda.default_stream() and default.cuda_stream == 0
    s = kiln.cuda.Stream()
    assert s != default and s.device == kiln.device("cuda", 0)
    with kiln.cuda.stream(s) as inside:
        assert inside is s and kiln.cuda.current_stream() == s
        seen = []
        t = threading.Thread(target=lambda: seen.append(kiln.cuda.current_stream()))
        t.start()
        t.join()
        assert seen == [default]  # the current stream is per thread
    assert kiln.cuda.current_stream() == default
    kiln.cuda.set_stream(s)
    assert kiln.cuda.current_stream() == s
    kiln.cuda.set_stream(default)
    assert kiln.cuda.Stream(device="cuda:1").device.index == 1


def test_stream_work_and_synchronization(gpu):
    s = kiln.cuda.Stream()
    x = kiln.randn(5)
    with kiln.cuda.stream(s):
        y = x.cuda().exp()
    kiln.cuda.current_stream().wait_stream(s)
    s.synchronize()
    assert s.query()
    kiln.cuda.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), x.exp().numpy(), rtol=1e-6)


def test_events_time_and_order_work(gpu):
    start, end = kiln.cuda.Event(enable_timing=True), kiln.cuda.Event(enable_timing=True)
    assert start.query()  # never recorded: nothing to wait for
    start.record()
    (kiln.randn(100).cuda() * 3).sum()
    end.record()
    end.synchronize()
    assert end.query() and end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    s = kiln.cuda.Stream()
    e = s.record_event()
    e.wait()  # later work on the current stream waits for s
    kiln.cuda.current_stream().wait_event(e)


def test_event_errors_are_pytorchs(gpu):
    plain = kiln.cuda.Event()
    timed = kiln.cuda.Event(enable_timing=True)
    plain.record()
    timed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        plain.elapsed_time(timed)
    with pytest.raises(RuntimeError, match="must be recorded"):
        kiln.cuda.Event(enable_timing=True).elapsed_time(timed)
