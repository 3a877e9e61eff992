"""The NCCL bindings without a GPU: a stand-in library records what the bindings pass (ctypes
types and values, the unique id by value), NCCL's errors become messages, the dtype/op table
matches PyTorch's NCCL backend, and the missing-library/missing-GPU errors say what to do. The
backend itself runs on kiln's host-memory CUDA device with a one-rank stand-in NCCL.

What needs a real GPU and NCCL (world size 1 on one GPU; more ranks on more GPUs) cannot run
here.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import kiln
import kiln.distributed as dist
from kiln.distributed import nccl
from kiln.distributed.nccl_backend import NCCLBackend
from kiln.distributed.reduce_op import RedOpType
from kiln.runtime import cuda


class _Function:
    """A library entry point: records its calls; ``argtypes``/``restype`` are assignable."""

    def __init__(self, name: str, log: list, body=None, result: int = 0):
        self.name, self.log, self.body, self.result = name, log, body, result
        self.argtypes = self.restype = None

    def __call__(self, *args):
        self.log.append((self.name, args))
        if self.body is not None:
            return self.body(*args)
        return self.result


class FakeNCCL:
    """Every NCCL symbol the bindings use, succeeding; ``fail(name, code)`` makes one fail."""

    def __init__(self, missing: tuple = ()):
        self.calls: list = []
        for name in nccl._SIGNATURES:
            if name not in missing:
                setattr(self, name, _Function(name, self.calls))
        self.ncclGetErrorString = _Function(
            "ncclGetErrorString", [], lambda code: b"unhandled system error"
        )
        self.ncclGetLastError = _Function("ncclGetLastError", [], lambda comm: b"socket timeout")
        self.ncclGetVersion = _Function("ncclGetVersion", self.calls, self._version)
        self.ncclGetUniqueId = _Function("ncclGetUniqueId", self.calls, self._unique_id)
        self.ncclCommInitRank = _Function("ncclCommInitRank", self.calls, self._init)
        self.ncclCommGetAsyncError = _Function("ncclCommGetAsyncError", self.calls, self._async)

    @staticmethod
    def _version(out):
        out._obj.value = 22105
        return 0

    @staticmethod
    def _unique_id(out):
        ctypes.memmove(ctypes.addressof(out._obj), bytes(range(128)), 128)  # zeros included
        return 0

    @staticmethod
    def _init(comm_out, nranks, unique_id, rank):
        comm_out._obj.value = 0xC0FFEE
        return 0

    @staticmethod
    def _async(comm, out):
        out._obj.value = 0
        return 0

    def fail(self, name: str, code: int) -> None:
        getattr(self, name).result = code

    def last(self, name: str):
        return next(args for n, args in reversed(self.calls) if n == name)


def test_every_entry_point_gets_its_ctypes_signature():
    lib = FakeNCCL()
    nccl.NCCL(lib)
    for name, (restype, argtypes) in nccl._SIGNATURES.items():
        assert getattr(lib, name).restype is restype
        assert getattr(lib, name).argtypes == argtypes


def test_a_library_missing_entry_points_is_refused_by_name():
    with pytest.raises(RuntimeError, match="lacks ncclReduceScatter, ncclSend"):
        nccl.NCCL(FakeNCCL(missing=("ncclReduceScatter", "ncclSend")))


def test_all_reduce_passes_pointers_counts_and_enums_as_their_c_types():
    lib = FakeNCCL()
    bound = nccl.NCCL(lib)
    comm = ctypes.c_void_p(0xC0FFEE)
    bound.all_reduce(0x1000, 0x2000, 123, 7, 4, comm, stream=0x99)
    send, recv, count, dtype, op, passed_comm, stream = lib.last("ncclAllReduce")
    assert isinstance(send, ctypes.c_void_p) and send.value == 0x1000
    assert isinstance(recv, ctypes.c_void_p) and recv.value == 0x2000
    assert isinstance(count, ctypes.c_size_t) and count.value == 123
    assert isinstance(dtype, ctypes.c_int) and dtype.value == 7
    assert isinstance(op, ctypes.c_int) and op.value == 4
    assert passed_comm is comm
    assert isinstance(stream, ctypes.c_void_p) and stream.value == 0x99


@pytest.mark.parametrize(
    "call, name, expected",
    [
        (lambda b, c: b.broadcast(1, 2, 3, 9, 1, c), "ncclBroadcast", [1, 2, 3, 9, 1]),
        (lambda b, c: b.reduce(1, 2, 3, 6, 2, 1, c), "ncclReduce", [1, 2, 3, 6, 2, 1]),
        (lambda b, c: b.all_gather(1, 2, 3, 8, c), "ncclAllGather", [1, 2, 3, 8]),
        (lambda b, c: b.reduce_scatter(1, 2, 3, 4, 0, c), "ncclReduceScatter", [1, 2, 3, 4, 0]),
        (lambda b, c: b.send(1, 3, 7, 1, c), "ncclSend", [1, 3, 7, 1]),
        (lambda b, c: b.recv(1, 3, 7, 0, c), "ncclRecv", [1, 3, 7, 0]),
    ],
)
def test_collectives_pass_their_arguments_in_ncclh_order(call, name, expected):
    lib = FakeNCCL()
    comm = ctypes.c_void_p(5)
    call(nccl.NCCL(lib), comm)
    args = lib.last(name)
    assert [a.value for a in args[: len(expected)]] == expected
    assert args[len(expected)] is comm and args[-1].value is None  # the default stream


def test_communicator_setup_passes_the_unique_id_by_value():
    lib = FakeNCCL()
    bound = nccl.NCCL(lib)
    assert bound.version() == 22105
    uid = bound.unique_id()
    assert uid == bytes(range(128))
    comm = bound.comm_init_rank(4, uid, 3)
    assert comm.value == 0xC0FFEE
    _, nranks, passed, rank = lib.last("ncclCommInitRank")
    assert (nranks.value, rank.value) == (4, 3)
    assert isinstance(passed, nccl.UniqueId) and passed.raw() == uid
    with pytest.raises(ValueError, match="128 bytes, got 5"):
        bound.comm_init_rank(4, b"short", 0)
    with pytest.raises(ValueError, match="rank 4 is not in a communicator of 4 ranks"):
        bound.comm_init_rank(4, uid, 4)


def test_an_nccl_failure_becomes_an_error_with_nccls_words():
    lib = FakeNCCL()
    lib.fail("ncclAllReduce", 2)
    with pytest.raises(nccl.NCCLError) as info:
        nccl.NCCL(lib).all_reduce(1, 1, 1, 7, 0, ctypes.c_void_p(5))
    message = str(info.value)
    assert info.value.code == 2
    for words in ("ncclAllReduce", "unhandled system error", "ncclSystemError", "socket timeout",
                  "NCCL_DEBUG=INFO"):  # fmt: skip
        assert words in message, message


@pytest.mark.parametrize(
    "dtype, op, expected",
    [
        (kiln.float32, RedOpType.SUM, (7, 1, 0)),
        (kiln.float64, RedOpType.PRODUCT, (8, 1, 1)),
        (kiln.float16, RedOpType.MAX, (6, 1, 2)),
        (kiln.bfloat16, RedOpType.AVG, (9, 1, 4)),
        (kiln.int8, RedOpType.MIN, (0, 1, 3)),
        (kiln.uint8, RedOpType.SUM, (1, 1, 0)),
        (kiln.int32, RedOpType.SUM, (2, 1, 0)),
        (kiln.int64, RedOpType.MAX, (4, 1, 2)),
        (kiln.bool, RedOpType.SUM, (1, 1, 2)),  # logical or: MAX on uint8, as PyTorch
        (kiln.bool, RedOpType.PRODUCT, (1, 1, 3)),  # logical and: MIN
        (kiln.complex64, RedOpType.SUM, (7, 2, 0)),  # pairs of float32
        (kiln.complex128, RedOpType.AVG, (8, 2, 4)),
        (kiln.float32, None, (7, 1, -1)),  # data movement: no op
    ],
)
def test_dtype_and_op_table(dtype, op, expected):
    assert nccl.nccl_operands(dtype, op, "all_reduce") == expected


@pytest.mark.parametrize(
    "dtype, op, error, words",
    [
        (kiln.int16, RedOpType.SUM, RuntimeError, "unsupported data type kiln.int16"),
        (kiln.int64, RedOpType.AVG, RuntimeError, "AVG of a kiln.int64"),
        (kiln.complex64, RedOpType.MAX, ValueError, "does not support RedOpType.MAX on complex"),
        (kiln.bool, RedOpType.BXOR, RuntimeError, "not supported for bool"),
        (kiln.float32, RedOpType.PREMUL_SUM, ValueError, "PREMUL_SUM is not supported"),
    ],
)
def test_what_nccl_cannot_do_is_refused(dtype, op, error, words):
    with pytest.raises(error, match=words):
        nccl.nccl_operands(dtype, op, "all_reduce")


def test_missing_library_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(nccl, "find_library", lambda: None)
    monkeypatch.setattr(nccl, "_loaded", {})
    with pytest.raises(RuntimeError, match="pip install nvidia-nccl-cu12"):
        nccl.load()
    monkeypatch.setattr(nccl, "find_library", lambda: str(tmp_path / "libnccl.so.2"))
    with pytest.raises(RuntimeError, match="could not be loaded"):
        nccl.load()


def test_without_a_gpu_the_nccl_backend_is_unavailable_and_says_why(monkeypatch):
    monkeypatch.setattr(cuda, "unavailable_reason", lambda: "libcuda.so.1 could not be loaded")
    reason = nccl.nccl_unavailable_reason()
    assert reason == "CUDA is not available (libcuda.so.1 could not be loaded)"
    assert not dist.is_nccl_available()
    with pytest.raises(RuntimeError, match="doesn't have NCCL built in: CUDA is not available"):
        dist.init_process_group("nccl")
    assert not dist.is_initialized()


# ---------------------------------------------------------------------- the backend, one rank
class _OneRankGroup:
    def rank(self) -> int:
        return 0

    def size(self) -> int:
        return 1

    def broadcast_bytes(self, data, nbytes, root=0):
        assert len(data) == nbytes
        return data


class OneRankNCCL(FakeNCCL):
    """One rank's NCCL on host memory: a reduction over one rank copies; with ``doubling`` the
    all-reduce doubles float32 values instead (as two equal ranks would), to see writes land."""

    def __init__(self):
        super().__init__()
        self.ncclAllReduce = _Function("ncclAllReduce", self.calls, self._all_reduce)

    def _all_reduce(self, send, recv, count, dtype, op, comm, stream):
        assert dtype.value == 7  # float32 in these tests
        source = np.ctypeslib.as_array((ctypes.c_float * count.value).from_address(send.value))
        target = np.ctypeslib.as_array((ctypes.c_float * count.value).from_address(recv.value))
        target[:] = source * 2
        return 0


@pytest.fixture
def host_gpu():
    cuda.use_driver(cuda.HostMemoryDriver())
    yield
    cuda.use_driver(None)


def test_backend_all_reduce_on_a_contiguous_cuda_tensor(host_gpu):
    lib = OneRankNCCL()
    backend = NCCLBackend(_OneRankGroup(), library=nccl.NCCL(lib))
    assert backend.comm.value == 0xC0FFEE
    t = kiln.tensor([[1.0, 2.0], [3.0, 4.0]], device="cuda")
    work = backend.all_reduce(t, RedOpType.SUM, "all_reduce")
    assert work.wait() and work.is_completed()
    send, recv, count, *_ = lib.last("ncclAllReduce")
    assert send.value == recv.value == t.data_ptr() and count.value == 4
    np.testing.assert_array_equal(t.cpu().numpy(), [[2.0, 4.0], [6.0, 8.0]])


def test_backend_stages_a_non_contiguous_cuda_tensor_and_writes_back(host_gpu):
    lib = OneRankNCCL()
    backend = NCCLBackend(_OneRankGroup(), library=nccl.NCCL(lib))
    base = kiln.tensor([[1.0, 2.0], [3.0, 4.0]], device="cuda")
    view = base.t()
    backend.all_reduce(view, RedOpType.SUM, "all_reduce").wait()
    send, _, count, *_ = lib.last("ncclAllReduce")
    assert send.value != base.data_ptr() and count.value == 4
    np.testing.assert_array_equal(base.cpu().numpy(), [[2.0, 4.0], [6.0, 8.0]])
