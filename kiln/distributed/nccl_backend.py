"""The CUDA backend: collectives on kiln's CUDA tensors through NCCL (``nccl.py``).

The group's rank 0 makes the NCCL unique id and the group's MPI communicator carries it to the
other ranks (so the NCCL communicator needs no store or port), then every rank joins with
``ncclCommInitRank``. kiln runs all CUDA work on the default stream, and so do the collectives:
a kernel launched after one is ordered after it, and ``Work.wait()`` synchronizes the device and
checks the communicator for asynchronous errors. Non-contiguous tensors go through a
contiguous copy, copied back on the same stream. Each rank uses device LOCAL_RANK unless
``device_id`` names one.
"""

from __future__ import annotations

import os

from ..autograd.grad_mode import no_grad
from ..runtime import cuda
from ..runtime.tensor import Tensor
from .nccl import NCCLError, load, nccl_operands
from .reduce_op import RedOpType
from .work import CompletedWork

__all__ = ["NCCLBackend", "NCCLWork"]


class NCCLWork(CompletedWork):
    """A collective enqueued on the default stream: ``wait`` synchronizes and checks errors."""

    def __init__(self, backend: NCCLBackend, what: str, outputs: list):
        super().__init__(outputs)
        self._backend = backend
        self._what = what

    def wait(self, timeout=None) -> bool:
        self._backend.synchronize(self._what)
        return True

    def is_completed(self) -> bool:
        self._backend.synchronize(self._what)
        return True

    def source_rank(self) -> int:
        peer = getattr(self, "_peer", None)
        if peer is None:
            raise RuntimeError("source_rank() is only available for receives")
        return peer


def _device_index(device_id) -> int:
    if device_id is None:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        return local % max(cuda.device_count(), 1)
    if isinstance(device_id, int):
        return device_id
    index = getattr(device_id, "index", None)
    return 0 if index is None else index


class _Contiguous:
    """A contiguous stand-in for a CUDA tensor (itself when it is contiguous)."""

    def __init__(self, t: Tensor, copy_in: bool = True):
        self.tensor = t
        if t.is_contiguous():
            self.buffer = t
        else:
            with no_grad():
                self.buffer = t.contiguous() if copy_in else t.new_empty(t.shape)

    def ptr(self) -> int:
        return self.buffer.data_ptr()

    def write_back(self) -> None:
        if self.buffer is not self.tensor:
            with no_grad():
                self.tensor.copy_(self.buffer)


class NCCLBackend:
    """Collectives of one process group on its NCCL communicator (see the module docstring)."""

    device_type = "cuda"
    name = "nccl"

    def __init__(self, group, device_id=None, library=None):
        self.nccl = library if library is not None else load()
        self.device = _device_index(device_id)
        self.driver = cuda.require(self.device)
        cuda.set_current_device(self.device)
        self.rank = group.rank()
        self.size = group.size()
        unique_id = self.nccl.unique_id() if self.rank == 0 else None
        unique_id = group.broadcast_bytes(unique_id, 128)
        self.comm = self.nccl.comm_init_rank(self.size, unique_id, self.rank)

    def synchronize(self, what: str) -> None:
        self.driver.synchronize()
        code = self.nccl.async_error(self.comm)
        if code != 0:
            raise NCCLError(f"NCCL reported error {code} after {what}", code)

    def close(self) -> None:
        if self.comm is not None:
            self.nccl.comm_destroy(self.comm)
            self.comm = None

    def _work(self, what: str, outputs: list) -> NCCLWork:
        return NCCLWork(self, what, outputs)

    @staticmethod
    def _count(t: Tensor, per_element: int) -> int:
        return t.numel() * per_element

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, t: Tensor, op: RedOpType, what: str) -> NCCLWork:
        dtype, per, nccl_op = nccl_operands(t.dtype, op, "all_reduce")
        buf = _Contiguous(t)
        self.nccl.all_reduce(buf.ptr(), buf.ptr(), self._count(t, per), dtype, nccl_op, self.comm)
        buf.write_back()
        return self._work(what, [t])

    def broadcast(self, t: Tensor, root: int, what: str) -> NCCLWork:
        dtype, per, _ = nccl_operands(t.dtype, None, "broadcast")
        buf = _Contiguous(t, copy_in=self.rank == root)
        self.nccl.broadcast(buf.ptr(), buf.ptr(), self._count(t, per), dtype, root, self.comm)
        buf.write_back()
        return self._work(what, [t])

    def reduce(self, t: Tensor, root: int, op: RedOpType, what: str) -> NCCLWork:
        dtype, per, nccl_op = nccl_operands(t.dtype, op, "reduce")
        buf = _Contiguous(t)
        count = self._count(t, per)
        self.nccl.reduce(buf.ptr(), buf.ptr(), count, dtype, nccl_op, root, self.comm)
        if self.rank == root:
            buf.write_back()
        return self._work(what, [t])

    def all_gather_into_tensor(self, out: Tensor, inp: Tensor, what: str) -> NCCLWork:
        dtype, per, _ = nccl_operands(inp.dtype, None, "all_gather_into_tensor")
        source, target = _Contiguous(inp), _Contiguous(out, copy_in=False)
        self.nccl.all_gather(source.ptr(), target.ptr(), self._count(inp, per), dtype, self.comm)
        target.write_back()
        return self._work(what, [out])

    def all_gather(self, outs: list[Tensor], inp: Tensor, what: str) -> NCCLWork:
        gathered = inp.new_empty((self.size, *inp.shape))
        self.all_gather_into_tensor(gathered, inp, what)
        with no_grad():
            for r, t in enumerate(outs):
                t.copy_(gathered[r])
        return self._work(what, list(outs))

    def reduce_scatter_tensor(self, out: Tensor, inp: Tensor, op: RedOpType, what: str):
        dtype, per, nccl_op = nccl_operands(inp.dtype, op, "reduce_scatter_tensor")
        source, target = _Contiguous(inp), _Contiguous(out, copy_in=False)
        count = self._count(out, per)
        self.nccl.reduce_scatter(source.ptr(), target.ptr(), count, dtype, nccl_op, self.comm)
        target.write_back()
        return self._work(what, [out])

    def _exchange(self, sends: list, recvs: list, dtype: int) -> None:
        """Grouped point-to-point transfers: (ptr, count, peer) each."""
        self.nccl.group_start()
        try:
            for ptr, count, peer in sends:
                self.nccl.send(ptr, count, dtype, peer, self.comm)
            for ptr, count, peer in recvs:
                self.nccl.recv(ptr, count, dtype, peer, self.comm)
        finally:
            self.nccl.group_end()

    def gather(self, inp: Tensor, outs: list[Tensor] | None, root: int, what: str):
        dtype, per, _ = nccl_operands(inp.dtype, None, "gather")
        source = _Contiguous(inp)
        count = self._count(inp, per)
        if self.rank != root:
            self._exchange([(source.ptr(), count, root)], [], dtype)
            return self._work(what, [])
        targets = [_Contiguous(t, copy_in=False) for t in outs]
        recvs = [(tg.ptr(), count, r) for r, tg in enumerate(targets) if r != root]
        self._exchange([], recvs, dtype)
        with no_grad():
            outs[root].copy_(inp)
        for tg in targets:
            tg.write_back()
        return self._work(what, list(outs))

    def scatter(self, out: Tensor, ins: list[Tensor] | None, root: int, what: str):
        dtype, per, _ = nccl_operands(out.dtype, None, "scatter")
        target = _Contiguous(out, copy_in=False)
        count = self._count(out, per)
        if self.rank != root:
            self._exchange([], [(target.ptr(), count, root)], dtype)
        else:
            sources = [_Contiguous(t) for t in ins]
            sends = [(s.ptr(), count, r) for r, s in enumerate(sources) if r != root]
            self._exchange(sends, [], dtype)
            with no_grad():
                target.buffer.copy_(ins[root])
        target.write_back()
        return self._work(what, [out])

    def all_to_all_single(self, out, inp, out_rows, in_rows, what: str) -> NCCLWork:
        dtype, per, _ = nccl_operands(inp.dtype, None, "all_to_all_single")
        source, target = _Contiguous(inp), _Contiguous(out, copy_in=False)
        row_in = (inp.numel() // max(inp.shape[0], 1)) * per if inp.dim() else per
        row_out = (out.numel() // max(out.shape[0], 1)) * per if out.dim() else per
        item = inp.element_size() // per
        sends, recvs, sent, received = [], [], 0, 0
        for peer in range(self.size):
            sends.append((source.ptr() + sent * row_in * item, in_rows[peer] * row_in, peer))
            recvs.append((target.ptr() + received * row_out * item, out_rows[peer] * row_out, peer))
            sent += in_rows[peer]
            received += out_rows[peer]
        self._exchange(sends, recvs, dtype)
        target.write_back()
        return self._work(what, [out])

    def barrier(self, what: str) -> NCCLWork:
        from ..ops.creation import api

        token = api.zeros(1, device=f"cuda:{self.device}")
        self.all_reduce(token, RedOpType.SUM, what)
        return self._work(what, [])

    # ------------------------------------------------------------------ point to point
    def send(self, t: Tensor, dst: int, tag: int, what: str) -> NCCLWork:
        dtype, per, _ = nccl_operands(t.dtype, None, "send")
        source = _Contiguous(t)
        self.nccl.send(source.ptr(), self._count(t, per), dtype, dst, self.comm)
        return self._work(what, [t])

    def recv(self, t: Tensor, src: int | None, tag: int, what: str) -> NCCLWork:
        if src is None:
            raise RuntimeError("recv from any source is not supported by the NCCL backend")
        dtype, per, _ = nccl_operands(t.dtype, None, "recv")
        target = _Contiguous(t, copy_in=False)
        self.nccl.recv(target.ptr(), self._count(t, per), dtype, src, self.comm)
        target.write_back()
        work = self._work(what, [t])
        work._peer = src
        return work
