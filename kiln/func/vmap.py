"""``kiln.func.vmap``: map a function over a batch dimension, by looping.

This is NOT a batching transform like PyTorch's: the function runs once per batch element on
``select``-ed slices and the results are stacked along ``out_dims``. Values, gradients and
error checks match PyTorch; speed is that of a Python loop. ``chunk_size`` therefore changes
nothing. ``randomness``: "different" lets each element draw its own numbers, "same" replays the
generator state for every element, "error" raises if the function draws random numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..ops.public import get_rng_state, set_rng_state, stack
from ..runtime.tensor import Tensor
from ..utils.pytree import tree_flatten, tree_unflatten
from .transforms import _check_randomness, _rng_state

__all__ = ["vmap"]


def _name(func) -> str:
    if hasattr(func, "__name__"):
        return func.__name__
    if isinstance(func, functools.partial):
        return f"functools.partial({_name(func.func)}, ...)"
    return repr(func)


def _count_leaves(spec) -> int:
    if spec.kind == "leaf":
        return 1
    return sum(_count_leaves(c) for c in spec.children)


def _broadcast_prefix(prefix, spec) -> list | None:
    """Flatten ``prefix`` against the tree ``spec``: an int/None covers a whole subtree.
    None when the structures do not match (PyTorch's ``_broadcast_to_and_flatten``)."""
    if not isinstance(prefix, (tuple, list, dict)):
        return [prefix] * _count_leaves(spec)
    if isinstance(prefix, tuple):
        matches = spec.kind in ("tuple", "namedtuple")
    else:
        matches = spec.kind == ("list" if isinstance(prefix, list) else "dict")
    if not matches:
        return None
    if isinstance(prefix, dict):
        if set(prefix) != set(spec.context):
            return None
        items = [prefix[k] for k in spec.context]
    else:
        items = list(prefix)
    if len(items) != len(spec.children):
        return None
    flat: list = []
    for item, child in zip(items, spec.children):
        sub = _broadcast_prefix(item, child)
        if sub is None:
            return None
        flat.extend(sub)
    return flat


def _check_out_dims(out_dims, func) -> None:
    leaves = [out_dims] if isinstance(out_dims, int) else tree_flatten(out_dims)[0]
    for x in leaves:
        if x is not None and not isinstance(x, int):
            raise ValueError(
                f"vmap({_name(func)}, ..., out_dims={out_dims}): `out_dims` must be an int, None "
                "or a python collection of ints representing where in the outputs the vmapped "
                "dimension should appear."
            )


def _batched_inputs(in_dims, args: tuple, func):
    """(batch size, flat in_dims normalized to >= 0, flat args, args spec)."""
    if not isinstance(in_dims, (int, tuple)):
        raise ValueError(
            f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): expected `in_dims` to be int "
            "or a (potentially nested) tuple matching the structure of inputs, got: "
            f"{type(in_dims)}."
        )
    if len(args) == 0:
        raise ValueError(
            f"vmap({_name(func)})(<inputs>): got no inputs. Maybe you forgot to add inputs, or "
            "you are trying to vmap over a function with no inputs. The latter is unsupported."
        )
    flat_args, spec = tree_flatten(args)
    flat_dims = _broadcast_prefix(in_dims, spec)
    if flat_dims is None:
        raise ValueError(
            f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>): in_dims is not compatible "
            f"with the structure of `inputs`. in_dims has structure {tree_flatten(in_dims)[1]} "
            f"but inputs has structure {spec}."
        )
    prefix = f"vmap({_name(func)}, in_dims={in_dims}, ...)(<inputs>)"
    for i, (arg, dim) in enumerate(zip(flat_args, flat_dims)):
        if dim is None:
            continue
        if not isinstance(dim, int):
            raise ValueError(
                f"{prefix}: Got in_dim={dim} for an input but in_dim must be either an integer "
                "dimension or None."
            )
        if not isinstance(arg, Tensor):
            raise ValueError(
                f"{prefix}: Got in_dim={dim} for an input but the input is of type {type(arg)}. "
                "We cannot vmap over non-Tensor arguments, please use None as the respective "
                "in_dim"
            )
        if not -arg.dim() <= dim < arg.dim():
            raise ValueError(
                f"{prefix}: Got in_dim={dim} for some input, but that input is a Tensor of "
                f"dimensionality {arg.dim()} so expected in_dim to satisfy -{arg.dim()} <= in_dim "
                f"< {arg.dim()}."
            )
        flat_dims[i] = dim % arg.dim()
    sizes = [a.shape[d] for a, d in zip(flat_args, flat_dims) if d is not None]
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(
            "vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
            f"{sizes} for the mapped dimension"
        )
    return sizes[0], flat_dims, flat_args, spec


def _sample(flat_args: list, flat_dims: list, index: int | None) -> list:
    """The inputs of one batch element (``index=None``: zero-filled stand-ins for an empty batch)."""
    out = []
    for a, d in zip(flat_args, flat_dims):
        if d is None:
            out.append(a)
        elif index is None:
            shape = tuple(a.shape[:d]) + tuple(a.shape[d + 1 :])
            out.append(a.new_zeros(shape))
        else:
            out.append(a.select(d, index))
    return out


def _assemble(func, results: list, out_dims, batch_size: int):
    """Stack per-element outputs along their ``out_dims``."""
    flat_results = []
    out_spec = None
    for r in results:
        flat, spec = tree_flatten(r)
        if out_spec is None:
            out_spec = spec
        elif spec.key() != out_spec.key():
            raise ValueError(
                f"vmap({_name(func)}, ...): `{_name(func)}` returned outputs of different "
                f"structures for different batch elements: {out_spec} and {spec}"
            )
        flat_results.append(flat)
    if out_spec.kind == "leaf" and isinstance(out_dims, tuple) and len(out_dims) == 1:
        flat_dims = list(out_dims)
    elif out_spec.kind == "leaf" and isinstance(out_dims, tuple):
        flat_dims = None
    else:
        flat_dims = _broadcast_prefix(out_dims, out_spec)
    if flat_dims is None:
        raise ValueError(
            f"vmap({_name(func)}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible "
            f"with the structure of `outputs`. out_dims has structure "
            f"{tree_flatten(out_dims)[1]} but outputs has structure {out_spec}."
        )
    outputs = []
    for k, dim in enumerate(flat_dims):
        values = [flat[k] for flat in flat_results]
        if dim is None:
            outputs.append(values[0])
            continue
        if not isinstance(values[0], Tensor):
            raise ValueError(
                f"vmap({_name(func)}, ...): `{_name(func)}` must only return Tensors, got type "
                f"{type(values[0])}. Did you mean to set out_dims= to None for output?"
            )
        if batch_size == 0:
            stacked = stack([values[0]], dim=dim)
            outputs.append(stacked.narrow(dim % stacked.dim(), 0, 0))
        else:
            outputs.append(stack(values, dim=dim))
    return tree_unflatten(outputs, out_spec)


def vmap(
    func: Callable,
    in_dims: int | tuple = 0,
    out_dims: int | tuple | None = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
) -> Callable:
    """``vmap(f)(xs)`` == ``stack([f(x) for x in xs])``, with PyTorch's in_dims/out_dims rules.

    A loop over the batch, not a batching transform (see the module docstring).
    """
    _check_randomness(randomness)
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    @functools.wraps(func)
    def wrapped(*args: Any, **kwargs: Any):
        _check_out_dims(out_dims, func)
        batch_size, flat_dims, flat_args, spec = _batched_inputs(in_dims, args, func)
        start_state = get_rng_state()
        start = start_state.numpy().tobytes()
        results = []
        for index in range(batch_size) if batch_size else (None,):
            if randomness == "same":
                set_rng_state(start_state)
            sample = tree_unflatten(_sample(flat_args, flat_dims, index), spec)
            results.append(func(*sample, **kwargs))
            if randomness == "error" and _rng_state() != start:
                raise RuntimeError(
                    "vmap: called random operation while in randomness error mode. Please "
                    "either use the 'same' or 'different' randomness flags on vmap or perform "
                    "the randomness operation out of vmap"
                )
        return _assemble(func, results, out_dims, batch_size)

    return wrapped
