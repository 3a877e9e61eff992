"""``out=`` as PyTorch handles it, for registered ops and Python-level functions alike.

The result is computed as without ``out`` (with grad recording off), then written into ``out``
(a tensor, or a tuple for multi-output functions), which is resized when its shape differs and
returned. Autograd refuses only what it could not record: a differentiable function (one with a
floating or complex result) whose inputs or ``out`` require grad; comparisons, ``argmax`` and
other integer or boolean results write into ``out`` whatever requires grad.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from ...autograd.forward_ad import DUAL_ACTIVE, tangent_of
from ...autograd.grad_mode import no_grad
from ...runtime import dtypes as dt
from ...runtime.state import per_thread
from ...runtime.symbolic import known_same_shape
from ...runtime.tensor import Tensor
from .dispatch import PARTIAL_OVERLAP, partially_overlapping
from .registry import OPS, return_type

__all__ = ["call_with_out", "write_out", "writes_out"]


def _flat(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _requires_grad(values) -> bool:
    for v in values:
        if isinstance(v, Tensor):
            if v._requires_grad:
                return True
        elif isinstance(v, (tuple, list)) and _requires_grad(v):
            return True
    return False


def check_out_grad(name: str, differentiable: bool, result, inputs, out) -> None:
    """PyTorch's refusal of ``out=`` where autograd would have to record the write: the
    function is differentiable, grad mode is on, some result is floating or complex (integer
    and boolean results never carry a gradient), and an input or ``out`` requires grad."""
    if not differentiable or not per_thread.state.grad_enabled:
        return
    if not any(
        isinstance(r, Tensor) and (r._dtype.is_floating_point or r._dtype.is_complex)
        for r in _flat(result)
    ):
        return
    if _requires_grad(inputs) or _requires_grad(_flat(out)):
        raise RuntimeError(
            f"{name}(): functions with out=... arguments don't support automatic "
            "differentiation, but one of the arguments requires grad."
        )


def refuse_unsafe_cast(result_dtype, out_dtype) -> None:
    """PyTorch's error for writing a result into a tensor of a dtype it does not cast to
    safely (a float result into an int ``out``, or into ``self`` of an in-place op)."""
    if not dt.can_cast(result_dtype, out_dtype):
        from ..reductions.reduce import torch_type_name

        raise RuntimeError(
            f"result type {torch_type_name(result_dtype)} can't be cast to the desired output "
            f"type {torch_type_name(out_dtype)}"
        )


def write_out(result, out, *, exact_dtype: bool = False, records_write: bool = False):
    """Write a result (a tensor or a tuple of them) into ``out``, resizing it to fit; the
    result's dtype must cast to ``out``'s safely, or with ``exact_dtype`` be the same.
    ``records_write``: autograd records the copy (``out`` gets the result's gradient)."""
    from ..reductions.reduce import c_type_name

    outs, results = _flat(out), _flat(result)
    for target, value in zip(outs, results, strict=True):
        if exact_dtype and value._dtype is not target._dtype:
            raise RuntimeError(
                f"Expected out tensor to have dtype {c_type_name(value._dtype)}, but got "
                f"{c_type_name(target._dtype)} instead"
            )
        refuse_unsafe_cast(value._dtype, target._dtype)
    for target, value in zip(outs, results):
        if not known_same_shape(target._shape, value._shape):
            version = target._version
            with no_grad():
                target.resize_(value._shape)
            # PyTorch resizes ``out`` without counting a write: only the copy bumps its version
            target._get_storage().version = version
        if records_write:
            OPS["copy_"](target, value)
        else:  # nothing to record: check_out_grad refused what would need it
            with no_grad():
                OPS["copy_"](target, value)
    if hasattr(result, "_fields"):  # (values, indices) come back as ``return_types.<op>_out``
        return return_type(type(result).__name__ + "_out", result._fields)(*outs)
    return out


def compute_into(
    name: str,
    differentiable: bool,
    fn: Callable,
    args: tuple,
    kwargs: dict,
    out,
    *,
    exact_dtype: bool = False,
    records_write: bool = False,
):
    """``fn(*args, **kwargs)`` written into ``out`` (see the module docstring)."""
    if DUAL_ACTIVE[0]:
        _refuse_dual(name, (*args, *kwargs.values(), out))
    if records_write:
        return write_out(fn(*args, **kwargs), out, exact_dtype=exact_dtype, records_write=True)
    with no_grad():
        result = fn(*args, **kwargs)
    check_out_grad(name, differentiable, result, (*args, *kwargs.values()), out)
    return write_out(result, out, exact_dtype=exact_dtype)


def _refuse_dual(name: str, values: tuple) -> None:
    """PyTorch's refusal of an ``out=`` call with a dual tensor among its tensors (inputs or
    ``out``): its out= variants have no forward derivatives."""
    for value in values:
        if isinstance(value, (list, tuple)):
            _refuse_dual(name, tuple(value))
        elif isinstance(value, Tensor) and tangent_of(value) is not None:
            raise NotImplementedError(
                f"Trying to use forward AD with {name}_out that does not support it because it "
                "is an out= function"
            )


def call_with_out(op, args: tuple, kwargs: dict):
    """A registered op called with ``out=``: written straight into ``out`` by the op's
    ``out_kernel`` where that is all the general path would do (``_writes_directly``), else
    computed and copied (``compute_into``)."""
    out = kwargs.pop("out")
    if out is None:
        return op(*args, **kwargs)
    storage = getattr(out, "_storage", None)
    if storage is not None and op.kind == "pointwise":
        _refuse_partial_overlap(op, args, out, storage)
    write = op.out_kernel
    if write is not None and not kwargs and _writes_directly(args, out) and write(out, *args):
        storage = out._storage
        if storage is None:
            storage = out._get_storage()
        storage.version += 1  # as the copy into ``out`` would
        return out
    return compute_into(
        op.name, op.differentiable, op, args, kwargs, out, exact_dtype=op.out_exact_dtype
    )


def _refuse_partial_overlap(op, args: tuple, out, storage) -> None:
    """PyTorch's TensorIterator check before an elementwise op writes ``out`` (``storage``, its
    storage: without one no view of it was ever made, and no input can share it): no input may
    share some but not all of its memory (``add(x[1:], 1, out=x[:-1])``), as for an in-place
    op (``dispatch._check_no_partial_overlap``)."""
    count = len(args)
    for p in op.tensor_positions:
        if p < count:
            a = args[p]
            if a is not out and getattr(a, "_storage", None) is storage:
                if partially_overlapping(out, a):
                    raise RuntimeError(PARTIAL_OVERLAP)


def _writes_directly(args: tuple, out) -> bool:
    """Whether a call with ``out=`` may skip compute-then-copy: two operands and nothing
    between the call and its kernel in this thread (no mode, autocast, profiler or inference
    mode; ``out`` not an inference tensor; no gradient to refuse). The op's ``out_kernel``
    then decides from the operands."""
    state = per_thread.state
    if (
        len(args) != 2
        or state.mode_stack
        or DUAL_ACTIVE[0]
        or state.autocast is not None
        or state.profiler is not None
        or state.inference_mode
        or getattr(out, "_inference", True)
    ):
        return False
    if state.grad_enabled:
        x, y = args
        return not (
            getattr(x, "_requires_grad", False)
            or getattr(y, "_requires_grad", False)
            or getattr(out, "_requires_grad", False)
        )
    return True


def writes_out(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    differentiable: bool = True,
    exact_dtype: bool = False,
    records_write: bool = False,
):
    """Give a Python-level function PyTorch's ``out=``. Factories (functions taking ``dtype``
    and ``device``) compute in ``out``'s dtype and on its device unless told otherwise.
    ``name``: the function's name in the autograd error (PyTorch names the op it runs);
    ``exact_dtype``: ``out`` must have the result's dtype (norms, ``aminmax``, ``median``);
    ``records_write``: PyTorch composes the function and copies its result into ``out`` under
    autograd (``quantile``, ``tensordot``), so ``out`` takes the gradient instead of refusing."""
    if fn is None:
        return functools.partial(
            writes_out,
            name=name,
            differentiable=differentiable,
            exact_dtype=exact_dtype,
            records_write=records_write,
        )
    signature = inspect.signature(fn)
    params = signature.parameters
    factory = "dtype" in params and "device" in params
    label = name or fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        if factory:
            target = _flat(out)[0]
            if kwargs.get("dtype") is None:
                kwargs["dtype"] = target._dtype
            if kwargs.get("device") is None:
                kwargs["device"] = target._device
        return compute_into(
            label,
            differentiable,
            fn,
            args,
            kwargs,
            out,
            exact_dtype=exact_dtype,
            records_write=records_write,
        )

    if "out" not in params:  # introspection (``inspect.signature``) shows the new keyword
        out_param = inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None)
        kept = [p for p in params.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        extra = [p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
        wrapper.__signature__ = signature.replace(parameters=[*kept, out_param, *extra])
    return wrapper
