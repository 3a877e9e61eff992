"""Loss ops with PyTorch's exact reduction semantics.

``nll_loss`` and the elementwise losses (mse, l1, smooth_l1, huber, binary cross-entropy with and
without logits) have a numpy kernel, a derivative in kiln ops and a decomposition into prims.
``cross_entropy`` and the rarer losses are composites of those ops. A weighted ``mean`` divides by
the summed weights of the non-ignored targets, as PyTorch does (NaN when every target is ignored).
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.device import cpu
from ...runtime.state import per_thread
from ...runtime.tensor import Size
from ..core.common import (
    Tensor,
    broadcast_shapes,
    cast_array,
    clip_ufunc,
    compute_np_dtype,
    fake,
    laid_out,
    numpy_derivative_ok,
    output_layout_source,
    preserved_layout,
    result_dtype,
    wrap,
)
from ..core.dispatch import dispatch
from ..core.registry import OPS, defop
from ..reductions.reduce import float_sum, torch_type_name
from .softmax_linear import log_softmax, machine_code_activation

__all__ = ["check_reduction", "reduce_loss"]

_REDUCTIONS = ("none", "mean", "sum")


def check_reduction(reduction: str) -> str:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    """Apply a reduction with kiln ops (for composites and decompositions)."""
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _np_reduce(a: np.ndarray, reduction: str) -> np.ndarray:
    if a.dtype == np.float32 and a.size and reduction in ("mean", "sum"):
        # the sum PyTorch computes (its mean is that sum divided by the count)
        total = float_sum(a, tuple(range(a.ndim)))
        return np.asarray(total / a.size if reduction == "mean" else total, dtype=a.dtype)
    if reduction == "mean":
        return np.asarray(a.mean() if a.size else np.nan, dtype=a.dtype)
    if reduction == "sum":
        return np.asarray(a.sum(), dtype=a.dtype)
    return a


def _grad_scale(g: Tensor, reduction: str, numel: int) -> Tensor:
    """The incoming gradient as seen by each element before the reduction."""
    return g / numel if reduction == "mean" else g


# ------------------------------------------------------------------------------ nll_loss


@defop(kind="loss", autocast={"cpu": "fp32", "cuda": "fp32"})
def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
): ...


def _target_shape_message(x, target) -> str:
    """PyTorch's words for a class-index target of the wrong shape (its kernels differ by rank)."""
    if x.ndim == 2:
        return "0D or 1D target tensor expected, multi-target not supported"
    if x.ndim == 4 and target.ndim != 3:
        return (
            "only batches of spatial targets supported (3D tensors) but got targets of "
            f"dimension: {target.ndim}"
        )
    if x.ndim == 4:
        return f"size mismatch (got input: {list(x._shape)} , target: {list(target._shape)}"
    return f"Expected target size {list(x._shape[:1] + x._shape[2:])}, got {list(target._shape)}"


def _nll_geometry(x, target, weight):
    """(class dim, number of classes) after PyTorch's argument checks, in its order: the rank
    and batch size (ValueError) before the target's dtype (a float target of another batch
    size, a cross_entropy given probabilities of the wrong shape, is a ValueError)."""
    rank = len(x._shape)  # (ranks read off the shapes: this runs on every loss call)
    target_rank = len(target._shape)
    if rank == 0:
        raise ValueError("Expected 1 or more dimensions (got 0)")
    if rank >= 2 and (target_rank == 0 or target._shape[0] != x._shape[0]):
        raise ValueError(
            f"Expected input batch_size ({x._shape[0]}) to match target batch_size "
            f"({target._shape[0] if target_rank else 0})."
        )
    if target._dtype not in (dt.int64, dt.uint8):
        raise RuntimeError(
            f"expected target dtype to be Long or Byte, but got {torch_type_name(target._dtype)}"
        )
    class_dim = 0 if rank == 1 else 1
    if rank == 1:
        if target_rank == 1 and target._shape[0] != 1:
            raise ValueError(
                f"For 1D input, 1D target must have size 1, but got target size: {target._shape[0]}"
            )
        if target_rank != 0:
            raise RuntimeError(
                f"0D target tensor expected for 1D input, got target of shape {list(target._shape)}"
            )
    elif rank == 2:  # (the batch sizes agree: the target must be 1-d)
        if target_rank != 1:
            raise RuntimeError(_target_shape_message(x, target))
    elif tuple(target._shape) != tuple(x._shape[:1] + x._shape[2:]):
        raise RuntimeError(_target_shape_message(x, target))
    n_classes = x._shape[class_dim]
    if weight is not None and (weight.ndim != 1 or weight._shape[0] != n_classes):
        raise RuntimeError(
            f"weight tensor should be defined either for all {n_classes} classes or no classes "
            f"but got weight tensor of shape: {list(weight._shape)}"
        )
    return class_dim, n_classes


def _check_nll_dtype(x) -> None:
    """Float inputs only, checked after the geometry as PyTorch's kernels check (inputs of 3 or
    more dims go to the 2-d kernel)."""
    if not x._dtype.is_floating_point:
        kernel = "nll_loss2d_forward_out_frame" if len(x._shape) >= 3 else "nll_loss_out_frame"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{torch_type_name(x._dtype)}'")


# targets up to this many are range-checked as a Python list: cheaper than numpy's reductions
_LISTED_TARGETS = 64
_ROW_NUMBERS = np.arange(_LISTED_TARGETS)
_ROW_NUMBERS.flags.writeable = False


def _row_numbers_of_classes(t: np.ndarray, n_classes: int) -> np.ndarray | None:
    """``arange(len(t))`` when the 1-d targets ``t`` are all classes (in ``[0, n_classes)``, so
    none is a negative ``ignore_index``), for a row-wise pick; None when some is not, or there
    are none."""
    rows = t.shape[0]
    if rows <= _LISTED_TARGETS:
        targets = t.tolist()
        if not targets or min(targets) < 0 or max(targets) >= n_classes:
            return None
        return _ROW_NUMBERS[:rows]
    if t.view(np.uint64).max() >= n_classes:  # one reduction: negatives wrap to huge
        return None
    return np.arange(rows)


def _nll_rows_plain(x, t: np.ndarray, reduction: str, n_classes: int):
    """The common call's loss: rows of log-probabilities, no weight, every target a class and
    none ignored (``ignore_index`` negative). A row-wise pick and the general path's sums,
    without its masks; None for any other call."""
    row_numbers = _row_numbers_of_classes(t, n_classes)
    if row_numbers is None:
        return None
    cd = compute_np_dtype(x._dtype)
    picked = x._data[row_numbers, t]
    losses = np.negative(picked, out=picked) if picked.dtype == cd else -picked.astype(cd)
    if reduction == "none":
        return wrap(losses, x._dtype)
    total = np.add.reduce(losses)  # (``losses.sum()`` is a Python wrapper around this)
    if reduction == "mean":
        total = total / cd.type(t.shape[0])
    return wrap(total, x._dtype)


@nll_loss.register_kernel
def _nll_loss_kernel(x, target, weight, reduction, ignore_index):
    check_reduction(reduction)
    class_dim, n_classes = _nll_geometry(x, target, weight)
    _check_nll_dtype(x)
    t = target._data
    if len(x._shape) == 2 and weight is None and ignore_index < 0:
        plain = _nll_rows_plain(x, t, reduction, n_classes)
        if plain is not None:
            return plain
    t = t.astype(np.int64, copy=False)
    valid = t != ignore_index
    bad = valid & ((t < 0) | (t >= n_classes))
    if bad.any():
        raise IndexError(f"Target {int(t[bad].flat[0])} is out of bounds.")
    safe = np.where(valid, t, 0)
    logp = np.moveaxis(x._data, class_dim, -1)
    picked = np.take_along_axis(logp, safe[..., None], -1)[..., 0]
    cd = compute_np_dtype(x._dtype)
    w = valid.astype(cd) if weight is None else np.where(valid, weight._data[safe], 0).astype(cd)
    # an ignored target contributes exactly 0, even where its input is NaN or inf
    losses = np.where(valid, -(picked.astype(cd) * w), 0)
    if reduction == "none":
        return wrap(losses, x._dtype)
    if reduction == "sum":
        return wrap(np.asarray(losses.sum(), cd), x._dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return wrap(np.asarray(losses.sum() / w.sum(), cd), x._dtype)


@nll_loss.register_meta
def _nll_loss_meta(x, target, weight=None, reduction="mean", ignore_index=-100):
    check_reduction(reduction)
    _nll_geometry(x, target, weight)
    _check_nll_dtype(x)
    return fake(target._shape if reduction == "none" else (), x._dtype, x)


def _nll_parts(x, target, weight, ignore_index, class_dim, n_classes):
    """(one-hot mask of the targets along the class dim, per-target weight with ignores zeroed)."""
    valid = target != ignore_index
    # a target outside [0, n_classes) that is not ignored is an error (the mask would be empty)
    safe = OPS["_checked_index"](
        OPS["where"](valid, target, 0).to(dt.int64), n_classes, "IndexError"
    )
    shape = [1] * x.ndim
    shape[class_dim] = n_classes
    classes = OPS["arange"](0, n_classes, 1, dtype=dt.int64, device=x.device).reshape(shape)
    onehot = classes == safe.unsqueeze(class_dim)
    w = (
        valid.to(x.dtype)
        if weight is None
        else OPS["where"](valid, OPS["index"](weight, [safe]), 0)
    )
    return onehot, w, valid


_NUMPY_GRAD_DTYPES = (dt.float32, dt.float64)


def _nll_loss_grad_numpy(x, target, weight, reduction, ignore_index, class_dim, g):
    """The derivative below in one numpy scatter: no one-hot mask, no per-op dispatch.

    Same formula and order of operations as the kiln-op form (``-w * g``, divided by the summed
    weight for a mean, exactly zero at ignored targets)."""
    cd = x.dtype.np
    t = target._data
    if len(x._shape) == 2 and weight is None and ignore_index < 0:
        row_numbers = _row_numbers_of_classes(t, x._shape[1])
        if row_numbers is not None:
            # every target a class, none ignored: each row's target entry is ``-w * g`` with w
            # 1 (over the summed weight, the row count, for a mean), as below without masks
            coef = cd.type(-1) * g._data.astype(cd, copy=False)
            if reduction == "mean":
                coef = coef / cd.type(t.shape[0])
            out = np.zeros(x._shape, cd)
            out[row_numbers, t] = coef
            return wrap(out, x.dtype)
    t = t.astype(np.int64, copy=False)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    w = valid.astype(cd) if weight is None else np.where(valid, weight._data[safe], 0).astype(cd)
    coef = -w * g._data.astype(cd, copy=False)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            coef = coef / w.sum(dtype=cd)
    coef = np.where(valid, coef, cd.type(0))
    out = np.zeros(x._shape, cd)
    np.put_along_axis(
        np.moveaxis(out, class_dim, -1), safe[..., None], coef[..., None].astype(cd), -1
    )
    return wrap(out, x.dtype)


def _nll_loss_grad(c, g):
    x, target, weight, reduction, ignore_index = c.args
    class_dim, n_classes = _nll_geometry(x, target, weight)
    # ``x`` is not saved (only its shape, dtype and device are known here)
    if numpy_derivative_ok(g, weight) and x.dtype in _NUMPY_GRAD_DTYPES and x.device.type == "cpu":
        gx = _nll_loss_grad_numpy(x, target, weight, reduction, ignore_index, class_dim, g)
        return (gx, None, None, None, None)
    onehot, w, valid = _nll_parts(x, target, weight, ignore_index, class_dim, n_classes)
    coef = -w * g
    # ignored targets get exactly no gradient (selected, since an inf or NaN ``g`` times their
    # zero weight is NaN), even when every target is ignored (a mean's 0/0 total weight)
    coef = OPS["where"](valid, coef / w.sum() if reduction == "mean" else coef, 0.0)
    return (OPS["where"](onehot, coef.unsqueeze(class_dim), 0.0), None, None, None, None)


nll_loss.register_derivative(_nll_loss_grad, save_inputs=(1, 2))


@nll_loss.register_decomposition
def _nll_loss_decomp(x, target, weight=None, reduction="mean", ignore_index=-100):
    check_reduction(reduction)
    class_dim, n_classes = _nll_geometry(x, target, weight)
    onehot, w, valid = _nll_parts(x, target, weight, ignore_index, class_dim, n_classes)
    losses = OPS["where"](valid, -OPS["where"](onehot, x, 0.0).sum(class_dim) * w, 0.0)
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    total = w.sum()
    empty = total == 0
    # NaN when every target is ignored, like the kernel, without a NaN gradient
    return OPS["where"](empty, float("nan"), losses.sum() / OPS["where"](empty, 1.0, total))


def _rows_op_serves(x: Tensor, target: Tensor, weight, label_smoothing: float) -> bool:
    """May ``cross_entropy`` run as ``_cross_entropy_rows`` (``cross_entropy_rows.py``: one op,
    one node)? 2-d float32/float64 CPU scores with data, 1-d int64 class indices, no weight or
    label smoothing, and no mode, profiler, autocast or saved-tensor hooks that should see the
    two ops (or that the node's saved softmax would bypass), and both ops' kernels in place."""
    if weight is not None or label_smoothing != 0 or len(x._shape) != 2:
        return False
    if (x._dtype is not dt.float32 and x._dtype is not dt.float64) or x._device is not cpu:
        return False
    if target._dtype is not dt.int64 or len(target._shape) != 1 or x._data is None:
        return False
    if log_softmax.kernel is None or nll_loss.kernel is None:  # (a test running decompositions)
        return False
    state = per_thread.state
    return not (
        state.mode_stack
        or state.profiler is not None
        or state.autocast is not None
        or state.saved_tensors_hooks
    )


def _cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
):
    """log_softmax + nll_loss, or a weighted sum for probability targets (same shape as input)."""
    check_reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    rank = len(input._shape)
    if input._shape == target._shape:  # class probabilities: checked before any kernel runs
        if not target.dtype.is_floating_point:
            raise RuntimeError(
                "Expected floating point type for target with class probabilities, got "
                f"{torch_type_name(target.dtype)}"
            )
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
    elif rank == 2:
        if _rows_op_serves(input, target, weight, label_smoothing):
            return dispatch(OPS["_cross_entropy_rows"], (input, target, reduction, ignore_index))
    class_dim = 0 if rank == 1 else 1
    n_classes = input._shape[class_dim]
    logp = dispatch(OPS["log_softmax"], (input, class_dim, None))  # (bound: no binding)
    wshape = [1] * rank
    wshape[class_dim] = n_classes
    if input._shape == target._shape:
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / n_classes
        terms = logp * target
        if weight is not None:
            terms = terms * weight.reshape(wshape)
        if reduction == "none":
            return -terms.sum(class_dim)
        if reduction == "sum":
            return -terms.sum()
        return (
            -terms.sum() / (input.numel() // n_classes)
            if input.numel()
            else -terms.sum() * float("nan")
        )
    loss = dispatch(nll_loss, (logp, target, weight, reduction, ignore_index))
    if label_smoothing == 0:
        return loss
    ignored = target == ignore_index
    smooth = -(logp * weight.reshape(wshape) if weight is not None else logp).sum(class_dim)
    smooth = OPS["where"](ignored, 0.0, smooth)
    if reduction == "sum":
        smooth = smooth.sum()
    elif reduction == "mean":
        if weight is None:
            smooth = smooth.sum() / ignored.logical_not().sum()
        else:
            safe = OPS["where"](ignored, 0, target).to(dt.int64)
            picked = OPS["where"](ignored, 0.0, OPS["index"](weight, [safe]))
            smooth = smooth.sum() / picked.sum()
    return (1 - label_smoothing) * loss + smooth * (label_smoothing / n_classes)


cross_entropy = defop(
    _cross_entropy, name="cross_entropy", kind="loss", autocast={"cpu": "fp32", "cuda": "fp32"}
)
cross_entropy.register_decomposition(_cross_entropy)


# ------------------------------------------------------------------------------ elementwise losses


def _loss_dtype(x, t):
    return result_dtype(x, t)


def _loss_strides(shape: tuple, x: Tensor, t: Tensor, like_input: bool) -> tuple | None:
    """The strides of an unreduced loss (None: row-major), as PyTorch lays them out: one
    TensorIterator over (input, target) for most losses; huber's output is made
    ``empty_like(input)``: the input's dense layout (its dims ordered by its strides) where it
    has the result's shape, row-major where it is broadcast (the output is resized)."""
    if not like_input:
        return output_layout_source(shape, (x, t))
    if tuple(x._shape) != tuple(shape):
        return None
    return output_layout_source(shape, (x,))


def _elementwise_loss(
    name, schema, np_fn, grad_fn, decomp_fn, like_input=False, kernel_name=None, **record
):
    """Define ``name(input, target, *params, reduction)`` from three elementwise formulas.

    ``np_fn(a, t, *params)`` is the numpy loss, ``grad_fn(x, t, *params)`` returns the kiln
    gradients (d/dinput, d/dtarget) of one element, ``decomp_fn`` the kiln loss of one element.
    ``like_input``: the unreduced loss is written into ``empty_like(input)`` as huber's is: the
    input's layout (``_loss_strides``) and dtype (computed in the promoted one), and its
    backward, one TensorIterator of PyTorch's default checks, refuses operands of two dtypes.
    """
    op = defop(schema, name=name, kind="loss", **record)

    def check(x, t):
        """(shape, dtype computed in, dtype of the result)."""
        common = _loss_dtype(x, t)
        if kernel_name is not None and not common.is_floating_point:
            raise NotImplementedError(
                f"\"{kernel_name}\" not implemented for '{torch_type_name(common)}'"
            )
        if not x._dtype.is_floating_point and not t._dtype.is_floating_point:
            raise RuntimeError(
                f"{name}: expected floating point inputs, got {x._dtype} and {t._dtype}"
            )
        d = _loss_dtype(x, t)
        if like_input and not dt.can_cast(d, x._dtype):
            raise RuntimeError(
                f"result type {torch_type_name(d)} can't be cast to the desired output type "
                f"{torch_type_name(x._dtype)}"
            )
        return broadcast_shapes(x._shape, t._shape), d, x._dtype if like_input else d

    def kernel(x, t, *rest):
        *params, reduction = rest
        check_reduction(reduction)
        _, d, out_dtype = check(x, t)
        cd = compute_np_dtype(d)
        a = x._data.astype(cd, copy=False)
        b = t._data.astype(cd, copy=False)
        elements = np.asarray(np_fn(a, b, *params), cd)
        if out_dtype is not d:  # stored in the input's dtype, then reduced
            elements = elements.astype(out_dtype.np).astype(compute_np_dtype(out_dtype))
        r = _np_reduce(elements, reduction)
        if r.ndim > 1 and (reduction == "none" or reduction == 0):
            r = laid_out(r, _loss_strides(r.shape, x, t, like_input))
        return wrap(r, out_dtype)

    def meta(x, t, *rest):
        check_reduction(rest[-1])
        shape, _, out_dtype = check(x, t)
        if rest[-1] != "none" and rest[-1] != 0:
            return fake((), out_dtype, x)
        strides = _loss_strides(shape, x, t, like_input) if len(shape) > 1 else None
        return fake(shape, out_dtype, x, strides)

    def derivative(c, g):
        x, t, *params, reduction = c.args
        if like_input and x.dtype is not t.dtype:
            first, second = (t, x) if c.needs_input_grad[0] else (x, t)
            raise RuntimeError(
                f"Found dtype {torch_type_name(first.dtype)} but expected "
                f"{torch_type_name(second.dtype)}"
            )
        shape = broadcast_shapes(tuple(x.shape), tuple(t.shape))
        scale = _grad_scale(g, reduction, math.prod(shape))
        gx, gt = grad_fn(x, t, *params)
        needs = c.needs_input_grad
        return (gx * scale if needs[0] else None, gt * scale if needs[1] else None) + (None,) * (
            len(params) + 1
        )

    op.register_kernel(kernel)
    op.register_meta(meta)
    op.register_derivative(derivative)

    def decomposition(x, t, *rest):
        elements = decomp_fn(x, t, *rest[:-1])
        if like_input and elements.dtype is not x.dtype:
            elements = elements.to(x.dtype)
        loss = reduce_loss(elements, check_reduction(rest[-1]))
        if like_input and loss.ndim > 1 and _loss_strides(loss.shape, x, t, True) is None:
            return loss.contiguous()  # (elsewhere the formula, input first, gives its layout)
        return loss

    op.register_decomposition(decomposition)
    return op


def _mse_schema(input: Tensor, target: Tensor, reduction: str = "mean"): ...


mse_loss = _elementwise_loss(
    "mse_loss",
    _mse_schema,
    lambda a, b: np.square(a - b),
    # the target's gradient from t - x, as PyTorch's (mse_loss_backward with the operands
    # swapped): 0.0, not -0.0, where they are equal
    lambda x, t: (2 * (x - t), 2 * (t - x)),
    lambda x, t: (x - t) * (x - t),
    autocast={"cpu": "fp32", "cuda": "fp32"},
    kernel_name="mse_cpu",
)


def _l1_schema(input: Tensor, target: Tensor, reduction: str = "mean"): ...


def _l1_loss_grad_fn_name(args) -> str:
    reduction = args[-1]
    return {
        "none": "AbsBackward0",
        0: "AbsBackward0",
        "sum": "SumBackward0",
        2: "SumBackward0",
    }.get(reduction, "MeanBackward0")


l1_loss = _elementwise_loss(
    "l1_loss",
    _l1_schema,
    lambda a, b: np.abs(a - b),
    lambda x, t: ((x - t).sign(), -(x - t).sign()),
    lambda x, t: (x - t).abs(),
    autocast={"cpu": "fp32", "cuda": "fp32"},
    grad_fn_name=_l1_loss_grad_fn_name,
)


def _smooth_l1_schema(
    input: Tensor, target: Tensor, beta: float = 1.0, reduction: str = "mean"
): ...


def _smooth_l1_np(a, b, beta):
    z = np.abs(a - b)
    if beta == 0:
        return z
    return np.where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta)


def _smooth_l1_slope(d, beta):
    """d / beta inside the band, +-1 beyond it, and NaN at a NaN difference (PyTorch's
    branches)."""
    if beta == 0:
        return d.sign()
    return OPS["where"](d < -beta, -1.0, OPS["where"](d > beta, 1.0, d / beta))


def _smooth_l1_grad(x, t, beta):
    # the target's from t - x, as PyTorch's: 0.0, not -0.0, where input equals target
    return _smooth_l1_slope(x - t, beta), _smooth_l1_slope(t - x, beta)


def _smooth_l1_decomp(x, t, beta):
    z = (x - t).abs()
    if beta == 0:
        return z
    return OPS["where"](z < beta, 0.5 * z * z / beta, z - 0.5 * beta)


smooth_l1_loss = _elementwise_loss(
    "smooth_l1_loss",
    _smooth_l1_schema,
    _smooth_l1_np,
    _smooth_l1_grad,
    _smooth_l1_decomp,
    autocast={"cpu": "fp32", "cuda": "fp32"},
    kernel_name="smooth_l1_cpu",
)


def _huber_schema(input: Tensor, target: Tensor, delta: float = 1.0, reduction: str = "mean"): ...


def _huber_grad(x, t, delta):
    # the target's from t - x, as PyTorch's: 0.0, not -0.0, where input equals target
    return (x - t).clamp(-delta, delta), (t - x).clamp(-delta, delta)


huber_loss = _elementwise_loss(
    "huber_loss",
    _huber_schema,
    lambda a, b, delta: np.where(
        np.abs(a - b) < delta, 0.5 * np.square(a - b), delta * (np.abs(a - b) - 0.5 * delta)
    ),
    _huber_grad,
    lambda x, t, delta: OPS["where"](
        (x - t).abs() < delta, 0.5 * (x - t) * (x - t), delta * ((x - t).abs() - 0.5 * delta)
    ),
    like_input=True,
    autocast={"cpu": "fp32", "cuda": "fp32"},
    kernel_name="huber_cpu",
)


# ------------------------------------------------------------------------------ binary cross-entropy


@defop(kind="loss", autocast={"cpu": "fp32", "cuda": "banned"})
def binary_cross_entropy(
    input: Tensor, target: Tensor, weight: Tensor | None = None, reduction: str = "mean"
): ...


def _bce_check(x, t, w):
    if tuple(x._shape) != tuple(t._shape):
        raise ValueError(
            f"Using a target size ({list(t._shape)}) that is different to the input size "
            f"({list(x._shape)}) is deprecated. Please ensure they have the same size."
        )
    if w is not None:
        _check_weight_fits(x, w)
    if x._dtype is t._dtype and not x._dtype.is_floating_point:
        raise NotImplementedError(
            f"\"binary_cross_entropy\" not implemented for '{torch_type_name(x._dtype)}'"
        )


def _check_weight_fits(x: Tensor, w: Tensor) -> None:
    """PyTorch multiplies the loss by a weight in place: a weight that would broadcast the
    input up is refused with the in-place message."""
    shape = broadcast_shapes(x._shape, w._shape)
    if tuple(shape) != tuple(x._shape):
        raise RuntimeError(
            f"output with shape {list(x._shape)} doesn't match the broadcast shape {list(shape)}"
        )


@binary_cross_entropy.register_kernel
def _bce_kernel(x, t, w, reduction):
    check_reduction(reduction)
    _bce_check(x, t, w)
    a = x._data.astype(compute_np_dtype(x._dtype), copy=False)
    b = t._data
    # written as PyTorch's checks are (0 <= v <= 1), so NaN fails them too
    if a.size and not np.logical_and(a >= 0, a <= 1).all():
        raise RuntimeError("all elements of input should be between 0 and 1")
    if b.size and not np.logical_and(b >= 0, b <= 1).all():
        raise RuntimeError("all elements of target should be between 0 and 1")
    with np.errstate(divide="ignore"):
        loss = -(b * np.maximum(np.log(a), -100.0) + (1 - b) * np.maximum(np.log1p(-a), -100.0))
    if w is not None:
        loss = loss * w._data
    loss = _np_reduce(np.asarray(loss, a.dtype), reduction)
    return wrap(laid_out(loss, _bce_strides(x, reduction)) if loss.ndim > 1 else loss, x._dtype)


def _bce_strides(x: Tensor, reduction: str) -> tuple | None:
    """PyTorch makes the unreduced loss ``empty_like(input)``: the input's layout."""
    return preserved_layout(x) if reduction == "none" and x.ndim > 1 else None


binary_cross_entropy.register_meta(
    lambda x, t, w=None, reduction="mean": (
        _bce_check(x, t, w),
        fake(
            x._shape if check_reduction(reduction) == "none" else (),
            x._dtype,
            x,
            _bce_strides(x, reduction),
        ),
    )[1]
)
binary_cross_entropy.result_layout = lambda x, t, w=None, reduction="mean": (
    "preserved" if reduction == "none" and x.ndim > 1 else "contiguous"
)  # as PyTorch's


def _bce_grad(c, g):
    x, t, w, reduction = c.args
    if (
        w is None
        and not c.needs_input_grad[1]
        and numpy_derivative_ok(x, t, g)
        and x._dtype is t._dtype
        and g._dtype is x._dtype
    ):
        return _bce_input_grad_numpy(x, t, g, reduction), None, None, None
    scale = _grad_scale(g, reduction, x.numel())
    if w is not None:
        scale = scale * w
    gx = gt = None
    if c.needs_input_grad[0]:
        gx = scale * (x - t) / ((1 - x) * x).clamp(min=1e-12)
    if c.needs_input_grad[1]:
        # PyTorch's -logit(x), unclamped: a saturated probability gives an infinite gradient
        gt = scale * ((-x).log1p() - x.log())
    return gx, gt, None, None


def _bce_input_grad_numpy(x: Tensor, t: Tensor, g: Tensor, reduction: str) -> Tensor:
    """The input's gradient of a plain backward (no weight, no target gradient), the kiln-op
    formula's steps on the arrays with the same roundings, so its bits: a DCGAN's three losses
    of 16 probabilities spent ~85 us each in the formula's seven dispatched ops (PyTorch's
    node: ~25 us)."""
    xa, ta, ga = x._data, t._data, g._data
    number = xa.dtype.type
    scale = np.true_divide(ga, number(x.numel())) if reduction == "mean" else ga
    denominator = np.multiply(np.subtract(number(1), xa), xa)
    denominator = clip_ufunc(denominator, number(1e-12), number(math.inf))  # clamp(min=1e-12)
    return wrap(np.true_divide(np.multiply(scale, np.subtract(xa, ta)), denominator), x._dtype)


binary_cross_entropy.register_derivative(_bce_grad)


@binary_cross_entropy.register_decomposition
def _bce_decomp(x, t, w=None, reduction="mean"):
    check_reduction(reduction)
    loss = -(t * x.log().clamp(min=-100.0) + (1 - t) * (-x).log1p().clamp(min=-100.0))
    if w is not None:
        loss = loss * w
    return reduce_loss(loss, reduction)


@defop(kind="loss", autocast={"cpu": "fp32", "cuda": "fp32"})
def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    pos_weight: Tensor | None = None,
    reduction: str = "mean",
): ...


def _bcel_check(x, t, w, pw):
    if tuple(x._shape) != tuple(t._shape):
        raise ValueError(
            f"Target size ({Size(t._shape)!r}) must be the same as input size ({Size(x._shape)!r})"
        )
    for o in (w, pw):
        if o is not None:
            _check_weight_fits(x, o)
    if not x._dtype.is_floating_point:  # (PyTorch takes log_sigmoid of the input itself)
        raise NotImplementedError(
            f"\"log_sigmoid_cpu\" not implemented for '{torch_type_name(x._dtype)}'"
        )


def _np_log_sigmoid(a):
    return np.minimum(a, 0) - np.log1p(np.exp(-np.abs(a)))


@binary_cross_entropy_with_logits.register_kernel
def _bcel_kernel(x, t, w, pw, reduction):
    check_reduction(reduction)
    _bcel_check(x, t, w, pw)
    d = result_dtype(x, t)
    cd = compute_np_dtype(d)
    a = cast_array(x._data, cd)
    b = cast_array(t._data, cd)
    log_weight = 1.0 if pw is None else 1.0 + (pw._data - 1.0) * b
    log_sig = machine_code_activation("log_sigmoid", a, a)  # numpy's float32 log1p: 40 ns
    loss = (1 - b) * a - log_weight * (_np_log_sigmoid(a) if log_sig is None else log_sig)
    if w is not None:
        loss = loss * w._data
    loss = _np_reduce(np.asarray(loss, cd), reduction)
    return wrap(laid_out(loss, _bcel_strides(t, reduction)) if loss.ndim > 1 else loss, d)


def _bcel_strides(t: Tensor, reduction: str) -> tuple | None:
    """PyTorch computes the unreduced loss as ``(1 - target).mul_(input).sub_(...)``: the
    target's layout."""
    if reduction != "none" or t.ndim < 2:
        return None
    return output_layout_source(tuple(t._shape), (t,))


binary_cross_entropy_with_logits.register_meta(
    lambda x, t, w=None, pw=None, reduction="mean": (
        _bcel_check(x, t, w, pw),
        fake(
            x._shape if check_reduction(reduction) == "none" else (),
            result_dtype(x, t),
            x,
            _bcel_strides(t, reduction),
        ),
    )[1]
)


def _bcel_grad(c, g):
    x, t, w, pw, reduction = c.args
    needs = c.needs_input_grad
    scale = _grad_scale(g, reduction, x.numel())
    weighted = scale * w if w is not None else scale
    log_weight = 1.0 if pw is None else 1 + (pw - 1) * t
    log_sig = OPS["log_sigmoid"](x)
    gx = weighted * ((1 - t) - log_weight * (-x).sigmoid()) if needs[0] else None
    gt = None
    if needs[1]:
        gt = weighted * (-x - (pw - 1) * log_sig if pw is not None else -x)
    gw = scale * ((1 - t) * x - log_weight * log_sig) if w is not None and needs[2] else None
    gpw = -weighted * t * log_sig if pw is not None and needs[3] else None
    return gx, gt, gw, gpw, None


binary_cross_entropy_with_logits.register_derivative(_bcel_grad)


@binary_cross_entropy_with_logits.register_decomposition
def _bcel_decomp(x, t, w=None, pw=None, reduction="mean"):
    check_reduction(reduction)
    log_weight = 1.0 if pw is None else 1 + (pw - 1) * t
    loss = (1 - t) * x - log_weight * OPS["log_sigmoid"](x)
    if w is not None:
        loss = loss * w
    return reduce_loss(loss, reduction)
