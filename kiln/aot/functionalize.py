"""Functionalization: rewrite a traced graph so it has no in-place ops and no aliasing writes.

The pass walks the graph once, in order. Every tensor belongs to a *base* (a non-view node); a view
node remembers the chain of view ops from its base. An in-place op ``x.op_(...)`` becomes the
out-of-place ``op(...)``; if ``x`` is a view, the new value is written back into a new version of
the base with the matching ``*_scatter`` ops (slice_scatter, select_scatter, ...). Later reads of
the base or of any of its views are redirected to the newest version (views are regenerated from
it, lazily, right before the node that reads them). Graph inputs that were mutated are returned
as extra outputs so the caller can copy the new values back into the real tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Graph, Node
from ..ir.node import map_arg
from ..ops.core.registry import OPS, Op
from ..ops.shape.shape_functions import unfold_scatter
from ..ops.shape.views import reshape_aliases

__all__ = ["functionalize", "FunctionalizationResult", "UnsupportedMutationError", "is_view_node"]


class UnsupportedMutationError(RuntimeError):
    """An in-place write through a view kind the pass cannot invert (the graph stays eager)."""


@dataclass
class FunctionalizationResult:
    graph: Graph
    # (placeholder index, index of the new value in the output tuple) for each mutated input
    mutated_inputs: list = field(default_factory=list)
    # how many outputs the original graph had, and whether it returned a bare value
    num_outputs: int = 0
    single_output: bool = False


def is_view_node(node: Node) -> bool:
    """Whether ``node``'s result aliases its first argument: a view op, or a ``reshape`` that
    returned a view (a backend that lowers ``reshape`` itself keeps it whole in the trace, and a
    write through it must still reach the tensor it views)."""
    if node.op != "call_function" or not isinstance(node.target, Op) or not node.args:
        return False
    if node.target.is_view:
        return True
    if node.target is not OPS["reshape"] or not isinstance(node.args[0], Node):
        return False
    x = node.args[0].meta.get("val")
    # sizes computed in the graph (``sym_size`` nodes) stand for their recorded values
    shape = map_arg(node.args[1], lambda n: n.meta.get("val"))
    if x is None or any(s is None for s in shape):
        return False
    return reshape_aliases(x, shape)


def _is_inplace(node: Node) -> bool:
    return node.op == "call_function" and isinstance(node.target, Op) and node.target.inplace


def _layout(t) -> str:
    """The strides of ``t``'s dims longer than one (a size-1 dim is never stepped over), as
    text: symbolic sizes compare without adding guards."""
    return str([(d, st) for d, (n, st) in enumerate(zip(t.shape, t.stride())) if str(n) != "1"])


def _inverse_perm(dims):
    ndim = len(dims)
    dims = [d % ndim for d in dims]
    inv = [0] * ndim
    for i, d in enumerate(dims):
        inv[d] = i
    return inv


class _Functionalizer:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.alias_of: dict[Node, Node] = {}  # in-place node -> the tensor it returns
        self.base_cache: dict[Node, Node] = {}
        self.current: dict[Node, Node] = {}  # base -> node with its newest value
        self.version: dict[Node, int] = {}
        self.view_value: dict[Node, tuple[Node, int]] = {}
        # each view's parent as traced (args get rewritten to newer values as the pass goes)
        self.parent: dict[Node, Node] = {}

    # ------------------------------------------------------------------ alias structure
    def source(self, node: Node) -> Node:
        """The tensor a node stands for: an in-place node stands for its mutated argument."""
        while node in self.alias_of:
            node = self.alias_of[node]
        return node

    def base_of(self, node: Node) -> Node:
        node = self.source(node)
        cached = self.base_cache.get(node)
        if cached is not None:
            return cached
        base = node
        while base in self.parent:
            base = self.source(self.parent[base])
        self.base_cache[node] = base
        return base

    def chain_of(self, node: Node) -> list[Node]:
        """View nodes from the base (exclusive) down to ``node`` (inclusive)."""
        chain = []
        n = self.source(node)
        while n in self.parent:
            chain.append(n)
            n = self.source(self.parent[n])
        chain.reverse()
        return chain

    # ------------------------------------------------------------------ reads and writes
    def new_node(self, target, args, like: Node | None, anchor: Node) -> Node:
        with self.graph.inserting_before(anchor):
            node = self.graph.call_function(target, args)
        if like is not None:
            node.meta = dict(like.meta)
        return node

    def cast_back(self, functional: Op, value: Node, inplace: Node) -> Node:
        """An in-place op keeps its input's dtype where its functional form promotes (``cumsum_``
        of int32 computes int64, then writes int32): cast the functional result back."""
        want = getattr(inplace.meta.get("val"), "dtype", None)
        if functional.meta is None or want is None:
            return value
        try:
            got = functional.meta(*map_arg(tuple(value.args), lambda n: n.meta.get("val")))
        except Exception:  # noqa: BLE001 - a meta that cannot rerun here keeps the old record
            return value
        if getattr(got, "dtype", want) is want:
            return value
        value.meta = dict(value.meta, val=got)
        cast = self.new_node(OPS["convert_element_type"], (value, want), inplace, inplace)
        return cast

    def keep_layout(self, functional: Op, value: Node, inplace: Node, target: Node) -> Node:
        """An in-place op leaves its tensor's strides alone, but its functional form may lay the
        result out its own way (index_add, scatter, cumsum, masked_fill: row-major): for an
        intermediate whose strides differ, copy the result into them (``copy_``'s functional
        form), so later views and the graph's outputs have eager's strides. Inputs are copied
        back into their own memory, views scattered into their base: both keep theirs."""
        src = self.source(target)
        want = inplace.meta.get("val")
        if src.op == "placeholder" or src in self.parent or want is None:
            return value
        args = map_arg(tuple(value.args), lambda n: n.meta.get("val"))
        try:
            got = functional.meta(*args) if functional.meta is not None else None
        except Exception:  # noqa: BLE001 - a meta that cannot rerun here: judge by want alone
            got = None
        if got is not None and _layout(got) == _layout(want):
            return value
        if got is None and want.is_contiguous():
            return value  # the decompositions' results are row-major unless they say otherwise
        if got is not None:
            value.meta = dict(value.meta, val=got)
        old = self.read(target, inplace)
        return self.new_node(OPS["copy_"].functional, (old, value), inplace, inplace)

    def read(self, node: Node, anchor: Node) -> Node:
        """The node holding ``node``'s value as of now (regenerating views after mutations)."""
        src = self.source(node)
        base = self.base_of(src)
        v = self.version.get(base, 0)
        if v == 0:
            return src
        if src is base:
            return self.current[base]
        cached = self.view_value.get(src)
        if cached is not None and cached[1] == v:
            return cached[0]
        value = self.current[base]
        for view in self.chain_of(src):
            value = self.replay(view, value, anchor)
        self.view_value[src] = (value, v)
        return value

    def replay(self, view: Node, value: Node, anchor: Node) -> Node:
        """``view``'s op applied to ``value``, a functional value of its parent. A written value
        need not have the layout the parent had in eager (a functional ``fill`` of a transposed
        view is contiguous), so ``view`` replays as ``reshape``: the same elements, viewed where
        the layout allows and copied where not (PyTorch's ``view_copy``)."""
        target = OPS["reshape"] if view.target is OPS["view"] else view.target
        return self.new_node(target, (value,) + tuple(view.args[1:]), view, anchor)

    def write(self, target: Node, new_value: Node, anchor: Node) -> None:
        """Record that tensor ``target`` now holds ``new_value``."""
        base = self.base_of(target)
        chain = self.chain_of(target)
        if chain:
            # values along the chain as of now, then scatter the new value back up to the base
            values = [self.read(base, anchor)]
            for view in chain[:-1]:
                values.append(self.replay(view, values[-1], anchor))
            updated = new_value
            for view, parent_value in zip(reversed(chain), reversed(values)):
                updated = self.scatter(view, parent_value, updated, anchor)
            new_value = updated
        self.version[base] = self.version.get(base, 0) + 1
        self.current[base] = new_value

    def scatter(self, view: Node, parent_value: Node, new: Node, anchor: Node) -> Node:
        """The parent's value with the region ``view`` selects replaced by ``new``."""
        name = view.target.name
        rest = tuple(view.args[1:])
        like = view.args[0] if isinstance(view.args[0], Node) else None
        meta_like = self.source(like) if like is not None else None
        if name in ("slice", "select", "diagonal", "as_strided"):
            return self.new_node(
                OPS[name + "_scatter"], (parent_value, new) + rest, meta_like, anchor
            )
        if name == "permute":
            return self.new_node(OPS["permute"], (new, _inverse_perm(rest[0])), meta_like, anchor)
        if name in ("view", "reshape", "squeeze", "unsqueeze", "alias"):
            # reshape, not view: ``new`` has the layout its op gave it, not the view's
            shape = tuple(meta_like.meta["val"].shape)
            return self.new_node(OPS["reshape"], (new, shape), meta_like, anchor)
        if name == "unfold":
            _, size, step = rest
            if step < size:  # eager writes overlapping windows' shared elements once per window
                raise UnsupportedMutationError(
                    "in-place write through an unfold view with overlapping windows "
                    f"(size {size}, step {step}) cannot be functionalized"
                )
            return self.new_node(unfold_scatter, (parent_value, new) + rest, meta_like, anchor)
        if name == "expand":
            # only fill_ writes through an expanded view (other in-place ops refuse it): every
            # copy of an element holds the same value, so the first copy is the parent's
            shape = tuple(meta_like.meta["val"].shape)
            value = new
            for _ in range(len(view.meta["val"].shape) - len(shape)):
                value = self.new_node(OPS["select"], (value, 0, 0), None, anchor)
            for dim, size in enumerate(shape):
                if str(size) == "1" and str(value.meta["val"].shape[dim]) != "1":
                    value = self.new_node(OPS["slice"], (value, dim, 0, 1, 1), None, anchor)
            return value
        if name == "view_as_real":  # the (real, imag) pairs rebuild the complex parent
            parts = [self.new_node(OPS["select"], (new, -1, i), None, anchor) for i in (0, 1)]
            return self.new_node(OPS["complex"], tuple(parts), meta_like, anchor)
        if name == "view_as_complex":
            return self.new_node(OPS["view_as_real"], (new,), meta_like, anchor)
        raise UnsupportedMutationError(
            f"in-place write through a '{name}' view cannot be functionalized"
        )

    # ------------------------------------------------------------------ the pass
    def run(self) -> FunctionalizationResult:
        graph = self.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node in list(graph.nodes):
            if node.op in ("placeholder", "get_attr"):
                continue
            if node.op == "output":
                node.args = map_arg(node.args, lambda n: self.read(n, node))
                break
            original_target = node.args[0] if node.args else None
            viewing = is_view_node(node)  # asked before the arguments are redirected
            if viewing:
                self.parent[node] = original_target
            node.args = map_arg(node.args, lambda n: self.read(n, node))
            node.kwargs = map_arg(node.kwargs, lambda n: self.read(n, node))
            if viewing:
                base = self.base_of(node)
                version = self.version.get(base, 0)
                if version and node.target is OPS["view"]:
                    node.target = OPS["reshape"]  # it now reads a written value (see replay)
                self.view_value[node] = (node, version)
                continue
            if not _is_inplace(node):
                continue
            op = node.target
            functional = op.functional
            if functional is None:
                raise UnsupportedMutationError(f"in-place op {op.name} has no functional variant")
            new_value = self.new_node(functional, tuple(node.args), node, node)
            new_value = self.cast_back(functional, new_value, node)
            new_value = self.keep_layout(functional, new_value, node, original_target)
            self.alias_of[node] = original_target
            self.write(original_target, new_value, node)
        # mutated graph inputs come back as extra outputs
        out_node = graph.output_node
        outputs = out_node.args[0]
        single = not isinstance(outputs, (tuple, list))
        outputs = [outputs] if single else list(outputs)
        result = FunctionalizationResult(graph, num_outputs=len(outputs), single_output=single)
        extra = []
        for i, ph in enumerate(placeholders):
            if self.version.get(ph, 0):
                result.mutated_inputs.append((i, len(outputs) + len(extra)))
                extra.append(self.current[ph])
        if extra:
            out_node.args = (tuple(outputs) + tuple(extra),)
        # in-place nodes are now dead (their users read the functional values): remove them
        for node in reversed(list(graph.nodes)):
            if _is_inplace(node) and not node.users:
                graph.erase_node(node)
        graph.eliminate_dead_code()
        return result


def functionalize(graph: Graph) -> FunctionalizationResult:
    """Rewrite ``graph`` in place into a mutation-free graph (see the module docstring)."""
    return _Functionalizer(graph).run()
