"""The caching device allocator: PyTorch's block-splitting idea over the CUDA driver.

``cuMemAlloc``/``cuMemFree`` are slow and synchronize the device, so memory is obtained from the
driver in *segments* and handed out as *blocks* cut from them. Requests round up to 512 bytes.
Small requests (up to 1 MiB) are cut from 2 MiB segments; requests up to 10 MiB from 20 MiB
segments; larger ones get a segment of their own rounded to 2 MiB. A free block is found by best
fit in the free list of its pool and stream; a larger block is split when the rest is worth
keeping (512 bytes in the small pool, over 1 MiB in the large one); a freed block merges with its
free neighbours in the segment. ``empty_cache`` returns segments with nothing allocated in them.

A block belongs to the stream it was allocated on and is reused only there, so work queued on
that stream before the free finishes before the next user's work starts. A block also used on
other streams (``Tensor.record_stream``) is held back until events recorded on those streams at
free time have completed, as PyTorch does.
"""

from __future__ import annotations

import bisect
import threading

__all__ = ["CachingAllocator", "Block", "DeviceBuffer", "OutOfMemoryError", "round_size"]

_ROUND = 512
_SMALL_REQUEST = 1 << 20  # requests up to this size come from the small pool
_SMALL_SEGMENT = 2 << 20
_MEDIUM_REQUEST = 10 << 20
_MEDIUM_SEGMENT = 20 << 20
_LARGE_ROUND = 2 << 20
_CUDA_ERROR_OUT_OF_MEMORY = 2


def round_size(nbytes: int) -> int:
    """A request's block size: at least 512 bytes, a multiple of 512."""
    nbytes = max(int(nbytes), 1)
    return (nbytes + _ROUND - 1) // _ROUND * _ROUND


def _segment_size(size: int) -> int:
    if size <= _SMALL_REQUEST:
        return _SMALL_SEGMENT
    if size <= _MEDIUM_REQUEST:
        return _MEDIUM_SEGMENT
    return (size + _LARGE_ROUND - 1) // _LARGE_ROUND * _LARGE_ROUND


class OutOfMemoryError(RuntimeError):
    """The device has no memory left for an allocation (``torch.OutOfMemoryError``)."""


class Block:
    """A piece of a segment: allocated or free, with its neighbours in the segment."""

    __slots__ = ("ptr", "size", "segment", "prev", "next", "allocated", "small", "stream", "uses")

    def __init__(self, ptr: int, size: int, segment: int, small: bool, stream):
        self.ptr, self.size, self.segment, self.small, self.stream = (
            ptr,
            size,
            segment,
            small,
            stream,
        )
        self.prev = self.next = None
        self.allocated = False
        self.uses: set = set()  # other streams that used the block (record_stream)

    def sort_key(self) -> tuple:
        return (self.size, self.ptr)


class DeviceBuffer:
    """An allocated block as tensors see it; freed back to the allocator when collected."""

    __slots__ = ("ptr", "nbytes", "_allocator", "_block", "__weakref__")

    def __init__(self, block: Block, owner: CachingAllocator):
        self.ptr = block.ptr
        self.nbytes = block.size
        self._block = block
        self._allocator = owner

    @property
    def index(self) -> int:
        return self._allocator.index

    @property
    def driver(self):
        return self._allocator.driver

    def data_ptr(self) -> int:
        return self.ptr

    def record_stream(self, stream) -> None:
        """Do not reuse this memory until work queued on ``stream`` so far has finished."""
        if stream is not self._block.stream:
            self._block.uses.add(stream)

    def __del__(self):
        owner = self._allocator
        if owner is not None:
            self._allocator = None
            owner.free(self._block)


class CachingAllocator:
    """Segments from the driver, cut into blocks (see the module docstring); one per device."""

    def __init__(self, driver, index: int, current_stream=None):
        self.driver = driver
        self.index = index
        self._current_stream = current_stream or (lambda index: None)
        self._free: dict = {}  # (small pool?, stream) -> blocks sorted by (size, ptr)
        self._segments: dict[int, int] = {}  # segment base -> size
        self._pending: list = []  # (block, events) freed while other streams may use it
        self._lock = threading.RLock()
        self.allocated_bytes = 0  # held by live blocks
        self.reserved_bytes = 0  # obtained from the driver
        self.peak_allocated_bytes = 0  # highest values since creation or ``reset_peaks``
        self.peak_reserved_bytes = 0
        self.allocations = 0  # blocks handed out and given back (memory_stats)
        self.frees = 0
        self.segment_allocations = 0
        self.segment_frees = 0
        self.alloc_retries = 0
        self.ooms = 0
        self.active_blocks = 0

    # ---------------------------------------------------------------- allocation
    def malloc(self, nbytes: int, stream=None) -> DeviceBuffer:
        size = round_size(nbytes)
        small = size <= _SMALL_REQUEST
        with self._lock:
            if stream is None:
                stream = self._current_stream(self.index)
            self._process_pending()
            block = self._take_free(small, stream, size)
            if block is None:
                block = self._new_segment(small, stream, size, nbytes)
            block = self._split(block, size)
            block.allocated = True
            self.allocated_bytes += block.size
            self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
            self.allocations += 1
            self.active_blocks += 1
        return DeviceBuffer(block, self)

    def _take_free(self, small: bool, stream, size: int) -> Block | None:
        blocks = self._free.get((small, stream))
        if not blocks:
            return None
        i = bisect.bisect_left(blocks, (size, 0), key=Block.sort_key)
        if i == len(blocks):
            return None
        return blocks.pop(i)

    def _new_segment(self, small: bool, stream, size: int, nbytes: int) -> Block:
        """A new segment for a block of ``size``; when the device is nearly full, after giving
        back cached segments, a segment of just the block's size."""
        segment = _segment_size(size)
        self.driver.activate(self.index)
        ptr = self._driver_alloc(segment)
        if ptr is None:
            self.alloc_retries += 1
            self._release_cached()
            for attempt in dict.fromkeys((segment, size)):
                ptr = self._driver_alloc(attempt)
                if ptr is not None:
                    segment = attempt
                    break
            else:
                self.ooms += 1
                raise OutOfMemoryError(
                    f"CUDA out of memory: tried to allocate {nbytes} bytes on cuda:{self.index} "
                    f"({self.allocated_bytes} bytes allocated by kiln, {self.reserved_bytes} "
                    "reserved)"
                )
        self._segments[ptr] = segment
        self.reserved_bytes += segment
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        self.segment_allocations += 1
        return Block(ptr, segment, ptr, small, stream)

    def _driver_alloc(self, nbytes: int) -> int | None:
        """A driver allocation, or None when the device is out of memory."""
        try:
            return self.driver.alloc(nbytes)
        except RuntimeError as e:
            if getattr(e, "cuda_error", None) != _CUDA_ERROR_OUT_OF_MEMORY:
                raise
            return None

    def _split(self, block: Block, size: int) -> Block:
        rest = block.size - size
        worth = rest >= _ROUND if block.small else rest > _SMALL_REQUEST
        if not worth:
            return block
        tail = Block(block.ptr + size, rest, block.segment, block.small, block.stream)
        tail.prev, tail.next = block, block.next
        if block.next is not None:
            block.next.prev = tail
        block.next = tail
        block.size = size
        self._insert_free(tail)
        return block

    # ---------------------------------------------------------------- freeing
    def free(self, block: Block) -> None:
        with self._lock:
            block.allocated = False
            self.allocated_bytes -= block.size
            self.frees += 1
            self.active_blocks -= 1
            if block.uses:
                events = [s.record_event() for s in block.uses]
                block.uses = set()
                self._pending.append((block, events))
                return
            self._merge_and_insert(block)

    def _process_pending(self) -> None:
        still = []
        for block, events in self._pending:
            if all(e.query() for e in events):
                self._merge_and_insert(block)
            else:
                still.append((block, events))
        self._pending = still

    def _merge_and_insert(self, block: Block) -> None:
        for neighbour in (block.prev, block.next):
            if neighbour is None or neighbour.allocated or neighbour in self._held():
                continue
            self._remove_free(neighbour)
            if neighbour is block.prev:
                neighbour.size += block.size
                neighbour.next = block.next
                if block.next is not None:
                    block.next.prev = neighbour
                block = neighbour
            else:
                block.size += neighbour.size
                block.next = neighbour.next
                if neighbour.next is not None:
                    neighbour.next.prev = block
        self._insert_free(block)

    def _held(self) -> set:
        return {b for b, _ in self._pending}

    def _insert_free(self, block: Block) -> None:
        blocks = self._free.setdefault((block.small, block.stream), [])
        bisect.insort(blocks, block, key=Block.sort_key)

    def _remove_free(self, block: Block) -> None:
        blocks = self._free[(block.small, block.stream)]
        i = bisect.bisect_left(blocks, block.sort_key(), key=Block.sort_key)
        del blocks[i]

    # ---------------------------------------------------------------- cache control
    def _release_cached(self) -> None:
        """Give the driver back every segment that is one free block."""
        self.driver.synchronize()
        self._process_pending()
        for key, blocks in self._free.items():
            keep = []
            for b in blocks:
                if b.prev is None and b.next is None and b.ptr in self._segments:
                    self.driver.free(b.ptr)
                    self.reserved_bytes -= self._segments.pop(b.ptr)
                    self.segment_frees += 1
                else:
                    keep.append(b)
            self._free[key] = keep

    def empty_cache(self) -> None:
        with self._lock:
            self.driver.activate(self.index)
            self._release_cached()

    def reset_peaks(self) -> None:
        with self._lock:
            self.peak_allocated_bytes = self.allocated_bytes
            self.peak_reserved_bytes = self.reserved_bytes

    def reset_accumulated(self) -> None:
        with self._lock:
            self.allocations = self.frees = 0
            self.segment_allocations = self.segment_frees = 0
            self.alloc_retries = self.ooms = 0

    # ---------------------------------------------------------------- reporting
    def cached_bytes(self) -> int:
        """Bytes in free blocks (reserved but not allocated)."""
        return self.reserved_bytes - self.allocated_bytes

    def stats(self) -> dict:
        """The counters under PyTorch's ``memory_stats`` names."""
        return {
            "allocated_bytes.all.current": self.allocated_bytes,
            "allocated_bytes.all.peak": self.peak_allocated_bytes,
            "reserved_bytes.all.current": self.reserved_bytes,
            "reserved_bytes.all.peak": self.peak_reserved_bytes,
            "inactive_split_bytes.all.current": self.cached_bytes(),
            "active.all.current": self.active_blocks,
            "allocation.all.allocated": self.allocations,
            "allocation.all.freed": self.frees,
            "allocation.all.current": self.allocations - self.frees,
            "segment.all.allocated": self.segment_allocations,
            "segment.all.freed": self.segment_frees,
            "segment.all.current": len(self._segments),
            "num_alloc_retries": self.alloc_retries,
            "num_ooms": self.ooms,
        }

    def summary(self) -> str:
        """A readable table of the counters (``torch.cuda.memory_summary``'s shape)."""

        def size(n: int) -> str:
            for unit in ("B", "KiB", "MiB", "GiB"):
                if abs(n) < 1024 or unit == "GiB":
                    return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
                n /= 1024
            return str(n)

        rule = "|" + "=" * 75 + "|"
        rows = [
            ("Allocated memory", size(self.allocated_bytes), size(self.peak_allocated_bytes)),
            ("Reserved memory", size(self.reserved_bytes), size(self.peak_reserved_bytes)),
            ("Cached free memory", size(self.cached_bytes()), ""),
            ("Allocations", str(self.allocations - self.frees), str(self.allocations)),
            ("Segments", str(len(self._segments)), str(self.segment_allocations)),
            ("Alloc retries / OOMs", f"{self.alloc_retries} / {self.ooms}", ""),
        ]
        lines = [
            rule,
            f"|{'kiln CUDA memory summary, device ID ' + str(self.index):^75}|",
            rule,
            f"| {'Metric':<28}| {'Cur Usage':>20} | {'Peak / Total':>20} |",
            "|" + "-" * 75 + "|",
        ]
        lines += [f"| {name:<28}| {cur:>20} | {peak:>20} |" for name, cur, peak in rows]
        lines.append(rule)
        return "\n".join(lines)
