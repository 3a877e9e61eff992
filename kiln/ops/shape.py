"""Shape functions built from the view prims: transpose, flatten, narrow, unbind, ``*_as``.

These are Python functions (registered as ``kiln.<name>`` and ``Tensor.<name>``) rather than ops
of their own: each call records the underlying view prims, which is all a graph needs.
"""

from __future__ import annotations

from .common import Tensor, wrap_dim
from .registry import OPS, tensor_method, torch_function

__all__ = ["transpose", "flatten", "unflatten", "narrow", "unbind", "movedim"]


@torch_function("transpose", "swapaxes", "swapdims")
@tensor_method("transpose", "swapaxes", "swapdims")
def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    n = input.ndim
    d0 = wrap_dim(dim0, n)
    d1 = wrap_dim(dim1, n)
    if n < 2 or d0 == d1:
        return OPS["alias"](input) if n else input
    perm = list(range(n))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return OPS["permute"](input, perm)


@torch_function()
@tensor_method()
def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    n = input.ndim
    if n == 0:
        return OPS["reshape"](input, (1,))
    s = wrap_dim(start_dim, n)
    e = wrap_dim(end_dim, n)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return input
    shape = list(input.shape)
    merged = 1
    for d in range(s, e + 1):
        merged *= shape[d]
    return OPS["reshape"](input, shape[:s] + [merged] + shape[e + 1 :])


@torch_function()
@tensor_method()
def unflatten(input: Tensor, dim: int, sizes) -> Tensor:
    d = wrap_dim(dim, input.ndim)
    shape = list(input.shape)
    sizes = list(sizes)
    if -1 in sizes:
        known = 1
        for s in sizes:
            if s != -1:
                known *= s
        sizes[sizes.index(-1)] = shape[d] // known if known else 0
    return OPS["reshape"](input, shape[:d] + sizes + shape[d + 1 :])


@torch_function()
@tensor_method()
def narrow(input: Tensor, dim: int, start, length: int) -> Tensor:
    d = wrap_dim(dim, input.ndim)
    start = int(start.item()) if isinstance(start, Tensor) else int(start)
    size = input.shape[d]
    if start < 0:
        start += size
    if start < 0 or start + length > size or length < 0:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return OPS["slice"](input, d, start, start + length, 1)


@torch_function()
@tensor_method()
def unbind(input: Tensor, dim: int = 0) -> tuple:
    d = wrap_dim(dim, input.ndim)
    return tuple(OPS["select"](input, d, i) for i in range(input.shape[d]))


@torch_function("movedim", "moveaxis")
@tensor_method("movedim", "moveaxis")
def movedim(input: Tensor, source, destination) -> Tensor:
    n = input.ndim
    src = [wrap_dim(s, n) for s in ((source,) if isinstance(source, int) else source)]
    dst = [
        wrap_dim(s, n) for s in ((destination,) if isinstance(destination, int) else destination)
    ]
    if len(src) != len(dst):
        raise RuntimeError("movedim: Invalid source or destination dims")
    order = [d for d in range(n) if d not in src]
    perm = [0] * n
    for s, t in zip(src, dst):
        perm[t] = s
    rest = iter(order)
    for i in range(n):
        if i not in dst:
            perm[i] = next(rest)
    return OPS["permute"](input, perm)


@tensor_method()
def view_as(self: Tensor, other: Tensor) -> Tensor:
    return OPS["view"](self, tuple(other.shape))


@tensor_method()
def reshape_as(self: Tensor, other: Tensor) -> Tensor:
    return OPS["reshape"](self, tuple(other.shape))


@tensor_method()
def expand_as(self: Tensor, other: Tensor) -> Tensor:
    return OPS["expand"](self, tuple(other.shape))


@tensor_method()
def select(self: Tensor, dim: int, index) -> Tensor:
    return OPS["select"](self, dim, int(index))


@torch_function("select")
def _select_fn(input: Tensor, dim: int, index) -> Tensor:
    return OPS["select"](input, dim, int(index))


@torch_function("broadcast_to")
@tensor_method("broadcast_to")
def broadcast_to(input: Tensor, size) -> Tensor:
    return OPS["expand"](input, tuple(size))


@torch_function("squeeze")
@tensor_method("squeeze")
def squeeze(input: Tensor, dim=None) -> Tensor:
    return OPS["squeeze"](input, dim)


@torch_function("reshape")
def _reshape_fn(input: Tensor, shape) -> Tensor:
    return OPS["reshape"](input, tuple(shape))


@torch_function("permute")
def _permute_fn(input: Tensor, dims) -> Tensor:
    return OPS["permute"](input, tuple(dims))


@torch_function("t")
def _t_fn(input: Tensor) -> Tensor:
    return input.t()
