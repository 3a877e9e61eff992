"""``kiln.func`` gradient transforms: grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian.

PyTorch's functorch wraps tensors per transform "level". kiln emulates levels on its tape: a
transform call makes its own differentiable copies of the inputs (leaves tagged with the call's
id, or history-keeping views when the caller's autograd already tracks the input), runs the
function with grad mode on, and differentiates with ``autograd.grad``. A result keeps autograd
history only if grad mode was on at the call and its graph reaches a leaf that is not one of
this call's own (an input or closed-over tensor tracked by the caller or an enclosing
transform); otherwise it is detached, just as functorch unwraps it. So transforms nest
(``jacrev(jacrev(f))``, ``vmap(grad(f))``) and compose with ordinary ``backward``.
Forward mode (``jvp``, ``jacfwd``) is reverse mode underneath: ``jvp`` uses the double-vjp
trick and ``jacfwd`` builds the same Jacobian as ``jacrev`` (in the output's dtype, as a
forward tangent would have).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

from ..autograd.engine import grad as autograd_grad
from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ..autograd.graph import AccumulateGrad
from ..ops import public
from ..ops.public import get_rng_state, zeros, zeros_like
from ..runtime.tensor import Tensor
from ..utils.pytree import tree_flatten, tree_unflatten

__all__ = [
    "grad",
    "grad_and_value",
    "vjp",
    "jvp",
    "jacrev",
    "jacfwd",
    "hessian",
    "linearize",
    "functionalize",
]

_call_ids = itertools.count(1)
# ids of the transform calls now running, innermost last
_live: list[int] = []


def tree_map(fn, value):
    leaves, spec = tree_flatten(value)
    return tree_unflatten([fn(x) for x in leaves], spec)


class _Level:
    """One transform call: its own input leaves, and whether the caller's autograd was on."""

    def __init__(self) -> None:
        self.id = next(_call_ids)
        self.outer_grad = is_grad_enabled()
        self._grad_mode = None

    def __enter__(self) -> _Level:
        _live.append(self.id)
        self._grad_mode = enable_grad()
        self._grad_mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._grad_mode.__exit__(*exc)
        _live.remove(self.id)

    def lift(self, t) -> Tensor:
        """A differentiable stand-in for input ``t`` at this level."""
        if not isinstance(t, Tensor):
            raise ValueError(f"Thing passed to transform API must be Tensor, got {type(t)}")
        if self.outer_grad and t.requires_grad:
            return t.view_as(t)
        leaf = t.detach().requires_grad_()
        leaf.__dict__["_func_level"] = self.id
        return leaf

    def own_leaf(self, t: Tensor) -> Tensor:
        """A helper leaf (a dummy cotangent) that belongs to this level."""
        leaf = t.detach().requires_grad_()
        leaf.__dict__["_func_level"] = self.id
        return leaf

    def tracked(self, tensors) -> bool:
        """True when the caller's autograd should see through any of ``tensors``."""
        if not self.outer_grad:
            return False
        memo: dict = {}
        return any(self._reaches_outer(t, memo) for t in tensors if isinstance(t, Tensor))

    def lower(self, value):
        """Results as the caller sees them: detached unless tracked by the caller."""
        if not isinstance(value, Tensor):
            return value
        if value.requires_grad and not self.tracked((value,)):
            return value.detach()
        return value

    def _outer_leaf(self, leaf: Tensor) -> bool:
        tag = leaf.__dict__.get("_func_level")
        return tag is None or (tag != self.id and tag in _live)

    def _reaches_outer(self, t: Tensor, memo: dict) -> bool:
        if not t.requires_grad:
            return False
        root = t.grad_fn
        if root is None:
            return self._outer_leaf(t)
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in memo:
                continue
            if isinstance(node, AccumulateGrad):
                memo[node] = self._outer_leaf(node.variable)
            elif expanded:
                memo[node] = any(memo.get(n, False) for n, _ in node.next_functions)
            else:
                stack.append((node, True))
                stack.extend((n, False) for n, _ in node.next_functions if n is not None)
        return memo[root]


# ------------------------------------------------------------------------------ argnums
def _wrap_argnum(argnum, num_args: int) -> int:
    if not isinstance(argnum, int):
        raise RuntimeError(f"argnum must be int, got: {type(argnum)}")
    if -num_args <= argnum < num_args:
        return argnum % num_args
    raise RuntimeError(f"Got argnum={argnum}, but only {num_args} positional inputs")


def _normalize_argnums(argnums, num_args: int):
    if isinstance(argnums, int):
        return _wrap_argnum(argnums, num_args)
    if not isinstance(argnums, tuple):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    if len(argnums) == 0:
        raise RuntimeError("argnums must be non-empty")
    if len(set(argnums)) != len(argnums):
        raise RuntimeError(f"argnums elements must be unique, got {argnums}")
    return tuple(_wrap_argnum(a, num_args) for a in argnums)


def _select_args(args: tuple, argnums):
    """The differentiated arguments: one argument (int argnums) or a tuple of them."""
    if isinstance(argnums, int):
        return args[argnums]
    return tuple(args[i] for i in argnums)


def _replace_args(args: tuple, new, argnums) -> tuple:
    if isinstance(argnums, int):
        return tuple(new if i == argnums else a for i, a in enumerate(args))
    table = dict(zip(argnums, new))
    return tuple(table.get(i, a) for i, a in enumerate(args))


def _lift_args(level: _Level, args: tuple, argnums):
    """(new args, flat lifted tensors, spec of the differentiated part)."""
    argnums = _normalize_argnums(argnums, len(args))
    flat, spec = tree_flatten(_select_args(args, argnums))
    lifted = [level.lift(t) for t in flat]
    return _replace_args(args, tree_unflatten(lifted, spec), argnums), lifted, spec


def _split_aux(output, has_aux: bool, api: str):
    if not has_aux:
        return output, None
    if not (isinstance(output, tuple) and len(output) == 2):
        raise RuntimeError(
            f"{api}: output of function f should be a tuple: (output, aux) if has_aux is True"
        )
    return output


def _check_tensor_outputs(flat: list, api: str) -> None:
    if len(flat) < 1 or (len(flat) == 1 and flat[0] is None):
        raise RuntimeError(
            f"{api}: Expected f to be a function that has non-empty output (got output = {flat})"
        )
    for o in flat:
        if not isinstance(o, Tensor):
            raise RuntimeError(
                f"{api}: expected f(*primals) to return only tensors, got unsupported type "
                f"{type(o)}"
            )


def _check_float_outputs(flat: list) -> None:
    """Reverse mode needs a floating cotangent per output (PyTorch words it as vjp's error)."""
    for o in flat:
        if not (o.is_floating_point() or o.is_complex()):
            raise RuntimeError(
                "vjp(f, ...): All outputs of f must be floating-point or complex Tensors, got "
                f"Tensor with dtype {o.dtype}"
            )


def _grads(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False):
    """Gradients of the outputs that require grad; zeros where an input is unused."""
    grad_outputs = [None] * len(outputs) if grad_outputs is None else list(grad_outputs)
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not pairs:
        return [zeros_like(t) for t in inputs]
    grads = autograd_grad(
        [o for o, _ in pairs],
        list(inputs),
        [g for _, g in pairs],
        retain_graph=retain_graph,
        create_graph=create_graph,
        allow_unused=True,
    )
    return [zeros_like(t) if g is None else g for g, t in zip(grads, inputs)]


# ------------------------------------------------------------------------------ grad
def grad_and_value(func: Callable, argnums: int | tuple = 0, has_aux: bool = False) -> Callable:
    """``grad_and_value(f)(*args)`` -> (gradient of the scalar ``f`` w.r.t. ``args[argnums]``,
    value), or ``(grad, (value, aux))`` with ``has_aux``."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        api = "grad_and_value(f)(*args)"
        with _Level() as level:
            new_args, lifted, spec = _lift_args(level, args, argnums)
            output, aux = _split_aux(func(*new_args, **kwargs), has_aux, api)
            if not isinstance(output, Tensor):
                raise RuntimeError(
                    f"{api}: Expected f(*args) to return a Tensor, got {type(output)}"
                )
            if output.dim() != 0:
                raise RuntimeError(
                    f"{api}: Expected f(*args) to return a scalar Tensor, got tensor with "
                    f"{output.dim()} dims. Maybe you wanted to use the vjp or jacrev APIs instead?"
                )
            create = level.tracked((output,))
            grads = _grads([output], lifted, create_graph=create)
            grads = tree_unflatten([level.lower(g) for g in grads], spec)
            output = level.lower(output)
            if has_aux:
                return grads, (output, tree_map(level.lower, aux))
            return grads, output

    return wrapper


def grad(func: Callable, argnums: int | tuple = 0, has_aux: bool = False) -> Callable:
    """``grad(f)(*args)``: the gradient of scalar ``f`` w.r.t. ``args[argnums]`` (and aux)."""
    inner = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        grads, value = inner(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapper


# ------------------------------------------------------------------------------ vjp / jvp
def vjp(func: Callable, *primals, has_aux: bool = False):
    """``(f(*primals), vjp_fn[, aux])``; ``vjp_fn(cotangents)`` returns one gradient per primal."""
    api = "vjp(f, *primals)"
    level = _Level()
    with level:
        flat_primals, primals_spec = tree_flatten(primals)
        lifted = [level.lift(t) for t in flat_primals]
        output, aux = _split_aux(func(*tree_unflatten(lifted, primals_spec)), has_aux, api)
        flat_out, out_spec = tree_flatten(output)
        _check_tensor_outputs(flat_out, api)
        _check_float_outputs(flat_out)
        results = tree_unflatten([level.lower(o) for o in flat_out], out_spec)
        aux = tree_map(level.lower, aux)

    def vjp_fn(cotangents, retain_graph: bool = True, create_graph: bool | None = None):
        if create_graph is None:
            create_graph = is_grad_enabled()
        flat_ct, ct_spec = tree_flatten(cotangents)
        if ct_spec.key() != out_spec.key():
            raise RuntimeError(
                "Expected pytree structure of cotangents to be the same as pytree structure of "
                f"outputs to the function. cotangents: {ct_spec}, primal output: {out_spec}"
            )
        with enable_grad():
            _live.append(level.id)
            try:
                create = create_graph and (
                    level.tracked(flat_out)
                    or any(isinstance(c, Tensor) and c.requires_grad for c in flat_ct)
                )
                grads = _grads(flat_out, lifted, flat_ct, retain_graph, create)
                grads = [g if create and level.tracked((g,)) else g.detach() for g in grads]
            finally:
                _live.remove(level.id)
        return tree_unflatten(grads, primals_spec)

    if has_aux:
        return results, vjp_fn, aux
    return results, vjp_fn


_JVP = "jvp(f, primals, tangents)"


def jvp(func: Callable, primals: tuple, tangents, *, strict: bool = False, has_aux: bool = False):
    """``(f(*primals), J @ tangents[, aux])``, computed with the double-vjp trick."""
    if not isinstance(primals, tuple):
        raise RuntimeError(
            f"{_JVP}: Expected primals to be a tuple. E.g. it should be valid to call f(*primals)."
        )
    flat_primals, primals_spec = tree_flatten(primals)
    flat_tangents, tangents_spec = tree_flatten(tangents)
    if primals_spec.key() != tangents_spec.key():
        raise RuntimeError(
            f"{_JVP}: Expected primals and tangents to have the same python structure. For "
            "example, if primals is a tuple of 3 tensors, tangents also must be. Got primals "
            f"with structure {primals_spec} and tangents with structure {tangents_spec}"
        )
    for name, flat in (("primals", flat_primals), ("tangents", flat_tangents)):
        if not flat:
            raise RuntimeError(f"{_JVP}: Expected {name} to contain at least one Tensor.")
        for t in flat:
            if not isinstance(t, Tensor):
                raise RuntimeError(
                    f"{_JVP}: Expected {name} to only contain Tensors, got {type(t)}"
                )
    for p, t in zip(flat_primals, flat_tangents):
        if p.shape != t.shape:
            raise RuntimeError(
                "Trying to set a forward gradient that has a different size than that of the "
                f"original Tensor, this is not supported. Tensor is of size {list(p.shape)} "
                f"while the given forward gradient is of size {list(t.shape)}."
            )
    with _Level() as level:
        lifted = [level.lift(p) for p in flat_primals]
        output, aux = _split_aux(func(*tree_unflatten(lifted, primals_spec)), has_aux, _JVP)
        flat_out, out_spec = tree_flatten(output)
        _check_tensor_outputs(flat_out, _JVP)
        tangents_out = _double_vjp(level, flat_out, lifted, flat_tangents, strict)
        out = tree_unflatten([level.lower(o) for o in flat_out], out_spec)
        tangents_out = tree_unflatten(tangents_out, out_spec)
        if has_aux:
            return out, tangents_out, tree_map(level.lower, aux)
        return out, tangents_out


def _double_vjp(level: _Level, outputs: list, inputs: list, tangents: list, strict: bool) -> list:
    """``J v`` per output: differentiate ``J^T u`` (built for dummy ``u``) with respect to ``u``."""
    live = [i for i, o in enumerate(outputs) if o.requires_grad]
    dummies = [level.own_leaf(zeros_like(outputs[i])) for i in live]
    result: list = [None] * len(outputs)
    if live:
        transposed = autograd_grad(
            [outputs[i] for i in live], inputs, dummies, create_graph=True, allow_unused=True
        )
        pairs = [(g, v) for g, v in zip(transposed, tangents) if g is not None and g.requires_grad]
        if pairs:
            create = level.tracked(outputs) or any(t.requires_grad for t in tangents)
            products = autograd_grad(
                [g for g, _ in pairs],
                dummies,
                [v for _, v in pairs],
                create_graph=create,
                allow_unused=True,
            )
            for i, p in zip(live, products):
                result[i] = p
    for i, p in enumerate(result):
        if p is None:
            if strict:
                raise RuntimeError(
                    "jvp(f, primals, tangents, strict=True): The output of f is independent of "
                    "the inputs. This is not allowed with strict=True."
                )
            result[i] = zeros_like(outputs[i])
        else:
            result[i] = level.lower(p)
    return result


def linearize(func: Callable, *primals):
    """``(f(*primals), jvp_fn)``: ``jvp_fn(*tangents)`` is the JVP at ``primals``."""
    output = func(*primals)
    _, primals_spec = tree_flatten(primals)

    def jvp_fn(*tangents):
        _, tangents_spec = tree_flatten(tangents)
        if tangents_spec.key() != primals_spec.key():
            raise RuntimeError(
                f"Expected the tangents {tangents_spec} to have the same argspec as the primals "
                f"{primals_spec}"
            )
        return jvp(func, primals, tangents)[1]

    return output, jvp_fn


# ------------------------------------------------------------------------------ jacobians
def _check_randomness(randomness: str) -> None:
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(
            "Only allowed values for randomness are 'error', 'different', or 'same'. Got "
            f"{randomness}"
        )


def _rng_state():
    return get_rng_state().numpy().tobytes()


def _jacobian(func, argnums, has_aux: bool, api: str, randomness: str | None) -> Callable:
    """Reverse-mode rows for both APIs; ``jacfwd`` blocks take the output's dtype (a forward
    tangent has it) where ``jacrev`` blocks take the input's (a gradient has it)."""
    forward = api == "jacfwd"

    @functools.wraps(func)
    def wrapper(*args):
        rng_before = _rng_state() if randomness == "error" else None
        with _Level() as level:
            new_args, lifted, spec = _lift_args(level, args, argnums)
            output, aux = _split_aux(func(*new_args), has_aux, api)
            if rng_before is not None and _rng_state() != rng_before:
                raise RuntimeError(
                    "vmap: called random operation while in randomness error mode. Please "
                    "either use the 'same' or 'different' randomness flags on vmap or perform "
                    "the randomness operation out of vmap"
                )
            flat_out, out_spec = tree_flatten(output)
            _check_tensor_outputs(flat_out, f"{api}(f, ...)(*args)")
            if not forward:
                _check_float_outputs(flat_out)
            create = level.tracked(flat_out)
            per_output = []
            for out in flat_out:
                rows: list[list] = [[] for _ in lifted]
                for k in range(out.numel()):
                    basis = zeros(out.numel(), dtype=out.dtype, device=out.device)
                    basis[k] = 1
                    grads = _grads([out], lifted, [basis.view(out.shape)], True, create)
                    for j, g in enumerate(grads):
                        rows[j].append(g)
                blocks = [
                    level.lower(_stack_rows(r, out, inp) if r else _empty_block(out, inp))
                    for r, inp in zip(rows, lifted)
                ]
                if forward:
                    blocks = [b.to(out.dtype) for b in blocks]
                per_output.append(tree_unflatten(blocks, spec))
            jac = tree_unflatten(per_output, out_spec)
            if has_aux:
                return jac, tree_map(level.lower, aux)
            return jac

    return wrapper


def _stack_rows(rows: list, out: Tensor, inp: Tensor) -> Tensor:
    return public.stack(rows).view(tuple(out.shape) + tuple(inp.shape))


def _empty_block(out: Tensor, inp: Tensor) -> Tensor:
    return zeros(tuple(out.shape) + tuple(inp.shape), dtype=inp.dtype, device=inp.device)


def jacrev(
    func: Callable,
    argnums: int | tuple = 0,
    *,
    has_aux: bool = False,
    chunk_size: int | None = None,
    _preallocate_and_copy: bool = False,
) -> Callable:
    """The Jacobian of ``func`` w.r.t. ``args[argnums]`` by reverse mode, one row per output
    element: each output leaf maps to the structure of the differentiated arguments, with
    blocks of shape ``out.shape + arg.shape``. ``chunk_size`` only bounds batching in PyTorch;
    rows are computed one at a time here."""
    if not (chunk_size is None or chunk_size > 0):
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")
    return _jacobian(func, argnums, has_aux, "jacrev", None)


def jacfwd(
    func: Callable, argnums: int | tuple = 0, has_aux: bool = False, *, randomness: str = "error"
) -> Callable:
    """Same values as ``jacrev`` (built on reverse mode too) but in each output's dtype; with
    ``randomness="error"`` a random op inside ``func`` raises, as under PyTorch's vmap over the
    basis."""
    _check_randomness(randomness)
    return _jacobian(func, argnums, has_aux, "jacfwd", randomness)


def hessian(func: Callable, argnums: int | tuple = 0) -> Callable:
    """``jacfwd(jacrev(func, argnums), argnums)``."""
    return jacfwd(jacrev(func, argnums), argnums)


def functionalize(func: Callable, *, remove: str = "mutations") -> Callable:
    """``func`` with PyTorch's argument check. Eager kiln runs in-place ops for real, which gives
    the same outputs and input mutations that functionalization promises; graph capture
    (``kiln.compile``) functionalizes on its own."""
    if remove not in ("mutations", "mutations_and_views"):
        raise RuntimeError(
            f"functionalize(f, remove='mutations'): received invalid argument for remove={remove}."
            " Valid options are:\n     remove='mutations': all inplace and out= operators will be "
            "removed from the program, and replaced with their out-of-place equivalents.\n     "
            "remove='mutations_and_views': In addition to the above, all aliasing operators "
            "{view} will be replaced with their non-aliasing counterparts, {view}_copy.\n"
        )

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapped
