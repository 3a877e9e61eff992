"""DDP's gradient reducer: parameters in buckets, each all-reduced as soon as it is complete.

Buckets hold parameters in reverse registration order (about the order backward produces their
gradients), each of about ``bucket_cap_mb`` (with the default cap, the first one holds only
1 MB, so communication starts early). Each parameter's post-accumulate-grad hook copies its gradient into its
bucket's flat buffer; when a bucket's last gradient arrives, its all-reduce (``AVG``) starts
asynchronously -- in bucket order, the same on every rank -- and overlaps the rest of backward.
A callback queued on the autograd engine waits for all of them when backward ends and writes
the averages back into ``param.grad`` (or leaves ``param.grad`` as a view of the bucket, with
``gradient_as_bucket_view``).

After the first iteration the buckets are rebuilt in the order the gradients actually arrived
(rank 0's order, broadcast), as PyTorch does: compiled models produce gradients segment by
segment, and the buckets then match the segments.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...autograd.variable import Variable
from ...distributed import collectives as dist
from ...distributed.reduce_op import ReduceOp
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor, wrap_array
from ..parameter import Parameter

__all__ = ["Reducer", "bucket_assignment"]

FIRST_BUCKET_BYTES = 1 << 20

_UNUSED_HINT = (
    "Expected to have finished reduction in the prior iteration before starting a new one. "
    "This error indicates that your module has parameters that were not used in producing "
    "loss. You can enable unused parameter detection by passing the keyword argument "
    "`find_unused_parameters=True` to `kiln.nn.parallel.DistributedDataParallel`, and by making "
    "sure all `forward` function outputs participate in calculating loss."
)


def bucket_assignment(
    params: list[Parameter], order: list[int], cap_bytes: int, first_cap_bytes: int
) -> list[list[int]]:
    """Parameter indices grouped into buckets, walking ``order``; one dtype per bucket."""
    buckets: list[list[int]] = []
    open_by_dtype: dict = {}
    sizes: dict = {}
    for i in order:
        p = params[i]
        key = (p.dtype, p.device)
        current = open_by_dtype.get(key)
        if current is None:
            current = open_by_dtype[key] = []
            sizes[key] = 0
            buckets.append(current)
        current.append(i)
        sizes[key] += p.numel() * p.element_size()
        limit = first_cap_bytes if len(buckets) == 1 else cap_bytes
        if sizes[key] >= limit:
            del open_by_dtype[key]
    return buckets


@dataclass
class _Bucket:
    indices: list[int]
    flat: np.ndarray
    tensor: Tensor
    offsets: list[int]
    views: list[Tensor]
    pending: int = 0
    work: object = None
    ready: set = field(default_factory=set)


def _array(t: Tensor) -> np.ndarray:
    return t.detach().numpy()


class Reducer:
    """The per-iteration state of DDP's gradient averaging (see the module docstring)."""

    def __init__(
        self, params: list[Parameter], names: list[str], group, cap_bytes: int,
        first_cap_bytes: int, find_unused: bool, gradient_as_bucket_view: bool,
    ):  # fmt: skip
        self.params = params
        self.names = names
        self.group = group
        self.cap_bytes = cap_bytes
        self.first_cap_bytes = first_cap_bytes
        self.find_unused = find_unused
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.index = {id(p): i for i, p in enumerate(params)}
        self.sync = True
        self.in_backward = False
        self.unused: set[int] = set()
        self.pending_error: str | None = None
        self.ready_order: list[int] = []
        self.rebuilt = False
        self.iterations = 0
        self.last_wait_seconds = 0.0  # how long the last backward waited for its all-reduces
        self._build(self._assign(list(reversed(range(len(params))))))
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in params]

    # ------------------------------------------------------------------ buckets
    def _assign(self, order: list[int]) -> list[list[int]]:
        return bucket_assignment(self.params, order, self.cap_bytes, self.first_cap_bytes)

    def _build(self, assignment: list[list[int]]) -> None:
        self.buckets: list[_Bucket] = []
        self.bucket_of: dict[int, tuple[int, int]] = {}
        for b, indices in enumerate(assignment):
            first = self.params[indices[0]]
            total = sum(self.params[i].numel() for i in indices)
            flat = np.zeros(total, first.detach().numpy().dtype)
            offsets, views, offset = [], [], 0
            for k, i in enumerate(indices):
                p = self.params[i]
                offsets.append(offset)
                views.append(
                    wrap_array(flat[offset : offset + p.numel()].reshape(p.shape), p.dtype)
                )
                self.bucket_of[i] = (b, k)
                offset += p.numel()
            self.buckets.append(
                _Bucket(indices, flat, wrap_array(flat, first.dtype), offsets, views)
            )

    def bucket_sizes(self) -> list[int]:
        """Bytes per bucket, in launch order (for tests and the benchmark)."""
        return [b.flat.nbytes for b in self.buckets]

    def rebuild_from_ready_order(self) -> None:
        """Rebuild the buckets in the order gradients arrived in the first iteration (rank 0's
        order, so every rank builds the same buckets)."""
        self.rebuilt = True
        order = [self.ready_order if self.group.rank() == 0 else None]
        dist.broadcast_object_list(order, group=self.group)
        order = order[0] or []
        missing = [i for i in reversed(range(len(self.params))) if i not in set(order)]
        self._build(self._assign(order + missing))

    # ------------------------------------------------------------------ per iteration
    def prepare_forward(self) -> None:
        """Start of an iteration: report an unfinished previous one, reset the counters."""
        if self.pending_error is not None:
            error, self.pending_error = self.pending_error, None
            raise RuntimeError(error)
        if self.iterations == 1 and not self.rebuilt and self.ready_order:
            self.rebuild_from_ready_order()
        self.unused = set()

    def mark_unused(self, unused: set[int]) -> None:
        """``find_unused_parameters``: parameters the forward's graph does not reach."""
        self.unused = unused

    def _start_backward(self) -> None:
        self.in_backward = True
        for bucket in self.buckets:
            bucket.pending = len(bucket.indices)
            bucket.ready = set()
            bucket.work = None
        self.next_to_launch = 0
        self.locally_used = np.zeros(len(self.params), np.int32)
        Variable._execution_engine.queue_callback(self._finish_backward)
        for i in self.unused:
            self._mark_ready(i, None)

    def _grad_ready(self, param: Parameter) -> None:
        if not self.sync:
            return
        if not self.in_backward:
            self._start_backward()
        i = self.index[id(param)]
        if self.iterations == 0:
            self.ready_order.append(i)
        self.locally_used[i] = 1
        self._mark_ready(i, param.grad)

    def _mark_ready(self, i: int, grad: Tensor | None) -> None:
        b, k = self.bucket_of[i]
        bucket = self.buckets[b]
        if k in bucket.ready:
            raise RuntimeError(
                f"Expected to mark a variable ready only once. Parameter {self.names[i]} "
                "received its gradient twice in one iteration (two backward passes without "
                "no_sync(), or a parameter used by two DDP modules)"
            )
        bucket.ready.add(k)
        view = bucket.flat[bucket.offsets[k] : bucket.offsets[k] + self.params[i].numel()]
        if grad is None:
            view[...] = 0
        else:
            np.copyto(view.reshape(grad.shape), _array(grad))
            if self.gradient_as_bucket_view:
                self.params[i].grad = bucket.views[k]
        bucket.pending -= 1
        while self.next_to_launch < len(self.buckets):
            ready = self.buckets[self.next_to_launch]
            if ready.pending:
                break
            ready.work = dist.all_reduce(
                ready.tensor, op=ReduceOp.AVG, group=self.group, async_op=True
            )
            self.next_to_launch += 1

    def _finish_backward(self) -> None:
        """End of backward: wait for every bucket and write the averages to ``.grad``."""
        self.in_backward = False
        self.iterations += 1
        used = None
        if self.find_unused:
            for i in range(len(self.params)):
                b, k = self.bucket_of[i]
                if k not in self.buckets[b].ready:
                    self._mark_ready(i, None)
            used = wrap_array(self.locally_used, dt.int32)
            dist.all_reduce(used, op=ReduceOp.MAX, group=self.group)
        late = [
            self.names[self.buckets[b].indices[k]]
            for b in range(len(self.buckets))
            for k in range(len(self.buckets[b].indices))
            if k not in self.buckets[b].ready
        ]
        start = time.perf_counter()
        for bucket in self.buckets:
            if bucket.work is not None:
                bucket.work.wait()
        self.last_wait_seconds = time.perf_counter() - start
        if late:
            self.pending_error = (
                f"{_UNUSED_HINT} Parameters which did not receive grad for rank "
                f"{self.group.rank()}: {', '.join(late)}"
            )
            return
        global_use = None if used is None else _array(used)
        for bucket in self.buckets:
            for k, i in enumerate(bucket.indices):
                p = self.params[i]
                if global_use is not None and not global_use[i]:
                    continue  # no rank used it: its gradient stays as it was
                if self.gradient_as_bucket_view:
                    p.grad = bucket.views[k]
                elif p.grad is None:
                    p.grad = wrap_array(bucket.views[k].detach().numpy().copy(), p.dtype)
                else:
                    np.copyto(_array(p.grad), _array(bucket.views[k]))
                    p.grad._bump_version()

    def remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()
