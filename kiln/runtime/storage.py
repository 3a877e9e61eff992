"""Storage identity and the pooled CPU allocator.

A ``Storage`` is shared by a tensor and all of its views: it carries the version counter that
autograd uses to detect in-place modification of saved tensors. The numpy buffer itself is owned
by the arrays; ``Storage`` only remembers the base array so ``data_ptr`` and ``storage_offset``
can be computed.

Large CPU buffers come from ``BufferPool``: a fresh 64 MB allocation costs milliseconds of page
faults on this class of machine, far more than the elementwise work done in it. A pooled buffer is
free again once nothing but the pool references its base array (every numpy view keeps its base
alive, so the reference count tells whether any tensor or user array still sees it).

The pool keeps at most ``max_free_bytes`` of free buffers. It learns which buffers are free only
when it scans, so it scans when it must fault in a fresh buffer, the one moment resident memory
grows: the least recently used free buffers above the budget go back first. Without the budget,
a buffer freed by one phase of a step (the forward's activations) stays resident while another
phase allocates other sizes (the backward's gradients, the optimizer's temporaries), and the
process holds the sum of each size's high-water mark instead of the live peak: GPT-2 small's
eager training step held about a gigabyte of free buffers between steps.

A compiled graph that returns calls ``release_idle``: free buffers above the budget that were
not handed out since the previous such call go back then, not at the next fresh allocation, so a
training step does not hold its last graphs' temporaries between steps.

The budget is small (32 MiB) because whatever it keeps is free exactly when the process grows,
so it lands on the step's peak: a training step's phases allocate different sizes, and a budget
of 256 MiB put ~230 MiB of free buffers on GPT-2 small's peak while sparing it only ~0.2 GB of
its ~1.2-1.9 GB of fresh buffers per step (about 0.1 s/GB of page faults here). Small models'
buffers stay under the pool's 1 MiB minimum, in malloc's free lists (``host_malloc``).
"""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

from .host_malloc import tune_host_malloc
from .untyped_storage import UntypedStorageMethods, spanned_bytes, storage_array

__all__ = [
    "Storage",
    "UntypedStorage",
    "BufferPool",
    "pooled",
    "pool",
    "empty_array",
    "zeros_array",
    "memory_unshared",
    "writable_target",
    "data_address",
]


class Storage(UntypedStorageMethods):
    """The shared identity of a buffer: base array plus in-place version counter. It is also
    PyTorch's untyped storage (see ``UntypedStorage`` below for the public constructor)."""

    __slots__ = ("base", "version", "shared", "segment", "__weakref__")

    def __init__(self, base: np.ndarray | None):
        self.base = base
        self.version = 0
        self.shared = False  # set by ``Tensor.share_memory_``
        # (file, bytes) of the shared memory holding ``base`` (``runtime.shared_memory``)
        self.segment = None

    def data_ptr(self) -> int:
        if self.base is None:
            return 0
        return self.base.__array_interface__["data"][0]

    def nbytes(self) -> int:
        """The allocation's bytes: a pooled buffer counts the bytes asked of the pool, not its
        bucket's (code comparing ``nbytes`` with a tensor's, as safetensors does, sees
        PyTorch's figure)."""
        base = self.base
        if base is None:
            return 0
        requested = pool._requested.get(id(base))  # a live pooled buffer: its id is its own
        if requested is not None:
            return requested
        if base.base is None:  # an array owning its memory is contiguous
            return base.nbytes
        if isinstance(base, np.ndarray) and not (
            base.flags.c_contiguous or base.flags.f_contiguous
        ):
            return spanned_bytes(base)  # memory numpy's as_strided lent: first to last
        return base.nbytes

    def size(self) -> int:
        return self.nbytes()  # an untyped storage counts bytes

    def __len__(self) -> int:
        return self.nbytes()


class _AnyStorage(type):
    """Every ``Storage`` counts as an ``UntypedStorage`` (``isinstance``/``issubclass``)."""

    def __instancecheck__(cls, instance) -> bool:
        return isinstance(instance, Storage)

    def __subclasscheck__(cls, subclass) -> bool:
        return issubclass(subclass, Storage)


class UntypedStorage(Storage, metaclass=_AnyStorage):
    """``kiln.UntypedStorage(n)`` / ``(sequence of bytes)`` / ``()``: PyTorch's constructor. A
    subclass, so that the runtime's ``Storage(base)`` (made once per tensor that needs one) pays
    nothing for the argument forms; ``isinstance(t.untyped_storage(), UntypedStorage)`` holds."""

    __slots__ = ()

    def __init__(self, source=None, *, device=None):
        if device is not None and str(device) != "cpu":
            raise RuntimeError(f"kiln.UntypedStorage(device={device!r}): only CPU storages")
        super().__init__(source if isinstance(source, np.ndarray) else storage_array(source))


_POOL_MIN_BYTES = 1 << 20  # below this numpy's own small-block cache is as good


def pooled(nbytes: int) -> bool:
    """Whether a buffer of ``nbytes`` comes from the pool (smaller ones are numpy's own)."""
    return nbytes >= _POOL_MIN_BYTES


# free buffers kept for reuse (see the module docstring): they sit on the peak of a step
DEFAULT_MAX_FREE_BYTES = 32 << 20

# numpy's buffers below the pool's size come from malloc: keep glibc from unmapping them per use
tune_host_malloc()


def _calibrate_free_refs() -> int:
    """getrefcount of a buffer held only by a pool list, seen from the pool's scan loop.

    CPython versions count borrowed references differently, so measure rather than assume.
    """
    bucket = [np.empty(1, np.uint8)]
    for buf in bucket:
        return sys.getrefcount(buf)
    raise AssertionError


_FREE_REFS = _calibrate_free_refs()


def _calibrate_held_once() -> int:
    """getrefcount of an object one container holds, read from it into a local (or passed in
    as a parameter from such a container): what ``memory_unshared`` compares counts with."""

    def seen(holder: list) -> int:
        obj = holder[0]
        return sys.getrefcount(obj)

    return seen([object()])


_HELD_ONCE = _calibrate_held_once()


class BufferPool:
    """Size-bucketed cache of large 1-D byte buffers, reused when nothing else references them;
    at most ``max_free_bytes`` of them are kept while free."""

    def __init__(self, max_free_bytes: int = DEFAULT_MAX_FREE_BYTES):
        self.max_free_bytes = max_free_bytes
        self._buckets: dict[int, list[np.ndarray]] = {}
        # id(buffer) -> the allocation count when it was last handed out
        self._last_use: dict[int, int] = {}
        # id(buffer) -> the bytes asked for when it was last handed out
        self._requested: dict[int, int] = {}
        self._uses = 0
        self._total = 0
        self.fresh_bytes = 0  # bytes of every buffer made (not reused): pages faulted in
        self._settled = 0  # the allocation count at the last ``release_idle``
        self._free_at_release: set[int] = set()  # ids of the buffers free at that call
        self._lock = threading.Lock()
        self._free_refs = _FREE_REFS

    def _bucket_size(self, nbytes: int) -> int:
        # round up to 1/8 steps of the next power of two: bounded waste, good reuse
        top = 1 << (nbytes - 1).bit_length()
        step = max(top >> 3, 4096)
        return (nbytes + step - 1) // step * step

    def allocate(self, nbytes: int, zeroed: bool = False) -> np.ndarray:
        """A buffer of at least ``nbytes``; with ``zeroed``, its first ``nbytes`` are zero."""
        size = self._bucket_size(nbytes)
        with self._lock:
            self._uses += 1
            bucket = self._buckets.setdefault(size, [])
            for buf in bucket:
                if sys.getrefcount(buf) <= self._free_refs:
                    self._last_use[id(buf)] = self._uses
                    self._requested[id(buf)] = nbytes
                    if zeroed:
                        buf[:nbytes].fill(0)
                    return buf
            self._release_free(self.max_free_bytes)  # before the fresh buffer's pages fault in
            # fresh zeroed memory comes from calloc: the kernel's zero pages, neither written
            # nor resident until the tensor's first write (AdamW's 1 GB of GPT-2 moments were
            # memset at creation and faulted in then, in the capture of the first step)
            buf = np.zeros(size, dtype=np.uint8) if zeroed else np.empty(size, dtype=np.uint8)
            bucket.append(buf)
            self._last_use[id(buf)] = self._uses
            self._requested[id(buf)] = nbytes
            self._total += size
            self.fresh_bytes += size
            return buf

    def _free_ids(self) -> list[tuple[int, int, int]]:
        """(last use, size, id) of every free buffer."""
        free = []
        for size, bucket in self._buckets.items():
            for buf in bucket:
                if sys.getrefcount(buf) <= self._free_refs:
                    key = id(buf)
                    free.append((self._last_use[key], size, key))
        return free

    def _release_free(self, keep: int) -> None:
        """Drop free buffers, least recently used first, until at most ``keep`` bytes are free."""
        free = self._free_ids()
        self._drop(sorted(free), sum(size for _, size, _ in free), keep)

    def _drop(self, candidates: list, free_bytes: int, keep: int) -> None:
        """Drop ``candidates`` (free buffers' ``_free_ids`` entries) in their order while more
        than ``keep`` of the ``free_bytes`` free are left."""
        if free_bytes <= keep:
            return
        dropped: dict[int, set[int]] = {}
        for _, size, key in candidates:
            if free_bytes <= keep:
                break
            dropped.setdefault(size, set()).add(key)
            free_bytes -= size
        for size, keys in dropped.items():
            bucket = self._buckets[size]
            bucket[:] = [buf for buf in bucket if id(buf) not in keys]
            self._free_at_release.difference_update(keys)
            for key in keys:
                del self._last_use[key]
                del self._requested[key]
            self._total -= size * len(keys)

    def clear(self) -> None:
        """Drop every free buffer (those still in use stay pooled)."""
        with self._lock:
            self._release_free(0)

    def release_idle(self) -> None:
        """Drop free buffers that were free at the previous call already and that nobody was
        handed since, the biggest first, until the free ones fit the budget; those handed out
        or freed since stay, over the budget or not.

        Called where a stretch of work ends (a compiled graph returning, codegen/wrapper.py):
        ``allocate`` trims only when it faults in a fresh buffer, so what a training step's
        last graphs freed stayed resident between steps (GPT-2 small's compiled step: 193 MB,
        the tied embedding's 154 MB gradient term among it). A graph run in a loop hands its
        temporaries out again at every call, so it keeps finding them without page faults.
        Biggest first: the budget then keeps more of the idle buffers (a one-off 154 MB
        buffer goes, the step's 6 MB ones stay for the next step to reuse). Freed since the
        previous call is not idle: a training step's gradients, freed by ``zero_grad`` after
        the optimizer's graph returned, went at the forward graph's return, and the backward
        faulted them in again every step (resnet18: about 3% of its compiled step)."""
        with self._lock:
            mark, self._settled = self._settled, self._uses
            free = self._free_ids()
            was_free, self._free_at_release = self._free_at_release, {key for *_, key in free}
            free_bytes = sum(size for _, size, _ in free)
            if free_bytes > self.max_free_bytes:
                idle = sorted(
                    (entry for entry in free if entry[0] <= mark and entry[2] in was_free),
                    key=lambda entry: (-entry[1], entry[0]),
                )
                self._drop(idle, free_bytes, self.max_free_bytes)

    def holds(self, buffer: np.ndarray) -> bool:
        """Whether ``buffer`` is one of the pool's (its bucket list references it)."""
        return id(buffer) in self._last_use

    @property
    def pooled_bytes(self) -> int:
        """Bytes of every pooled buffer, in use or free."""
        return self._total

    @property
    def free_bytes(self) -> int:
        """Bytes of the pooled buffers nothing else references now."""
        with self._lock:
            return sum(size for _, size, _ in self._free_ids())


pool = BufferPool()


def empty_array(shape: tuple, np_dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array, from the pool when it is large."""
    itemsize = np_dtype.itemsize
    n = 1
    for s in shape:
        n *= s
    nbytes = n * itemsize
    if nbytes < _POOL_MIN_BYTES:
        return np.empty(shape, np_dtype)
    buf = pool.allocate(nbytes)
    return buf[:nbytes].view(np_dtype).reshape(shape)


def zeros_array(shape: tuple, np_dtype: np.dtype) -> np.ndarray:
    """A zero-filled C-contiguous array, from the pool when it is large (fresh memory is left to
    calloc, whose pages stay untouched until written)."""
    n = 1
    for s in shape:
        n *= s
    nbytes = n * np_dtype.itemsize
    if nbytes < _POOL_MIN_BYTES:
        return np.zeros(shape, np_dtype)
    buf = pool.allocate(nbytes, zeroed=True)
    return buf[:nbytes].view(np_dtype).reshape(shape)


def memory_unshared(data: np.ndarray, storage: Storage | None) -> bool:
    """Whether one tensor alone sees its memory: nothing references its array ``data`` but the
    tensor (and its ``storage``), nothing references the array owning the memory but ``data``,
    that storage and the pool, and no other tensor shares the storage. Such memory may be
    written in place without anyone observing it (the autograd engine sums gradients so).
    Counts references: call it with the tensor's own fields (``t._data, t._storage``)."""
    root = data.base
    if storage is not None and sys.getrefcount(storage) != _HELD_ONCE:
        return False
    if sys.getrefcount(data) != _HELD_ONCE + (root is None and storage is not None):
        return False
    if root is None:
        return True
    if root.__class__ is not np.ndarray:
        return False  # memory of another object (a mapped file, bytes): not ours to judge
    holders = 1 + (storage is not None) + pool.holds(root)  # data's base, the storage, the pool
    return sys.getrefcount(root) == _HELD_ONCE - 1 + holders


def storage_of(array: np.ndarray) -> np.ndarray:
    """The array that owns ``array``'s memory (numpy collapses view chains to the owner)."""
    base = array
    while isinstance(base.base, np.ndarray):
        base = base.base
    return base


_OVERLAP_MESSAGE = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)


def check_no_internal_overlap(shape, strides) -> None:
    """PyTorch's refusal of an in-place write where one memory location would receive several
    elements: a stride-0 dimension longer than one, in a non-empty tensor (strides in elements
    or bytes alike; a tensor's metadata is enough, so compiled code checks it too)."""
    if any(st == 0 and n > 1 for n, st in zip(shape, strides, strict=True)) and all(
        n != 0 for n in shape
    ):
        raise RuntimeError(_OVERLAP_MESSAGE)


def writable_target(array: np.ndarray, allow_overlap: bool = False) -> np.ndarray:
    """``array`` made writable for an in-place op, as PyTorch allows it.

    numpy marks views of ``broadcast_to`` (``expand``) read-only. PyTorch refuses a write only
    where one memory location would receive several elements (a stride-0 dimension of size > 1,
    unless ``allow_overlap``, as for ``fill_``); otherwise this returns a writable alias of the
    same memory.
    """
    if array.flags.writeable:
        return array
    if not allow_overlap:
        check_no_internal_overlap(array.shape, array.strides)
    owner = storage_of(array)
    if not owner.flags.writeable and isinstance(owner.base, (bytes, memoryview)):
        raise RuntimeError(  # ``kiln.frombuffer`` of bytes: the memory itself is read-only
            "cannot write to a tensor over a read-only buffer (kiln.frombuffer of bytes); copy "
            "the buffer (bytearray(...)) or clone() the tensor first"
        )
    if not owner.flags.writeable or not owner.flags.c_contiguous:
        raise RuntimeError(_OVERLAP_MESSAGE)
    offset = array.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
    return np.ndarray(array.shape, array.dtype, buffer=owner, offset=offset, strides=array.strides)


# ------------------------------------------------------------------------------ data addresses


def _buffer_address(a) -> int:
    """``a``'s data address through a ctypes view of its buffer (0.5 us), or numpy's array
    interface (2.5 us, as long as ``a.ctypes.data``) where ctypes cannot view the buffer
    (read-only, not C-contiguous, empty)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.__array_interface__["data"][0]


def _field_reader():
    """A function reading an ndarray's data pointer from its C struct (the field right after
    the object header: ``PyArrayObject_fields.data``; 0.27 us, for every array), or None when
    that layout does not hold here (checked on arrays whose addresses numpy reports)."""
    read = ctypes.c_void_p.from_address
    offset = object.__basicsize__  # the object header the struct starts with

    def data_address(a) -> int:
        """The address of numpy array ``a``'s first element, from its struct."""
        return read(id(a) + offset).value or 0

    base = np.arange(24, dtype=np.float32)
    probes = (base, base[5:], base[::3], np.broadcast_to(base[7:8], (4, 3)), base.reshape(4, 6).T)
    try:
        if all(data_address(p) == p.__array_interface__["data"][0] for p in probes):
            return data_address
    except (ValueError, OSError):
        pass
    return None


# ``data_address(a)``: the address of numpy array ``a``'s first element. Every kernel call
# passes a few (a compiled graph's wrapper one per buffer, softmax rows two, layer norm four),
# and every ``data_ptr``: the reader is chosen once here, not tested per call.
data_address = _field_reader() or _buffer_address
