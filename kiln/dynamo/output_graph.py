"""The graph being captured, its inputs and guards, and compiling it with the backend.

One ``OutputGraph`` lives for one capture attempt of one frame (inlined calls share it). It owns
the ``TracingMode`` that records ops, the graph inputs (every tensor read from a source becomes
a placeholder: arguments, parameters, globals), the guard set, the side effects, the grad mode
the code runs under, and the identity caches that make one real object one variable.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from ..autograd.grad_mode import set_grad_enabled_node
from ..ir import Graph, GraphModule
from ..ir.tracer import TracingMode
from ..runtime import logs as klog
from ..runtime.state import per_thread
from ..runtime.symbolic import ShapeEnv
from ..runtime.tensor import Tensor
from . import config
from .exc import unsupported
from .guards import GuardSet, overlapping
from .side_effects import SideEffects
from .sources import LocalSource, Source
from .symbolic_shapes import ShapePolicy, symbolic_fake

__all__ = ["OutputGraph", "set_grad_enabled_node"]


def _restoring_grad_mode(compiled):
    """A graph that switches grad mode must not leave it switched if it raises half-way."""

    def run(*args):
        state = per_thread.state
        saved = state.grad_enabled
        try:
            return compiled(*args)
        except BaseException:
            state.grad_enabled = saved
            raise

    return run


def _with_state(name: str, value, fn, *args):
    """``fn(*args)`` with the calling thread's ``name`` (``grad_enabled``, ``autocast``) set to
    ``value``, then restored."""
    state = per_thread.state
    saved = getattr(state, name)
    setattr(state, name, value)
    try:
        return fn(*args)
    finally:
        setattr(state, name, saved)


def _with_grad_enabled(fn, *args):
    """``fn(*args)`` with grad mode on (see ``OutputGraph.compile``)."""
    return _with_state("grad_enabled", True, fn, *args)


def _without_autocast(fn, *args):
    return _with_state("autocast", None, fn, *args)


def _running_without_autocast(compiled):
    """A graph captured inside an autocast region holds its casts as nodes: it must run (and be
    compiled, traced again by aot) with autocast off, or the casts would be applied twice."""

    def run(*args):
        return _without_autocast(compiled, *args)

    return run


def _is_module_state(source: Source, inputs: dict) -> bool:
    """Whether ``source`` reads a module's parameter or buffer (``self.fc.weight``), a
    parameter's gradient (``p.grad``) or an optimizer's state of a parameter
    (``opt.state[p]['exp_avg']``): tensors shaped like the parameters, which ``dynamic=True``
    leaves static as PyTorch does (its optimizer marks grads and state static). An optimizer
    step compiled with symbolic parameter shapes would tie a 16x3x3x3 weight's dims into one
    symbol and give every tiny update kernel loops of unknown trip count. The gradient of
    anything else (an input that ``requires_grad_()`` made a leaf) is shaped like that input:
    it follows it (``inputs``: the graph's input tensors by source; an unknown base counts as a
    parameter)."""
    from .sources import AttrSource, IdentityItemSource, ModuleTableSource

    if isinstance(source, AttrSource) and source.attr == "grad":
        base = inputs.get(source.base)
        return base is None or base._is_param or _is_module_state(source.base, inputs)
    while source is not None:
        if isinstance(source, ModuleTableSource):
            return True
        if isinstance(source, IdentityItemSource) and getattr(source.index, "_is_param", False):
            return True
        source = getattr(source, "base", None)
    return False


class OutputGraph:
    """State shared by the root translator and every inlined call during one capture."""

    def __init__(
        self, ctx, name: str, dynamic_scalars: frozenset = frozenset(),
        changing_scalars: frozenset = frozenset(), shape_policy: ShapePolicy | None = None,
    ):  # fmt: skip
        self.ctx = ctx
        self.name = name
        # sources of ints/floats that changed between calls: met by a tensor in arithmetic,
        # they are 0-dim tensor inputs (``scalar_input``: no recompile for the next value, as
        # PyTorch's automatic dynamic ints); other uses bake the value in (guarded), unless
        # it changed too often (``dynamic_scalars``): then such a use is a graph break
        self.changing_scalars = changing_scalars | dynamic_scalars
        self.dynamic_scalars = dynamic_scalars
        self._scalar_vts: dict[Source, Any] = {}
        self.graph = Graph()
        self.mode = TracingMode(self.graph)
        self.guards = GuardSet()
        self.guards.global_state()
        # symbolic sizes: the env of this capture, the policy choosing symbolic dims, symbols
        # by duck-sizing key, where each symbol's value is read at run time (for rebuilding
        # sizes in the transformed code) and the sizes of the tensor inputs (by source name)
        self.shape_env = ShapeEnv()
        self.shape_env.location = self._location
        self.mode.shape_env = self.shape_env
        self.guards.shape_env = self.shape_env
        self.shape_policy = shape_policy or ShapePolicy(ctx.dynamic, {}, {}, name)
        self._duck: dict = {}
        self._int_vts: dict = {}
        self.symbol_reads: dict = {}
        self.input_shapes: dict[str, tuple] = {}
        self.input_strides: dict[str, tuple] = {}
        self.side_effects = SideEffects()
        state = per_thread.state  # the capturing thread's: the frame was called in it
        self.grad_enabled = state.grad_enabled
        self.entry_grad_enabled = self.grad_enabled  # the mode the frame was called in
        # inside a captured ``inference_mode()`` block: what is_inference_mode_enabled() reads
        # there (the graph's ops run as under no_grad, as torch.compile's do)
        self.inference_mode = state.inference_mode
        # the autocast configuration ops are traced under; the graph records their casts
        self.autocast = state.autocast
        self._autocast_at_entry = self.autocast
        # run-time exits of autocast blocks entered before this frame's capture began and left
        # in it (``AutocastExit``), called after the graph in order
        self.autocast_exits: list = []
        # the graph ends where a gradient is taken with create_graph=True: it runs with the
        # eager ops (a differentiable history) instead of as a compiled region
        self.differentiable = False
        self.inputs: list[tuple[Source, Tensor]] = []
        # tensor inputs from the frame's locals: (source, proxy, its version when made), and
        # the pairs of them viewing overlapping memory
        self._local_inputs: list[tuple[Source, Tensor, int]] = []
        self.overlapping_inputs: list[tuple[Source, Source]] = []
        # inputs with autograd history (not leaves): (source, proxy, its stand-in grad_fn)
        self._with_history: list[tuple[Source, Tensor, Any]] = []
        self._input_vts: dict[int, Any] = {}
        self._input_by_source: dict[Source, Tensor] = {}
        self._proxy_vts: dict[int, Any] = {}
        self._tracked: dict[int, tuple[Any, Any]] = {}
        self._cells: dict[int, Any] = {}
        self._cell_sources: dict[int, Source] = {}  # where each of those cells is read
        self._names: set[str] = set()
        self.instruction_count = 0
        self.current_tx = None  # the translator evaluating the current instruction

    def effects_mark(self) -> tuple:
        """What an instruction's evaluation can add to the capture (graph nodes, inputs, guards,
        size guards and symbols, side effects, modes), as sizes and flags: equal before and
        after an instruction that raised, it changed nothing here."""
        side = self.side_effects
        return (
            self.graph._len,
            self.graph._edits,
            len(self.guards),
            len(self.guards.ns.pending),
            len(self.shape_env.guards),
            len(self.shape_env.symbols),
            len(self.inputs),
            len(self._local_inputs),
            len(self._input_vts),
            len(self._proxy_vts),
            len(self._tracked),
            len(self._cells),
            len(self._scalar_vts),
            len(self.symbol_reads),
            len(self.mode.attributes),
            len(side.containers),
            len(side.attrs),
            len(side.globals),
            len(side.cells),
            len(self.autocast_exits),
            self.grad_enabled,
            self.inference_mode,
            self.autocast,
            self.differentiable,
        )

    def count_instruction(self) -> None:
        self.instruction_count += 1
        if self.instruction_count > config.instruction_limit:
            raise unsupported(
                "unsupported_bytecode",
                f"more than {config.instruction_limit} instructions to evaluate (a long loop?)",
            )

    # ------------------------------------------------------------------ variables
    def input_tensor(self, tensor: Tensor, source: Source | None):
        """The variable of a real tensor: a placeholder (guarded) or, without a source, a
        constant of the graph."""
        from .variables.tensor import TensorVariable, make_fake_like, mark_history

        vt = self._input_vts.get(id(tensor))
        if vt is not None and vt.example is tensor:
            if source is not None and vt.source is not None and source != vt.source:
                self.guards.same_object(source, vt.source)
            return vt
        if tensor._data is None:
            raise TypeError("fake tensors cannot be inputs of a compiled function")
        if source is None:
            node = self.mode.node_of(tensor)  # a get_attr constant
            proxy = make_fake_like(tensor)
            proxy._requires_grad = tensor._requires_grad
            self.bind_proxy(proxy, node)
            vt = TensorVariable(proxy, None, tensor)
        else:
            if self.current_tx is not None:
                self.mode.current_source, self.mode.current_source_text = (
                    self.current_tx.source_location()
                )
            name = source.name()
            dims = self.shape_policy.dims_for(
                name, tensor, _is_module_state(source, self._input_by_source)
            )
            history = self.shape_policy.seen.get(name)
            if history is not None and len(history) != tensor.ndim:
                history = None
            fake, bindings = (
                symbolic_fake(
                    self.shape_env,
                    tensor,
                    name,
                    dims,
                    self._duck,
                    history,
                    self.shape_policy.seen_strides.get(name),
                )  # fmt: skip
                if dims
                else (None, [])
            )
            distinct = isinstance(source, LocalSource) or isinstance(source.root(), LocalSource)
            if distinct:
                self._note_overlap(tensor, source)
            proxy = self.mode.placeholder(self._placeholder_name(source), tensor, fake)
            if distinct:
                self._local_inputs.append((source, proxy, proxy._version))
            self.guards.tensor_match(source, tensor, distinct=distinct, fake=fake,
                                     bindings=bindings)  # fmt: skip
            for d, symbol, first, kind in bindings:
                if first and kind == "size":
                    self.symbol_reads[symbol] = (source, "source", d)
                elif kind == "stride":
                    self.symbol_reads[symbol] = (source, "stride", d)
            self.inputs.append((source, tensor))
            self._input_by_source[source] = tensor
            self.input_shapes[name] = tuple(tensor._shape)
            self.input_strides[name] = tuple(tensor.stride())
            vt = TensorVariable(proxy, source, tensor)
            if tensor._requires_grad and tensor.grad_fn is not None:
                self._with_history.append((source, proxy, mark_history(proxy)))
        self._input_vts[id(tensor)] = vt
        self._proxy_vts[id(proxy)] = vt
        return vt

    def _note_overlap(self, tensor: Tensor, source: Source) -> None:
        """Two inputs viewing overlapping memory (``f(base[:4], base[2:])``; a language model's
        ``data, targets = source[i : i + n], source[i + 1 : i + 1 + n]``): the graph treats them
        as separate buffers, which holds as long as it writes to no input (checked once it is
        complete: ``check_overlapping_inputs``)."""
        for other_source, other in self.inputs:  # (ints of symbolic sizes are inputs too)
            if (
                isinstance(other, Tensor)
                and other is not tensor
                and other._storage is tensor._storage
                and overlapping(other, tensor)
            ):
                self.overlapping_inputs.append((source, other_source))
                return

    def check_overlapping_inputs(self) -> None:
        """A graph that writes to an input while two inputs overlap runs eagerly: a write
        through one must show in the other. One that writes to none computes the same however
        its inputs alias, so the guard that they view apart is dropped."""
        if not self.overlapping_inputs:
            return
        written = [
            s.name() for s, proxy, version in self._local_inputs if proxy._version != version
        ]
        if written:
            first, second = self.overlapping_inputs[0]
            raise unsupported(
                "overlapping_inputs",
                f"{first.name()} and {second.name()} view overlapping memory and the graph "
                f"writes to {written[0]}",
            )
        self.guards.allow_overlapping_inputs()

    def guard_written_histories(self) -> None:
        """An input with history that the graph wrote in place (its proxy's grad_fn moved
        off its stand-in) relied on not being a leaf: a leaf that requires grad must refuse the
        write as eager does, so a later call with one captures again."""
        for source, proxy, stand_in in self._with_history:
            if proxy.grad_fn is not stand_in:
                self.guards.has_history(source)

    def symbolic_int(self, value: int, source: Source):
        """The variable of an int read from ``source`` whose value changed between calls (or
        any int argument under ``dynamic=True``): a symbol the graph takes as an int input
        (guarded on its type only), so a new value needs no recompile. None: bake it in."""
        name = source.name()
        if self.ctx.dynamic is False or value in (0, 1) or name in self.shape_policy.static_ints:
            return None
        if name not in self.changing_scalars and not (
            self.ctx.dynamic is True and isinstance(source, LocalSource)
        ):
            return None
        from ..runtime.sym_expr import INF
        from .variables.base import ConstantVariable

        vt = self._int_vts.get(source)
        if vt is not None:
            return vt
        symbol = self.shape_env.create_symbol(value, name, lower=-INF)
        symint = self.shape_env.symint(symbol)
        if self.current_tx is not None:
            self.mode.current_source, self.mode.current_source_text = (
                self.current_tx.source_location()
            )
        self.mode.placeholder(self._placeholder_name(source), symint)
        self.guards.symbolic_int(source, symbol)
        self.inputs.append((source, value))
        self.symbol_reads[symbol] = (source, "int", None)
        vt = self._int_vts[source] = ConstantVariable(symint)
        klog.log("recompiles", f"{self.name}: int {name} = {value} is symbolic ({symbol.name})")
        return vt

    def scalar_input(self, number, dtype):
        """The graph input standing for ``number`` (a ConstantVariable read from a source whose
        value changes between calls, see ``changing_scalars``): a 0-dim tensor of ``dtype``
        made from the number at each call, guarded only on the number's type."""
        from .sources import ScalarTensorSource, _scalar_tensor
        from .variables.tensor import TensorVariable

        value, source = number.value, number.source
        key = ScalarTensorSource(source, dtype)
        vt = self._scalar_vts.get(key)
        if vt is None:
            self.guards.type_match(source, value)
            example = _scalar_tensor(value, dtype)
            proxy = self.mode.placeholder(self._placeholder_name(key), example)
            self.inputs.append((key, example))
            vt = self._scalar_vts[key] = TensorVariable(proxy, key, example)
            self._proxy_vts[id(proxy)] = vt
        return vt

    def _placeholder_name(self, source: Source) -> str:
        name = re.sub(r"\W+", "_", source.name()).strip("_") or "input"
        if name[0].isdigit():
            name = "_" + name
        base, n = name, 1
        while name in self._names:
            name = f"{base}_{n}"
            n += 1
        self._names.add(name)
        return name

    def proxy_variable(self, proxy: Tensor):
        """The variable of a proxy returned by kiln code (None if no node produced it)."""
        from .variables.tensor import TensorVariable

        vt = self._proxy_vts.get(id(proxy))
        if vt is not None and vt.proxy is proxy:
            return vt
        try:
            self.mode.node_of(proxy)
        except RuntimeError:
            return None
        vt = TensorVariable(proxy)
        self._proxy_vts[id(proxy)] = vt
        self._note_unbacked(vt)
        return vt

    def _note_unbacked(self, vt) -> None:
        """A data-dependent size of a new tensor (``nonzero``'s rows) is read at run time from
        that tensor (a graph output then), when the transformed code needs its value."""
        for d, size in enumerate(vt.proxy._shape):
            symbol = getattr(getattr(size, "expr", None), "as_symbol", lambda: None)()
            if symbol is not None and symbol.unbacked and symbol not in self.symbol_reads:
                self.symbol_reads[symbol] = (vt, "size", d)

    def _location(self) -> str | None:
        tx = self.current_tx
        return tx.source_location()[0] if tx is not None else None

    def bind_proxy(self, proxy: Tensor, node) -> None:
        """Make ``proxy`` stand for ``node`` (for nodes the dynamo frontend records itself)."""
        self.mode._bind(proxy, node)

    def track(self, value: Any, vt) -> None:
        self._tracked[id(value)] = (value, vt)

    def tracked_variable(self, value: Any, source: Source | None = None):
        """The variable already made for ``value`` (guarding that ``source`` still aliases it)."""
        entry = self._tracked.get(id(value))
        if entry is None or entry[0] is not value:
            return None
        vt = entry[1]
        if source is not None and vt.source is not None and source != vt.source:
            self.guards.same_object(source, vt.source)
        return vt

    def cell_variable(self, cell, name: str, cell_source=None):
        """The variable of a real closure cell (of an inlined function); ``cell_source``: where
        the cell is read when the function itself is only known by its code (a local one)."""
        from .sources import AttrSource, CellSource
        from .variables.builder import wrap
        from .variables.functions import UNBOUND, CellVariable

        entry = self._cells.get(id(cell))
        if entry is not None:
            first = self._cell_sources.get(id(cell))
            if cell_source is not None and first is not None and first != cell_source:
                self.guards.same_object(cell_source, first)  # the graph relies on the alias
            return entry
        if cell_source is not None:
            contents_source = AttrSource(cell_source, "cell_contents")
        else:
            contents_source = CellSource(cell, name)
        try:
            contents = wrap(self, cell.cell_contents, contents_source)
        except ValueError:
            contents = UNBOUND
        if cell_source is not None:
            vt = CellVariable(contents, cell_source=cell_source)
        else:
            vt = CellVariable(contents, cell=cell)
        self.register_cell(cell, vt, cell_source)
        return vt

    def register_cell(self, cell, vt, cell_source=None) -> None:
        """Make ``vt`` the one variable of the real ``cell``: a function that reaches the same
        cell through its ``__closure__`` (a local function passed to a resume function, which
        has the cell as its own free variable too) then reads and writes that variable."""
        self._cells[id(cell)] = vt
        if cell_source is not None:
            self._cell_sources[id(cell)] = cell_source

    def set_autocast(self, config) -> None:
        """Enter or leave a ``with autocast`` region (``config``: a ``_Config`` or None)."""
        self.autocast = config

    def set_grad_enabled(self, mode: bool) -> None:
        if mode != self.grad_enabled:
            self.graph.call_function(set_grad_enabled_node, (mode,))
            self.grad_enabled = mode

    # ------------------------------------------------------------------ compiling
    def op_count(self) -> int:
        return sum(
            1
            for n in self.graph.nodes
            if n.op == "call_function" and n.target is not set_grad_enabled_node
        )

    def creates_optimizer_state(self) -> bool:
        """Whether this graph's call adds parameters to an optimizer's ``state`` (its first
        step makes the momentum or moment buffers). Compiling such a graph is wasted: its
        guards name the parameters that have state, so it never runs again. (Where the frame
        does nothing after the step, capture stops at the first new entry instead:
        ``exc.CreatesOptimizerState``.)"""
        for container in self.side_effects.containers.values():
            before = getattr(container, "entries_before", None)
            if before is not None and len(container.items) > before:
                return True
        return False

    def has_graph(self, outputs: list) -> bool:
        """Whether there is anything to run: ops recorded, or tensors to produce."""
        return self.op_count() > 0 or bool(outputs)

    def compile(self, outputs: list):
        """Finish the graph with ``outputs`` (tensor variables) and compile it with the backend.

        Returns the callable the transformed code calls with the graph inputs.
        """
        self.mode.output(tuple(vt.proxy for vt in outputs))
        self.shape_env.settle_aliasing([vt.proxy for vt in outputs if isinstance(vt.proxy, Tensor)])
        self.graph.eliminate_dead_code()
        enables_grad = not self.entry_grad_enabled and any(
            n.target is set_grad_enabled_node and n.args[0] for n in self.graph.nodes
        )
        if enables_grad:
            # entered under no_grad, it switches grad on: the graph states its entry mode and
            # is compiled and run with grad enabled, so AOT builds the backward it needs
            first = next(n for n in self.graph.nodes if n.op != "placeholder")
            with self.graph.inserting_before(first):
                self.graph.call_function(set_grad_enabled_node, (False,))
        used = {n.target for n in self.graph.nodes if n.op == "get_attr"}
        attrs = {k: v for k, v in self.mode.attributes.items() if k in used}
        gm = GraphModule(attrs, self.graph, class_name=f"GraphModule_{self.name}")
        example_inputs = [t for _, t in self.inputs]
        if klog.enabled("graph") or klog.debug_dir():  # the source is written only if read
            klog.log("graph", f"captured graph for {self.name}:\n{gm.code}")
            klog.dump(f"{self.name}_graph", "py", gm.code)
        compile_graph = self.ctx.compile_graph
        if self.differentiable:
            klog.log("graph_breaks", f"{self.name} runs with the eager ops: a gradient of it is "
                     "taken with create_graph=True")  # fmt: skip
            compile_graph = _eager_graph
        elif self.creates_optimizer_state():
            # its guards hold the optimizer's parameters with state: the next call, which finds
            # the state this call creates, captures again; the graph runs once, as eager ops
            klog.log("recompiles", f"{self.name} runs with the eager ops this once: it creates "
                     "an optimizer's state (the next call compiles the steady step)")  # fmt: skip
            compile_graph = _eager_graph
        if enables_grad:
            compile_graph = functools.partial(_with_grad_enabled, compile_graph)
        if self._autocast_at_entry is None:
            compiled = compile_graph(gm, example_inputs, self.name)
        else:
            compiled = _without_autocast(compile_graph, gm, example_inputs, self.name)
        self.ctx.record_graph(gm, self.op_count(), self.name)
        if enables_grad:
            compiled = functools.partial(_with_grad_enabled, compiled)
        if any(n.target is set_grad_enabled_node for n in self.graph.nodes):
            compiled = _restoring_grad_mode(compiled)
        if self._autocast_at_entry is not None:
            compiled = _running_without_autocast(compiled)
        return compiled


def _eager_graph(gm: GraphModule, example_inputs: list, name: str) -> Callable:
    """The graph as its module's forward: kiln ops whose history a later gradient with
    ``create_graph=True`` differentiates again (a compiled region's backward cannot be)."""
    return gm.forward
