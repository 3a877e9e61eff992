"""``GraphModule``: a ``kiln.nn.Module`` whose ``forward`` is Python generated from a graph.

The attributes that ``get_attr`` nodes read are copied from ``root`` (a Module or a dict of
qualified names); tensors and Parameters are shared, not cloned, so an optimizer updating the
original module's parameters is seen here. The generated source (``gm.code``) is compiled under
a fake file name kept in ``linecache``, so tracebacks and debuggers show the generated line, and
each of its lines maps back to the user's source for tracers that replay the module.

Setting ``graph`` generates nothing yet: most graphs a compile builds (dynamo's, the forward and
backward AOT hands the inductor, those rebuilt from the compile caches) are lowered, never run
as Python, and writing plus compiling their source is a tenth of a warm compile. The source is
written on first use of ``forward``, ``code`` or the printed forms; ``recompile()`` writes it now.
"""

from __future__ import annotations

import copy
import itertools
import linecache
import textwrap
import weakref
from collections.abc import Mapping
from typing import Any

from ..nn import Module, Parameter
from ..runtime.tensor import Tensor
from .codegen import generate_code
from .dot import graph_to_dot
from .graph import Graph
from .passes import fetch_attr
from .printing import print_graph
from .source import forget_generated, register_generated

__all__ = ["GraphModule"]

_file_counter = itertools.count()


def _drop_generated(files: list) -> None:
    for filename in files:
        linecache.cache.pop(filename, None)
        forget_generated(filename)
    files.clear()


def _assign_attr(value: Any, module: Module, qualified_name: str) -> None:
    """Set ``module.<a.b.c> = value``, creating empty container modules for ``a`` and ``b``."""
    *path, field = qualified_name.split(".")
    for item in path:
        child = getattr(module, item, None)
        if child is None:
            child = Module()
            setattr(module, item, child)
        elif not isinstance(child, Module):
            raise AttributeError(f"cannot place {qualified_name!r}: {item!r} is not a Module")
        module = child
    if isinstance(value, Tensor) and not isinstance(value, (Parameter, Module)):
        module.register_buffer(field, value)
    else:
        setattr(module, field, value)


class GraphModule(Module):
    """A Module running ``graph`` (see the module docstring)."""

    def __new__(cls, *args, **kwargs):
        # each instance gets its own class so ``forward`` can be a class attribute (as in FX)
        base = cls
        while base.__dict__.get("_one_instance_class", False):
            base = base.__bases__[0]
        own = type(base.__name__, (base,), {"_one_instance_class": True})
        own.__module__ = base.__module__
        return super().__new__(own)

    def __init__(
        self, root: Module | Mapping[str, Any], graph: Graph, class_name: str = "GraphModule"
    ):
        super().__init__()
        type(self).__name__ = class_name
        type(self).__qualname__ = class_name
        object.__setattr__(self, "_class_name", class_name)
        object.__setattr__(self, "_generated_files", [])
        weakref.finalize(self, _drop_generated, self._generated_files)
        for node in graph.nodes:
            if node.op != "get_attr":
                continue
            if isinstance(root, Module):
                value = fetch_attr(root, node.target)
            elif isinstance(root, Mapping):
                value = (
                    root[node.target]
                    if node.target in root
                    else fetch_attr(_MappingRoot(root), node.target)
                )
            else:
                raise TypeError(f"GraphModule root must be a Module or a dict, got {type(root)}")
            _assign_attr(value, self, node.target)
        self.graph = graph

    # ---------------------------------------------------------------- graph and code
    @property
    def graph(self) -> Graph:
        return self._graph

    @graph.setter
    def graph(self, graph: Graph) -> None:
        object.__setattr__(self, "_graph", graph)
        graph.owning_module = self
        # written on first use (see the module docstring)
        object.__setattr__(self, "_code", None)
        type(self).forward = _PendingForward(self)

    @property
    def code(self) -> str:
        """The Python source of ``forward``."""
        if self._code is None:
            self.recompile()
        return self._code

    def recompile(self) -> str:
        """Regenerate ``forward`` from the (possibly edited) graph; returns the new source."""
        code = generate_code(self._graph)
        filename = f"<kiln-graph-{next(_file_counter)}>"
        _drop_generated(self._generated_files)
        linecache.cache[filename] = (len(code.src), None, code.src.splitlines(True), filename)
        self._generated_files.append(filename)
        register_generated(
            filename,
            {
                line: (node.meta["source"], node.meta.get("source_text"))
                for line, node in code.line_nodes.items()
                if node.meta.get("source")
            },
        )
        namespace = dict(code.globals)
        exec(compile(code.src, filename, "exec"), namespace)
        type(self).forward = namespace["forward"]
        object.__setattr__(self, "_code", code.src)
        return code.src

    def add_attribute(self, qualified_name: str, value: Any) -> None:
        """Store a tensor/Module at a dotted path, for new get_attr nodes to read."""
        _assign_attr(value, self, qualified_name)

    # ---------------------------------------------------------------- views
    def print_readable(self, print_output: bool = True) -> str:
        """The module as a class definition with the generated, shape-commented forward."""
        text = f"class {self._class_name}(kiln.nn.Module):\n" + textwrap.indent(self.code, "    ")
        if print_output:
            print(text)
        return text

    def print_tabular(self) -> str:
        """Print (and return) the node table: name, op, target, args, shape, dtype, source."""
        return print_graph(self._graph)

    def to_dot(self) -> str:
        """Graphviz source for the graph."""
        return graph_to_dot(self._graph, self._class_name)

    def __str__(self) -> str:
        return f"{super().__repr__()}\n\n{self.code}"

    def __deepcopy__(self, memo) -> GraphModule:
        attrs = {
            n.target: copy.deepcopy(fetch_attr(self, n.target), memo)
            for n in self._graph.nodes
            if n.op == "get_attr"
        }
        return GraphModule(attrs, copy.deepcopy(self._graph, memo), self._class_name)


class _PendingForward:
    """``forward`` of a GraphModule whose source is not written yet: the first lookup, through
    the instance or its class, writes and compiles it (replacing this stand-in) and answers
    with the real function, so callers never see the difference."""

    def __init__(self, gm: GraphModule):
        # weak: the class holding this stand-in must not keep its one instance alive
        self._gm = weakref.ref(gm)

    def __get__(self, instance: Any, owner: type) -> Any:
        gm = self._gm()
        if gm is None:
            raise AttributeError("forward of a GraphModule that no longer exists")
        own = type(gm)
        if own.__dict__.get("forward") is self:
            gm.recompile()
        return own.__dict__["forward"].__get__(instance, owner)


class _MappingRoot:
    """Attribute access into a dict root whose values are Modules (``{"fc1": linear}``)."""

    def __init__(self, mapping: Mapping[str, Any]):
        self._mapping = mapping

    def __getattr__(self, name: str):
        try:
            return self._mapping[name]
        except KeyError:
            raise AttributeError(name) from None
