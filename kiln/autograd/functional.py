"""``kiln.autograd.functional``: vjp, jvp, jacobian, hessian, hvp and vhp of Python functions.

Everything is built on reverse mode (``autograd.grad``). Forward-mode products use the
double-vjp trick: with ``g(u) = J^T u`` computed with ``create_graph=True`` for a dummy ``u``,
``J v`` is the gradient of ``g`` with respect to ``u`` along ``v``; this works because every
kiln derivative formula is written in differentiable kiln ops. ``vectorize`` is accepted and
ignored: jacobians are built one row (reverse mode) or one column (forward mode) at a time.
Inputs and outputs may each be a tensor or a tuple of tensors; results follow PyTorch's nesting.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ..ops import public as _public
from ..runtime.tensor import Tensor
from .engine import grad as autograd_grad
from .grad_mode import enable_grad, is_grad_enabled, set_grad_enabled

# calls of this module's functions now running: a compiled function's frame run eagerly leaves
# the modules they call eager (``dynamo.eager_frames``), since these differentiate twice
RUNNING = [0]


def _counted(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def counted(*args, **kwargs):
        RUNNING[0] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            RUNNING[0] -= 1

    return counted


__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]

Tensors = Tensor | tuple[Tensor, ...]

_STRICT_MESSAGES = {
    "back": "The output of the user-provided function is independent of input {i}. This is "
    "not allowed in strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the "
    "grad_outputs when using the double backward trick to compute forward mode gradients. This "
    "is not allowed in strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. "
    "This is not allowed in strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry "
    "{i} in the grad_jacobian. This is not allowed in strict mode as it prevents from using the "
    "double backward trick to replace forward mode AD.",
}

_NO_GRAD_MESSAGES = {
    "outputs": "Output {i} of the user-provided function does not require gradients. The "
    "outputs must be computed in a differentiable manner from the input when running in strict "
    "mode.",
    "grad_inputs": "The gradient with respect to input {i} is independent of the inputs of the "
    "user-provided function. This is not allowed in strict mode.",
    "jacobian": "While computing the hessian, found that the jacobian of the user-provided "
    "function with respect to input {i} is independent of the input. This is not allowed in "
    "strict mode. You should ensure that your function is twice differentiable and that the "
    "jacobian depends on the inputs (this would be violated by a linear function for example).",
    "hessian": "The hessian of the user-provided function with respect to input {i} is "
    "independent of the input. This is not allowed in strict mode. You should ensure that your "
    "function is thrice differentiable and that the hessian depends on the inputs.",
}


# ------------------------------------------------------------------------------ helpers
def _as_tuple(value, arg_name: str, fn_name: str) -> tuple[bool, tuple]:
    """(was it a tuple, the tensors as a tuple); anything but tensors is a TypeError."""
    is_tuple = isinstance(value, tuple)
    items = value if is_tuple else (value,)
    for i, item in enumerate(items):
        if not isinstance(item, Tensor):
            where = f"value at index {i}" if is_tuple else f"given {arg_name}"
            raise TypeError(
                f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of "
                f"Tensors but the {where} has type {type(item)}."
            )
    return is_tuple, items


def _unpack(result, shape):
    """Undo the tuple wrapping: ``shape`` is one flag, or (outer flag, inner flag) for nesting."""
    if isinstance(shape, tuple):
        outer, inner = shape
        if not inner:
            result = tuple(r[0] for r in result)
        return result if outer else result[0]
    return result if shape else result[0]


def _fresh_inputs(inputs: tuple, create_graph: bool, need_graph: bool) -> tuple:
    """Inputs the function sees: history-carrying views under create_graph, else new leaves."""
    out = []
    for t in inputs:
        if create_graph and t.requires_grad:
            out.append(t.view_as(t))
        else:
            out.append(t.detach().requires_grad_(need_graph))
    return tuple(out)


def _finish(tensors, create_graph: bool):
    """Detach results unless the caller asked for a differentiable answer (nested tuples too)."""
    if create_graph:
        return tensors
    if tensors and isinstance(tensors[0], Tensor):
        return tuple(t.detach() for t in tensors)
    return tuple(_finish(t, create_graph) for t in tensors)


def _validate_v(v: tuple, refs: tuple, refs_is_tuple: bool) -> None:
    if len(v) != len(refs):
        if refs_is_tuple:
            raise RuntimeError(
                f"v is a tuple of invalid length: should be {len(refs)} but got {len(v)}."
            )
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (vi, ref) in enumerate(zip(v, refs)):
        if vi.shape != ref.shape:
            prefix = f"Entry {i} in " if refs_is_tuple else ""
            raise RuntimeError(
                f"{prefix}v has invalid size: should be {ref.shape} but got {vi.shape}."
            )


def _check_requires_grad(tensors: tuple, kind: str, strict: bool) -> None:
    if not strict:
        return
    for i, t in enumerate(tensors):
        if t is None:
            raise RuntimeError(
                f"The output of the user-provided function is independent of input {i}. This "
                "is not allowed in strict mode."
            )
        if not t.requires_grad:
            raise RuntimeError(_NO_GRAD_MESSAGES[kind].format(i=i))


def _grads(outputs: tuple, inputs: tuple, grad_outputs=None, create_graph=False, retain_graph=None):
    """``autograd.grad`` over the outputs that require grad; None per input when none does."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return autograd_grad(
        tuple(o for o, _ in pairs),
        inputs,
        tuple(g for _, g in pairs),
        retain_graph=retain_graph,
        create_graph=create_graph,
        allow_unused=True,
    )


def _zeros_for_none(grads: tuple, refs: tuple, strict: bool, create_graph: bool, stage: str):
    """Replace missing gradients with zeros (or raise in strict mode)."""
    out = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                raise RuntimeError(_STRICT_MESSAGES[stage].format(i=i))
            g = _public.zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(
                f"The {what} of the user-provided function is independent of input {i}. This "
                "is not allowed in strict mode when create_graph=True."
            )
        out.append(g)
    return tuple(out)


def _prepare_v(v, refs: tuple, refs_is_tuple: bool, create_graph: bool, fn_name: str, what: str):
    if v is None:
        if len(refs) != 1 or refs[0].numel() != 1:
            raise RuntimeError(f"The vector v can only be None if {what} with a single element.")
        return None
    _, v = _as_tuple(v, "v", fn_name)
    v = _fresh_inputs(v, create_graph, need_graph=False)
    _validate_v(v, refs, refs_is_tuple)
    return v


_V_FROM_INPUT = "the input to the user-provided function is a single Tensor"
_V_FROM_OUTPUT = "the user-provided function returns a single Tensor"


def _single_scalar_output(outputs: tuple, is_tuple: bool, fn_name: str) -> None:
    if is_tuple or not isinstance(outputs[0], Tensor):
        raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(
            f"The Tensor returned by the function given to {fn_name} should contain a single "
            "element"
        )


# ------------------------------------------------------------------------------ products
@_counted
def vjp(
    func: Callable, inputs: Tensors, v: Tensors | None = None, create_graph=False, strict=False
):
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``."""
    with enable_grad():
        inputs_is_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _fresh_inputs(inputs, create_graph, need_graph=True)
        outputs_is_tuple, outputs = _as_tuple(
            func(*inputs), "outputs of the user-provided function", "vjp"
        )
        _check_requires_grad(outputs, "outputs", strict)
        v = _prepare_v(v, outputs, outputs_is_tuple, create_graph, "vjp", _V_FROM_OUTPUT)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        grads = _grads(outputs, inputs, v, create_graph=create_graph)
        result = _zeros_for_none(grads, inputs, strict, create_graph, "back")
    return (
        _unpack(_finish(outputs, create_graph), outputs_is_tuple),
        _unpack(_finish(result, create_graph), inputs_is_tuple),
    )


def _transpose_graph(func, inputs: tuple, strict: bool, fn_name: str):
    """Run ``func`` and build ``J^T u`` for a dummy ``u`` with history (the double-vjp trick)."""
    outputs_is_tuple, outputs = _as_tuple(
        func(*inputs), "outputs of the user-provided function", fn_name
    )
    _check_requires_grad(outputs, "outputs", strict)
    dummies = tuple(_public.zeros_like(o, requires_grad=True) for o in outputs)
    grad_inputs = _grads(outputs, inputs, dummies, create_graph=True)
    _check_requires_grad(grad_inputs, "grad_inputs", strict)
    return outputs_is_tuple, outputs, dummies, grad_inputs


@_counted
def jvp(
    func: Callable, inputs: Tensors, v: Tensors | None = None, create_graph=False, strict=False
):
    """``(func(inputs), J v)``: the Jacobian-vector product, by the double-vjp trick."""
    with enable_grad():
        inputs_is_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _fresh_inputs(inputs, create_graph, need_graph=True)
        v = _prepare_v(v, inputs, inputs_is_tuple, create_graph, "jvp", _V_FROM_INPUT)
        outputs_is_tuple, outputs, dummies, grad_inputs = _transpose_graph(
            func, inputs, strict, "jvp"
        )
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        grads = _grads(grad_inputs, dummies, v, create_graph=create_graph)
        result = _zeros_for_none(grads, outputs, strict, create_graph, "back_trick")
    return (
        _unpack(_finish(outputs, create_graph), outputs_is_tuple),
        _unpack(_finish(result, create_graph), outputs_is_tuple),
    )


# ------------------------------------------------------------------------------ jacobians
def _basis(ref: Tensor, k: int) -> Tensor:
    """The ``k``-th one-hot tensor shaped like ``ref``."""
    e = _public.zeros(ref.numel(), dtype=ref.dtype, device=ref.device)
    e[k] = 1
    return e.view(ref.shape)


def _stack_rows(rows: list, lead_shape, tail_shape) -> Tensor:
    return _public.stack(rows).view(tuple(lead_shape) + tuple(tail_shape))


def _jacobian_reverse(func, inputs, create_graph: bool, strict: bool):
    with enable_grad():
        inputs_is_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _fresh_inputs(inputs, create_graph, need_graph=True)
        outputs_is_tuple, outputs = _as_tuple(
            func(*inputs), "outputs of the user-provided function", "jacobian"
        )
        _check_requires_grad(outputs, "outputs", strict)
        jacobian = []
        for i, out in enumerate(outputs):
            rows: list[list] = [[] for _ in inputs]
            for k in range(out.numel()):
                vj = _grads((out,), inputs, (_basis(out, k),), create_graph, retain_graph=True)
                for j, (g, inp) in enumerate(zip(vj, inputs)):
                    if g is None:
                        if strict:
                            raise RuntimeError(
                                f"Output {i} of the user-provided function is independent of "
                                f"input {j}. This is not allowed in strict mode."
                            )
                        g = _public.zeros_like(inp)
                    elif strict and create_graph and not g.requires_grad:
                        raise RuntimeError(
                            f"The jacobian of the user-provided function is independent of "
                            f"input {i}. This is not allowed in strict mode when "
                            "create_graph=True."
                        )
                    rows[j].append(g)
            jacobian.append(
                tuple(
                    _stack_rows(r, out.shape, inp.shape)
                    if r
                    else _public.zeros(tuple(out.shape) + tuple(inp.shape), dtype=inp.dtype)
                    for r, inp in zip(rows, inputs)
                )
            )
        jacobian = _finish(tuple(jacobian), create_graph)
    return _unpack(jacobian, (outputs_is_tuple, inputs_is_tuple))


def _jacobian_forward(func, inputs, strict: bool, vectorize: bool):
    """Column by column: one ``J e_k`` per input element, sharing one ``J^T u`` graph.

    PyTorch only has a vectorized forward-mode jacobian, so ``vectorize=False`` is refused
    as there, although this loop would not need it."""
    if strict:
        raise RuntimeError(
            'kiln.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` are '
            'not supported together (yet). Please either set `strict=False` or `strategy="reverse-'
            'mode"`.'
        )
    inputs_is_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
    if not vectorize:
        raise NotImplementedError(
            "Computing Jacobian using forward-AD or forward-over-reverse Hessian is only "
            "implemented for `vectorize=True`."
        )
    with enable_grad():
        inputs = _fresh_inputs(inputs, False, need_graph=True)
        outputs_is_tuple, outputs, dummies, grad_inputs = _transpose_graph(
            func, inputs, False, "jacobian"
        )
        columns: list[list[list]] = [[[] for _ in inputs] for _ in outputs]
        for j, inp in enumerate(inputs):
            for k in range(inp.numel()):
                v = tuple(
                    _basis(t, k) if n == j else _public.zeros_like(t) for n, t in enumerate(inputs)
                )
                jv = _grads(grad_inputs, dummies, v, retain_graph=True)
                for i, (col, out) in enumerate(zip(jv, outputs)):
                    columns[i][j].append(_public.zeros_like(out) if col is None else col.detach())
    jacobian = tuple(
        tuple(
            _public.stack(cols, dim=out.ndim).view(tuple(out.shape) + tuple(inp.shape))
            if cols
            else _public.zeros(tuple(out.shape) + tuple(inp.shape), dtype=out.dtype)
            for cols, inp in zip(columns[i], inputs)
        )
        for i, out in enumerate(outputs)
    )
    return _unpack(jacobian, (outputs_is_tuple, inputs_is_tuple))


@_counted
def jacobian(
    func: Callable,
    inputs: Tensors,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
):
    """The Jacobian of ``func`` at ``inputs``: ``jac[i][j]`` has shape out_i.shape + in_j.shape.

    ``strategy="forward-mode"`` builds columns (cheaper when outputs outnumber inputs);
    ``vectorize`` is accepted for compatibility and has no effect.
    """
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
            'function has more outputs than inputs, "forward-mode" tends to be more performant. '
            'Otherwise, prefer to use "reverse-mode".'
        )
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError(
                "kiln.autograd.functional.jacobian: `create_graph=True` and "
                '`strategy="forward-mode"` are not supported together (yet). Please either set '
                '`create_graph=False` or `strategy="reverse-mode"`.'
            )
        return _jacobian_forward(func, inputs, strict, vectorize)
    if vectorize and strict:
        raise RuntimeError(
            "kiln.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not "
            "supported together. Please either set `strict=False` or `vectorize=False`."
        )
    return _jacobian_reverse(func, inputs, create_graph, strict)


@_counted
def hessian(
    func: Callable,
    inputs: Tensors,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
):
    """The Hessian of a scalar function: the Jacobian of its gradient."""
    inputs_is_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def scalar_func(*inp):
        out = func(*inp)
        is_tuple, outs = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_requires_grad(outs, "outputs", strict)
        _single_scalar_output(outs, is_tuple, "hessian")
        return out.squeeze()

    def gradient(*inp):
        jac = jacobian(scalar_func, inp, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        return jac

    result = jacobian(
        gradient,
        inputs,
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )
    return _unpack(result, (inputs_is_tuple, inputs_is_tuple))


def _first_gradient(func, inputs, v, create_graph: bool, strict: bool, fn_name: str):
    """Shared start of vhp/hvp: run ``func``, check it is scalar, take its gradient with history."""
    inputs_is_tuple, inputs = _as_tuple(inputs, "inputs", fn_name)
    inputs = _fresh_inputs(inputs, create_graph, need_graph=True)
    v = _prepare_v(v, inputs, inputs_is_tuple, create_graph, fn_name, _V_FROM_INPUT)
    outputs_is_tuple, outputs = _as_tuple(
        func(*inputs), "outputs of the user-provided function", fn_name
    )
    _check_requires_grad(outputs, "outputs", strict)
    _single_scalar_output(outputs, outputs_is_tuple, fn_name)
    jac = _grads(outputs, inputs, create_graph=True)
    _check_requires_grad(jac, "jacobian", strict)
    return inputs_is_tuple, inputs, v, outputs_is_tuple, outputs, jac


@_counted
def vhp(
    func: Callable, inputs: Tensors, v: Tensors | None = None, create_graph=False, strict=False
):
    """``(func(inputs), v^T H)`` for a scalar ``func``."""
    with enable_grad():
        inputs_is_tuple, inputs, v, outputs_is_tuple, outputs, jac = _first_gradient(
            func, inputs, v, create_graph, strict, "vhp"
        )
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        grads = _grads(jac, inputs, v, create_graph=create_graph)
        result = _zeros_for_none(grads, inputs, strict, create_graph, "double_back")
    return (
        _unpack(_finish(outputs, create_graph), outputs_is_tuple),
        _unpack(_finish(result, create_graph), inputs_is_tuple),
    )


@_counted
def hvp(
    func: Callable, inputs: Tensors, v: Tensors | None = None, create_graph=False, strict=False
):
    """``(func(inputs), H v)`` for a scalar ``func``, by the double-vjp trick on the gradient."""
    with enable_grad():
        inputs_is_tuple, inputs, v, outputs_is_tuple, outputs, jac = _first_gradient(
            func, inputs, v, create_graph, strict, "hvp"
        )
        dummies = tuple(_public.zeros_like(t, requires_grad=True) for t in inputs)
        double_back = _grads(jac, inputs, dummies, create_graph=True)
        _check_requires_grad(jac, "hessian", strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        grads = _grads(double_back, dummies, v, create_graph=create_graph)
        result = _zeros_for_none(grads, inputs, strict, create_graph, "double_back_trick")
    return (
        _unpack(_finish(outputs, create_graph), outputs_is_tuple),
        _unpack(_finish(result, create_graph), inputs_is_tuple),
    )
