"""Forward-mode AD through the dispatcher: the tangents of an op's results.

While a dual level is open (``autograd.forward_ad``), ``dispatch`` sends every op call here.
A call whose inputs carry no tangent runs as usual; a composite runs its decomposition, whose
parts carry the tangents. Otherwise the op runs, and its results get ``J . t``:

- a view op: the same view of the input's tangent (so the tangent of a view is a view of its
  base's tangent, and an in-place write through either updates both);
- an op with a forward rule (``Op.jvp``, ``forward_rules``): the rule;
- any other op: the double-vjp trick on its ``derivative``. The op runs again on stand-ins of
  its inputs that record autograd history; ``v = J^T g`` for a dummy cotangent ``g`` is linear
  in ``g``, so the gradient of ``<v, t>`` with respect to ``g`` is ``J t``. An elementwise
  op's real Jacobian is diagonal (``J t = J^T t``): one vjp at the tangent does.

An in-place op's tangent is the out-of-place op's, computed before the write (the rules read
the old value) and then written into the existing tangent, so that views of the tangent see
it. Tangent computations run with the level suspended in their thread (no tangents of
tangents) and, where backward AD must see them (a primal or a tangent requires grad), under
grad mode.
"""

from __future__ import annotations

from ...autograd.engine import grad as autograd_grad
from ...autograd.forward_ad import dual_suspended, set_tangent, suspended_dual, tangent_of
from ...runtime.state import per_thread
from ...runtime.tensor import Tensor
from . import registry

__all__ = ["dual_dispatch"]


def dual_dispatch(op, args: tuple, dispatch):
    """Run ``op`` (through ``dispatch`` below the forward-AD check) and give its results
    their tangents."""
    if dual_suspended():
        return dispatch(op, args, True, True)
    tangents = _input_tangents(op, args)
    if tangents is None or not op.differentiable or op.kernel is None:
        return dispatch(op, args, True, True)  # a composite's parts carry the tangents
    if op.inplace:
        return _inplace(op, args, tangents, dispatch)
    seeded = op.nondeterministic_seeded
    rng = _rng_state() if seeded else None
    out = dispatch(op, args, True, True)
    with suspended_dual():
        result = _result_tangents(op, args, tangents, out, rng, dispatch)
    _attach(out, result)
    return out


def _input_tangents(op, args: tuple) -> tuple | None:
    """The tangents lined up with ``args`` (lists for tensor lists), or None if none has one."""
    found = False
    tangents = [None] * len(args)
    for p in op.tensor_positions:
        a = args[p]
        if isinstance(a, Tensor):
            t = tangent_of(a)
            if t is not None:
                tangents[p] = t
                found = True
    for p in op.list_positions:
        row = [tangent_of(a) if isinstance(a, Tensor) else None for a in args[p]]
        if any(t is not None for t in row):
            tangents[p] = row
            found = True
    return tuple(tangents) if found else None


def _result_tangents(op, args: tuple, tangents: tuple, out, rng, dispatch):
    if op.is_view:
        if tangents[0] is None:
            return None
        return dispatch(op, (tangents[0],) + tuple(args[1:]))
    if op.jvp is not None:
        result = op.jvp(args, tangents, out)
        if result is not NotImplemented:
            return result
    return _double_vjp(op, args, tangents, out, rng, dispatch)


def _attach(out, result) -> None:
    if isinstance(out, Tensor):
        if result is not None and out._dtype.category >= 2:
            set_tangent(out, _shaped_like(result, out))
        return
    if isinstance(out, (tuple, list)):
        for o, r in zip(out, result if result is not None else [None] * len(out)):
            if isinstance(o, Tensor) and r is not None and o._dtype.category >= 2:
                set_tangent(o, _shaped_like(r, o))


def _shaped_like(tangent: Tensor, out: Tensor) -> Tensor:
    """A tangent of ``out``'s shape that in-place writes can update: a rule's broadcast
    operand (``x + bias``) materialized."""
    if tangent._shape != out._shape:
        with suspended_dual():
            return tangent.expand(out.shape).contiguous()
    return tangent


def _zero_tangent(t: Tensor) -> Tensor:
    """A zero tangent for ``t`` (where an input without one meets one with)."""
    from ..public import zeros_like

    return zeros_like(t)


def _inplace(op, args: tuple, tangents: tuple, dispatch):
    """``op`` writes into ``args[0]``: its new tangent is the out-of-place op's on the old
    values, written into ``args[0]``'s tangent (or its base's, made zero first) after the op."""
    functional = op.functional
    self = args[0]
    if self._dtype.category < 2:  # an integer or bool tensor takes no tangent
        return dispatch(op, args, True, True)
    if op.jvp is not None:  # a rule giving the written tensor's new tangent (copy_)
        with suspended_dual():
            new = op.jvp(args, tangents, None)
    elif functional is None:
        raise NotImplementedError(f"forward AD: no tangent rule for the in-place op {op.name}")
    elif functional.kernel is None:  # a composite: its parts give its value the tangent
        new = tangent_of(dispatch(functional, args))
    else:
        with suspended_dual():
            value = dispatch(functional, args, True, True)
            new = _result_tangents(functional, args, tangents, value, None, dispatch)
    out = dispatch(op, args, True, True)
    with suspended_dual():
        _write_tangent(self, new)
    return out


def _write_tangent(self: Tensor, new: Tensor | None) -> None:
    existing = tangent_of(self)
    if existing is not None:
        if new is None:
            existing.zero_()
        else:
            existing.copy_(new)
        return
    if new is None:
        return
    base = self._base
    if base is None:
        set_tangent(self, _shaped_like(new, self).clone())
        return
    from .dispatch import view_replay

    base_tangent = _zero_tangent(base)
    set_tangent(base, base_tangent)
    view_tangent = view_replay(self)(base_tangent)
    view_tangent.copy_(new)
    set_tangent(self, view_tangent)


def _rng_state():
    from ..public import get_rng_state

    return get_rng_state()


def _set_rng_state(state) -> None:
    from ..public import set_rng_state

    set_rng_state(state)


def _stand_in(a: Tensor, outer_grad: bool) -> Tensor:
    """A copy of input ``a`` that records history: through ``a``'s own where backward AD
    tracks it, so the tangent's history reaches ``a``."""
    if outer_grad and a._requires_grad:
        return registry.OPS["alias"](a)
    return a.detach().requires_grad_()


def _double_vjp(op, args: tuple, tangents: tuple, out, rng, dispatch):
    """``J . t`` from ``op``'s derivative: the gradient of ``<J^T g, t>`` with respect to ``g``."""
    state = per_thread.state
    outer_grad = state.grad_enabled
    lifted = list(args)
    inputs, input_tangents = [], []
    for p, t in enumerate(tangents):
        if t is None:
            continue
        if isinstance(t, list):
            row = list(args[p])
            for j, tj in enumerate(t):
                if tj is not None:
                    row[j] = _stand_in(row[j], outer_grad)
                    inputs.append(row[j])
                    input_tangents.append(tj)
            lifted[p] = row
        else:
            lifted[p] = _stand_in(args[p], outer_grad)
            inputs.append(lifted[p])
            input_tangents.append(t)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    prev = state.grad_enabled
    state.grad_enabled = True
    try:
        if rng is not None:
            after = _rng_state()
            _set_rng_state(rng)
        again = dispatch(op, tuple(lifted))
        if rng is not None:
            _set_rng_state(after)
        again = list(again) if isinstance(again, (tuple, list)) else [again]
        wanted = [
            i
            for i, o in enumerate(again)
            if isinstance(o, Tensor) and o._dtype.category >= 2 and o._requires_grad
        ]
        if not wanted:
            return _zero_results(outs)
        keep_graph = prev and (
            any(t._requires_grad for t in input_tangents) or _any_requires_grad(op, args)
        )
        if _diagonal(op, again, inputs, input_tangents):
            jvps = [_diagonal_jvp(again[0], inputs, input_tangents, keep_graph)]
        else:
            jvps = _jvp_by_double_vjp(op, again, wanted, inputs, input_tangents, keep_graph)
    finally:
        state.grad_enabled = prev
    result = [None] * len(outs)
    for i, j in zip(wanted, jvps):
        if j is None:
            j = _zero_tangent(outs[i])
        result[i] = j if keep_graph else j.detach()
    for i, o in enumerate(outs):
        if result[i] is None and isinstance(o, Tensor) and o._dtype.category >= 2:
            result[i] = _zero_tangent(o)
    return result if isinstance(out, (tuple, list)) else result[0]


def _jvp_by_double_vjp(op, again: list, wanted: list, inputs: list, tangents: list, keep_graph):
    """The gradient of ``<J^T g, t>`` with respect to dummy cotangents ``g``: ``J t``."""
    from ..public import ones_like

    # (ones, not zeros: a derivative may split ``g`` by sign, linear only away from g = 0)
    cotangents = [ones_like(again[i]).requires_grad_() for i in wanted]
    vjps = autograd_grad(
        [again[i] for i in wanted], inputs, cotangents, create_graph=True, allow_unused=True
    )
    for v in vjps:
        if v is not None and not v._requires_grad and bool(v.any()):
            # J^T g is linear in g: one that is not zero yet has no history in g came from a
            # derivative autograd cannot differentiate, and J t would silently be zero
            raise NotImplementedError(
                f"forward AD: the derivative of '{op.name}' is not differentiable, so its "
                "tangent cannot be computed from it; give the op a forward rule (Op.jvp)"
            )
    pairs = [
        (v, t.to(v.dtype)) for v, t in zip(vjps, tangents) if v is not None and v._requires_grad
    ]
    if not pairs:
        return [None] * len(wanted)
    return autograd_grad(
        [v for v, _ in pairs],
        cotangents,
        [t for _, t in pairs],
        create_graph=keep_graph,
        allow_unused=True,
    )


def _diagonal(op, again: list, inputs: list, tangents: list) -> bool:
    """Whether each input's Jacobian is diagonal, and real, so that ``J t = J^T t``: an
    elementwise op's one real result, of the shape of every input with a tangent."""
    if op.kind != "pointwise" or len(again) != 1 or again[0]._dtype.category != 2:
        return False
    shape = again[0]._shape
    return all(x._shape == shape and x._dtype.category == 2 for x in inputs) and all(
        t._dtype.category == 2 for t in tangents
    )


def _diagonal_jvp(out: Tensor, inputs: list, tangents: list, keep_graph: bool):
    """``J t`` of an elementwise op as the sum of its vjps at the tangents: one backward pass
    per input with a tangent instead of the double-vjp's two."""
    total = None
    for k, (x, t) in enumerate(zip(inputs, tangents)):
        (part,) = autograd_grad(
            [out],
            [x],
            [t.to(out.dtype)],
            retain_graph=keep_graph or k < len(inputs) - 1,
            create_graph=keep_graph,
            allow_unused=True,
        )
        if part is not None:  # (in the input's dtype: a cast's tangent is the result's)
            part = part.to(out.dtype)
            total = part if total is None else total + part
    return total


def _any_requires_grad(op, args: tuple) -> bool:
    for p in op.tensor_positions:
        if isinstance(args[p], Tensor) and args[p]._requires_grad:
            return True
    return any(
        isinstance(a, Tensor) and a._requires_grad for p in op.list_positions for a in args[p]
    )


def _zero_results(outs: list):
    result = [
        _zero_tangent(o) if isinstance(o, Tensor) and o._dtype.category >= 2 else None for o in outs
    ]
    return result if len(outs) > 1 else result[0]
