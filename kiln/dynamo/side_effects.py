"""Python-visible mutations made by captured code, replayed after the graph runs.

The evaluator never mutates real objects. It records: contents of pre-existing lists, dicts and
sets that were changed; attribute writes on objects and modules; writes to globals and to the
cells of closures. Reads see the pending values. The transformed code then applies the final
state of each, in the order first touched, after every value it needs has been computed (so
``a.x, a.y = a.y, a.x`` swaps correctly).
"""

from __future__ import annotations

from bytecode import Instr

from .exc import unsupported

__all__ = ["SideEffects"]


def _replace_list(target, items: list) -> None:
    if isinstance(target, list):
        target[:] = items
    else:  # a deque
        target.clear()
        target.extend(items)


def _replace_dict(target: dict, items: dict) -> None:
    target.clear()
    target.update(items)


def _replace_set(target: set, items: set) -> None:
    target.clear()
    target.update(items)


class SideEffects:
    """Pending mutations, keyed by the variable (one per real object) they apply to."""

    def __init__(self):
        self.containers: dict[int, object] = {}  # id(variable) -> mutated container variable
        self.attrs: dict[tuple[int, str], tuple] = {}  # (id(obj vt), name) -> (obj vt, value)
        self.globals: dict[tuple[int, str], tuple] = {}  # (id(dict), name) -> (dict, value)
        self.cells: dict[int, tuple] = {}  # id(cell variable) -> (cell variable, value)

    def __bool__(self) -> bool:
        return bool(self.containers or self.attrs or self.globals or self.cells)

    # ------------------------------------------------------------------ recording
    def mutated(self, container) -> None:
        """``container`` (a list/dict/set variable) changed; replay it if it existed before."""
        if container.source is not None:
            self.containers[id(container)] = container

    def store_attr(self, obj, name: str, value) -> None:
        self.attrs[(id(obj), name)] = (obj, name, value)

    def pending_attr(self, obj, name: str):
        entry = self.attrs.get((id(obj), name))
        return None if entry is None else entry[2]

    def store_global(self, globals_dict: dict, name: str, value) -> None:
        self.globals[(id(globals_dict), name)] = (globals_dict, name, value)

    def pending_global(self, globals_dict: dict, name: str):
        entry = self.globals.get((id(globals_dict), name))
        return None if entry is None else entry[2]

    def store_cell(self, cell, value) -> None:
        """A closure cell that existed before the capture (a ``CellVariable``) was assigned:
        the cell object is rebuilt from where it was found (a constant, the frame's closure, a
        local function's ``__closure__``), so the write lands in the running instance's cell."""
        self.cells[id(cell)] = (cell, value)

    def prune_dead_objects(self, roots: list) -> None:
        """Forget attribute writes on objects created during capture that nothing reachable
        from ``roots`` (what the transformed code rebuilds) or from a replayed mutation refers
        to: such objects never need to exist at run time."""
        from .variables.base import VariableTracker
        from .variables.misc import NewObjectVariable

        fields: dict[int, list] = {}
        for obj, _, value in self.attrs.values():
            if isinstance(obj, NewObjectVariable):
                fields.setdefault(id(obj), []).append(value)
        if not fields:
            return
        stack = list(roots)
        stack += [v for o, _, v in self.attrs.values() if not isinstance(o, NewObjectVariable)]
        stack += [v for _, _, v in self.globals.values()] + [v for _, v in self.cells.values()]
        stack += list(self.containers.values())
        seen: set[int] = set()
        while stack:
            item = stack.pop()
            if isinstance(item, (list, tuple, set, frozenset)):
                stack.extend(item)
                continue
            if isinstance(item, dict):
                stack.extend(item.values())
                continue
            if not isinstance(item, VariableTracker) or id(item) in seen:
                continue
            seen.add(id(item))
            stack.extend(fields.get(id(item), ()))
            stack.extend(vars(item).values())
        self.attrs = {
            key: entry
            for key, entry in self.attrs.items()
            if not isinstance(entry[0], NewObjectVariable) or id(entry[0]) in seen
        }

    # ------------------------------------------------------------------ code generation
    def values(self) -> list:
        """Every variable the replay reads (prepared before any mutation runs)."""
        out: list = []
        for container in self.containers.values():
            out.append(container)
            items = getattr(container, "items", ())  # a set holds constants only
            if isinstance(items, dict):
                out.extend(container.key_variables())
                out.extend(items.values())
            else:
                out.extend(items)
        for obj, _, value in self.attrs.values():
            out += [obj, value]
        out += [value for _, _, value in self.globals.values()]
        for cell, value in self.cells.values():
            out += [cell, value]
        return out

    def codegen_dropped_gradients(self, cg) -> None:
        """``t.grad = None`` on tensors from outside the capture (``zero_grad``'s
        ``set_to_none``), written before the graph runs instead of after it: it only drops a
        reference, the graph's inputs are loaded by then, and the old gradients' memory is free
        while the graph runs, as in eager code, where ``zero_grad`` runs before the forward
        (otherwise a training step's forward would run with last step's gradients alive)."""
        from .variables.base import ConstantVariable
        from .variables.tensor import TensorVariable

        for key, (obj, name, value) in self.attrs.items():
            if (
                name == "grad"
                and isinstance(obj, TensorVariable)
                and obj.source is not None
                and isinstance(value, ConstantVariable)
                and value.value is None
            ):
                cg.load_const(None)
                obj.source.reconstruct(cg)
                cg.append(Instr("STORE_ATTR", "grad"))
                cg.written_early.add(key)

    def codegen(self, cg) -> None:
        from .variables.dicts import DictVariable, load_key
        from .variables.lists import ListVariable, SetVariable

        for container in self.containers.values():
            if isinstance(container, ListVariable):
                cg.load_callable(_replace_list)
                cg.load(container)
                for item in container.items:
                    cg.load(item)
                cg.append(Instr("BUILD_LIST", len(container.items)))
            elif isinstance(container, DictVariable):
                cg.load_callable(_replace_dict)
                cg.load(container)
                for key, value in container.items.items():
                    load_key(cg, key)
                    cg.load(value)
                cg.append(Instr("BUILD_MAP", len(container.items)))
            elif isinstance(container, SetVariable):
                cg.load_callable(_replace_set)
                cg.load(container)
                cg.load_const(frozenset(container.values))
            else:
                raise unsupported("side_effect", f"replaying a mutation of {container}")
            cg.call(2)
            cg.append(Instr("POP_TOP"))
        for key, (obj, name, value) in self.attrs.items():
            if key in cg.written_early:
                continue
            cg.load(value)
            cg.load(obj)
            cg.append(Instr("STORE_ATTR", name))
        for globals_dict, name, value in self.globals.values():
            cg.load(value)
            if globals_dict is cg.globals:
                cg.append(Instr("STORE_GLOBAL", name))
            else:
                cg.load_const(globals_dict)
                cg.load_const(name)
                cg.append(Instr("STORE_SUBSCR"))
        for cell, value in self.cells.values():
            cg.load(value)
            cg.load(cell)
            cg.append(Instr("STORE_ATTR", "cell_contents"))

    def describe(self) -> list[str]:
        """One line per pending mutation, for logs."""
        lines = [f"mutate {c}" for c in self.containers.values()]
        lines += [f"set {obj}.{name}" for obj, name, _ in self.attrs.values()]
        lines += [f"set global {name}" for _, name, _ in self.globals.values()]
        lines += ["set a closure cell" for _ in self.cells.values()]
        return lines
