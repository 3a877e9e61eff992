"""The CPU backend: collectives as MPI non-blocking operations (mpi4py over MPICH).

Every collective works on C-contiguous numpy buffers that share memory with the tensors when
they can: a contiguous tensor *is* the MPI buffer (``MPI_IN_PLACE`` for reductions), a strided
one is staged in a contiguous copy and written back when the work finishes. Data that is only
moved (broadcast, gathers, scatters, all-to-all, send/recv) travels as bytes, so every dtype
works; reductions use MPI's typed operations, except for float16/bfloat16, which MPI has no
arithmetic for: they are summed in float32 and rounded once at the end (as a float32
reference computes them). ``AVG`` is a sum divided by the group size.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.tensor import Tensor
from .health import Health
from .reduce_op import RedOpType
from .work import Work

__all__ = ["MPIBackend", "load_mpi"]


def load_mpi():
    """``mpi4py.MPI`` (initialising MPI with thread support), or an error saying how to get it."""
    try:
        import mpi4py
    except ImportError:
        raise RuntimeError(
            "kiln.distributed needs mpi4py and an MPI library for its CPU backend: "
            "pip install 'kiln-ml[distributed]' (or: pip install mpich mpi4py)"
        ) from None
    mpi4py.rc.thread_level = "multiple"  # DDP's progress thread waits while the model computes
    from mpi4py import MPI

    return MPI


def _np_array(t: Tensor) -> np.ndarray:
    """The numpy view of a CPU tensor's memory (strided like the tensor)."""
    return t.detach().numpy()


def _reduce_types(mpi) -> dict:
    return {
        np.dtype(np.float32): mpi.FLOAT,
        np.dtype(np.float64): mpi.DOUBLE,
        np.dtype(np.int8): mpi.INT8_T,
        np.dtype(np.int16): mpi.INT16_T,
        np.dtype(np.int32): mpi.INT32_T,
        np.dtype(np.int64): mpi.INT64_T,
        np.dtype(np.uint8): mpi.UINT8_T,
        np.dtype(np.bool_): mpi.C_BOOL,
        np.dtype(np.complex64): mpi.C_FLOAT_COMPLEX,
        np.dtype(np.complex128): mpi.C_DOUBLE_COMPLEX,
    }


_HALF = (dt.float16, dt.bfloat16)


def reduction_plan(op: RedOpType, dtype: dt.dtype, collective: str) -> tuple[str, bool]:
    """(MPI operation name, whether to divide by the group size) for ``op`` on ``dtype``, or
    the error PyTorch gives for a combination it refuses."""
    if op is RedOpType.PREMUL_SUM:
        raise ValueError(f"{collective}: ReduceOp.PREMUL_SUM is only supported by the NCCL backend")
    if dtype is dt.bool_:
        if op is RedOpType.AVG:
            raise RuntimeError(f"{collective}: ReduceOp.AVG is not supported for bool tensors")
        logical = {
            RedOpType.SUM: "LOR", RedOpType.MAX: "LOR", RedOpType.BOR: "LOR",
            RedOpType.PRODUCT: "LAND", RedOpType.MIN: "LAND", RedOpType.BAND: "LAND",
            RedOpType.BXOR: "LXOR",
        }  # fmt: skip
        return logical[op], False
    if op in (RedOpType.BAND, RedOpType.BOR, RedOpType.BXOR) and dtype.category != 1:
        raise RuntimeError(f"{collective}: cannot use {op} with non-integral dtype {dtype}")
    if dtype.is_complex and op in (RedOpType.MIN, RedOpType.MAX):
        raise ValueError(f"{collective} does not support {op} on complex tensors")
    if op is RedOpType.AVG:
        if dtype.category < 2:
            raise RuntimeError(
                f"{collective}: ReduceOp.AVG of a {dtype} tensor: the result type (floating "
                f"point) can't be cast to the tensor's type {dtype}"
            )
        return "SUM", True
    names = {
        RedOpType.SUM: "SUM", RedOpType.PRODUCT: "PROD", RedOpType.MIN: "MIN",
        RedOpType.MAX: "MAX", RedOpType.BAND: "BAND", RedOpType.BOR: "BOR",
        RedOpType.BXOR: "BXOR",
    }  # fmt: skip
    return names[op], False


class _Staged:
    """A C-contiguous buffer for a tensor: its own memory when possible, else a copy that
    ``write_back`` returns into it (converted back from float32 for half types)."""

    def __init__(self, t: Tensor, compute_dtype=None, copy_in: bool = True):
        self.tensor = t
        self.target = _np_array(t)
        target = self.target
        if compute_dtype is not None and target.dtype != compute_dtype:
            self.buffer = target.astype(compute_dtype, order="C")
        elif target.flags.c_contiguous:
            self.buffer = target
        elif copy_in:
            self.buffer = np.ascontiguousarray(target)
        else:
            self.buffer = np.empty(target.shape, target.dtype)
        self.flat = self.buffer.reshape(-1)

    @property
    def copied(self) -> bool:
        return self.buffer is not self.target

    def bytes(self) -> np.ndarray:
        return self.flat.view(np.uint8)

    def write_back(self) -> None:
        if self.copied:
            np.copyto(self.target, self.buffer, casting="unsafe")
        self.tensor._bump_version()


class MPIBackend:
    """Collectives of one process group on its MPI communicator (see the module docstring)."""

    device_type = "cpu"
    name = "mpi"

    def __init__(self, mpi, comm, health: Health, timeout: float | None):
        self.MPI = mpi
        self.comm = comm
        self.health = health
        self.timeout = timeout
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()
        self._types = _reduce_types(mpi)

    def _work(self, request, what: str, finish=None, outputs=None, status=None) -> Work:
        return Work(request, self.health, what, self.timeout, finish, outputs, status)

    def _typed(self, staged: _Staged):
        return [staged.flat, self._types[staged.flat.dtype]]

    def _reduction(self, t: Tensor, op: RedOpType, collective: str):
        """The staged buffer and MPI op for reducing ``t``, and the finishing step."""
        op_name, divide = reduction_plan(op, t.dtype, collective)
        staged = _Staged(t, np.float32 if t.dtype in _HALF else None)
        size = self.size

        def finish():
            if divide:
                np.divide(staged.buffer, size, out=staged.buffer, casting="unsafe")
            staged.write_back()

        return staged, getattr(self.MPI, op_name), finish

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, t: Tensor, op: RedOpType, what: str) -> Work:
        staged, mpi_op, finish = self._reduction(t, op, "all_reduce")
        request = self.comm.Iallreduce(self.MPI.IN_PLACE, self._typed(staged), mpi_op)
        return self._work(request, what, finish, [t])

    def reduce(self, t: Tensor, root: int, op: RedOpType, what: str) -> Work:
        staged, mpi_op, finish = self._reduction(t, op, "reduce")
        if self.rank == root:
            request = self.comm.Ireduce(self.MPI.IN_PLACE, self._typed(staged), mpi_op, root)
            return self._work(request, what, finish, [t])
        request = self.comm.Ireduce(self._typed(staged), None, mpi_op, root)
        return self._work(request, what, None, [t])

    def broadcast(self, t: Tensor, root: int, what: str) -> Work:
        staged = _Staged(t, copy_in=self.rank == root)
        request = self.comm.Ibcast([staged.bytes(), self.MPI.BYTE], root)
        finish = staged.write_back if self.rank != root else None
        return self._work(request, what, finish, [t])

    def all_gather_into_tensor(self, out: Tensor, inp: Tensor, what: str) -> Work:
        source = _Staged(inp)
        target = _Staged(out, copy_in=False)
        request = self.comm.Iallgather(
            [source.bytes(), self.MPI.BYTE], [target.bytes(), self.MPI.BYTE]
        )
        return self._work(request, what, target.write_back, [out])

    def all_gather(self, outs: list[Tensor], inp: Tensor, what: str) -> Work:
        source = _Staged(inp)
        gathered = np.empty((self.size, source.flat.nbytes), np.uint8)
        request = self.comm.Iallgather([source.bytes(), self.MPI.BYTE], [gathered, self.MPI.BYTE])

        def finish():
            for row, t in zip(gathered, outs):
                np.copyto(_np_array(t), row.view(source.flat.dtype).reshape(t.shape))
                t._bump_version()

        return self._work(request, what, finish, list(outs))

    def reduce_scatter_tensor(self, out: Tensor, inp: Tensor, op: RedOpType, what: str) -> Work:
        op_name, divide = reduction_plan(op, inp.dtype, "reduce_scatter_tensor")
        compute = np.float32 if inp.dtype in _HALF else None
        source = _Staged(inp, compute)
        target = _Staged(out, compute, copy_in=False)
        size = self.size

        def finish():
            if divide:
                np.divide(target.buffer, size, out=target.buffer, casting="unsafe")
            target.write_back()

        request = self.comm.Ireduce_scatter_block(
            self._typed(source), self._typed(target), getattr(self.MPI, op_name)
        )
        return self._work(request, what, finish, [out])

    def gather(self, inp: Tensor, outs: list[Tensor] | None, root: int, what: str) -> Work:
        source = _Staged(inp)
        if self.rank != root:
            request = self.comm.Igather([source.bytes(), self.MPI.BYTE], None, root)
            return self._work(request, what)
        gathered = np.empty((self.size, source.flat.nbytes), np.uint8)
        request = self.comm.Igather(
            [source.bytes(), self.MPI.BYTE], [gathered, self.MPI.BYTE], root
        )

        def finish():
            for row, t in zip(gathered, outs):
                np.copyto(_np_array(t), row.view(source.flat.dtype).reshape(t.shape))
                t._bump_version()

        return self._work(request, what, finish, list(outs))

    def scatter(self, out: Tensor, ins: list[Tensor] | None, root: int, what: str) -> Work:
        target = _Staged(out, copy_in=False)
        if self.rank != root:
            request = self.comm.Iscatter(None, [target.bytes(), self.MPI.BYTE], root)
            return self._work(request, what, target.write_back, [out])
        chunks = np.stack([np.ascontiguousarray(_np_array(t)).reshape(-1) for t in ins])
        request = self.comm.Iscatter(
            [chunks.view(np.uint8), self.MPI.BYTE], [target.bytes(), self.MPI.BYTE], root
        )
        # ``chunks`` must live until the transfer is done: the finishing step holds it
        return self._work(request, what, lambda: (chunks, target.write_back()), [out])

    def all_to_all_single(
        self, out: Tensor, inp: Tensor, out_rows: list[int], in_rows: list[int], what: str
    ) -> Work:
        source = _Staged(inp)
        target = _Staged(out, copy_in=False)
        row_bytes_in = source.flat.nbytes // max(inp.shape[0], 1) if inp.dim() else 0
        row_bytes_out = target.flat.nbytes // max(out.shape[0], 1) if out.dim() else 0
        send_counts = [n * row_bytes_in for n in in_rows]
        recv_counts = [n * row_bytes_out for n in out_rows]
        send_displs = np.cumsum([0, *send_counts[:-1]]).tolist()
        recv_displs = np.cumsum([0, *recv_counts[:-1]]).tolist()
        request = self.comm.Ialltoallv(
            [source.bytes(), (send_counts, send_displs), self.MPI.BYTE],
            [target.bytes(), (recv_counts, recv_displs), self.MPI.BYTE],
        )
        return self._work(request, what, target.write_back, [out])

    def barrier(self, what: str) -> Work:
        return self._work(self.comm.Ibarrier(), what)

    # ------------------------------------------------------------------ point to point
    def send(self, t: Tensor, dst: int, tag: int, what: str) -> Work:
        source = _Staged(t)
        request = self.comm.Isend([source.bytes(), self.MPI.BYTE], dst, tag)
        return self._work(request, what, lambda: source, [t])

    def recv(self, t: Tensor, src: int | None, tag: int, what: str) -> Work:
        """Receive into ``t`` from group rank ``src`` (None: any rank; ``Work.source_rank``
        then tells which)."""
        target = _Staged(t, copy_in=False)
        source = self.MPI.ANY_SOURCE if src is None else src
        request = self.comm.Irecv([target.bytes(), self.MPI.BYTE], source, tag)
        return self._work(request, what, target.write_back, [t], self.MPI.Status())
