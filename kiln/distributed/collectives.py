"""The collectives of ``torch.distributed`` with PyTorch's signatures and in-place semantics.

Each function checks its arguments, gives the call a sequence number in its group, runs the
KILN_DISTRIBUTED_DEBUG check when asked, and hands the tensors to the group's backend for their
device. With ``async_op=True`` it returns the ``Work`` (its transfer advances on the progress
thread); otherwise it waits and returns None. Ranks given as ``src``/``dst`` are global ranks,
``group_src``/``group_dst`` ranks within ``group``, as in PyTorch.

A compiled function that calls a collective breaks its graph there and runs the collective
eagerly (``_kiln_disabled``): the data it exchanges only exists at run time.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.tensor import Tensor, wrap_array
from .process_group import ProcessGroup, debug_level, resolve_group
from .reduce_op import ReduceOp, as_red_op
from .work import Work

__all__ = [
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "reduce_scatter",
    "gather",
    "scatter",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "isend",
    "irecv",
    "broadcast_object_list",
    "all_gather_object",
    "gather_object",
]

_EAGER = "collectives run eagerly (kiln.distributed): a graph break"


def _eager(fn: Callable) -> Callable:
    fn._kiln_disabled = _EAGER
    return fn


# ---------------------------------------------------------------------- argument checks
def _check_tensor(t, name: str = "tensor") -> None:
    if not isinstance(t, Tensor):
        raise TypeError(
            f"Invalid function argument. Expected parameter `{name}` of type kiln.Tensor but got "
            f"{type(t)} instead."
        )
    if t.is_fake:
        raise RuntimeError(f"a collective needs a tensor with data; `{name}` is being captured")


def _check_list(ts, name: str) -> None:
    if not isinstance(ts, (list, tuple)) or not all(isinstance(t, Tensor) for t in ts):
        raise TypeError(
            f"Invalid function argument. Expected parameter `{name}` of type List[kiln.Tensor] "
            f"but got {type(ts)} instead."
        )


def _describe(t: Tensor) -> str:
    return f"{list(t.shape)} {t.dtype}"


def _check_per_rank(
    pg: ProcessGroup, tensors, like: Tensor, collective: str, name: str, shape_error=ValueError
) -> None:
    """``tensors`` holds one tensor per rank, each with ``like``'s shape, dtype and device."""
    _check_list(tensors, name)
    if len(tensors) != pg.size():
        raise ValueError(
            f"{collective}: {name} has {len(tensors)} tensors; the group has {pg.size()} ranks"
        )
    for i, t in enumerate(tensors):
        _same_layout(t, like, collective, f"{name}[{i}]")
        if t.shape != like.shape:
            raise shape_error(
                f"{collective}: invalid tensor size at index {i} of {name} (expected "
                f"{list(like.shape)}, got {list(t.shape)})"
            )


def _check_root_list(pg, root: int, tensors, like: Tensor, collective: str, name: str) -> None:
    """The per-rank list of a rooted collective: given on the root only."""
    if pg.rank() == root:
        _check_per_rank(pg, tensors, like, collective, name)
    elif tensors:
        role = "destination" if collective == "gather" else "source"
        raise ValueError(f"Argument ``{name}`` must NOT be specified on non-{role} ranks.")


def _group_rank(pg: ProcessGroup, rank, group_rank, param: str, collective: str) -> int:
    """The rank within ``pg`` named by a global ``rank`` or a ``group_rank``."""
    if rank is not None and group_rank is not None:
        raise ValueError(f"{collective}: pass either {param} or group_{param}, not both")
    if group_rank is not None:
        if not 0 <= group_rank < pg.size():
            raise ValueError(
                f"{collective}: invalid group_{param} {group_rank} for a group of {pg.size()}"
            )
        return group_rank
    if rank is None:
        rank = 0
    if rank not in pg.ranks:
        raise ValueError(
            f"{collective}: invalid {param} rank {rank}: it is not part of the process group "
            f"(global ranks {pg.ranks})"
        )
    return pg.ranks.index(rank)


def _same_layout(a: Tensor, b: Tensor, collective: str, what: str) -> None:
    if a.dtype != b.dtype:
        raise TypeError(
            f"{collective}: {what} dtype {a.dtype} does not match input dtype {b.dtype}"
        )
    if a.device != b.device:
        raise ValueError(f"{collective}: {what} is on {a.device} but the input is on {b.device}")


def _fingerprint(seq: int, name: str, tensors: list[Tensor], **extra) -> str:
    shapes = ", ".join(str(list(t.shape)) for t in tensors)
    types = ", ".join(t.dtype.name for t in tensors)
    devices = ", ".join(t.device.type for t in tensors)
    more = "".join(f", {k}={v}" for k, v in extra.items())
    return (
        f"CollectiveFingerPrint(SequenceNumber={seq}, OpType={name.upper()}, "
        f"TensorShape=[{shapes}], TensorDtypes={types}, TensorDeviceTypes={devices}{more})"
    )


def _run(
    pg: ProcessGroup,
    name: str,
    backend,
    checked: list[Tensor],
    start: Callable[[object, str], Work],
    async_op: bool,
    **extra,
):
    """Number the collective, check it across ranks if asked, start it, wait unless async."""
    broken = pg.health.broken
    if broken is not None:
        raise broken
    seq = pg.next_sequence()
    what = f"{name} (collective #{seq} of process group {pg.group_name}, {pg.size()} ranks)"
    if debug_level() == "DETAIL":
        pg.check_same_collective(_fingerprint(seq, name, checked, **extra), what)
    work = start(backend, what)
    if async_op:
        return work._start_background()
    work.wait()
    return None


# ---------------------------------------------------------------------- collectives
@_eager
def all_reduce(tensor: Tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``tensor`` across the group in place: every rank ends with the result."""
    _check_tensor(tensor)
    op = as_red_op(op)
    pg = resolve_group(group)
    if pg is None:
        return None
    return _run(
        pg, "all_reduce", pg.backend_for(tensor.device.type), [tensor],
        lambda b, what: b.all_reduce(tensor, op, what), async_op, ReduceOp=op.name,
    )  # fmt: skip


@_eager
def broadcast(tensor: Tensor, src=None, group=None, async_op: bool = False, group_src=None):
    """Copy ``tensor`` of rank ``src`` into ``tensor`` on every rank."""
    _check_tensor(tensor)
    pg = resolve_group(group)
    if pg is None:
        return None
    root = _group_rank(pg, src, group_src, "src", "broadcast")
    return _run(
        pg, "broadcast", pg.backend_for(tensor.device.type), [tensor],
        lambda b, what: b.broadcast(tensor, root, what), async_op, Root=root,
    )  # fmt: skip


@_eager
def reduce(
    tensor: Tensor, dst=None, op=ReduceOp.SUM, group=None, async_op: bool = False, group_dst=None
):
    """Reduce ``tensor`` across the group into rank ``dst``'s ``tensor`` (others unchanged)."""
    _check_tensor(tensor)
    op = as_red_op(op)
    pg = resolve_group(group)
    if pg is None:
        return None
    root = _group_rank(pg, dst, group_dst, "dst", "reduce")
    return _run(
        pg, "reduce", pg.backend_for(tensor.device.type), [tensor],
        lambda b, what: b.reduce(tensor, root, op, what), async_op, Root=root, ReduceOp=op.name,
    )  # fmt: skip


@_eager
def all_gather(tensor_list: list, tensor: Tensor, group=None, async_op: bool = False):
    """Fill ``tensor_list[r]`` with rank r's ``tensor`` on every rank."""
    _check_list(tensor_list, "tensor_list")
    _check_tensor(tensor)
    pg = resolve_group(group)
    if pg is None:
        return None
    _check_per_rank(pg, tensor_list, tensor, "all_gather", "tensor_list", RuntimeError)
    return _run(
        pg, "all_gather", pg.backend_for(tensor.device.type), [tensor],
        lambda b, what: b.all_gather(list(tensor_list), tensor, what), async_op,
    )  # fmt: skip


@_eager
def all_gather_into_tensor(
    output_tensor: Tensor, input_tensor: Tensor, group=None, async_op: bool = False
):
    """Gather every rank's ``input_tensor`` into ``output_tensor``, concatenated in rank order
    along dim 0 (or stacked, when ``output_tensor`` has a leading dim of the group size)."""
    _check_tensor(output_tensor, "output_tensor")
    _check_tensor(input_tensor, "input_tensor")
    pg = resolve_group(group)
    if pg is None:
        return None
    _same_layout(output_tensor, input_tensor, "all_gather_into_tensor", "output")
    if output_tensor.numel() != pg.size() * input_tensor.numel():
        raise ValueError(
            f"all_gather_into_tensor: output tensor of {_describe(output_tensor)} must have "
            f"{pg.size()} times the {input_tensor.numel()} elements of the input "
            f"({_describe(input_tensor)})"
        )
    return _run(
        pg, "all_gather_into_tensor", pg.backend_for(input_tensor.device.type), [input_tensor],
        lambda b, what: b.all_gather_into_tensor(output_tensor, input_tensor, what), async_op,
    )  # fmt: skip


@_eager
def reduce_scatter_tensor(
    output: Tensor, input: Tensor, op=ReduceOp.SUM, group=None, async_op: bool = False
):
    """Reduce ``input`` (the group size times ``output``'s elements) across ranks and give
    rank r the r-th chunk of the result in ``output``."""
    _check_tensor(output, "output")
    _check_tensor(input, "input")
    op = as_red_op(op)
    pg = resolve_group(group)
    if pg is None:
        return None
    _same_layout(output, input, "reduce_scatter_tensor", "output")
    if input.numel() != pg.size() * output.numel():
        raise ValueError(
            f"reduce_scatter_tensor: input tensor of {_describe(input)} must have {pg.size()} "
            f"times the {output.numel()} elements of the output ({_describe(output)})"
        )
    return _run(
        pg, "reduce_scatter_tensor", pg.backend_for(input.device.type), [input],
        lambda b, what: b.reduce_scatter_tensor(output, input, op, what), async_op,
        ReduceOp=op.name,
    )  # fmt: skip


@_eager
def reduce_scatter(
    output: Tensor, input_list: list, op=ReduceOp.SUM, group=None, async_op: bool = False
):
    """Reduce ``input_list[r]`` across ranks into rank r's ``output``."""
    _check_tensor(output, "output")
    _check_list(input_list, "input_list")
    pg = resolve_group(group)
    if pg is None:
        return None
    _check_per_rank(pg, input_list, output, "reduce_scatter", "input_list")
    joined = _joined(input_list)
    return reduce_scatter_tensor(output, joined, op, group, async_op)


def _joined(tensors: list[Tensor]) -> Tensor:
    """The tensors' values back to back in one new contiguous tensor."""
    arrays = [t.detach().numpy().reshape(-1) for t in tensors]
    return wrap_array(np.concatenate(arrays) if arrays else np.empty(0), tensors[0].dtype)


@_eager
def gather(
    tensor: Tensor, gather_list=None, dst=None, group=None, async_op: bool = False,
    group_dst=None,
):  # fmt: skip
    """Collect every rank's ``tensor`` into ``gather_list`` on rank ``dst``."""
    _check_tensor(tensor)
    pg = resolve_group(group)
    if pg is None:
        return None
    root = _group_rank(pg, dst, group_dst, "dst", "gather")
    _check_root_list(pg, root, gather_list, tensor, "gather", "gather_list")
    return _run(
        pg, "gather", pg.backend_for(tensor.device.type), [tensor],
        lambda b, what: b.gather(tensor, gather_list, root, what), async_op, Root=root,
    )  # fmt: skip


@_eager
def scatter(
    tensor: Tensor, scatter_list=None, src=None, group=None, async_op: bool = False,
    group_src=None,
):  # fmt: skip
    """Give rank r ``scatter_list[r]`` of rank ``src`` in ``tensor``."""
    _check_tensor(tensor)
    pg = resolve_group(group)
    if pg is None:
        return None
    root = _group_rank(pg, src, group_src, "src", "scatter")
    _check_root_list(pg, root, scatter_list, tensor, "scatter", "scatter_list")
    return _run(
        pg, "scatter", pg.backend_for(tensor.device.type), [tensor],
        lambda b, what: b.scatter(tensor, scatter_list, root, what), async_op, Root=root,
    )  # fmt: skip


def _splits(sizes, tensor: Tensor, n: int, name: str) -> list[int]:
    rows = tensor.shape[0] if tensor.dim() else 1
    if sizes is None or len(sizes) == 0:
        if rows % n:
            raise ValueError(
                f"all_to_all_single: {name} has {rows} rows, not divisible by the group size {n}; "
                f"pass {name}_split_sizes"
            )
        return [rows // n] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or sum(sizes) != rows or any(s < 0 for s in sizes):
        raise ValueError(
            f"all_to_all_single: {name}_split_sizes {sizes} must have {n} non-negative entries "
            f"summing to the {rows} rows of the {name} tensor"
        )
    return sizes


@_eager
def all_to_all_single(
    output: Tensor, input: Tensor, output_split_sizes=None, input_split_sizes=None,
    group=None, async_op: bool = False,
):  # fmt: skip
    """Split ``input`` along dim 0 and send piece r to rank r; receive into ``output``."""
    _check_tensor(output, "output")
    _check_tensor(input, "input")
    pg = resolve_group(group)
    if pg is None:
        return None
    _same_layout(output, input, "all_to_all_single", "output")
    if output.shape[1:] != input.shape[1:]:
        raise ValueError(
            f"all_to_all_single: output {_describe(output)} and input {_describe(input)} must "
            "agree in every dim but the first"
        )
    out_rows = _splits(output_split_sizes, output, pg.size(), "output")
    in_rows = _splits(input_split_sizes, input, pg.size(), "input")
    return _run(
        pg, "all_to_all_single", pg.backend_for(input.device.type), [],
        lambda b, what: b.all_to_all_single(output, input, out_rows, in_rows, what), async_op,
    )  # fmt: skip


@_eager
def barrier(group=None, async_op: bool = False, device_ids=None):
    """Wait until every rank of the group has reached this barrier."""
    pg = resolve_group(group)
    if pg is None:
        return None
    device = "cpu" if "cpu" in pg.backend_names else "cuda"
    return _run(pg, "barrier", pg.backend_for(device), [], lambda b, w: b.barrier(w), async_op)


@_eager
def monitored_barrier(group=None, timeout=None, wait_all_ranks: bool = False):
    """A barrier that raises ``DistBackendError`` after ``timeout`` instead of the group's."""
    pg = resolve_group(group)
    if pg is None:
        return None
    work = barrier(group, async_op=True)
    work.wait(timeout)
    return None


# ---------------------------------------------------------------------- point to point
def _p2p(tensor, peer, group, tag, group_peer, kind: str) -> tuple[ProcessGroup, int | None]:
    _check_tensor(tensor)
    pg = resolve_group(group)
    if pg is None:
        return None, None
    if kind == "recv" and peer is None and group_peer is None:
        return pg, None
    param = "dst" if kind == "send" else "src"
    peer_rank = _group_rank(pg, peer, group_peer, param, kind)
    if kind == "send" and peer_rank == pg.rank():
        raise ValueError("Invalid destination rank: should not be the same as rank of the process")
    return pg, peer_rank


@_eager
def isend(tensor: Tensor, dst=None, group=None, tag: int = 0, group_dst=None):
    """Start sending ``tensor`` to rank ``dst``; returns a ``Work``."""
    pg, peer = _p2p(tensor, dst, group, tag, group_dst, "send")
    if pg is None:
        return None
    what = f"send to rank {pg.ranks[peer]} (tag {tag})"
    return pg.backend_for(tensor.device.type).send(tensor, peer, tag, what)._start_background()


@_eager
def irecv(tensor: Tensor, src=None, group=None, tag: int = 0, group_src=None):
    """Start receiving into ``tensor`` from ``src`` (None: any rank); returns a ``Work``."""
    pg, peer = _p2p(tensor, src, group, tag, group_src, "recv")
    if pg is None:
        return None
    origin = "any rank" if peer is None else f"rank {pg.ranks[peer]}"
    what = f"recv from {origin} (tag {tag})"
    return pg.backend_for(tensor.device.type).recv(tensor, peer, tag, what)._start_background()


@_eager
def send(tensor: Tensor, dst=None, group=None, tag: int = 0, group_dst=None) -> None:
    """Send ``tensor`` to rank ``dst`` and wait until the transfer is done."""
    pg, peer = _p2p(tensor, dst, group, tag, group_dst, "send")
    if pg is None:
        return None
    what = f"send to rank {pg.ranks[peer]} (tag {tag})"
    pg.backend_for(tensor.device.type).send(tensor, peer, tag, what).wait()
    return None


@_eager
def recv(tensor: Tensor, src=None, group=None, tag: int = 0, group_src=None) -> int:
    """Receive into ``tensor`` from ``src`` (None: any rank); returns the sender's rank."""
    pg, peer = _p2p(tensor, src, group, tag, group_src, "recv")
    if pg is None:
        return -1
    origin = "any rank" if peer is None else f"rank {pg.ranks[peer]}"
    work = pg.backend_for(tensor.device.type).recv(tensor, peer, tag, f"recv from {origin}")
    work.wait()
    return pg.ranks[work.source_rank()]


# ---------------------------------------------------------------------- picklable objects
def _to_bytes(obj) -> np.ndarray:
    buffer = io.BytesIO()
    pickle.Pickler(buffer).dump(obj)
    return np.frombuffer(buffer.getvalue(), np.uint8)


def _from_bytes(data: np.ndarray):
    return pickle.loads(data.tobytes())


def _tensor(array: np.ndarray, dtype) -> Tensor:
    return wrap_array(np.ascontiguousarray(array), dtype)


def _object_run(pg: ProcessGroup, name: str, start: Callable[[object, str], Work]) -> None:
    _run(pg, name, pg.object_backend(), [], start, False)


@_eager
def broadcast_object_list(object_list: list, src=None, group=None, device=None, group_src=None):
    """Replace ``object_list``'s items on every rank with those of rank ``src`` (pickled)."""
    pg = resolve_group(group)
    if pg is None:
        return None
    root = _group_rank(pg, src, group_src, "src", "broadcast_object_list")
    if pg.rank() == root:
        payloads = [_to_bytes(o) for o in object_list]
        sizes = np.array([p.size for p in payloads], np.int64)
    else:
        sizes = np.zeros(len(object_list), np.int64)
    size_tensor = _tensor(sizes, dt.int64)
    _object_run(pg, "broadcast_object_list", lambda b, w: b.broadcast(size_tensor, root, w))
    sizes = size_tensor.numpy()
    data = np.concatenate(payloads) if pg.rank() == root else np.zeros(int(sizes.sum()), np.uint8)
    data_tensor = _tensor(data, dt.uint8)
    _object_run(pg, "broadcast_object_list", lambda b, w: b.broadcast(data_tensor, root, w))
    if pg.rank() != root:
        data = data_tensor.numpy()
        offset = 0
        for i, n in enumerate(sizes.tolist()):
            object_list[i] = _from_bytes(data[offset : offset + n])
            offset += n
    return None


def _gather_payloads(pg: ProcessGroup, obj, name: str) -> list[np.ndarray]:
    payload = _to_bytes(obj)
    n = pg.size()
    mine = _tensor(np.array([payload.size], np.int64), dt.int64)
    sizes = _tensor(np.zeros(n, np.int64), dt.int64)
    _object_run(pg, name, lambda b, w: b.all_gather_into_tensor(sizes, mine, w))
    counts = sizes.numpy().tolist()
    longest = max(counts)
    padded = _tensor(np.pad(payload, (0, longest - payload.size)), dt.uint8)
    everything = _tensor(np.zeros(n * longest, np.uint8), dt.uint8)
    _object_run(pg, name, lambda b, w: b.all_gather_into_tensor(everything, padded, w))
    rows = everything.numpy().reshape(n, longest)
    return [rows[r, : counts[r]] for r in range(n)]


@_eager
def all_gather_object(object_list: list, obj, group=None) -> None:
    """Fill ``object_list[r]`` with rank r's ``obj`` on every rank (pickled)."""
    pg = resolve_group(group)
    if pg is None:
        return None
    if len(object_list) != pg.size():
        raise ValueError(
            f"all_gather_object: object_list has {len(object_list)} items; the group has "
            f"{pg.size()} ranks"
        )
    for r, data in enumerate(_gather_payloads(pg, obj, "all_gather_object")):
        object_list[r] = _from_bytes(data)
    return None


@_eager
def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None) -> None:
    """Collect every rank's ``obj`` into ``object_gather_list`` on rank ``dst``."""
    pg = resolve_group(group)
    if pg is None:
        return None
    root = _group_rank(pg, dst, group_dst, "dst", "gather_object")
    payloads = _gather_payloads(pg, obj, "gather_object")
    if pg.rank() == root:
        if object_gather_list is None or len(object_gather_list) != pg.size():
            raise ValueError(
                f"gather_object: object_gather_list must have {pg.size()} items on rank {dst}"
            )
        for r, data in enumerate(payloads):
            object_gather_list[r] = _from_bytes(data)
    return None
