"""ctypes bindings of NCCL (the ``nvidia-nccl-cu12`` wheel's ``libnccl.so.2``).

Only what the CUDA backend calls is bound. Every argument is converted to its ctypes type here
(device pointers ``c_void_p``, counts ``c_size_t``, enums ``c_int``, the 128-byte unique id by
value), so the marshalling can be checked against a stand-in library on machines without a GPU;
every ``ncclResult_t`` other than success becomes ``NCCLError`` with NCCL's own text.

The table of dtypes follows PyTorch's NCCL backend: bool travels as uint8 (SUM and MAX become
MAX, PRODUCT and MIN become MIN: logical or/and), complex as pairs of reals (SUM and AVG only);
int16 has no NCCL type.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import threading

from ..runtime import dtypes as dt
from .reduce_op import RedOpType

__all__ = [
    "NCCL",
    "NCCLError",
    "UniqueId",
    "load",
    "find_library",
    "nccl_unavailable_reason",
    "nccl_operands",
    "RESULT_NAMES",
]

UNIQUE_ID_BYTES = 128

RESULT_NAMES = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}

DATA_TYPES = {
    dt.int8: 0,
    dt.uint8: 1,
    dt.int32: 2,
    dt.int64: 4,
    dt.float16: 6,
    dt.float32: 7,
    dt.float64: 8,
    dt.bfloat16: 9,
}
_UINT8 = 1

REDUCE_OPS = {
    RedOpType.SUM: 0,
    RedOpType.PRODUCT: 1,
    RedOpType.MAX: 2,
    RedOpType.MIN: 3,
    RedOpType.AVG: 4,
}
_BOOL_OPS = {
    RedOpType.SUM: RedOpType.MAX,
    RedOpType.MAX: RedOpType.MAX,
    RedOpType.BOR: RedOpType.MAX,
    RedOpType.PRODUCT: RedOpType.MIN,
    RedOpType.MIN: RedOpType.MIN,
    RedOpType.BAND: RedOpType.MIN,
}


class NCCLError(RuntimeError):
    """An NCCL call failed; ``code`` is its ``ncclResult_t``."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class UniqueId(ctypes.Structure):
    """``ncclUniqueId``: 128 opaque bytes that rank 0 makes and every rank passes by value
    (read and written as raw memory: as a ``c_char`` array it would stop at the first zero)."""

    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]

    def raw(self) -> bytes:
        return ctypes.string_at(ctypes.addressof(self), UNIQUE_ID_BYTES)

    @classmethod
    def from_raw(cls, data: bytes) -> UniqueId:
        uid = cls()
        ctypes.memmove(ctypes.addressof(uid), data, UNIQUE_ID_BYTES)
        return uid


def nccl_operands(dtype: dt.dtype, op: RedOpType | None, collective: str) -> tuple[int, int, int]:
    """(NCCL data type, elements per tensor element, NCCL reduction op or -1 for none) for a
    collective on ``dtype``; the error PyTorch's NCCL backend gives for what it refuses."""
    per_element = 1
    if dtype is dt.bool_:
        code = _UINT8
        if op is not None:
            if op not in _BOOL_OPS:
                raise RuntimeError(f"{collective}: {op} is not supported for bool tensors by NCCL")
            op = _BOOL_OPS[op]
    elif dtype.is_complex:
        code = DATA_TYPES[dtype.to_real()]
        per_element = 2
        if op is not None and op not in (RedOpType.SUM, RedOpType.AVG):
            raise ValueError(f"{collective} does not support {op} on complex tensors")
    elif dtype in DATA_TYPES:
        code = DATA_TYPES[dtype]
    else:
        raise RuntimeError(f"{collective}: unsupported data type {dtype} for the NCCL backend")
    if op is None:
        return code, per_element, -1
    if op is RedOpType.AVG and dtype.category < 2:
        raise RuntimeError(
            f"{collective}: ReduceOp.AVG of a {dtype} tensor: the result type (floating point) "
            f"can't be cast to the tensor's type {dtype}"
        )
    if op not in REDUCE_OPS:
        raise ValueError(f"{collective}: {op} is not supported by the NCCL backend")
    return code, per_element, REDUCE_OPS[op]


# nccl.h's prototypes: (result type, argument types); every call returns ncclResult_t (an int)
_PTR, _COUNT, _ENUM = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
_SIGNATURES = {
    "ncclGetVersion": (_ENUM, [ctypes.POINTER(ctypes.c_int)]),
    "ncclGetUniqueId": (_ENUM, [ctypes.POINTER(UniqueId)]),
    "ncclCommInitRank": (_ENUM, [ctypes.POINTER(ctypes.c_void_p), _ENUM, UniqueId, _ENUM]),
    "ncclCommDestroy": (_ENUM, [_PTR]),
    "ncclCommAbort": (_ENUM, [_PTR]),
    "ncclCommGetAsyncError": (_ENUM, [_PTR, ctypes.POINTER(ctypes.c_int)]),
    "ncclGetErrorString": (ctypes.c_char_p, [_ENUM]),
    "ncclGetLastError": (ctypes.c_char_p, [_PTR]),
    # (send, recv, count, dtype, op, comm, stream)
    "ncclAllReduce": (_ENUM, [_PTR, _PTR, _COUNT, _ENUM, _ENUM, _PTR, _PTR]),
    # (send, recv, count, dtype, root, comm, stream)
    "ncclBroadcast": (_ENUM, [_PTR, _PTR, _COUNT, _ENUM, _ENUM, _PTR, _PTR]),
    # (send, recv, count, dtype, op, root, comm, stream)
    "ncclReduce": (_ENUM, [_PTR, _PTR, _COUNT, _ENUM, _ENUM, _ENUM, _PTR, _PTR]),
    # (send, recv, send count, dtype, comm, stream)
    "ncclAllGather": (_ENUM, [_PTR, _PTR, _COUNT, _ENUM, _PTR, _PTR]),
    # (send, recv, recv count, dtype, op, comm, stream)
    "ncclReduceScatter": (_ENUM, [_PTR, _PTR, _COUNT, _ENUM, _ENUM, _PTR, _PTR]),
    # (buffer, count, dtype, peer, comm, stream)
    "ncclSend": (_ENUM, [_PTR, _COUNT, _ENUM, _ENUM, _PTR, _PTR]),
    "ncclRecv": (_ENUM, [_PTR, _COUNT, _ENUM, _ENUM, _PTR, _PTR]),
    "ncclGroupStart": (_ENUM, []),
    "ncclGroupEnd": (_ENUM, []),
}


class NCCL:
    """The bound library: one method per NCCL call, raising ``NCCLError`` on failure."""

    def __init__(self, lib):
        self.lib = lib
        missing = []
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name, None)
            if fn is None:
                missing.append(name)
                continue
            fn.restype = restype
            fn.argtypes = argtypes
        if missing:
            raise RuntimeError(f"the NCCL library lacks {', '.join(missing)} (NCCL >= 2.10 needed)")

    def _check(self, result: int, what: str, comm=None) -> None:
        if result == 0:
            return
        text = self.lib.ncclGetErrorString(ctypes.c_int(result))
        text = text.decode() if isinstance(text, bytes) else str(text)
        detail = ""
        if comm is not None:
            last = self.lib.ncclGetLastError(comm)
            if last:
                detail = f": {last.decode() if isinstance(last, bytes) else last}"
        name = RESULT_NAMES.get(result, f"error {result}")
        raise NCCLError(
            f"NCCL error in {what}: {text} ({name}){detail}; run with NCCL_DEBUG=INFO for details",
            result,
        )

    # ------------------------------------------------------------------ setup
    def version(self) -> int:
        """NCCL's version as X*10000 + Y*100 + Z (22105 is 2.21.5)."""
        out = ctypes.c_int()
        self._check(self.lib.ncclGetVersion(ctypes.byref(out)), "ncclGetVersion")
        return out.value

    def unique_id(self) -> bytes:
        uid = UniqueId()
        self._check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return uid.raw()

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int) -> ctypes.c_void_p:
        if len(unique_id) != UNIQUE_ID_BYTES:
            raise ValueError(f"an NCCL unique id has {UNIQUE_ID_BYTES} bytes, got {len(unique_id)}")
        if not 0 <= rank < nranks:
            raise ValueError(f"rank {rank} is not in a communicator of {nranks} ranks")
        uid = UniqueId.from_raw(unique_id)
        comm = ctypes.c_void_p()
        result = self.lib.ncclCommInitRank(
            ctypes.byref(comm), ctypes.c_int(nranks), uid, ctypes.c_int(rank)
        )
        self._check(result, "ncclCommInitRank")
        return comm

    def comm_destroy(self, comm) -> None:
        self._check(self.lib.ncclCommDestroy(comm), "ncclCommDestroy")

    def comm_abort(self, comm) -> None:
        self._check(self.lib.ncclCommAbort(comm), "ncclCommAbort")

    def async_error(self, comm) -> int:
        out = ctypes.c_int()
        self._check(
            self.lib.ncclCommGetAsyncError(comm, ctypes.byref(out)), "ncclCommGetAsyncError"
        )
        return out.value

    # ------------------------------------------------------------------ collectives
    def _call(self, name: str, comm, *values) -> None:
        """``name(*values)`` with every Python int made the C type ``nccl.h`` declares."""
        argtypes = _SIGNATURES[name][1]
        args = [t(v) if v is None or isinstance(v, int) else v for t, v in zip(argtypes, values)]
        self._check(getattr(self.lib, name)(*args), name, comm)

    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: int, comm, stream=0):
        self._call("ncclAllReduce", comm, send, recv, count, dtype, op, comm, stream)

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, comm, stream=0):
        self._call("ncclBroadcast", comm, send, recv, count, dtype, root, comm, stream)

    def reduce(self, send, recv, count, dtype, op, root, comm, stream=0):
        self._call("ncclReduce", comm, send, recv, count, dtype, op, root, comm, stream)

    def all_gather(self, send: int, recv: int, send_count: int, dtype: int, comm, stream=0):
        self._call("ncclAllGather", comm, send, recv, send_count, dtype, comm, stream)

    def reduce_scatter(self, send, recv, recv_count, dtype, op, comm, stream=0):
        self._call("ncclReduceScatter", comm, send, recv, recv_count, dtype, op, comm, stream)

    def send(self, buf: int, count: int, dtype: int, peer: int, comm, stream=0):
        self._call("ncclSend", comm, buf, count, dtype, peer, comm, stream)

    def recv(self, buf: int, count: int, dtype: int, peer: int, comm, stream=0):
        self._call("ncclRecv", comm, buf, count, dtype, peer, comm, stream)

    def group_start(self) -> None:
        self._check(self.lib.ncclGroupStart(), "ncclGroupStart")

    def group_end(self) -> None:
        self._check(self.lib.ncclGroupEnd(), "ncclGroupEnd")


_INSTALL_HINT = "pip install nvidia-nccl-cu12 (or set KILN_NCCL_LIBRARY to libnccl.so.2)"


def find_library() -> str | None:
    """Where ``libnccl.so.2`` is: KILN_NCCL_LIBRARY, the nvidia-nccl-cu12 wheel, the system."""
    explicit = os.environ.get("KILN_NCCL_LIBRARY")
    if explicit:
        return explicit
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = os.path.join(root, "lib", "libnccl.so.2")
        if os.path.exists(path):
            return path
    return ctypes.util.find_library("nccl")


_loaded: dict = {}
_lock = threading.Lock()


def load() -> NCCL:
    """The bound NCCL library (loaded once), or a RuntimeError saying how to get it."""
    with _lock:
        if "nccl" in _loaded:
            return _loaded["nccl"]
        path = find_library()
        if path is None:
            raise RuntimeError(f"the NCCL library was not found: {_INSTALL_HINT}")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise RuntimeError(f"the NCCL library at {path} could not be loaded ({e})") from None
        _loaded["nccl"] = NCCL(lib)
        return _loaded["nccl"]


def nccl_unavailable_reason() -> str | None:
    """Why the NCCL backend cannot run here (no GPU, no library), or None."""
    from ..runtime import cuda

    reason = cuda.unavailable_reason()
    if reason is not None:
        return f"CUDA is not available ({reason})"
    if find_library() is None:
        return f"the NCCL library was not found: {_INSTALL_HINT}"
    return None
