"""``einsum``: a numpy kernel, a derivative that is an einsum of the other operands, and a
decomposition that contracts operands pairwise with ``bmm``.

Subscripts follow PyTorch: letters a-zA-Z, ``...`` for broadcast dims, the implicit output in
alphabetical order, size-1 dims broadcasting; ``kiln.einsum`` also takes the sublist form.
"""

from __future__ import annotations

import functools
import math
import string

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.state import per_thread
from ..core.common import (
    Tensor,
    TensorList,
    broadcast_shapes,
    compute_np_dtype,
    fake,
    tensor_sequence,
    wrap,
)
from ..core.registry import OPS, defop, torch_function
from ..reductions.reduce import torch_type_name
from .matmul import bmm

__all__: list[str] = []

_LETTERS = string.ascii_uppercase + string.ascii_lowercase


def _einsum_terms(equation: str, ndims) -> tuple[list[str], str]:
    """Explicit subscripts per operand and for the output, each ``...`` replaced by letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    for i, ch in enumerate(eq):
        if not (ch in _LETTERS or ch in ",.->"):
            raise RuntimeError(
                f"einsum(): invalid subscript given at index {i} in the equation string, "
                "subscripts must be in [a-zA-Z]"
            )
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        more = "more" if len(ndims) > len(terms) else "fewer"
        raise RuntimeError(
            f"einsum(): {more} operands were provided than specified in the equation"
        )
    spare = [c for c in _LETTERS if c not in eq]
    widths = []
    for k, (term, nd) in enumerate(zip(terms, ndims)):
        letters = term.replace("...", "")
        if "." in letters:
            raise RuntimeError(
                f"einsum(): found '.' for operand {k} that is not part of any ellipsis"
            )
        width = nd - len(letters)
        if ("..." in term and width < 0) or ("..." not in term and width != 0):
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation ({len(letters)}) does not "
                f"match the number of dimensions ({nd}) for operand {k}"
                + ("" if "..." in term else " and no ellipsis was given")
            )
        widths.append(width)
    n_ell = max(widths, default=0)
    ell = "".join(spare[:n_ell])
    subs = [t.replace("...", ell[n_ell - w :]) for t, w in zip(terms, widths)]
    if arrow:
        out = rhs.replace("...", ell)
        for ch in out:
            if not any(ch in s for s in subs):
                raise RuntimeError(
                    f"einsum(): output subscript {ch} does not appear in the equation for any "
                    "input operand"
                )
            if out.count(ch) > 1:
                raise RuntimeError(
                    f"einsum(): output subscript {ch} appears more than once in the output"
                )
    else:
        joined = "".join(subs)
        out = ell + "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in ell))
    return subs, out


def _einsum_plan(equation: str, tensors) -> tuple[list[str], str, dict]:
    """Subscripts plus the size of every letter (size-1 dims broadcast, as in PyTorch)."""
    subs, out = _einsum_terms(equation, [t.ndim for t in tensors])
    sizes: dict = {}
    for k, (s, t) in enumerate(zip(subs, tensors)):
        seen: dict = {}
        for ch, n in zip(s, t.shape):
            if ch in seen and seen[ch] != n:
                raise RuntimeError(
                    f"einsum(): subscript {ch} is repeated for operand {k} but the sizes don't "
                    f"match, {seen[ch]} != {n}"
                )
            seen[ch] = n
            cur = sizes.get(ch)
            if cur is None or cur == 1:
                sizes[ch] = n
            elif n != 1 and n != cur:
                raise RuntimeError(
                    f"einsum(): subscript {ch} has size {n} for operand {k} which does not "
                    f"broadcast with previously seen size {cur}"
                )
    return subs, out, sizes


@defop(kind="linalg", autocast={"cpu": "lower", "cuda": "lower"}, holomorphic=True)
def einsum(equation: str, tensors: TensorList): ...


def _require_operands(tensors):
    if not tensors:
        raise RuntimeError("einsum(): must provide at least one operand")


def _summed_dtype(d: dt.dtype) -> dt.dtype:
    """The dtype ``sum`` gives: integers and bools add up as int64."""
    return dt.int64 if d.category <= 1 else d


def _einsum_result_dtype(subs: list[str], out: str, tensors) -> dt.dtype:
    """The result dtype PyTorch's einsum gives, which is not always the operands'.

    PyTorch contracts operands left to right; a letter that no later operand holds (with a size
    other than 1) is summed out of one side by ``sum``, which turns integers and bools into
    int64, while a letter both sides hold goes through ``bmm`` (same dtypes only, no bools) and
    no summed letter at all through ``mul`` (which promotes). This replays those steps on the
    letters alone, raising PyTorch's errors where its steps fail.
    """
    dtypes = [t.dtype for t in tensors]
    d = dtypes[0]
    if d.category > 1 and all(other is d for other in dtypes):
        return d
    shapes = []
    for s, t in zip(subs, tensors):
        letters = _diagonal_steps(s)[1]
        sizes = dict(zip(s, t.shape))
        shapes.append({ch: sizes[ch] for ch in letters})
    summed = sorted({ch for s in subs for ch in s} - set(out))
    if len(tensors) == 1:
        return _summed_dtype(d) if summed else d
    if any(t.numel() == 0 for t in tensors):
        return functools.reduce(dt.promote_types, dtypes)  # (zeros, of the operands' product)
    counts = {ch: sum(shape.get(ch, 1) != 1 for shape in shapes) for ch in summed}
    left, left_dtype = dict(shapes[0]), d
    for right, right_dtype in zip(shapes[1:], dtypes[1:]):
        right, contracted = dict(right), False
        for ch in summed:
            a, b = left.get(ch, 1), right.get(ch, 1)
            if a != 1 and b != 1:
                counts[ch] -= 1
                if counts[ch] == 1:
                    contracted, counts[ch] = True, 0
                    left[ch] = right[ch] = 1
            elif counts[ch] == 1 and (a != 1 or b != 1):
                counts[ch] = 0
                if a != 1:
                    left[ch], left_dtype = 1, _summed_dtype(left_dtype)
                else:
                    right[ch], right_dtype = 1, _summed_dtype(right_dtype)
        if contracted:
            if left_dtype is dt.bool_:  # (before the dtype check, as PyTorch's bmm)
                raise NotImplementedError("\"bmm\" not implemented for 'Bool'")
            if left_dtype is not right_dtype:
                raise RuntimeError(
                    f"expected scalar type {torch_type_name(left_dtype)} but found "
                    f"{torch_type_name(right_dtype)}"
                )
        else:
            left_dtype = dt.promote_types(left_dtype, right_dtype)
        for ch, n in right.items():
            left[ch] = max(left.get(ch, 1), n)
    return left_dtype


@einsum.register_kernel
def _einsum_kernel(equation, tensors):
    tensors = list(tensors)
    _require_operands(tensors)
    subs, out, sizes = _einsum_plan(equation, tensors)
    d = _einsum_result_dtype(subs, out, tensors)
    cd = compute_np_dtype(d)
    arrays = []
    for t, s in zip(tensors, subs):
        a = t._data.astype(cd, copy=False)
        full_shape = tuple(sizes[c] for c in s)
        arrays.append(a if a.shape == full_shape else np.broadcast_to(a, full_shape))
    r = np.einsum(",".join(subs) + "->" + out, *arrays, optimize=len(arrays) > 1)
    if any(np.may_share_memory(r, a) for a in arrays):  # numpy returns views for ij->ji, ii->i
        r = r.copy()
    return wrap(np.require(r, requirements="C"), d)


@einsum.register_meta
def _einsum_meta(equation, tensors):
    tensors = list(tensors)
    _require_operands(tensors)
    subs, out, sizes = _einsum_plan(equation, tensors)
    return fake([sizes[c] for c in out], _einsum_result_dtype(subs, out, tensors), tensors[0])


def _einsum_grad(c, g):
    """The gradient of operand i is an einsum of the output gradient with the other operands.

    Letters only operand i has are broadcast back with a ones vector. A letter repeated in
    operand i (a diagonal) appears once in that einsum, whose result is then written onto the
    diagonal of zeros (``diagonal_scatter``, the inverse of the forward's ``diagonal``), so the
    off-diagonal gradient is exactly zero even where ``g`` is inf or NaN.
    """
    equation, tensors = c.args
    tensors = list(tensors)
    subs, out, sizes = _einsum_plan(equation, tensors)
    grads = []
    for i, s in enumerate(subs):
        terms, operands = [out], [g]
        for j, t in enumerate(tensors):
            if j != i:  # (in g's dtype: the forward's mul promoted it, its bmm needed equal ones)
                terms.append(subs[j])
                operands.append(t if t.dtype is g.dtype else t.to(g.dtype))
        steps, target = _diagonal_steps(s)
        available = set("".join(terms))
        for ch in target:
            if ch not in available:
                terms.append(ch)
                operands.append(OPS["full"]((sizes[ch],), 1, dtype=g.dtype, device=g.device))
                available.add(ch)
        grad = einsum(",".join(terms) + "->" + target, operands)
        for p, q, before in reversed(steps):
            zeros = OPS["full"]([sizes[ch] for ch in before], 0, dtype=g.dtype, device=g.device)
            grad = OPS["diagonal_scatter"](zeros, grad, 0, p, q)
        shape = tuple(tensors[i].shape)
        if tuple(grad.shape) != shape:  # a size-1 letter broadcast against operand i's size
            grad = grad.expand(broadcast_shapes(tuple(grad.shape), shape))
        grads.append(grad)
    return None, grads


einsum.register_derivative(_einsum_grad)


def _diagonal_steps(s: str):
    """The ``diagonal(t, 0, p, q)`` calls that remove every letter repeated in subscript ``s``,
    as (p, q, subscript before the call), and the subscript left (each letter once; a diagonal's
    letter moves to the end, as ``diagonal`` moves its dim)."""
    steps = []
    while True:
        for p, ch in enumerate(s):
            q = s.find(ch, p + 1)
            if q >= 0:
                break
        else:
            return steps, s
        steps.append((p, q, s))
        s = s[:p] + s[p + 1 : q] + s[q + 1 :] + ch


def _einsum_diagonals(t: Tensor, s: str):
    """Take a diagonal for every letter repeated within one operand."""
    steps, s = _diagonal_steps(s)
    for p, q, _ in steps:
        t = OPS["diagonal"](t, 0, p, q)
    return t, s


def _einsum_sum_out(t: Tensor, s: str, keep: set):
    drop = [i for i, ch in enumerate(s) if ch not in keep]
    if not drop:
        return t, s
    return OPS["sum"](t, drop, False, dtype=t.dtype), "".join(ch for ch in s if ch in keep)


def _einsum_pair(a: Tensor, sa: str, b: Tensor, sb: str, keep: set, sizes: dict):
    """Contract two operands with one ``bmm``: [batch, a-only, summed] @ [batch, summed, b-only]."""
    batch = [ch for ch in sa if ch in sb and ch in keep]
    summed = [ch for ch in sa if ch in sb and ch not in keep]
    only_a = [ch for ch in sa if ch not in sb]
    only_b = [ch for ch in sb if ch not in sa]

    def numel(letters):
        return math.prod(sizes[ch] for ch in letters)

    a3 = a.permute([sa.index(ch) for ch in batch + only_a + summed])
    a3 = a3.reshape(numel(batch), numel(only_a), numel(summed))
    b3 = b.permute([sb.index(ch) for ch in batch + summed + only_b])
    b3 = b3.reshape(numel(batch), numel(summed), numel(only_b))
    letters = batch + only_a + only_b
    return bmm(a3, b3).reshape([sizes[ch] for ch in letters]), "".join(letters)


@einsum.register_decomposition
def _einsum_decomp(equation, tensors):
    """Diagonals, then sum out private letters, then contract operands left to right with bmm."""
    tensors = list(tensors)
    _require_operands(tensors)
    subs, out, sizes = _einsum_plan(equation, tensors)
    d = _einsum_result_dtype(subs, out, tensors)
    tensors = [t.to(d) for t in tensors]  # (int64 where PyTorch's sums give it)
    terms = []
    for t, s in zip(tensors, subs):
        t, s = _einsum_diagonals(t, s)
        full_shape = [sizes[ch] for ch in s]
        terms.append((t if list(t.shape) == full_shape else t.expand(full_shape), s))
    later = [set(out).union(*(s for _, s in terms[k + 1 :])) for k in range(len(terms))]
    t, s = _einsum_sum_out(*terms[0], later[0] | set(terms[1][1] if len(terms) > 1 else ""))
    for k in range(1, len(terms)):
        u, r = _einsum_sum_out(*terms[k], later[k] | set(s))
        t, s = _einsum_sum_out(t, s, later[k] | set(r))
        t, s = _einsum_pair(t, s, u, r, later[k], sizes)
    t, s = _einsum_sum_out(t, s, set(out))
    # contiguous, as the kernel and the meta function give it: a graph captured on those
    # strides (a ``reshape`` that is a ``view`` there) must trace the same through this
    return t.permute([s.index(ch) for ch in out]).contiguous()


def _einsum_view(equation: str, t: Tensor) -> Tensor | None:
    """One operand whose every letter reaches the output: PyTorch's einsum returns a view of it
    (its diagonals, then a permute), not a copy; None where letters are summed out, or under
    autocast (which casts the operand to a new tensor first)."""
    state = per_thread.state
    if state.autocast is not None and einsum in state.autocast.policies:
        return None
    subs, out, _ = _einsum_plan(equation, [t])
    if len(set(subs[0])) != len(out):
        return None
    t, s = _einsum_diagonals(t, subs[0])
    return t.permute([s.index(ch) for ch in out])


def _sublist_term(sublist) -> str:
    out = []
    for item in sublist:
        if item is Ellipsis:
            out.append("...")
        elif isinstance(item, int) and 0 <= item < len(_LETTERS):
            out.append(_LETTERS[item])
        else:
            raise ValueError(
                "einsum(): subscript in subscript list is not within the valid range [0, 52)"
            )
    return "".join(out)


@torch_function("einsum")
def _einsum_fn(*args) -> Tensor:
    """``einsum(eq, *operands)``, ``einsum(eq, [operands])`` or the sublist form."""
    if args and isinstance(args[0], str):
        equation, operands = args[0], args[1:]
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
    else:
        items = list(args)
        operands, terms = [], []
        while len(items) >= 2:
            operands.append(items.pop(0))
            terms.append(_sublist_term(items.pop(0)))
        equation = ",".join(terms) + ("->" + _sublist_term(items[0]) if items else "")
    operands = tensor_sequence(operands, "einsum", position=1)
    if len(operands) == 1:
        view = _einsum_view(equation, operands[0])
        if view is not None:
            return view
    return einsum(equation, operands)
