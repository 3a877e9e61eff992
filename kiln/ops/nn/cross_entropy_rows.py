"""``cross_entropy`` of rows of class scores as one op: ``nll_loss(log_softmax(x, 1), target)``
run by the two ops' own kernels in one call, recorded as one autograd node.

The composite (``losses._cross_entropy``) dispatches ``log_softmax`` and ``nll_loss`` and records
a node for each: two dispatches, two nodes made and later applied, two gradients handed
between them by the engine, which cost more than the kernels on a small batch (8x16: 10.5 us a
forward against PyTorch's 2.9). The composite takes this op for its commonest call (2-d float
scores, class-index targets, no weight, no label smoothing, nothing tracing or hooking the
call); the kernel and the derivative call the composite's kernels and derivative functions in
its order, so the loss and the gradient are the composite's bits.

One difference shows: the loss's node (``NllLossBackward0``, as PyTorch's) leads straight to
the scores' node, without the ``LogSoftmaxBackward0`` between them that PyTorch's graph has.
"""

from __future__ import annotations

from types import SimpleNamespace

from ...autograd.graph import OpBackward, op_node_class
from ..core.common import Tensor, numpy_derivative_ok
from ..core.registry import OPS, defop
from .losses import _nll_loss_grad, _nll_loss_grad_numpy, check_reduction, nll_loss
from .softmax_linear import _log_softmax_from_exps, _log_softmax_grad_from_exps, log_softmax

__all__: list[str] = []


@defop(kind="loss", grad_fn_name="NllLossBackward0")
def _cross_entropy_rows(input: Tensor, target: Tensor, reduction: str, ignore_index: int): ...


_cross_entropy_rows.doc = (
    "``nll_loss(log_softmax(input, 1), target, None, reduction, ignore_index)`` of a 2-d float "
    "``input`` in one call and one autograd node (``cross_entropy``'s common call)."
)


@_cross_entropy_rows.register_kernel
def _kernel(x, target, reduction, ignore_index):
    logp = log_softmax.kernel(x, 1, None)
    return nll_loss.kernel(logp, target, None, reduction, ignore_index)


@_cross_entropy_rows.register_recording_kernel
def _recording_kernel(x, target, reduction, ignore_index):
    """The loss, keeping log_softmax's recording kernel's (exps, row sums) for the derivative."""
    logp, saved = log_softmax.recording_kernel(x, 1, None)
    return nll_loss.kernel(logp, target, None, reduction, ignore_index), saved


@_cross_entropy_rows.register_meta
def _meta(x, target, reduction, ignore_index):
    check_reduction(reduction)
    logp = log_softmax.meta(x, 1, None)
    return nll_loss.meta(logp, target, None, reduction, ignore_index)


@_cross_entropy_rows.register_decomposition
def _decomposition(x, target, reduction, ignore_index):
    return OPS["nll_loss"](OPS["log_softmax"](x, 1), target, None, reduction, ignore_index)


def _grad(c, g):
    x, target, reduction, ignore_index = c.args  # (x: its metadata only)
    saved = c.kernel_saved
    if saved is None:
        raise RuntimeError(
            "_cross_entropy_rows was recorded without the softmax its derivative reads (under "
            "saved_tensors_hooks); call cross_entropy, which records log_softmax and nll_loss"
        )
    if numpy_derivative_ok(g):
        # the composite's two numpy derivatives, in its order
        g_logp = _nll_loss_grad_numpy(x, target, None, reduction, ignore_index, 1, g)
        return (_log_softmax_grad_from_exps(saved, g_logp, 1, x.dtype), None, None, None)
    return (_composite_grad(c, g, saved), None, None, None)


def _composite_grad(c, g: Tensor, saved: tuple) -> Tensor:
    """The gradient in kiln ops, as the composite's nodes compute it (a double backward, a
    traced backward): a ``log_softmax`` node rebuilt over the scores' edge, holding the saved
    softmax as the composite's did, so that under ``create_graph`` the gradient's history
    runs through the scores; then nll_loss's derivative, then that node's."""
    x, target, reduction, ignore_index = c.args
    logp = _log_softmax_from_exps(saved)
    args = (x, 1, None)
    node = OpBackward(
        log_softmax, args, logp, (c.next_functions[0],), log_softmax.tensor_edge_positions,
        (True, False, False),
    )  # fmt: skip
    node.__class__ = log_softmax.node_class or op_node_class(log_softmax, args)
    node.keep_kernel_saved(saved)
    logp.grad_fn = node
    logp._requires_grad = True
    nll_node = SimpleNamespace(args=(logp, target, None, reduction, ignore_index))
    (g_logp, *_) = _nll_loss_grad(nll_node, g)
    return node.apply((g_logp,))[0]


_cross_entropy_rows.register_derivative(_grad, save_inputs=(1,))
