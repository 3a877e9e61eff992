"""``fully_shard``: PyTorch's FSDP2 API -- parameters, gradients and optimizer state sharded.

``fully_shard(module)`` replaces each parameter the module owns (those not owned by a nested
``fully_shard`` module) by its *shard*: the rows ``[r*c, (r+1)*c)`` of dim 0 on rank r, with
``c = ceil(rows / world size)`` (the last ranks may hold fewer rows, or none). The optimizer is
built on ``module.parameters()`` afterwards, so it steps on shards and keeps 1/N of the state.

Around each call of the module:

- before forward, the shards of the module's parameters are all-gathered (one collective for
  the group) into *unsharded* parameters -- leaf tensors that the module's forward uses in place
  of the shards;
- after forward they are freed again (``reshard_after_forward``; not for the outermost module,
  whose backward comes next), their storage swapped for an empty one (autograd keeps the same
  tensor objects);
- when the gradient reaches the module's outputs, they are gathered again for its backward;
- when every unsharded parameter has its gradient, the gradients are reduce-scattered
  (averaged) into the shards' ``.grad`` and the unsharded values and gradients freed.

The outermost module's backward ends with a callback that finishes any group whose parameters
did not all receive gradients. ``set_requires_gradient_sync(False)`` keeps unsharded gradients
for accumulation instead. State dicts of the module hold the shards; the functions in
``kiln.distributed.checkpoint.state_dict`` gather full ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ...autograd.grad_mode import no_grad
from ...autograd.variable import Variable
from ...nn.modules.module import Module
from ...nn.parameter import Parameter
from ...runtime.tensor import Tensor, wrap_array
from .. import collectives as dist
from ..process_group import ProcessGroup, resolve_group
from ..reduce_op import ReduceOp

__all__ = ["fully_shard", "FSDPModule", "ShardedParameter"]

_EAGER = "fully_shard's all-gathers and reduce-scatters run eagerly"


def _array(t: Tensor) -> np.ndarray:
    return t.detach().numpy()


class ShardedParameter:
    """One parameter's shard, its unsharded stand-in and where the module holds it."""

    def __init__(self, owners: list[tuple[Module, str]], full: Parameter, group: ProcessGroup):
        self.owners = owners
        self.name = owners[0][1]
        self.shape = tuple(full.shape)
        self.dtype = full.dtype
        rows = self.shape[0] if self.shape else 1
        self.row_numel = math.prod(self.shape[1:]) if self.shape else 1
        n, r = group.size(), group.rank()
        self.chunk = -(-rows // n)
        self.rows = rows
        start, stop = min(r * self.chunk, rows), min((r + 1) * self.chunk, rows)
        values = _array(full).reshape(rows, self.row_numel)[start:stop]
        local_shape = (stop - start, *self.shape[1:]) if self.shape else (stop - start,)
        shard = wrap_array(np.ascontiguousarray(values).reshape(local_shape), full.dtype)
        self.sharded = Parameter(shard, requires_grad=full.requires_grad)
        self.unsharded = Parameter(wrap_array(np.empty(0, _array(full).dtype), full.dtype))
        self.unsharded.requires_grad_(full.requires_grad)
        self.padded_numel = self.chunk * self.row_numel  # what each rank contributes

    def gather_full(self, shard: Tensor, group: ProcessGroup) -> Tensor:
        """The full tensor whose rows ``shard`` (this rank's, shaped like the shard) holds."""
        n = group.size()
        padded = np.zeros(self.padded_numel, _array(shard).dtype)
        padded[: shard.numel()] = _array(shard).reshape(-1)
        mine = wrap_array(padded, shard.dtype)
        everything = wrap_array(np.empty(n * self.padded_numel, padded.dtype), shard.dtype)
        dist.all_gather_into_tensor(everything, mine, group=group)
        full = _array(everything)[: self.rows * self.row_numel].reshape(self.shape)
        return wrap_array(full.copy(), shard.dtype)

    def local_rows(self, full: np.ndarray, group: ProcessGroup) -> np.ndarray:
        """This rank's rows of a full value (what its shard holds)."""
        r = group.rank()
        start, stop = min(r * self.chunk, self.rows), min((r + 1) * self.chunk, self.rows)
        shard_shape = tuple(self.sharded.shape)
        return full.reshape(self.rows, self.row_numel)[start:stop].reshape(shard_shape)

    def register(self, value: Parameter) -> None:
        for module, name in self.owners:
            module._parameters[name] = value

    def padded_shard(self) -> np.ndarray:
        flat = np.zeros(self.padded_numel, _array(self.sharded).dtype)
        local = _array(self.sharded).reshape(-1)
        flat[: local.size] = local
        return flat

    def set_full(self, rows_by_rank: np.ndarray) -> None:
        """``rows_by_rank``: (world size, padded_numel) gathered shards -> the full value."""
        full = rows_by_rank.reshape(-1)[: self.rows * self.row_numel].reshape(self.shape)
        self.unsharded.data = wrap_array(np.ascontiguousarray(full), self.dtype)

    def free_full(self) -> None:
        self.unsharded.data = wrap_array(np.empty(0, _array(self.sharded).dtype), self.dtype)


class _ParamGroup:
    """The parameters one ``fully_shard`` call manages, gathered and reduced together."""

    def __init__(self, module: Module, params: list[ShardedParameter], group: ProcessGroup,
                 reshard_after_forward: bool):  # fmt: skip
        self.module = module
        self.params = params
        self.group = group
        self.reshard_after_forward = reshard_after_forward
        self.is_unsharded = False
        self.sync = True
        self.pending = 0
        self.reduced = True
        self.backward_started = False
        for p in params:
            p.unsharded.register_post_accumulate_grad_hook(self._grad_ready)

    # ------------------------------------------------------------------ all-gather
    def unshard(self) -> None:
        if self.is_unsharded or not self.params:
            self.is_unsharded = True
            return
        n = self.group.size()
        local = np.concatenate([p.padded_shard() for p in self.params])
        mine = wrap_array(local, self.params[0].dtype) if _one_dtype(self.params) else None
        if mine is None:
            raise TypeError("fully_shard: parameters of one module must share a dtype")
        gathered = wrap_array(np.empty(n * local.size, local.dtype), self.params[0].dtype)
        dist.all_gather_into_tensor(gathered, mine, group=self.group)
        rows = _array(gathered).reshape(n, local.size)
        offset = 0
        for p in self.params:
            p.set_full(rows[:, offset : offset + p.padded_numel])
            p.register(p.unsharded)
            offset += p.padded_numel
        self.is_unsharded = True

    def reshard(self) -> None:
        for p in self.params:
            p.free_full()
            p.register(p.sharded)
        self.is_unsharded = False

    # ------------------------------------------------------------------ backward
    def start_backward(self) -> None:
        if self.backward_started:
            return
        self.backward_started = True
        self.pending = sum(1 for p in self.params if p.unsharded.requires_grad)
        self.reduced = False
        self.unshard()

    def _grad_ready(self, _param) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.finish_backward()

    def finish_backward(self) -> None:
        """Reduce-scatter the group's gradients into the shards and free the full values."""
        if self.reduced:
            return
        self.reduced = True
        self.backward_started = False
        if not self.sync:
            self.reshard_keeping_grads()
            return
        n = self.group.size()
        width = sum(p.padded_numel for p in self.params)
        dtype = _array(self.params[0].sharded).dtype
        grads = np.zeros((n, width), dtype)
        offset = 0
        for p in self.params:
            g = p.unsharded.grad
            if g is not None:
                padded = np.zeros(n * p.padded_numel, dtype)
                padded[: p.rows * p.row_numel] = _array(g).reshape(-1)
                grads[:, offset : offset + p.padded_numel] = padded.reshape(n, p.padded_numel)
            offset += p.padded_numel
        kiln_dtype = self.params[0].dtype
        inp = wrap_array(grads.reshape(-1), kiln_dtype)
        out = wrap_array(np.empty(width, dtype), kiln_dtype)
        dist.reduce_scatter_tensor(out, inp, op=ReduceOp.AVG, group=self.group)
        reduced = _array(out)
        offset = 0
        for p in self.params:
            if p.unsharded.grad is not None or p.sharded.grad is not None:
                local = p.sharded.numel()
                value = reduced[offset : offset + local].reshape(p.sharded.shape)
                if p.sharded.grad is None:
                    p.sharded.grad = wrap_array(value.copy(), kiln_dtype)
                else:
                    with no_grad():
                        p.sharded.grad.add_(wrap_array(value.copy(), kiln_dtype))
            p.unsharded.grad = None
            offset += p.padded_numel
        self.reshard()

    def reshard_keeping_grads(self) -> None:
        """``set_requires_gradient_sync(False)``: keep the unsharded gradients to accumulate."""
        for p in self.params:
            p.free_full()
            p.register(p.sharded)
        self.is_unsharded = False


def _one_dtype(params: list[ShardedParameter]) -> bool:
    return len({p.dtype for p in params}) == 1


class _RootState:
    """How many fully_shard modules' forwards are running (0: the next one is the root)."""

    active = 0


class FSDPModule:
    """Mixed into a module's class by ``fully_shard`` (as PyTorch does): ``unshard``,
    ``reshard`` and gradient-sync control."""

    def unshard(self, async_op: bool = False):
        self._fsdp_group.unshard()
        return None

    def reshard(self) -> None:
        self._fsdp_group.reshard()

    def set_requires_gradient_sync(self, requires_gradient_sync: bool, *, recurse=True) -> None:
        """False: backward keeps full gradients (accumulating microbatches) without
        reduce-scattering; the next backward with True reduces the accumulated sum."""
        modules = self.modules() if recurse else [self]
        for m in modules:
            if isinstance(m, FSDPModule):
                m._fsdp_group.sync = requires_gradient_sync

    def set_reshard_after_forward(self, reshard_after_forward: bool, recurse=True) -> None:
        modules = self.modules() if recurse else [self]
        for m in modules:
            if isinstance(m, FSDPModule):
                m._fsdp_group.reshard_after_forward = reshard_after_forward


def _fsdp_modules_under(module: Module) -> list[FSDPModule]:
    return [m for m in module.modules() if isinstance(m, FSDPModule)]


def _pre_forward(module, args, kwargs=None):
    group: _ParamGroup = module._fsdp_group
    if _RootState.active == 0:
        module._fsdp_is_root = True
    _RootState.active += 1
    group.unshard()
    return None


def _post_forward(module, args, output):
    group: _ParamGroup = module._fsdp_group
    _RootState.active = max(_RootState.active - 1, 0)
    is_root = getattr(module, "_fsdp_is_root", False) and _RootState.active == 0
    tensors = [t for t in _tensors(output) if t.requires_grad]
    if tensors:
        for t in tensors:
            t.register_hook(_PreBackward(module, is_root))
    if group.reshard_after_forward and not is_root:
        group.reshard()
    return None


class _PreBackward:
    """Gradient hook on a module's outputs: gather its parameters again before its backward."""

    def __init__(self, module: Module, is_root: bool):
        self.module = module
        self.is_root = is_root

    def __call__(self, grad):
        group = self.module._fsdp_group
        if self.is_root and not group.backward_started:
            Variable._execution_engine.queue_callback(_FinishRoot(self.module))
        group.start_backward()
        return None


class _FinishRoot:
    """End of backward: groups whose parameters did not all get gradients reduce now (in a
    fixed order, the same on every rank)."""

    def __init__(self, root: Module):
        self.root = root

    def __call__(self) -> None:
        for m in _fsdp_modules_under(self.root):
            group = m._fsdp_group
            if not group.reduced:
                group.finish_backward()
            elif group.is_unsharded:
                group.reshard()


def _tensors(value) -> Iterable[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


_pre_forward._kiln_disabled = _EAGER
_post_forward._kiln_disabled = _EAGER


def _owned_parameters(module: Module, ignored: set[int]) -> list[list[tuple[Module, str]]]:
    """For each parameter ``module`` manages (not one of a nested fully_shard module), the
    places (submodule, attribute) that hold it: tied weights are held twice."""
    places: dict[int, list[tuple[Module, str]]] = {}
    order: list[int] = []

    def visit(m: Module) -> None:
        for name, p in m._parameters.items():
            if p is None or id(p) in ignored:
                continue
            if id(p) not in places:
                places[id(p)] = []
                order.append(id(p))
            places[id(p)].append((m, name))
        for child in m._modules.values():
            if child is not None and not isinstance(child, FSDPModule):
                visit(child)

    visit(module)
    return [places[i] for i in order]


_CLASS_CACHE: dict[type, type] = {}


def _fsdp_class(cls: type) -> type:
    if cls not in _CLASS_CACHE:
        _CLASS_CACHE[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    return _CLASS_CACHE[cls]


def fully_shard(
    module: Module,
    *,
    mesh: ProcessGroup | None = None,
    reshard_after_forward: bool = True,
    shard_placement_fn=None,
    mp_policy=None,
    offload_policy=None,
    ignored_params: set | None = None,
) -> Module:
    """Shard ``module``'s parameters across the ranks of ``mesh`` (a process group; the default
    group when None). Apply it to submodules first (each block), then to the root."""
    if shard_placement_fn is not None or mp_policy is not None or offload_policy is not None:
        raise NotImplementedError(
            "fully_shard: shard_placement_fn, mp_policy and offload_policy are not supported; "
            "kiln shards every parameter on dim 0"
        )
    if isinstance(module, FSDPModule):
        raise ValueError(f"fully_shard was already applied to {type(module).__name__}")
    group = resolve_group(mesh)
    if group is None:
        raise ValueError("fully_shard: this rank is not in the given process group")
    ignored = {id(p) for p in ignored_params or ()}
    params = []
    for places in _owned_parameters(module, ignored):
        holder, name = places[0]
        params.append(ShardedParameter(places, holder._parameters[name], group))
    for p in params:
        p.register(p.sharded)
    module.__class__ = _fsdp_class(type(module))
    object.__setattr__(
        module, "_fsdp_group", _ParamGroup(module, params, group, reshard_after_forward)
    )
    module.register_forward_pre_hook(_pre_forward)
    module.register_forward_hook(_post_forward, always_call=True)
    return module
