"""Eager CPU fast paths for SGD and Adam/AdamW: their kiln-op updates, done on the numpy buffers.

An eager optimizer step runs about ten small in-place kiln ops per parameter, and for small
models their dispatch costs more than the arithmetic. Outside ``kiln.compile``, dispatch modes
and autocast, with float32/float64 CPU tensors, these functions do the same arithmetic in the
same order and with the same roundings directly on the arrays (writing in place, bumping the
version counters as in-place ops do), so results are bit-identical to the op path; anything
else returns False and the caller runs its ops.
"""

from __future__ import annotations

import numpy as np

from ..runtime import machine_code
from ..runtime.compiling import is_compiling
from ..runtime.device import cpu
from ..runtime.state import per_thread
from ..runtime.tensor import Tensor, wrap_array

__all__ = ["available", "sgd_update", "adam_update", "AdamScalars"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def available() -> bool:
    """Whether an eager step may skip dispatch (nothing is tracing or intercepting ops)."""
    state = per_thread.state
    return not state.mode_stack and state.autocast is None and not is_compiling()


def _arrays(*tensors: Tensor) -> list[np.ndarray] | None:
    """The tensors' writable, C-contiguous CPU arrays of one float dtype and shape, or None."""
    arrays = []
    first = tensors[0]._data
    if first.__class__ is not np.ndarray or first.dtype not in _FLOATS:
        return None
    dtype, shape = first.dtype, first.shape
    for t in tensors:
        data = t._data
        if (
            t._device is not cpu
            or data.__class__ is not np.ndarray
            or data.dtype != dtype
            or data.shape != shape
            or not data.flags.writeable
            or not data.flags.c_contiguous
        ):
            return None
        arrays.append(data)
    return arrays


def _scaled_add(x: np.ndarray, y: np.ndarray, alpha, out=None) -> np.ndarray:
    """``x.add(y, alpha=alpha)``: alpha rounded to the dtype scales y first (none when 1)."""
    if alpha == 1:
        return np.add(x, y, out=out)
    return np.add(x, y * x.dtype.type(alpha), out=out)


def sgd_update(param: Tensor, states, group: dict, lr: float) -> bool:
    """One parameter of ``SGD.step`` (``states`` is the optimizer's ``state``, read only with
    momentum, as the op path does); False (nothing done) when the fast path does not apply.

    Every operation is elementwise, so it runs as one machine-code pass (float32) or over flat
    slices of ``_CHUNK`` elements: the op path's values, without a parameter-sized temporary per
    scaled term (each was fresh pages past glibc's mmap threshold: resnet18's eager step
    faulted in ~24 MB a step, ~35 ms of its SGD update)."""
    arrays = _arrays(param, param.grad)
    momentum = group["momentum"]
    buf = states[param].get("momentum_buffer") if momentum != 0 else None
    if arrays is None or (buf is not None and _arrays(buf, param) is None):
        return False
    p, grad = arrays
    new_buffer = momentum != 0 and buf is None
    if new_buffer:
        buf = wrap_array(np.empty_like(grad), param.dtype)
        states[param]["momentum_buffer"] = buf
    buf_data = None if buf is None else buf._data
    scalar = p.dtype.type
    scalars = {
        "weight_decay": scalar(group["weight_decay"]),
        "momentum": scalar(momentum),
        "one_minus_dampening": scalar(1 - group["dampening"]),
        "neg_lr": scalar(-lr),
    }
    flags = {
        "maximize": group["maximize"],
        "decay": group["weight_decay"] != 0,
        "new_buffer": new_buffer,
        "nesterov": group["nesterov"],
    }
    kernels = machine_code.get("optimizers") if p.dtype == _FLOATS[0] else None
    if kernels is not None:
        kernels.sgd(p, grad, buf_data, scalars, **flags)
    else:
        flat = [a.reshape(-1) for a in (p, grad) + (() if buf is None else (buf_data,))]
        n = p.size
        scratch = np.empty(min(n, _CHUNK), p.dtype)
        for start in range(0, n, _CHUNK):
            parts = [a[start : start + _CHUNK] for a in flat]
            _sgd_slice(parts, scratch[: parts[0].size], scalars, **flags)
    if buf is not None and not new_buffer:
        buf._bump_version()
    param._bump_version()
    return True


def _sgd_slice(
    arrays,
    scratch,
    scalars: dict,
    *,
    maximize: bool,
    decay: bool,
    new_buffer: bool,
    nesterov: bool,
) -> None:
    """The SGD update of one slice in place, with the op path's operations and roundings
    (``x.add(y, alpha=a)`` scales ``y`` by ``a`` rounded to the dtype, none when it is 1)."""
    p, grad = arrays[:2]
    if maximize:
        grad = np.negative(grad)
    if decay:
        grad = np.add(grad, np.multiply(p, scalars["weight_decay"], out=scratch))
    if len(arrays) > 2:
        buf = arrays[2]
        if new_buffer:
            np.copyto(buf, grad)
        else:
            np.multiply(buf, scalars["momentum"], out=buf)
            damped = scalars["one_minus_dampening"]
            np.add(buf, grad if damped == 1 else np.multiply(grad, damped, out=scratch), out=buf)
        grad = np.add(grad, np.multiply(buf, scalars["momentum"], out=scratch)) if nesterov else buf
    np.add(p, np.multiply(grad, scalars["neg_lr"], out=scratch), out=p)


def _lerp(start: np.ndarray, end: np.ndarray, weight: float) -> None:
    """``start.lerp_(end, weight)`` with kiln's lerp kernel rounding (see ``ops.pointwise.ternary``)."""
    w = start.dtype.type(weight)
    small = abs(w) < 0.5
    if start.dtype == np.float32:
        coeff, base = (w, start) if small else (w - np.float32(1), end)
        out = np.multiply(np.subtract(end, start), coeff, dtype=np.float64)
        out += base
        np.copyto(start, out, casting="unsafe")
    elif small:
        np.add(start, w * (end - start), out=start)
    else:
        np.subtract(end, (end - start) * (1 - w), out=start)


# elements per slice of an Adam update: its temporaries (float64 for the float32 lerp) stay
# within the caches instead of adding several parameter-sized arrays to the step's peak memory
_CHUNK = 1 << 16


class AdamScalars:
    """One group's Adam settings for one ``step()``: its flags read once, and the scalars each
    step count needs (the bias corrections, the float32 words the machine code takes) computed
    once per count instead of once per parameter. A group's parameters usually share their
    count, so a step of nanoGPT's 28 parameters builds them once (~12 us a parameter before)."""

    __slots__ = ("group", "lr", "betas", "amsgrad", "kernels", "_by_step")

    def __init__(self, group: dict, lr: float, betas: tuple) -> None:
        self.group = group
        self.lr = lr
        self.betas = betas
        self.amsgrad = group["amsgrad"]
        self.kernels = machine_code.get("optimizers")
        self._by_step: dict = {}

    def at(self, step: float) -> tuple:
        """(``_adam_slice``'s scalars, the machine code's float32 words) for step ``step``."""
        found = self._by_step.get(step)
        if found is None:
            group, lr = self.group, self.lr
            beta1, beta2 = self.betas
            scalars = (
                group["maximize"],
                group["weight_decay"],
                group["decoupled_weight_decay"],
                lr,
                beta1,
                beta2,
                lr / (1 - beta1**step),  # step size
                (1 - beta2**step) ** 0.5,  # square root of the second bias correction
                group["eps"],
            )
            found = self._by_step[step] = (scalars, _native_words(scalars))
        return found


def adam_update(param: Tensor, state: dict, scalars: AdamScalars) -> bool:
    """One parameter of ``Adam.step`` (not capturable or differentiable; real parameters), with
    its state already created; False when the fast path does not apply.

    Every operation is elementwise, so the update runs over flat slices of ``_CHUNK`` elements:
    the same values as whole-array operations, with temporaries of one slice (whole-array ones
    cost GPT-2 small's 154 MB embedding about 700 MB of transient memory)."""
    step_t = state["step"]
    step_data = step_t._data
    if scalars.amsgrad:
        tensors = (
            param,
            param.grad,
            state["exp_avg"],
            state["exp_avg_sq"],
            state["max_exp_avg_sq"],
        )
    else:
        tensors = (param, param.grad, state["exp_avg"], state["exp_avg_sq"])
    arrays = _arrays(*tensors)
    if (
        arrays is None
        or step_t._device is not cpu
        or step_data.__class__ is not np.ndarray
        or step_data.ndim != 0
        or not step_data.flags.writeable
    ):
        return False
    np.add(step_data, 1, out=step_data)
    step_t._bump_version()
    step_scalars, words = scalars.at(float(step_data))
    kernels = scalars.kernels
    if kernels is not None and arrays[0].dtype == _FLOATS[0]:
        _native_adam(kernels, arrays, words)
    else:
        flat = [a.reshape(-1) for a in arrays]
        n = flat[0].size
        for start in range(0, max(n, 1), _CHUNK):
            _adam_slice([a[start : start + _CHUNK] for a in flat], step_scalars)
    for t in tensors[:1] + tensors[2:]:
        t._get_storage().version += 1
    return True


def _native_words(scalars: tuple) -> tuple:
    """The machine code's float32 words and flags for ``_adam_slice``'s scalars, rounded as
    ``_adam_slice`` rounds them (so the two paths give the same bits)."""
    maximize, weight_decay, decoupled, lr, beta1, beta2, step_size, correction2_sqrt, eps = scalars
    f32 = np.float32
    w = f32(1 - beta1)  # as ``_lerp`` rounds and picks its formula
    small = abs(w) < 0.5
    words = {
        "decay": f32(1 - lr * weight_decay),
        "weight_decay": f32(weight_decay),
        "coeff": w if small else w - f32(1),
        "beta2": f32(beta2),
        "one_minus_beta2": f32(1 - beta2),
        "correction2": f32(correction2_sqrt),
        "eps": f32(eps),
        "neg_step": f32(-step_size),
    }
    decay = "" if weight_decay == 0 else "decoupled" if decoupled else "coupled"
    return words, {"maximize": maximize, "decay": decay, "small": small}


def _native_adam(kernels, arrays: list[np.ndarray], words: tuple) -> None:
    """The float32 update as one machine-code pass (``inductor/codegen/llvm/eager_optimizers``)
    with ``_adam_slice``'s roundings, so its bits."""
    p, grad, exp_avg, exp_avg_sq = arrays[:4]
    second = arrays[4] if len(arrays) > 4 else exp_avg_sq
    kernels.adam(p, grad, exp_avg, exp_avg_sq, second, words[0], **words[1])


def _adam_slice(arrays: list[np.ndarray], scalars: tuple) -> None:
    """The Adam update of one slice of a parameter, in place (PyTorch's single-tensor order)."""
    maximize, weight_decay, decoupled, lr, beta1, beta2, step_size, correction2_sqrt, eps = scalars
    p, grad, exp_avg, exp_avg_sq = arrays[:4]
    scalar = p.dtype.type
    if maximize:
        grad = np.negative(grad)
    if weight_decay != 0:
        if decoupled:
            np.multiply(p, scalar(1 - lr * weight_decay), out=p)
        else:
            grad = _scaled_add(grad, p, weight_decay)
    _lerp(exp_avg, grad, 1 - beta1)
    np.multiply(exp_avg_sq, scalar(beta2), out=exp_avg_sq)
    np.add(exp_avg_sq, grad * scalar(1 - beta2) * grad, out=exp_avg_sq)  # x + value * a * b
    second = exp_avg_sq
    if len(arrays) > 4:  # amsgrad
        second = arrays[4]
        np.maximum(second, exp_avg_sq, out=second)
    denom = np.sqrt(second)
    np.true_divide(denom, scalar(correction2_sqrt), out=denom)
    np.add(denom, scalar(eps), out=denom)
    np.add(p, exp_avg * scalar(-step_size) / denom, out=p)  # x + value * a / b
