"""Autograd graph nodes: what a tensor's ``grad_fn`` is.

``OpBackward`` records one op call: the saved inputs/outputs its derivative formula needs (with
their version counters, so in-place changes after saving are caught) and one edge per tensor
input. Each node is an instance of a subclass named as PyTorch names the call's node
(``MulBackward0``; ``node_class``), so ``type(grad_fn).__name__`` reads as PyTorch's. ``AccumulateGrad`` ends a path at a leaf. Derivative formulas themselves live with the
ops (``op.derivative``); they are ordinary kiln code, so running them with grad mode on records
a graph of the backward (higher-order gradients) and running them under a tracer records nodes.
"""

from __future__ import annotations

import itertools
import weakref
from collections import namedtuple

from ..runtime.state import per_thread
from ..runtime.tensor import INFERENCE_SAVED, INFERENCE_SEEN, Size, Tensor, mark_inference
from .anomaly import anomaly_state, forward_stack
from .graph_tasks import register_multi_grad_hook
from .saved_hooks import (
    PackedArgs,
    disable_saved_tensors_hooks,
    pack_tensor,
    save_on_cpu,
    saved_tensors_hooks,
    unpacked,
)
from .saved_mutation import allow_mutation_on_saved_tensors

__all__ = [
    "Node",
    "OpBackward",
    "node_class",
    "op_node_class",
    "AccumulateGrad",
    "SavedMeta",
    "grad_accumulator",
    "detached_alias",
    "saved_tensors_hooks",
    "save_on_cpu",
    "disable_saved_tensors_hooks",
    "GradientEdge",
    "get_gradient_edge",
    "increment_version",
    "register_multi_grad_hook",
    "allow_mutation_on_saved_tensors",
]

_sequence = itertools.count()
_new = object.__new__
_ACCUMULATE_FIRST = 1 << 62

_RELEASED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you "
    "call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors after calling "
    "backward."
)


class Node:
    """A backward function: takes gradients of its outputs, returns gradients of its inputs."""

    __slots__ = (
        "next_functions",
        "sequence_nr",
        "_pre_hooks",
        "_post_hooks",
        "_tensor_pre_hooks",
        "_released",
        "metadata_",
        "__weakref__",
    )

    def __init__(self, next_functions: tuple):
        self.next_functions = next_functions
        self.sequence_nr = next(_sequence)
        self._pre_hooks = self._post_hooks = self._tensor_pre_hooks = self.metadata_ = None
        self._released = False
        if anomaly_state[0]:
            self.metadata_ = {"traceback_": forward_stack()}

    def name(self) -> str:
        return type(self).__name__

    @property
    def metadata(self) -> dict:
        if self.metadata_ is None:
            self.metadata_ = {}
        return self.metadata_

    def apply(self, grad_outputs: tuple) -> tuple:
        raise NotImplementedError

    def release(self) -> None:
        self._released = True

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` after this node runs; may return new grad_inputs."""
        if self._post_hooks is None:
            self._post_hooks = []
        self._post_hooks.append(fn)
        return _RemovableHandle(self._post_hooks, fn)

    def register_prehook(self, fn):
        """``fn(grad_outputs)`` before this node runs; may return new grad_outputs."""
        if self._pre_hooks is None:
            self._pre_hooks = []
        self._pre_hooks.append(fn)
        return _RemovableHandle(self._pre_hooks, fn)

    def _add_tensor_pre_hook(self, output_nr: int, fn):
        if self._tensor_pre_hooks is None:
            self._tensor_pre_hooks = {}
        hooks = self._tensor_pre_hooks.setdefault(output_nr, [])
        # retain_grad's hook runs after the user's hooks, so ``.grad`` sees what they return
        retain_at = next(
            (i for i, h in enumerate(hooks) if getattr(h, "_retains_grad", False)), None
        )
        if retain_at is None or getattr(fn, "_retains_grad", False):
            hooks.append(fn)
        else:
            hooks.insert(retain_at, fn)
        return _RemovableHandle(hooks, fn)

    def __call__(self, *grads):
        return self.apply(grads)

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"


class _RemovableHandle:
    __slots__ = ("_hooks", "_fn")

    def __init__(self, hooks: list, fn):
        self._hooks = hooks
        self._fn = fn

    def remove(self) -> None:
        try:
            self._hooks.remove(self._fn)
        except ValueError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class SavedMeta:
    """Stands in for an input tensor an op's derivative doesn't need: only its metadata."""

    __slots__ = ("_shape", "dtype", "device", "_layout")

    def __init__(self, t: Tensor):
        self._shape = t._shape
        self.dtype = t._dtype
        self.device = t._device

    def stride(self, dim=None):
        """The input's strides (kept only for ops that declare ``saves_input_layouts``)."""
        strides = self._layout[0]
        return strides if dim is None else strides[dim]

    def storage_offset(self) -> int:
        return self._layout[1]

    @property
    def shape(self) -> Size:
        return Size(self._shape)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    def size(self, dim=None):
        return Size(self._shape) if dim is None else self._shape[dim]

    def numel(self) -> int:
        n = 1
        for s in self._shape:
            n *= s
        return n


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


class OpBackward(Node):
    """The grad_fn of one op call. Derivatives read ``ctx.args``, ``ctx.out``, ``ctx.needs_input_grad``
    and ``ctx.kernel_saved`` (what the op's recording kernel kept for them, else None).

    Nodes are made as instances of ``op_node_class(op, args)``, the subclass carrying PyTorch's
    name for the call: ``type(node).__name__`` and ``node.name()`` are both that name."""

    __slots__ = (
        "op",
        "_args",
        "_out",
        "_versions",
        "needs_input_grad",
        "edge_positions",
        "out_meta",
        "kernel_saved",
    )

    def __init__(self, op, args: tuple, out, next_functions, edge_positions, needs_input_grad):
        # Node.__init__, inlined: one of these is made for every differentiable op call
        self.next_functions = next_functions
        self.sequence_nr = next(_sequence)
        self._pre_hooks = self._post_hooks = self._tensor_pre_hooks = self.metadata_ = None
        self._released = False
        if anomaly_state[0]:
            self.metadata_ = {"traceback_": forward_stack()}
        self.op = op
        self.kernel_saved = None
        self.edge_positions = edge_positions  # (arg position, index in list or -1) per edge
        self.needs_input_grad = needs_input_grad
        saves = op.saves_inputs
        if saves is not None and saves.__class__ is not tuple and callable(saves):
            saves = saves(args, needs_input_grad)
        if INFERENCE_SEEN[0]:
            _refuse_saved_inference(op, args, saves)
        versions = []
        if saves is None:
            saved_args = args
            for p, _ in edge_positions:
                a = args[p]
                if isinstance(a, Tensor):
                    st = a._storage
                    versions.append((a, (st if st is not None else a._get_storage()).version))
        else:
            saved_args = list(args)
            for p in op.tensor_positions:
                a = args[p]
                if a.__class__ is Tensor or isinstance(a, Tensor):
                    if p in saves:
                        st = a._storage
                        versions.append((a, (st if st is not None else a._get_storage()).version))
                    else:  # SavedMeta(a), without the __init__ call
                        m = _new(SavedMeta)
                        m._shape = a._shape
                        m.dtype = a._dtype
                        m.device = a._device
                        if op.saves_input_layouts:
                            m._layout = (a.stride(), a.storage_offset())
                        saved_args[p] = m
            for p in op.list_positions:
                if p not in saves:
                    saved_args[p] = [SavedMeta(t) if isinstance(t, Tensor) else t for t in args[p]]
            saved_args = tuple(saved_args)
        self._args = saved_args
        if op.saves_output and out.__class__ is Tensor:
            alias = _detached_alias(out)
            versions.append((alias, alias._storage.version))
            self._out = alias
        elif op.saves_output:
            outs = out if isinstance(out, tuple) else (out,)
            # a tuple of positions: only those outputs are saved (max_pool's indices, not its
            # values, which user code may then change in place, as PyTorch allows)
            keep = op.saves_output if op.saves_output.__class__ is tuple else None
            saved = []
            for i, o in enumerate(outs):
                if keep is not None and i not in keep:
                    saved.append(None)
                    continue
                alias = _detached_alias(o)
                versions.append((alias, alias._storage.version))
                saved.append(alias)
            self._out = tuple(saved) if isinstance(out, tuple) else saved[0]
        else:
            self._out = None
        self._versions = versions
        if out.__class__ is Tensor:
            self.out_meta = ((out._shape, out._dtype),)
        else:
            self.out_meta = tuple((o._shape, o._dtype) for o in out)

    def rename(self, name: str) -> None:
        """Give the node PyTorch's name for the call that made it, where that is not the op's
        (a composite or a Python-level function names its result's node: ``x.t()``)."""
        self.__class__ = node_class(name)

    @property
    def args(self) -> tuple:
        if self._released:
            raise RuntimeError(_RELEASED_MSG)
        args = self._args
        return args if args.__class__ is not PackedArgs else unpacked(args)

    def pack_saved(self, hooks: tuple) -> None:
        """Hand every tensor the node saved to ``saved_tensors_hooks``' pack hook (``hooks``:
        the innermost (pack, unpack) pair) and keep what it returns; ``args`` and ``out``
        unpack on each read. As PyTorch's, packed tensors are not version-checked: what the
        unpack hook returns may be a copy, and the node must not keep the original alive."""
        op = self.op
        args = list(self._args)
        for p in op.tensor_positions:
            if isinstance(args[p], Tensor):
                args[p] = pack_tensor(args[p], hooks)
        for p in op.list_positions:
            if isinstance(args[p], (list, tuple)):
                args[p] = [pack_tensor(t, hooks) if isinstance(t, Tensor) else t for t in args[p]]
        self._args = PackedArgs(args)
        out = self._out
        if isinstance(out, Tensor):
            self._out = pack_tensor(out, hooks)
        elif out is not None:
            self._out = tuple(None if o is None else pack_tensor(o, hooks) for o in out)
        self._versions = ()

    def keep_kernel_saved(self, saved) -> None:
        """Keep what the op's recording kernel saved for the derivative; where the op can
        rebuild its output from it, the saved output is dropped: the node holds one copy, not
        two (the output's buffer is freed as soon as the forward stops using it)."""
        self.kernel_saved = saved
        out = self._out
        if self.op.output_from_kernel_saved is not None and out.__class__ is Tensor:
            self._versions = [
                (_OutputVersion(t, v), v) if t is out else (t, v) for t, v in self._versions
            ]
            self._out = None

    @property
    def out(self):
        if self._released:
            raise RuntimeError(_RELEASED_MSG)
        out = self._out
        if self._args.__class__ is PackedArgs:
            out = unpacked(out)
        if out is None and self.kernel_saved is not None:
            rebuild = self.op.output_from_kernel_saved
            if rebuild is not None:
                out = rebuild(self.kernel_saved)
        if out is None or not per_thread.state.grad_enabled:
            return out
        # under create_graph the saved output must carry this node as its history
        if isinstance(out, tuple):
            return tuple(
                None if o is None else _with_history(o, self, i) for i, o in enumerate(out)
            )
        return _with_history(out, self, 0)

    def _check_versions(self) -> None:
        for t, v in self._versions:
            now = t._get_storage().version
            if now != v:
                raise version_error(t, self._made_by(t), now, v)

    def _made_by(self, saved) -> str:
        """PyTorch's ``, which is output N of Op,`` for a saved tensor: a saved output names
        this node; a saved input names the node that made it as it is now (the in-place op's,
        once one wrote into it); a leaf names none."""
        outs = self._out if isinstance(self._out, tuple) else (self._out,)
        for index, out in enumerate(outs):
            if out is saved:
                return f", which is output {index} of {_op_name(self)},"
        if saved.__class__ is _OutputVersion:
            return f", which is output 0 of {_op_name(self)},"
        return made_by(saved)

    def apply(self, grad_outputs: tuple) -> tuple:
        op = self.op
        if self._released and (self._versions or op.saves_output):
            raise RuntimeError(_RELEASED_MSG)
        for t, v in self._versions:  # _check_versions, its call saved on the common path
            st = t._storage
            if (st if st is not None else t._get_storage()).version != v:
                self._check_versions()
        grads = op.derivative(self, *grad_outputs)
        if not isinstance(grads, (tuple, list)):
            grads = (grads,)
        positions = self.edge_positions
        if positions is op.tensor_edge_positions and op.tensor_positions_lead:
            # an edge per leading argument, in order: the formula's first grads are the edges'
            n = len(positions)
            if len(grads) >= n:
                return tuple(grads[:n])
        out = []
        for p, j in positions:
            g = grads[p] if p < len(grads) else None
            if j >= 0 and g is not None:
                g = g[j]
            out.append(g)
        return tuple(out)

    def release(self) -> None:
        self._released = True
        if self._versions or self.op.saves_output or self._args.__class__ is PackedArgs:
            self._args = None
            self._out = None
            self._versions = ()
        self.kernel_saved = None


_NODE_CLASSES: dict[str, type] = {}


def node_class(name: str) -> type:
    """The subclass of ``OpBackward`` called ``name`` (``MulBackward0``), made once per name."""
    cls = _NODE_CLASSES.get(name)
    if cls is None:
        attrs = {"__slots__": (), "__qualname__": name, "__module__": __name__}
        cls = _NODE_CLASSES[name] = type(name, (OpBackward,), attrs)
    return cls


def op_node_class(op, args: tuple) -> type:
    """The node class for a call of ``op`` with ``args``: named by the op's ``grad_fn_name``
    (a string, or a function of the arguments choosing PyTorch's overload: ``x.sum(0)`` is
    ``SumBackward1``), else ``<Op>Backward0``. A name that does not depend on the arguments is
    kept on the op (``op.node_class``), so the dispatcher finds it with one attribute read."""
    namer = op.grad_fn_name
    if callable(namer):
        name = namer(args)
        cls = _NODE_CLASSES.get(name)
        return cls if cls is not None else node_class(name)
    cls = node_class(_camel(op.name) + "Backward0" if namer is None else namer)
    op.node_class = cls
    return cls


class _OutputVersion:
    """Stands in for a saved output the node dropped (its op rebuilds it from ``kernel_saved``)
    in the version checks: an in-place write to the output still makes backward refuse, as
    PyTorch's does, but the output's buffer is not kept alive for it. A freed output cannot
    have been written since, so its version stands."""

    __slots__ = ("_ref", "_shape", "_dtype", "_expected")

    def __init__(self, out: Tensor, version: int):
        self._ref = weakref.ref(out._get_storage())
        self._shape = out._shape
        self._dtype = out._dtype
        self._expected = version

    @property
    def _storage(self):
        storage = self._ref()
        return self if storage is None else storage

    def _get_storage(self):
        return self._storage

    @property
    def version(self) -> int:
        return self._expected


def version_error(saved, made_by: str, now: int, expected: int) -> RuntimeError:
    """PyTorch's error for a saved tensor written in place before the backward read it;
    ``made_by``: ``", which is output N of Op,"`` or empty (a leaf)."""
    hint = (
        "the backtrace further above shows the operation that failed to compute its "
        "gradient. The variable in question was changed in there or anywhere later. "
        "Good luck!"
        if anomaly_state[0]
        else "enable anomaly detection to find the operation that failed to compute "
        "its gradient, with kiln.autograd.set_detect_anomaly(True, check_nan=False)."
    )
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{_describe(saved)}]{made_by} is at version {now}; expected "
        f"version {expected} instead. Hint: {hint}"
    )


def made_by(saved) -> str:
    """``, which is output N of Op,`` for a tensor with history (the node that made it as it
    is now, named as PyTorch's version errors name it), empty for a leaf."""
    grad_fn = getattr(saved, "grad_fn", None)
    if grad_fn is None:
        return ""
    return f", which is output {saved.output_nr} of {_op_name(grad_fn)},"


def _describe(t: Tensor) -> str:
    """``kiln.FloatTensor [2, 3]``, as PyTorch names a tensor in version errors."""
    from ..runtime.legacy_types import legacy_type_name

    return f"{legacy_type_name(t._dtype)} {list(t._shape)}"


def _op_name(node) -> str:
    """A node's name as PyTorch's version errors give it: ``Exp`` for ``ExpBackward0``."""
    name = node.name()
    stem = name.rstrip("0123456789")
    return stem.removesuffix("Backward") if stem.endswith("Backward") else name


def _detached_alias(t: Tensor) -> Tensor:
    alias = object.__new__(Tensor)
    alias._data = t._data
    alias._shape = t._shape
    alias._dtype = t._dtype
    alias._device = t._device
    alias._storage = t._get_storage()
    alias._stride = t._stride
    alias._base = None
    alias._view_src = None
    if t._data is None:  # (a symbolic offset, 0 for the traced sizes only, is not asked its truth)
        alias._offset = t._offset
    return alias


def detached_alias(t: Tensor) -> Tensor:
    """``Tensor.detach`` and ``.data`` (kiln.ops): an alias sharing data and version counter, no
    history. An inference tensor's is one too (see ``mark_inference`` for why writable)."""
    alias = _detached_alias(t)
    if t._inference:
        mark_inference(alias, writable=True)
    return alias


def _with_history(alias: Tensor, node: Node, output_nr: int) -> Tensor:
    t = _detached_alias(alias)
    t.grad_fn = node
    t._output_nr = output_nr
    t._requires_grad = True
    return t


class AccumulateGrad(Node):
    """Sink for a leaf tensor: adds incoming gradients into ``leaf.grad``."""

    __slots__ = ("variable",)

    def __init__(self, variable: Tensor):
        # Node.__init__, inlined: a leaf's accumulator lives as long as the graphs using it, so
        # one is made again for each step's (or each tiny op's) graph
        self.next_functions = ()
        # above every other node (PyTorch gives these UINT64_MAX): the engine accumulates a
        # leaf's gradient, and runs its hooks, as soon as it is complete -- DDP starts a
        # bucket's all-reduce there, while the rest of backward still runs
        self.sequence_nr = next(_sequence) + _ACCUMULATE_FIRST
        self._pre_hooks = self._post_hooks = self._tensor_pre_hooks = self.metadata_ = None
        self._released = False
        if anomaly_state[0]:
            self.metadata_ = {"traceback_": forward_stack()}
        self.variable = variable

    def apply(self, grad_outputs: tuple) -> tuple:
        raise AssertionError("AccumulateGrad is handled by the engine")


def leaf_edge(leaf: Tensor) -> tuple:
    """The autograd edge into a tensor without history that requires grad: its accumulator, or
    none for a view made under no_grad (PyTorch drops the gradients that reach one)."""
    if leaf._no_grad_view:
        return (None, 0)
    return (grad_accumulator(leaf), 0)


def grad_accumulator(leaf: Tensor) -> AccumulateGrad:
    """The one AccumulateGrad node of a leaf (shared so hooks and dependency counts agree).
    Held weakly, as PyTorch holds it: a leaf used by no live graph gets a new one, once per
    op on it in a loop that drops each result, hence ``__init__`` called on ``object.__new__``
    (a class call costs ~0.1 us more)."""
    ref = leaf.__dict__.get("_accumulator_ref")
    acc = ref() if ref is not None else None
    if acc is None:
        acc = _new(AccumulateGrad)
        _init_accumulator(acc, leaf)
        leaf.__dict__["_accumulator_ref"] = weakref.ref(acc)
    return acc


_init_accumulator = AccumulateGrad.__init__


def _refuse_saved_inference(op, args, saves) -> None:
    """PyTorch's refusal to save an inference tensor for backward: it has no version counter to
    check the saved value against."""
    for p in op.tensor_positions:
        if (saves is None or p in saves) and getattr(args[p], "_inference", False):
            raise RuntimeError(INFERENCE_SAVED)


# where a tensor's gradient is computed: its grad_fn and output number, or its accumulator
GradientEdge = namedtuple(
    "GradientEdge", ("node", "output_nr", "ownership_token"), defaults=(None,)
)


def get_gradient_edge(tensor: Tensor) -> GradientEdge:
    """The edge ``kiln.autograd.grad(outputs, inputs=[edge])`` differentiates with respect to:
    the gradient that reaches it, whether or not the tensor is still there."""
    if not tensor.requires_grad:
        raise RuntimeError(
            "It is not possible to get the gradient edge for a Tensor that does not require "
            "gradients"
        )
    from .engine import tensor_edge  # (the engine imports this module)

    node, output_nr = tensor_edge(tensor)
    return GradientEdge(node, output_nr)


def increment_version(tensor) -> None:
    """Tell autograd that ``tensor`` (or each tensor of an iterable) was changed in place by
    code it cannot see (a kernel writing through ``data_ptr()``, a numpy view of the storage):
    a backward that saved it then raises PyTorch's in-place error instead of reading the new
    values. Its views share the count, as its storage's writes do."""
    for t in (tensor,) if isinstance(tensor, Tensor) else tensor:
        if not isinstance(t, Tensor):
            raise TypeError(f"increment_version expects Tensors, got {type(t).__name__}")
        t._bump_version()
