"""The pooled CPU allocator reuses free buffers and keeps at most its budget of them free."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.runtime.storage import BufferPool

MB = 1 << 20


def test_free_buffer_is_reused_for_its_size():
    pool = BufferPool(max_free_bytes=64 * MB)
    a = pool.allocate(3 * MB)
    address = a.ctypes.data
    del a
    b = pool.allocate(3 * MB)
    assert b.ctypes.data == address
    assert pool.pooled_bytes == b.nbytes


def test_buffer_in_use_is_not_handed_out_again():
    pool = BufferPool(max_free_bytes=64 * MB)
    a = pool.allocate(3 * MB)
    view = a[:16].view(np.float32)  # a view keeps its base alive
    del a
    b = pool.allocate(3 * MB)
    assert b.ctypes.data != view.ctypes.data
    assert pool.pooled_bytes == 2 * b.nbytes


def test_free_buffers_above_the_budget_go_back_least_recently_used_first():
    pool = BufferPool(max_free_bytes=8 * MB)
    sizes = [3 * MB, 4 * MB, 5 * MB, 6 * MB]
    buffers = [pool.allocate(n) for n in sizes]
    recent = buffers[-1].ctypes.data
    del buffers  # all four free: 18 MB, over the budget, but nothing scanned yet
    assert pool.free_bytes == sum(sizes)
    kept = pool.allocate(7 * MB)  # a fresh buffer: the free ones are trimmed to 8 MB first
    assert pool.free_bytes <= 8 * MB
    assert pool.pooled_bytes - kept.nbytes <= 8 * MB
    again = pool.allocate(6 * MB)
    assert again.ctypes.data == recent  # the most recently used survived


def test_buffers_in_use_are_never_dropped():
    pool = BufferPool(max_free_bytes=0)
    held = [pool.allocate(2 * MB) for _ in range(3)]
    pool.allocate(5 * MB)
    pool.clear()
    assert pool.pooled_bytes == sum(h.nbytes for h in held)
    held[0][:] = 1  # still valid memory


def test_clear_drops_every_free_buffer():
    pool = BufferPool()
    a = pool.allocate(2 * MB)
    pool.allocate(3 * MB)  # free at once
    pool.clear()
    assert pool.pooled_bytes == a.nbytes
    assert pool.free_bytes == 0


def test_tensors_from_the_pool_hold_their_buffer():
    x = kiln.ones(1024, 1024)  # 4 MB: pooled
    y = x * 2
    del x
    z = kiln.zeros(1024, 1024)  # may reuse x's buffer, never y's
    np.testing.assert_array_equal(y.numpy(), np.full((1024, 1024), 2, np.float32))
    np.testing.assert_array_equal(z.numpy(), 0)


def test_fresh_bytes_counts_buffers_made_not_reused():
    pool = BufferPool(max_free_bytes=64 * MB)
    a = pool.allocate(3 * MB)
    made = pool.fresh_bytes
    assert made == a.nbytes
    del a
    pool.allocate(3 * MB)  # the freed buffer again: no new pages
    assert pool.fresh_bytes == made


def test_zeroed_buffers_are_zero_whether_reused_or_fresh():
    """A zeroed request reuses a dirty free buffer (clearing the bytes asked for) or takes
    fresh calloc'd memory."""
    pool = BufferPool(max_free_bytes=64 * MB)
    a = pool.allocate(3 * MB)
    a.fill(7)
    address = a.ctypes.data
    del a
    b = pool.allocate(3 * MB - 5, zeroed=True)
    assert b.ctypes.data == address
    assert not b[: 3 * MB - 5].any()
    c = pool.allocate(3 * MB, zeroed=True)  # b is in use: fresh memory
    assert c.ctypes.data != address and not c.any()


def test_zero_filled_tensors_from_a_dirty_pool_are_zero_and_keep_negative_zero():
    """``zeros``/``zeros_like``/``full(0)`` over large sizes take zeroed pool memory; -0.0 (its
    sign bit set) is filled as a value, in every dtype PyTorch's factories make."""
    for _ in range(3):  # leave freed, dirty buffers of these sizes in the pool
        dirty = kiln.full((1024, 1024), float("nan"))
        del dirty
    for make in (
        lambda: kiln.zeros(1024, 1024),
        lambda: kiln.zeros_like(kiln.empty(1024, 1024)),
        lambda: kiln.full((1024, 1024), 0),
        lambda: kiln.zeros(512, 1024, dtype=kiln.float64),
        lambda: kiln.zeros(1024, 1024, dtype=kiln.complex64),
    ):
        z = make()
        assert not np.isnan(z.numpy()).any() and not z.numpy().any()
    neg = kiln.full((1024, 1024), -0.0).numpy()
    assert np.signbit(neg).all() and not neg.any()
    bits = kiln.full((1024, 512), complex(-0.0, 0.0)).numpy().view(np.float32)
    assert np.signbit(bits[:, 0::2]).all() and not np.signbit(bits[:, 1::2]).any()


def test_release_idle_drops_the_biggest_idle_buffers_until_the_free_ones_fit_the_budget():
    """Buffers free for a whole stretch (free at the previous ``release_idle``, handed to
    nobody since) go, the biggest first, until what is free fits the budget: the small ones
    stay for the next stretch to reuse."""
    pool = BufferPool(max_free_bytes=8 * MB)
    buffers = [pool.allocate(n) for n in (2 * MB, 3 * MB, 20 * MB)]
    small = {b.ctypes.data for b in buffers[:2]}
    pool.release_idle()  # the end of a stretch: all three in use, nothing to drop
    del buffers  # 25 MB free, over the budget; nothing scanned yet
    assert pool.free_bytes == 25 * MB
    pool.release_idle()  # freed during the stretch: not idle yet
    assert pool.free_bytes == 25 * MB
    pool.release_idle()
    assert pool.free_bytes == 5 * MB
    made = pool.fresh_bytes
    again = {pool.allocate(2 * MB).ctypes.data, pool.allocate(3 * MB).ctypes.data}
    assert again == small and pool.fresh_bytes == made  # reused, no new pages


def test_release_idle_keeps_buffers_handed_out_since_its_last_call_over_the_budget():
    """A stretch of work run in a loop (a compiled graph's call) finds its temporaries again at
    its next run: what was handed out since the previous call stays free, however big."""
    pool = BufferPool(max_free_bytes=1 * MB)
    held = pool.allocate(2 * MB)
    pool.release_idle()
    for _ in range(3):
        temporary = pool.allocate(16 * MB)
        del temporary
        pool.release_idle()
        assert pool.free_bytes == 16 * MB
    assert pool.fresh_bytes == held.nbytes + 16 * MB  # one 16 MB buffer made, reused since
    pool.release_idle()  # a stretch that did not use it: now it goes
    assert pool.free_bytes == 0
    held[:] = 1  # buffers in use are never dropped


def test_release_idle_keeps_buffers_freed_between_stretches_for_the_next_one():
    """A training step's gradients, freed by ``zero_grad`` after the optimizer's graph
    returned, stay pooled through the forward graph's return: the backward finds them again
    and faults in no fresh memory, step after step."""
    pool = BufferPool(max_free_bytes=1 * MB)
    made = None
    for _ in range(4):
        grads = [pool.allocate(8 * MB) for _ in range(3)]  # the backward's gradients
        pool.release_idle()  # the backward returns
        pool.release_idle()  # the optimizer's graph returns, the gradients still held
        del grads  # zero_grad(set_to_none=True)
        pool.release_idle()  # the forward returns
        assert pool.free_bytes == 24 * MB
        made = pool.fresh_bytes if made is None else made
        assert pool.fresh_bytes == made == 24 * MB
    pool.release_idle()  # a stretch that did not use them: now they go
    assert pool.free_bytes == 0
