"""Collectives that return new tensors and have gradients (``torch.distributed.nn.functional``).

Each is an autograd ``Function`` whose backward is the adjoint collective: the gradient of an
all-reduce (SUM) is an all-reduce of the output gradients, of a broadcast a reduce to the source,
of an all-gather a reduce-scatter, of a scatter a gather, of an all-to-all the all-to-all with the
splits swapped. Every rank must call backward, since the backward runs collectives too.

Where PyTorch would differentiate ``all_reduce`` with MIN, MAX or PRODUCT by all-reducing the
gradients with the same op (not the derivative of the reduction), kiln refuses those in backward.
"""

from __future__ import annotations

from ...autograd.function import Function
from ...ops.creation import api
from ...ops.shape.cat_split import stack
from ...runtime.tensor import Tensor
from .. import collectives as dist
from ..process_group import resolve_group
from ..reduce_op import RedOpType, ReduceOp, as_red_op

__all__ = [
    "broadcast",
    "gather",
    "scatter",
    "reduce",
    "all_gather",
    "all_to_all_single",
    "all_reduce",
    "reduce_scatter",
]


def _rank(group) -> int:
    return resolve_group(group).rank()


def _size(group) -> int:
    return resolve_group(group).size()


def _global(group, group_rank: int) -> int:
    return resolve_group(group).ranks[group_rank]


class _Broadcast(Function):
    @staticmethod
    def forward(ctx, src, group, tensor):
        ctx.src, ctx.group = src, group
        out = tensor.clone()
        dist.broadcast(out, src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        summed = _Reduce.apply(ctx.src, ReduceOp.SUM, ctx.group, grad)
        if _global(ctx.group, _rank(ctx.group)) != ctx.src:
            summed = api.zeros_like(summed)
        return None, None, summed


class _Reduce(Function):
    @staticmethod
    def forward(ctx, dst, op, group, tensor):
        ctx.dst, ctx.group = dst, group
        out = tensor.clone()
        dist.reduce(out, dst, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, None, None, _Broadcast.apply(ctx.dst, ctx.group, grad)


class _AllReduce(Function):
    @staticmethod
    def forward(ctx, op, group, tensor):
        ctx.op, ctx.group = op, group
        out = tensor.clone()
        dist.all_reduce(out, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (RedOpType.SUM, RedOpType.AVG):
            raise RuntimeError(
                f"kiln.distributed.nn.functional.all_reduce: no gradient for {ctx.op}; "
                "backward is defined for ReduceOp.SUM and ReduceOp.AVG"
            )
        return None, None, _AllReduce.apply(ctx.op, ctx.group, grad)


class _AllGather(Function):
    @staticmethod
    def forward(ctx, group, tensor):
        ctx.group = group
        tensor = tensor.contiguous()
        outs = [api.empty_like(tensor) for _ in range(_size(group))]
        dist.all_gather(outs, tensor, group=group)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        stacked = stack([g.contiguous() for g in grads])
        return None, _ReduceScatter.apply(ReduceOp.SUM, ctx.group, stacked)


class _ReduceScatter(Function):
    """Input: the per-rank pieces stacked on dim 0; output: this rank's reduced piece."""

    @staticmethod
    def forward(ctx, op, group, stacked):
        ctx.group = group
        out = api.empty_like(stacked[0])
        dist.reduce_scatter_tensor(out, stacked.contiguous(), op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        pieces = _AllGather.apply(ctx.group, grad)
        return None, None, stack(list(pieces))


class _Gather(Function):
    @staticmethod
    def forward(ctx, dst, group, tensor):
        ctx.dst, ctx.group = dst, group
        tensor = tensor.contiguous()
        outs = [api.zeros_like(tensor) for _ in range(_size(group))]
        mine = _global(group, _rank(group)) == dst
        dist.gather(tensor, outs if mine else None, dst=dst, group=group)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return None, None, _Scatter.apply(ctx.dst, ctx.group, *grads)


class _Scatter(Function):
    @staticmethod
    def forward(ctx, src, group, *tensors):
        ctx.src, ctx.group = src, group
        out = api.zeros_like(tensors[0])
        mine = _global(group, _rank(group)) == src
        dist.scatter(out, [t.contiguous() for t in tensors] if mine else None, src=src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (None, None, *_Gather.apply(ctx.src, ctx.group, grad))


class _AllToAllSingle(Function):
    @staticmethod
    def forward(ctx, group, output_split_sizes, input_split_sizes, output, tensor):
        ctx.group = group
        ctx.splits = (output_split_sizes, input_split_sizes)
        ctx.input_shape = tensor.shape
        out = api.empty_like(output)
        dist.all_to_all_single(
            out, tensor.contiguous(), output_split_sizes, input_split_sizes, group=group
        )
        return out

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        result = api.empty(ctx.input_shape, dtype=grad.dtype)
        dist.all_to_all_single(result, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return None, None, None, None, result


def broadcast(tensor: Tensor, src: int, group=None) -> Tensor:
    """Rank ``src``'s ``tensor`` on every rank (a new tensor); its gradient sums to ``src``."""
    return _Broadcast.apply(src, group, tensor)


def reduce(tensor: Tensor, dst: int, op=ReduceOp.SUM, group=None) -> Tensor:
    """The reduction of ``tensor`` over the group on rank ``dst`` (a new tensor)."""
    return _Reduce.apply(dst, as_red_op(op), group, tensor)


def all_reduce(tensor: Tensor, op=ReduceOp.SUM, group=None) -> Tensor:
    """The reduction of ``tensor`` over the group, on every rank (a new tensor)."""
    return _AllReduce.apply(as_red_op(op), group, tensor)


def all_gather(tensor: Tensor, group=None) -> tuple[Tensor, ...]:
    """Every rank's ``tensor``, in rank order."""
    return _AllGather.apply(group, tensor)


def reduce_scatter(output: Tensor, input_list: list[Tensor], op=ReduceOp.SUM, group=None) -> Tensor:
    """This rank's piece of the reduction of ``input_list`` (one piece per rank)."""
    if list(input_list[0].shape) != list(output.shape):
        raise ValueError("reduce_scatter: each input must have the output's shape")
    return _ReduceScatter.apply(as_red_op(op), group, stack(list(input_list)))


def gather(tensor: Tensor, dst: int = 0, group=None) -> tuple[Tensor, ...]:
    """Every rank's ``tensor`` on rank ``dst`` (zeros elsewhere)."""
    return _Gather.apply(dst, group, tensor)


def scatter(tensors: list[Tensor], src: int = 0, group=None) -> Tensor:
    """Piece r of rank ``src``'s ``tensors`` on rank r."""
    return _Scatter.apply(src, group, *tensors)


def all_to_all_single(
    output: Tensor, input: Tensor, output_split_sizes=None, input_split_sizes=None, group=None
) -> Tensor:
    """``dist.all_to_all_single`` as a function of ``input`` (returns a tensor like
    ``output``)."""
    return _AllToAllSingle.apply(group, output_split_sizes, input_split_sizes, output, input)


# under kiln.compile a call breaks the graph and runs eagerly: the collective needs real data
for _public in (broadcast, reduce, all_reduce, all_gather, reduce_scatter, gather, scatter,
                all_to_all_single):  # fmt: skip
    _public._kiln_disabled = "collectives run eagerly (kiln.distributed.nn.functional)"
