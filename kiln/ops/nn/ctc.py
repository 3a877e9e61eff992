"""The ``_ctc_loss`` op and ``F.ctc_loss`` over it: Connectionist Temporal Classification, forward and backward in log space.

The alignment sum over all paths is the alpha (forward) recursion over the blank-extended target
``l' = (blank, l1, blank, l2, ..., blank)``, run in numpy over the whole batch one time step at a
time; the gradient comes from the beta (backward) recursion, as in PyTorch's CPU kernel. A
composite of kiln ops would record T steps of small ops; two kernels are far faster, and the
compiler runs them as an eager fallback.

The gradient matches PyTorch's ``ctc_loss_backward`` exactly, including its convention: with
occupation probabilities gamma (summed over the positions of each class),
``d loss / d log_probs[t, n, c] = exp(log_probs[t, n, c]) - gamma[t, n, c]``. That is the true
gradient through a preceding ``log_softmax`` (the usual input); it is not the derivative with
respect to unnormalized log-probabilities.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, fake, wrap
from ..core.registry import OPS, defop, torch_function
from ..creation.api import tensor as kiln_tensor
from ..reductions.reduce import torch_type_name
from . import losses as _loss

__all__ = ["ctc_loss"]

_CHECKING = " (while checking arguments for ctc_loss_allocate_outputs)"


@defop(kind="loss", autocast={"cpu": "fp32"})
def _ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Tensor,
    target_lengths: Tensor,
    blank: int = 0,
    zero_infinity: bool = False,
):
    """Negative log-likelihood per sample of (T, N, C) log-probabilities; int64 lengths (N,)."""


@defop(kind="loss")
def _ctc_loss_backward(
    grad: Tensor,
    log_probs: Tensor,
    targets: Tensor,
    input_lengths: Tensor,
    target_lengths: Tensor,
    neg_log_likelihood: Tensor,
    blank: int = 0,
    zero_infinity: bool = False,
):
    """Gradient of ``_ctc_loss`` with respect to ``log_probs``, scaled by ``grad`` (N,)."""


def _check_shapes(log_probs, targets, input_lengths, target_lengths, blank) -> None:
    if log_probs.dtype not in (dt.float32, dt.float64):
        raise NotImplementedError(
            f"\"ctc_loss_cpu\" not implemented for '{torch_type_name(log_probs.dtype)}'"
        )
    if log_probs.ndim != 3:
        raise RuntimeError(
            f"ctc_loss: expected log_probs of shape (T, N, C), got {list(log_probs.shape)}"
        )
    if log_probs.numel() == 0:
        raise RuntimeError("log_probs tensor must not be empty")
    batch, classes = log_probs.shape[1], log_probs.shape[2]
    if not 0 <= blank < classes:
        raise RuntimeError("blank must be in label range")
    if input_lengths.numel() != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if target_lengths.numel() != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    if targets.ndim != 1 and (targets.ndim != 2 or targets.shape[0] != batch):
        raise RuntimeError(
            f"Expected tensor to have size {batch} at dimension 0, but got size "
            f"{targets.shape[0] if targets.ndim else 0} for argument #2 'targets'{_CHECKING}"
        )


def _check_lengths(log_probs, targets, il: np.ndarray, tl: np.ndarray) -> None:
    """The data-dependent checks: lengths in range and targets long enough."""
    steps = log_probs.shape[0]
    for name, lengths in (("input_lengths", il), ("target_lengths", tl)):
        if lengths.size and lengths.min() < 0:
            raise RuntimeError(
                f"Expected {name} to have value at least 0, but got value {lengths.min()}"
                + _CHECKING
            )
    if il.size and il.max() > steps:
        raise RuntimeError(
            f"Expected input_lengths to have value at most {steps}, but got value {il.max()}"
            + _CHECKING
        )
    if targets.ndim == 1:
        if targets.shape[0] != tl.sum():
            raise RuntimeError(
                f"Expected tensor to have size {tl.sum()} at dimension 0, but got size "
                f"{targets.shape[0]} for argument #2 'targets'{_CHECKING}"
            )
    elif tl.size and targets.shape[1] < tl.max():
        raise RuntimeError(
            f"Expected tensor to have size at least {tl.max()} at dimension 1, but got size "
            f"{targets.shape[1]} for argument #2 'targets'{_CHECKING}"
        )


def _logsumexp3(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """log(exp(a) + exp(b) + exp(c)), -inf where all three are -inf (no NaN)."""
    top = np.maximum(np.maximum(a, b), c)
    shift = np.where(np.isneginf(top), 0.0, top)
    return shift + np.log(np.exp(a - shift) + np.exp(b - shift) + np.exp(c - shift))


class _Lattice:
    """The extended-label lattice of a batch: labels, emissions and the alpha recursion."""

    def __init__(self, log_probs, targets, input_lengths, target_lengths, blank):
        lp = np.asarray(log_probs._data, dtype=np.float64)
        self.il = np.asarray(input_lengths._data, dtype=np.int64).reshape(-1)
        self.tl = np.asarray(target_lengths._data, dtype=np.int64).reshape(-1)
        _check_lengths(log_probs, targets, self.il, self.tl)
        steps, batch, _ = lp.shape
        self.lp = lp
        width = 2 * int(self.tl.max(initial=0)) + 1
        labels = np.asarray(targets._data).astype(np.int64)
        if labels.ndim == 1:  # concatenated targets: cut them per sample
            starts = np.concatenate([[0], np.cumsum(self.tl)[:-1]]).astype(np.int64)
            rows = np.zeros((batch, max(width // 2, 1)), np.int64)
            for n in range(batch):
                rows[n, : self.tl[n]] = labels[starts[n] : starts[n] + self.tl[n]]
            labels = rows
        ext = np.full((batch, width), blank, np.int64)
        ext[:, 1::2] = labels[:, : width // 2]
        positions = np.arange(width)
        self.inside = positions[None, :] < (2 * self.tl + 1)[:, None]
        ext = np.where(self.inside, ext, blank)
        classes = lp.shape[2]
        if ((ext < 0) | (ext >= classes)).any():
            bad = ext[(ext < 0) | (ext >= classes)][0]
            raise IndexError(f"ctc_loss: target label {bad} is out of range for {classes} classes")
        self.ext = ext
        emit = lp[:, np.arange(batch)[:, None], ext]
        self.emit = np.where(self.inside[None], emit, -np.inf)
        # a label may follow the label two positions back unless they are equal (blanks, repeats)
        self.skip = np.zeros((batch, width), bool)
        self.skip[:, 2:] = ext[:, 2:] != ext[:, :-2]
        self.alpha = self._alphas(steps, batch, width)

    def _alphas(self, steps, batch, width) -> np.ndarray:
        alpha = np.full((steps, batch, width), -np.inf)
        if steps:
            alpha[0, :, :2] = self.emit[0, :, :2]
        for t in range(1, steps):
            prev = alpha[t - 1]
            one_back = np.concatenate([np.full((batch, 1), -np.inf), prev[:, :-1]], 1)
            two_back = np.concatenate([np.full((batch, 2), -np.inf), prev[:, :-2]], 1)
            two_back = np.where(self.skip, two_back, -np.inf)
            alpha[t] = _logsumexp3(prev, one_back, two_back) + self.emit[t]
        return alpha

    def neg_log_likelihood(self) -> np.ndarray:
        batch = self.il.shape[0]
        out = np.empty(batch)
        for n in range(batch):
            steps, length = self.il[n], self.tl[n]
            if steps == 0:
                out[n] = 0.0 if length == 0 else np.inf
                continue
            last = self.alpha[steps - 1, n]
            ends = last[2 * length] if length == 0 else np.logaddexp(*last[2 * length - 1 :][:2])
            out[n] = -ends
        return out

    def betas(self) -> np.ndarray:
        steps, batch, width = self.alpha.shape
        positions = np.arange(width)
        last = self.il - 1
        ends = (positions[None, :] == 2 * self.tl[:, None]) | (
            (positions[None, :] == 2 * self.tl[:, None] - 1) & (self.tl[:, None] > 0)
        )
        skip_ahead = np.zeros((batch, width), bool)
        skip_ahead[:, :-2] = self.skip[:, 2:]
        beta = np.full((steps, batch, width), -np.inf)
        following = np.full((batch, width), -np.inf)
        for t in range(steps - 1, -1, -1):
            one_ahead = np.concatenate([following[:, 1:], np.full((batch, 1), -np.inf)], 1)
            two_ahead = np.concatenate([following[:, 2:], np.full((batch, 2), -np.inf)], 1)
            two_ahead = np.where(skip_ahead, two_ahead, -np.inf)
            step = _logsumexp3(following, one_ahead, two_ahead) + self.emit[t]
            start = np.where(ends, self.emit[t], -np.inf)
            row = (t == last)[:, None]
            before = (t < last)[:, None]
            beta[t] = np.where(row, start, np.where(before, step, -np.inf))
            following = beta[t]
        return beta


@_ctc_loss.register_kernel
def _ctc_loss_kernel(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    _check_shapes(log_probs, targets, input_lengths, target_lengths, blank)
    nll = _Lattice(log_probs, targets, input_lengths, target_lengths, blank).neg_log_likelihood()
    if zero_infinity:
        nll = np.where(np.isinf(nll), 0.0, nll)
    return wrap(nll.astype(log_probs.dtype.np), log_probs.dtype)


@_ctc_loss.register_meta
def _ctc_loss_meta(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    _check_shapes(log_probs, targets, input_lengths, target_lengths, blank)
    return fake((log_probs.shape[1],), log_probs.dtype, log_probs)


def _ctc_loss_grad(c, g):
    log_probs, targets, input_lengths, target_lengths, blank, zero_infinity = c.args
    grad = OPS["_ctc_loss_backward"](
        g, log_probs, targets, input_lengths, target_lengths, c.out, blank, zero_infinity
    )
    return grad, None, None, None, None, None


_ctc_loss.register_derivative(_ctc_loss_grad, save_inputs=(0, 1, 2, 3), save_output=True)


@_ctc_loss_backward.register_kernel
def _ctc_backward_kernel(grad, log_probs, targets, il, tl, nll, blank, zero_infinity):
    _check_shapes(log_probs, targets, il, tl, blank)
    lattice = _Lattice(log_probs, targets, il, tl, blank)
    likelihood = -lattice.neg_log_likelihood()
    steps, batch, classes = lattice.lp.shape
    with np.errstate(invalid="ignore"):
        # occupation probability of each lattice position: alpha * beta / emission / p(l|x)
        occupancy = np.exp(
            lattice.alpha + lattice.betas() - lattice.emit - likelihood[None, :, None]
        )
    occupancy = np.where(lattice.inside[None], occupancy, 0.0)
    onehot = (lattice.ext[..., None] == np.arange(classes)).astype(np.float64)
    gamma = np.einsum("tns,nsc->tnc", occupancy, onehot)
    out = np.exp(lattice.lp) - gamma
    live = np.arange(steps)[:, None] < lattice.il[None, :]
    if zero_infinity:
        live = live & np.isfinite(likelihood)[None, :]
    out = np.where(live[..., None], out, 0.0) * np.asarray(grad._data, np.float64)[None, :, None]
    return wrap(out.astype(log_probs.dtype.np), log_probs.dtype)


@_ctc_loss_backward.register_meta
def _ctc_backward_meta(grad, log_probs, targets, il, tl, nll, blank=0, zero_infinity=False):
    return fake(tuple(log_probs.shape), log_probs.dtype, log_probs)


def _no_double_backward(c, g):
    raise RuntimeError("derivative for _ctc_loss_backward is not implemented")


_ctc_loss_backward.register_derivative(_no_double_backward)


def _lengths(lengths, name: str, like: Tensor) -> Tensor:
    """Lengths given as a tensor or a sequence of ints, as an int64 vector."""
    if isinstance(lengths, Tensor):
        if lengths.dtype.is_floating_point or lengths.dtype is dt.bool_:
            raise RuntimeError(f"{name} must be integral")
        return lengths.reshape(-1).to(dt.int64)
    if isinstance(lengths, int):
        lengths = [lengths]
    return kiln_tensor(list(lengths), dtype=dt.int64, device=like.device)


def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """CTC loss of (T, N, C) (or unbatched (T, C)) log-probabilities against padded (N, S) or
    concatenated targets. ``mean`` divides each loss by its target length, then averages."""
    _loss.check_reduction(reduction)
    unbatched = log_probs.ndim == 2
    il = _lengths(input_lengths, "input_lengths", log_probs)
    tl = _lengths(target_lengths, "target_lengths", log_probs)
    if unbatched:
        log_probs, targets = log_probs.unsqueeze(1), targets.unsqueeze(0)
    nll = OPS["_ctc_loss"](log_probs, targets, il, tl, blank, zero_infinity)
    if zero_infinity:
        nll = OPS["where"](nll == float("inf"), 0.0, nll)
    if reduction == "mean":
        return (nll / tl.clamp(min=1).to(nll.dtype)).mean()
    if reduction == "sum":
        return nll.sum()
    return nll.squeeze(0) if unbatched else nll


@torch_function("ctc_loss")
def _torch_ctc_loss(
    log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1, zero_infinity=False
):
    if isinstance(reduction, int):
        reduction = ("none", "mean", "sum")[reduction]
    return ctc_loss(
        log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity
    )
