"""How an op's record says what it does with complex inputs, and the wrappers that apply it.

An op declares, where it is defined (``defop`` arguments, ``Op.register_complex``):

- ``complex_refused=(exception type, message)``: PyTorch refuses complex input (comparisons,
  max, clamp, relu, sort...); kiln raises its error instead of numpy's lexicographic ordering;
- ``holomorphic=True``: the real derivative formula applies under PyTorch's convention for
  complex gradients (the gradient of a real loss L with respect to z = x + iy is
  dL/dx + i dL/dy; for a holomorphic op with derivative f' that is ``grad * conj(f'(z))``, so
  the real formula ``grad * f'(z)`` applies with everything conjugated:
  ``conj(formula(conj(grad)))``);
- ``complex_derivative=formula``: the formula to use when the gradient is complex, written as
  PyTorch writes it (same bits, signed zeros included);
- ``register_complex(kernel=..., meta=..., derivative=..., decomposition=...)``: other pieces for
  a complex first argument (``abs``, ``var``).

The registry applies these as the pieces are registered, so no module patches another's ops.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor

__all__ = [
    "complex_not_implemented",
    "conj_value",
    "refusing",
    "conjugate_wirtinger",
    "complex_formula",
    "complex_branch",
]


def complex_not_implemented(kernel_name: str) -> tuple:
    """PyTorch's refusal by a CPU kernel compiled without complex types, for ``complex_refused``."""
    return NotImplementedError, f"\"{kernel_name}\" not implemented for '{{type}}'"


def conj_value(v):
    """The conjugate of a tensor or Python number (real values are their own conjugates)."""
    if isinstance(v, Tensor):
        return v.conj() if v._dtype.is_complex else v
    return v.conjugate() if isinstance(v, complex) else v


def complex_operand(op, args) -> dt.dtype | None:
    """The dtype of the first complex tensor (or Python complex) among ``op``'s tensor args."""
    for p in op.tensor_positions:
        a = args[p]
        if isinstance(a, Tensor):
            if a._dtype.is_complex:
                return a._dtype
        elif isinstance(a, complex):
            return dt.default_complex_dtype()
    return None


def refuse_complex(op, args, exc, message):
    from ..reductions.reduce import torch_type_name

    raise exc(message.format(type=torch_type_name(complex_operand(op, args))))


def refusing(op, fn: Callable) -> Callable:
    """``fn`` (a kernel, meta or decomposition of ``op``) behind ``op``'s complex refusal.

    The check is generated per op (like the schema binders): real calls pay one attribute read
    per tensor argument, which matters for hot ops such as ``relu`` and ``lt``. When ``fn``
    takes plain positional parameters the wrapper takes the same ones, so the call is forwarded
    without packing ``*rest, **kwargs`` (a relu paid ~10% for that).
    """
    exc, message = op.complex_refused
    params = list(op.signature.parameters.values())[: max(op.tensor_positions) + 1]
    namespace = {"fn": fn, "refuse": refuse_complex, "op": op, "exc": exc, "message": message}
    namespace["real_dtype"] = dt.float32
    own = _plain_parameters(fn, namespace)
    forwarded = own is not None and len(own) >= len(params)
    taken = own if forwarded else params
    signature = []
    for p in taken:
        if p.default is p.empty:
            signature.append(p.name)
        else:
            namespace[f"_d_{p.name}"] = p.default
            signature.append(f"{p.name}=_d_{p.name}")
    names = [p.name for p in taken]
    checks = " or ".join(
        f"getattr({names[i]}, '_dtype', real_dtype).is_complex or {names[i]}.__class__ is complex"
        for i in op.tensor_positions
    )
    rest = "" if forwarded else ", *rest, **kwargs"
    src = (
        f"def refusing({', '.join(signature)}{rest}):\n"
        f"    if {checks}:\n"
        f"        refuse(op, ({', '.join(names[: len(params)])},), exc, message)\n"
        f"    return fn({', '.join(names)}{rest})\n"
    )
    exec(compile(src, f"<kiln complex check {op.name}>", "exec"), namespace)
    return namespace["refusing"]


def _plain_parameters(fn: Callable, taken: dict) -> list | None:
    """``fn``'s parameters when all are positional-or-keyword with names free in ``taken``
    (the generated wrapper's namespace), else None."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    for p in params:
        if (
            p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD
            or p.name in taken
            or f"_d_{p.name}" in taken
        ):
            return None
    return params


def conjugate_wirtinger(real_formula: Callable) -> Callable:
    """A holomorphic op's derivative under PyTorch's convention: conj(formula(conj(grad)))."""

    def derivative(c, *grads):
        if not any(g is not None and g._dtype.is_complex for g in grads):
            return real_formula(c, *grads)
        out = real_formula(c, *(conj_value(g) for g in grads))
        # a list argument's gradient is a list (einsum's operands): each one conjugated
        return tuple(
            None
            if r is None
            else [None if t is None else conj_value(t) for t in r]
            if isinstance(r, list)
            else conj_value(r)
            for r in out
        )

    return derivative


def complex_formula(real_formula: Callable, formula: Callable) -> Callable:
    """``formula`` when the gradient is complex, else the op's own (real) formula."""

    def derivative(c, *grads):
        for g in grads:  # a loop, not any(<generator>): this runs for every mul/div node
            if g is not None and g._dtype.is_complex:
                return formula(c, *grads)
        return real_formula(c, *grads)

    return derivative


def complex_branch(real_piece: Callable | None, complex_piece: Callable, is_derivative: bool):
    """One of an op's pieces that runs ``complex_piece`` for a complex first argument."""
    if is_derivative:

        def derivative(c, *grads):
            piece = complex_piece if c.args[0]._dtype.is_complex else real_piece
            return piece(c, *grads)

        return derivative

    def piece(x, *rest):
        return (complex_piece if x._dtype.is_complex else real_piece)(x, *rest)

    return piece
