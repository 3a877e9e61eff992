"""Running generated Triton kernels on the CPU with Triton's interpreter (a testing aid).

``TRITON_INTERPRET=1`` makes ``@triton.jit`` return an interpreted function; Triton reads it when a
kernel is *decorated*, so ``interpret_mode()`` sets it only while a generated module is executed
and restores it afterwards. The interpreter runs each program of the grid as numpy code over raw
memory addresses, and moves arguments "to the host" through a small slice of PyTorch's tensor
protocol. ``HostBuffer`` provides that slice for memory kiln already holds on the host: a numpy
array, or a raw address (the host-emulated CUDA driver used in tests).

The interpreter has no ``libdevice`` (those calls are stubs there) and no bfloat16 arithmetic;
``LIBDEVICE`` stands in for the former with numpy, and kiln computes half types in float32.
This path is for tests and debugging, not for users: it is orders of magnitude slower than the
LLVM CPU backend.
"""

from __future__ import annotations

import contextlib
import os
import types

import numpy as np

__all__ = ["HostBuffer", "interpret_mode", "LIBDEVICE"]


class _HostStorage:
    """``untyped_storage()`` of a host buffer: the interpreter only asks for its address and to
    copy it; host memory is already "on the CPU", so ``cpu()`` is the storage itself."""

    __slots__ = ("ptr", "nbytes", "owner")

    def __init__(self, ptr: int, nbytes: int, owner):
        self.ptr, self.nbytes, self.owner = ptr, nbytes, owner

    def data_ptr(self) -> int:
        return self.ptr

    def cpu(self) -> _HostStorage:
        return self

    def copy_(self, other: _HostStorage) -> _HostStorage:
        if other.ptr != self.ptr:
            import ctypes

            ctypes.memmove(self.ptr, other.ptr, min(self.nbytes, other.nbytes))
        return self


class HostBuffer:
    """A flat host buffer as the tensor-like argument Triton's interpreter expects.

    ``dtype`` is the element type's name (``"float32"``, ``"bfloat16"``, bools as ``"int8"``),
    which Triton maps to its pointer types the same way it maps ``torch.float32``.
    """

    __slots__ = ("_storage", "_offset", "_numel", "dtype", "itemsize", "array")

    def __init__(self, storage: _HostStorage, dtype: str, itemsize: int, offset=0, numel=None):
        self._storage = storage
        self.dtype = dtype
        self.itemsize = itemsize
        self._offset = offset
        self._numel = (storage.nbytes // itemsize - offset) if numel is None else numel
        self.array = storage.owner if isinstance(storage.owner, np.ndarray) else None

    @staticmethod
    def of_array(array: np.ndarray, dtype: str | None = None) -> HostBuffer:
        """Wrap a C-contiguous numpy array (kept alive by the buffer)."""
        name = dtype or ("int8" if array.dtype == np.bool_ else str(array.dtype))
        ptr = array.__array_interface__["data"][0]
        return HostBuffer(_HostStorage(ptr, array.nbytes, array), name, array.itemsize)

    @staticmethod
    def of_address(ptr: int, nbytes: int, dtype: str, itemsize: int, owner=None) -> HostBuffer:
        return HostBuffer(_HostStorage(ptr, nbytes, owner), dtype, itemsize)

    # the tensor protocol of triton.runtime.interpreter.GridExecutor
    def data_ptr(self) -> int:
        return self._storage.ptr + self._offset * self.itemsize

    def untyped_storage(self) -> _HostStorage:
        return self._storage

    def storage_offset(self) -> int:
        return self._offset

    def size(self) -> tuple:
        return (self._numel,)

    def stride(self, dim=None):
        return (1,) if dim is None else 1

    def element_size(self) -> int:
        return self.itemsize

    def numel(self) -> int:
        return self._numel

    def new_empty(self, *size, device=None, **kwargs) -> HostBuffer:
        return HostBuffer(self._storage, self.dtype, self.itemsize, 0, 0)

    def set_(self, storage: _HostStorage, offset: int, size, stride) -> HostBuffer:
        self._storage = storage
        self._offset = int(offset)
        self._numel = int(np.prod(size)) if len(size) else 1
        return self

    def copy_(self, other: HostBuffer) -> HostBuffer:
        self._storage.copy_(other._storage)
        return self

    def __repr__(self) -> str:
        return f"HostBuffer({self.dtype}, {self._numel} elements at {self.data_ptr():#x})"


@contextlib.contextmanager
def interpret_mode():
    """Set ``TRITON_INTERPRET=1`` while kernels are decorated (a generated module is executed)."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


# ------------------------------------------------------------------------------ libdevice


def _elementwise(fn):
    """A libdevice function for interpreted kernels: ``fn`` on the operands' numpy data."""

    def call(*args):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        tensors = [a for a in args if isinstance(a, tl.core.tensor)]
        out_tl = tensors[0].dtype.scalar
        datas = [a.handle.data if isinstance(a, tl.core.tensor) else a for a in args]
        with np.errstate(all="ignore"):
            result = np.asarray(fn(*datas))
        np_dtype = np.bool_ if out_tl == tl.int1 else tensors[0].handle.data.dtype
        if fn in _INT_RESULT:
            out_tl, np_dtype = tl.int32, np.int32
        result = result.astype(np_dtype)
        shapes = [t.shape for t in tensors if t.type.is_block()]
        if shapes:
            shape = list(np.broadcast_shapes(*[tuple(s) for s in shapes]))
            ty = tl.block_type(out_tl, shape)
            result = np.broadcast_to(result, tuple(shape)).copy()
        else:
            ty = out_tl
        return tl.core.tensor(TensorHandle(result, out_tl), ty)

    return call


def _erfinv(x):
    from ...ops.pointwise.unary_binary import np_erfinv

    return np_erfinv(x)


def _pow(a, b):
    from ...ops.pointwise.numpy_math import np_float_pow

    return np_float_pow(a, b)


def _erfc(x):
    from ...ops.special.numpy_kernels import np_erfc

    return np_erfc(np.asarray(x))


_INT_RESULT = {np.signbit}

LIBDEVICE = types.SimpleNamespace(
    **{
        name: _elementwise(fn)
        for name, fn in {
            "expm1": np.expm1,
            "log10": np.log10,
            "log1p": np.log1p,
            "log": np.log,
            "sqrt": np.sqrt,
            "sin": np.sin,
            "cos": np.cos,
            "tan": np.tan,
            "asin": np.arcsin,
            "acos": np.arccos,
            "atan": np.arctan,
            "sinh": np.sinh,
            "cosh": np.cosh,
            "tanh": np.tanh,
            "asinh": np.arcsinh,
            "acosh": np.arccosh,
            "atanh": np.arctanh,
            "erfc": _erfc,
            "erfinv": _erfinv,
            "trunc": np.trunc,
            "nearbyint": np.rint,
            "atan2": np.arctan2,
            "hypot": np.hypot,
            "copysign": np.copysign,
            "pow": _pow,
            "signbit": np.signbit,
        }.items()
    }
)
