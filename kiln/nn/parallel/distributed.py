"""``DistributedDataParallel``: one replica of the model per rank, gradients averaged in backward.

At construction the parameters and buffers of rank 0 are broadcast to every rank (after checking
that all ranks hold the same parameter shapes), so replicas start identical; each forward first
broadcasts rank 0's buffers again (``broadcast_buffers``). Backward averages gradients through
the ``Reducer`` (buckets all-reduced while backward still runs); ``no_sync()`` skips that for
gradient accumulation. The wrapped module is ``self.module``, so state dicts carry PyTorch's
``module.`` prefix.

Under ``kiln.compile`` the bookkeeping before and after the wrapped module's forward runs eagerly
(graph breaks), and the captured forward is split at bucket boundaries so each piece is its own
autograd node: see ``kiln.dynamo.ddp_graph_split``.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...distributed import collectives as dist
from ...distributed.process_group import ProcessGroup, resolve_group
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor, wrap_array
from ..modules.module import Module
from .reducer import FIRST_BUCKET_BYTES, Reducer

__all__ = ["DistributedDataParallel", "ddp_bucket_cap_for", "has_live_ddp"]

_live: weakref.WeakSet = weakref.WeakSet()


def has_live_ddp() -> bool:
    """Whether any DistributedDataParallel module exists (the compiler's cheap first check)."""
    return len(_live) > 0


def ddp_bucket_cap_for(tensors: list[Tensor]) -> tuple[int, int] | None:
    """(first bucket's bytes, other buckets' bytes) of the DDP module whose parameters include
    any of ``tensors`` (None if none): the compiler splits a graph reading them into buckets."""
    ids = {id(t) for t in tensors}
    for ddp in list(_live):
        reducer = ddp._reducer
        if any(id(p) in ids for p in reducer.params):
            return reducer.first_cap_bytes, reducer.cap_bytes
    return None


def _array(t: Tensor) -> np.ndarray:
    return t.detach().numpy()


def broadcast_tensors(tensors: list[Tensor], src: int, group: ProcessGroup) -> None:
    """Rank ``src``'s values of ``tensors`` on every rank, in one broadcast of their bytes."""
    if not tensors:
        return
    arrays = [np.ascontiguousarray(_array(t)).reshape(-1).view(np.uint8) for t in tensors]
    joined = wrap_array(np.concatenate(arrays), dt.uint8)
    dist.broadcast(joined, group_src=src, group=group)
    data = _array(joined)
    offset = 0
    for t, a in zip(tensors, arrays):
        chunk = data[offset : offset + a.size].view(_array(t).dtype).reshape(t.shape)
        np.copyto(_array(t), chunk)
        t._bump_version()
        offset += a.size


def _check_same_parameters(named: list[tuple[str, Tensor]], group: ProcessGroup) -> None:
    mine = [(name, tuple(p.shape), p.dtype.name) for name, p in named]
    everyone: list = [None] * group.size()
    dist.all_gather_object(everyone, mine, group=group)
    for r, theirs in enumerate(everyone):
        if theirs == mine:
            continue
        if len(theirs) != len(mine):
            raise RuntimeError(
                f"DDP expects same model across all ranks, but Rank {group.rank()} has "
                f"{len(mine)} params, while rank {r} has inconsistent {len(theirs)} params."
            )
        for (name, shape, dtype), (_, their_shape, their_dtype) in zip(mine, theirs):
            if (shape, dtype) != (their_shape, their_dtype):
                raise RuntimeError(
                    f"DDP expects same model across all ranks, but Rank {group.rank()} has "
                    f"parameter {name} of shape {list(shape)} ({dtype}) while rank {r} has "
                    f"shape {list(their_shape)} ({their_dtype})"
                )


def _reachable_parameters(outputs: Any) -> set[int]:
    """ids of the leaves the autograd graph of ``outputs`` reaches (find_unused_parameters)."""
    roots = []

    def collect(value):
        if isinstance(value, Tensor):
            if value.grad_fn is not None:
                roots.append(value.grad_fn)
        elif isinstance(value, (list, tuple)):
            for v in value:
                collect(v)
        elif isinstance(value, dict):
            for v in value.values():
                collect(v)

    collect(outputs)
    seen, found = set(), set()
    while roots:
        node = roots.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None:
            found.add(id(variable))
        roots.extend(n for n, _ in node.next_functions)
    return found


class DistributedDataParallel(Module):
    """Data parallelism across the ranks of ``process_group`` (see the module docstring)."""

    def __init__(
        self,
        module: Module,
        device_ids=None,
        output_device=None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group: ProcessGroup | None = None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        delay_all_reduce_named_params=None,
        param_to_hook_all_reduce=None,
        mixed_precision=None,
        device_mesh=None,
        init_sync: bool = True,
    ) -> None:
        super().__init__()
        group = resolve_group(process_group)
        if group is None:
            raise ValueError("DistributedDataParallel: this rank is not in process_group")
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError("device_ids can only be None or contain a single element.")
        self.module = module
        self.process_group = group
        self.device_ids = device_ids
        self.output_device = output_device
        self.dim = dim
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024)
        # with the default cap the first bucket is small, so communication starts early
        first_cap = FIRST_BUCKET_BYTES if bucket_cap_mb is None else self.bucket_bytes_cap
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError(
                "DistributedDataParallel is not needed when a module doesn't have any parameter "
                "that requires a gradient."
            )
        _check_same_parameters(named, group)
        if init_sync and group.size() > 1:
            broadcast_tensors(
                [p for _, p in module.named_parameters()] + list(module.buffers()), 0, group
            )
        self._reducer = Reducer(
            [p for _, p in named], [n for n, _ in named], group, self.bucket_bytes_cap,
            first_cap, find_unused_parameters, gradient_as_bucket_view,
        )  # fmt: skip
        _live.add(self)

    # ------------------------------------------------------------------ forward
    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        self._pre_forward()
        outputs = self.module(*inputs, **kwargs)
        if self.find_unused_parameters:
            self._post_forward(outputs)
        return outputs

    def _pre_forward(self) -> None:
        self._reducer.prepare_forward()
        if self.broadcast_buffers and self.process_group.size() > 1:
            broadcast_tensors(list(self.module.buffers()), 0, self.process_group)

    def _post_forward(self, outputs: Any) -> None:
        if not self._reducer.sync:
            return
        reached = _reachable_parameters(outputs)
        self._reducer.mark_unused(
            {i for i, p in enumerate(self._reducer.params) if id(p) not in reached}
        )

    # ------------------------------------------------------------------ PyTorch's extras
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally inside the block; the next backward outside averages
        the sum."""
        previous = self._reducer.sync
        self._reducer.sync = False
        try:
            yield
        finally:
            self._reducer.sync = previous

    @property
    def require_backward_grad_sync(self) -> bool:
        return self._reducer.sync

    @require_backward_grad_sync.setter
    def require_backward_grad_sync(self, value: bool) -> None:
        self._reducer.sync = bool(value)

    def bucket_sizes(self) -> list[int]:
        """Bytes of each gradient bucket, in the order they are all-reduced."""
        return self._reducer.bucket_sizes()

    def communication_wait_seconds(self) -> float:
        """Seconds the last backward waited, once its own work was done, for all-reduces still
        in flight: the communication that backward did not hide."""
        return self._reducer.last_wait_seconds

    def __getstate__(self):
        raise TypeError("DistributedDataParallel is not picklable; save its state_dict()")


# backward bookkeeping and buffer broadcasts exchange data: under kiln.compile they run eagerly
DistributedDataParallel._pre_forward._kiln_disabled = "DDP's bookkeeping runs eagerly"
DistributedDataParallel._post_forward._kiln_disabled = "DDP's bookkeeping runs eagerly"
