"""Tensors in memory other processes map: ``Tensor.share_memory_`` and its pickled handle.

kiln's CPU tensors are numpy arrays. ``share_storage`` copies a tensor's storage into a file in
``/dev/shm`` mapped with ``mmap`` and points the tensor at the mapping; pickled for another
process (``kiln.multiprocessing`` registers ``reduce_shared`` with multiprocessing's pickler),
such a tensor travels as the file's name and its layout, and the receiver maps the same pages,
so Hogwild training (``model.share_memory()``, then several processes stepping one model) sees
every process's updates. The creating process removes the file when the storage dies or the
process exits; mappings already made stay valid (POSIX keeps an unlinked file's pages while
mapped). Tensors that are not shared are pickled by value, as before.

The tensor shared and the base it views move; other views made of the storage before it was
shared keep the old buffer: share a tensor before viewing it (``Module.share_memory`` shares
parameters, which are not views).
"""

from __future__ import annotations

import itertools
import mmap
import os
import secrets
import tempfile
import weakref

import numpy as np

from . import dtypes as dt
from .storage import Storage
from .tensor import Tensor, wrap_array

__all__ = ["share_storage", "reduce_shared", "rebuild_shared"]

_DIRECTORY = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_counter = itertools.count()


def _unlink(path: str, creator: int) -> None:
    """Remove a segment's file, only in the process that made it (a forked child inherits the
    storage and its finalizer, but not the file's ownership)."""
    if os.getpid() == creator:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _map(path: str, nbytes: int, create: bool) -> mmap.mmap:
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, nbytes)
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


def share_storage(tensor: Tensor) -> None:
    """Move ``tensor``'s storage into shared memory (once; later calls only mark it)."""
    storage = tensor._get_storage()
    if storage.segment is not None or storage.base is None or not storage.base.nbytes:
        storage.shared = True
        return
    base = storage.base
    if not (base.flags.c_contiguous or base.flags.f_contiguous):
        raise RuntimeError("share_memory_: the tensor's storage is not one contiguous buffer")
    path = os.path.join(_DIRECTORY, f"kiln_{os.getpid()}_{next(_counter)}_{secrets.token_hex(4)}")
    pages = _map(path, base.nbytes, create=True)
    shared = np.ndarray(base.shape, base.dtype, buffer=pages, strides=base.strides)
    np.copyto(shared, base)
    for holder in (tensor, tensor._base):  # the tensor, and the base it is a view of
        if holder is not None and holder._data is not None:
            holder._data = _moved(holder._data, base, pages)
    storage.base = shared
    storage.shared = True
    storage.segment = (path, base.nbytes)
    weakref.finalize(storage, _unlink, path, os.getpid())


def _moved(data: np.ndarray, base: np.ndarray, pages: mmap.mmap) -> np.ndarray:
    """``data`` (a view of ``base``) with the same layout over ``pages``, ``base``'s copy."""
    offset = data.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return np.ndarray(data.shape, data.dtype, pages, offset=offset, strides=data.strides)


def reduce_shared(tensor: Tensor):
    """The pickle reduction of a tensor for another process: a handle to its shared memory, or
    its value where it is not shared (or not a CPU tensor with data)."""
    storage = tensor._storage
    if storage is None or storage.segment is None or tensor._data is None:
        return tensor.__reduce_ex__(2)
    path, nbytes = storage.segment
    data = tensor._data
    offset = data.__array_interface__["data"][0] - storage.data_ptr()
    layout = (data.shape, data.strides, offset, data.dtype.str)
    return (
        rebuild_shared,
        (path, nbytes, layout, tensor._dtype.name, tensor._requires_grad, type(tensor)),
    )


def rebuild_shared(
    path: str, nbytes: int, layout: tuple, dtype_name: str, requires_grad: bool, cls: type
) -> Tensor:
    """The tensor a ``reduce_shared`` handle describes, on the same pages as the sender's."""
    shape, strides, offset, numpy_dtype = layout
    pages = _map(path, nbytes, create=False)
    base = np.frombuffer(pages, dtype=np.uint8)
    array = np.ndarray(shape, np.dtype(numpy_dtype), pages, offset=offset, strides=strides)
    storage = Storage(base)
    storage.shared = True
    storage.segment = (path, nbytes)
    tensor = wrap_array(array, getattr(dt, dtype_name), storage)
    if cls is not Tensor:
        tensor = cls(tensor, requires_grad)  # a Parameter: its class and flag
    tensor._get_storage().shared = True
    tensor.requires_grad_(requires_grad)
    return tensor
