"""Guards: the conditions under which a captured graph is valid, compiled into one function.

While capturing, the evaluator adds guards on the sources it read (tensor metadata, constant
values, object identity, global state). ``GuardSet.compile`` writes them as the source of one
Python function with the frame's own signature (so calling it binds arguments at C speed) and
one ``if`` per check; any exception while checking means "no match". ``failure_reason`` runs the
checks one by one to say which failed (only on a cache miss, never on the hot path).
"""

from __future__ import annotations

import inspect
import math
import types
import weakref
from dataclasses import dataclass
from typing import Any

from ..nn.modules import _hooks
from ..nn.modules.module import Module
from ..runtime import dtypes as _dtypes
from ..runtime.code_cache import compile_source
from ..runtime.state import per_thread
from ..runtime.symbolic import SymInt
from ..runtime.tensor import Tensor
from .sources import GuardNamespace, HoistingNamespace, Source
from .symbolic_shapes import sym_var
from .variables.base import is_constant_value

__all__ = ["Guard", "GuardSet", "CompiledGuard", "signature_source"]

_CONSTANT_BY_IDENTITY = (type(None), bool, type(Ellipsis), type(NotImplemented))


@dataclass(frozen=True)
class Guard:
    """One check: ``expr`` is Python over the guard's parameters; ``text`` reads well in logs;
    ``setup`` assigns the hoisted source variables it is the first to use."""

    expr: str
    text: str
    setup: tuple = ()
    on_shape: bool = False  # a tensor's shape or strides (a new shape recompiles)
    scalar: str | None = None  # the source name of an int/float whose value is checked
    float_scalar: bool = False  # that number is a float (PyTorch makes it dynamic at a change)
    # a range the user declared (``sym_constrain_range``...): failing it is an error saying this,
    # and ``value`` (Python over the guard's parameters) is the size that broke it
    error: str | None = None
    value: str | None = None


def _stride_code(stride) -> str:
    """A stride as guard code: a number, or its expression over the bound size symbols."""
    return stride.expr.code(sym_var) if stride.__class__ is SymInt else str(stride)


def _hint(value) -> int:
    """A size or stride as the value seen (a ``SymInt``'s hint)."""
    return value.hint if value.__class__ is SymInt else value


def views_apart(*tensors) -> bool:
    """No two of ``tensors`` view overlapping memory (tensors of different storages never do;
    within one storage, their byte ranges are compared)."""
    storages = [t._storage for t in tensors]
    if len({id(s) for s in storages}) == len(storages):
        return True
    for i, a in enumerate(tensors):
        for b in tensors[i + 1 :]:
            if a._storage is b._storage and overlapping(a, b):
                return False
    return True


def overlapping(a, b) -> bool:
    """Whether two tensors of one storage touch a common element. Extents that meet are not
    enough: the key and value heads split from one projection (``qkv.split(d, dim=-1)``, then
    viewed per head) interleave without sharing an element. The exact test is bounded; one too
    hard to decide counts as overlapping."""
    import numpy as np

    if not np.may_share_memory(a._data, b._data):
        return False
    try:
        return bool(np.shares_memory(a._data, b._data, max_work=_OVERLAP_WORK))
    except np.exceptions.TooHardError:
        return True


_OVERLAP_WORK = 1 << 12  # bound on the exact overlap test's search (numpy's max_work)


class GuardSet:
    """The guards of one cache entry, in the order they were added (cheap, broad checks first)."""

    def __init__(self):
        self.ns = HoistingNamespace()
        self.guards: list[Guard] = []
        self._seen: set[str] = set()
        self._distinct: list[Source] = []
        self.shape_env = None  # the capture's ShapeEnv: its guards are added at ``compile``
        self._symbol_sources: dict = {}  # symbol -> full source expression of its value
        self._int_symbols: dict = {}  # symbol of an int input -> the input's source name
        # (strides expression, name, [(dim, stride)]) of inputs' size-1 dims, left unguarded
        # unless the capture read a stride (``strides_read``)
        self._unit_strides: list = []
        self.strides_read = False
        self.weak_refs: list = []  # objects identity guards name: an entry dies with them

    def _add(
        self, expr: str, text: str, on_shape: bool = False, scalar: str | None = None,
        error: str | None = None, value: str | None = None, float_scalar: bool = False,
    ):  # fmt: skip
        if expr not in self._seen:
            self._seen.add(expr)
            setup = tuple(self.ns.pending)
            guard = Guard(expr, text, setup, on_shape, scalar, float_scalar, error, value)
            self.guards.append(guard)
            self.ns.pending.clear()

    def __len__(self) -> int:
        return len(self.guards)

    # ------------------------------------------------------------------ kinds of guards
    def tensor_match(
        self, source: Source, t: Tensor, distinct: bool = False, fake: Tensor | None = None,
        bindings: list = (),
    ) -> None:  # fmt: skip
        """Type, dtype, device, shape, strides and requires_grad of a tensor input; ``distinct``
        tensors must stay different objects (in-place ops on one must not reach the other).
        With a symbolic ``fake``, its symbolic sizes are bound (``bindings``: dim, symbol,
        first) or checked equal to a symbol bound before, and its strides checked as the
        expressions they are."""
        e = self.ns.ref(source)
        name = source.name()
        cls = self.ns.name_of(type(t), "T")
        dtype = self.ns.name_of(t._dtype, "dtype")
        dev = self.ns.name_of(t._device, "device")
        self._add(f"type({e}) is {cls}", f"type({name}) is {type(t).__name__}")
        self._add(f"{e}._dtype is {dtype}", f"{name}.dtype == {t._dtype}")
        self._add(f"{e}._device is {dev}", f"{name}.device == {t._device}")
        if fake is None:
            self._add(
                f"{e}._shape == {tuple(t._shape)!r}", f"{name}.shape == {list(t._shape)}", True
            )
            # ``_stride`` caches ``stride()`` (None until first asked): a cheap read later
            self._stride_match(f"({e}._stride or {e}.stride())", name, t._shape, t.stride())
        else:
            self._symbolic_shape(source, e, name, fake, bindings)
        self._add(
            f"{e}._requires_grad is {t._requires_grad}",
            f"{name}.requires_grad == {t._requires_grad}",
        )
        if distinct:
            self._distinct.append(source)

    def has_history(self, source: Source) -> None:
        """A tensor input is no leaf (it has a grad_fn): the graph writes it in place."""
        self._add(f"{self.ns.ref(source)}.grad_fn is not None", f"{source.name()} is not a leaf")

    def _symbolic_shape(self, source: Source, e: str, name: str, fake: Tensor, bindings) -> None:
        tag = f"{len(self._symbol_sources)}_{len(self.guards)}"
        shape_var, stride_var = f"___shape{tag}", f"___stride{tag}"
        self.ns.pending.append((shape_var, f"{e}._shape"))
        checks = [f"len({shape_var}) == {len(fake._shape)}"]
        full = self._full_expr(source)
        bound = set()
        for d, symbol, first, kind in bindings:
            if first and kind == "size":
                self.ns.pending.append((sym_var(symbol), f"{shape_var}[{d}]"))
                self._symbol_sources[symbol] = f"{full}._shape[{d}]"
                bound.add(d)
        for d, size in enumerate(fake._shape):
            if size.__class__ is SymInt:
                if d not in bound:
                    checks.append(f"{shape_var}[{d}] == {sym_var(size.expr.as_symbol())}")
            else:
                checks.append(f"{shape_var}[{d}] == {size}")
        shown = [str(s) for s in fake._shape]
        self._add(" and ".join(checks), f"{name}.shape == [{', '.join(shown)}]", True)
        # ``_stride`` caches ``stride()`` (None until first asked): a cheap read on later calls
        self.ns.pending.append((stride_var, f"({e}._stride or {e}.stride())"))
        for d, symbol, _, kind in bindings:
            if kind == "stride":
                self.ns.pending.append((sym_var(symbol), f"{stride_var}[{d}]"))
                self._symbol_sources[symbol] = f"{full}.stride()[{d}]"
        self._stride_match(stride_var, name, fake._shape, fake.stride())

    def _stride_match(self, strides_expr: str, name: str, shape: tuple, strides: tuple) -> None:
        """The strides of a tensor input, except those of size-1 dims: no element is reached
        through them, and a window of a growing buffer (``ids[:, -1:]`` in a generation loop)
        changes them every call. They are guarded exactly if the capture read a stride
        (``strides_read``, checked at ``compile``), and otherwise by how they compare with
        the other strides (``_unit_stride_order``)."""
        unit = [d for d, size in enumerate(shape) if size.__class__ is int and size == 1]
        if unit:
            self._unit_strides.append((strides_expr, name, [(d, strides[d]) for d in unit]))
            self._unit_stride_order(strides_expr, name, shape, strides, unit)
        kept = [d for d in range(len(shape)) if d not in unit]
        if not kept:
            return

        shown = ", ".join("*" if d in unit else str(st) for d, st in enumerate(strides))
        text = f"{name}.stride() == ({shown}{',' if len(strides) == 1 else ''})"
        if not unit:
            listed = ", ".join(_stride_code(st) for st in strides)
            self._add(f"{strides_expr} == ({listed}{',' if len(strides) == 1 else ''})", text, True)
        else:
            checks = " and ".join(
                f"{strides_expr}[{d}] == {_stride_code(strides[d])}" for d in kept
            )
            self._add(checks, text, True)

    def _unit_stride_order(self, strides_expr: str, name: str, shape, strides, unit) -> None:
        """Where each size-1 dim's stride falls among 0 and the other dims' strides and
        extents (stride times size): what layout choices compare it with (the channels-last
        test ``suggest_memory_format`` makes for a convolution, a pooling or an upsampling;
        the dim order a layout-preserving op copies). A graph compiled for a channels-last
        ``(n, c, 1, w)`` input chose its outputs' layouts from those comparisons; an input whose
        size-1 stride compares otherwise looks contiguous to eager and captures again."""
        marks = [(0, "0")]
        for k, size in enumerate(shape):
            if k not in unit:
                marks += [(strides[k], _stride_code(strides[k]))]
                marks += [(strides[k] * size, _stride_code(strides[k] * size))]
        checks, shown = [], []
        for d in unit:
            ref, value = f"{strides_expr}[{d}]", strides[d]
            compared = [(strides[e], f"{strides_expr}[{e}]") for e in unit if e != d]
            below = above = None  # the nearest plain marks on either side of the stride
            for mark, code in marks:
                if mark.__class__ is not int or value.__class__ is not int:
                    compared.append((mark, code))
                elif mark == value:
                    below = above = (mark, code)
                    break
                elif mark < value and (below is None or mark > below[0]):
                    below = (mark, code)
                elif mark > value and (above is None or mark < above[0]):
                    above = (mark, code)
            if below is not None and below is above:
                checks.append(f"{ref} == {below[1]}")
                shown.append(f"{name}.stride({d}) == {below[0]}")
            else:
                if below is not None:
                    checks.append(f"{ref} > {below[1]}")
                    shown.append(f"{name}.stride({d}) > {below[0]}")
                if above is not None:
                    checks.append(f"{ref} < {above[1]}")
                    shown.append(f"{name}.stride({d}) < {above[0]}")
            for mark, code in compared:  # (by the sizes seen: no size guard is recorded)
                seen, other = _hint(value), _hint(mark)
                op = "==" if seen == other else ("<" if seen < other else ">")
                checks.append(f"{ref} {op} {code}")
                shown.append(f"{name}.stride({d}) {op} {mark}")
        if checks:
            self._add(" and ".join(checks), ", ".join(shown), True)

    def _read_unit_strides(self) -> None:
        """The capture read a stride (``x.stride()``): the size-1 dims' strides it may have
        used are guarded as well."""
        for strides_expr, name, dims in self._unit_strides:
            checks = " and ".join(f"{strides_expr}[{d}] == {_stride_code(st)}" for d, st in dims)
            listed = ", ".join(f"{name}.stride({d}) == {st}" for d, st in dims)
            self._add(checks, listed, True)

    def symbolic_int(self, source: Source, symbol) -> None:
        """An int input standing for ``symbol``: bound, and guarded on its type only."""
        e = self.ns.ref(source)
        var = sym_var(symbol)
        self.ns.pending.append((var, e))
        self._symbol_sources[symbol] = self._full_expr(source)
        self._int_symbols[symbol] = source.name()
        self._add(
            f"type({var}) is int",
            f"type({source.name()}) is int ({symbol.name} = {source.name()})",
            True,
        )

    def _full_expr(self, source: Source) -> str:
        """``source`` written out in full (not hoisted), naming objects as the guards do."""
        ns = GuardNamespace()
        ns.values, ns._ids = self.ns.values, self.ns._ids
        return source.expr(ns)

    def _shape_env_guards(self) -> None:
        """The relations the capture relied on between symbolic sizes (after every symbol is
        bound): recorded comparisons, specializations and each symbol's range."""
        env = self.shape_env
        if env is None or not self._symbol_sources:
            return
        for g in env.guards + env.range_guards():
            symbols = g.lhs.symbols() | g.rhs.symbols()
            if any(s not in self._symbol_sources for s in symbols):
                continue  # a symbol no input binds (a capture attempt that was dropped)
            legend = ", ".join(f"{s.name} = {s.origin}" for s in sorted(symbols, key=_by_name))
            text = f"{g.text()}  ({legend})" if legend else g.text()
            if g.origin and g.kind != "user":
                text += f"  [{g.origin}]"
            value = None
            if g.kind == "user" and len(symbols) == 1:
                (symbol,) = symbols
                value = self._symbol_sources[symbol]
            # an int input the graph ended up needing as a plain value: a new value is like a
            # changed Python number (``FrameCache.capture`` stops making it symbolic)
            int_source = None
            if g.kind == "specialize" and len(symbols) == 1:
                int_source = self._int_symbols.get(next(iter(symbols)))
            self._add(
                g.code(sym_var), text, int_source is None, int_source,
                g.message if g.kind == "user" else None, value,
            )  # fmt: skip

    def identity(self, source: Source, obj: Any) -> None:
        e = self.ns.ref(source)
        try:  # held weakly: a cache entry must not keep a model or an optimizer alive
            ref = weakref.ref(obj)
            target = f"{self.ns.name_of(ref, 'wr')}()"
            self.weak_refs.append(ref)
        except TypeError:
            target = self.ns.name_of(obj, "id")
        self._add(f"{e} is {target}", f"{source.name()} is {_short(obj)}")

    def same_object(self, source: Source, first: Source) -> None:
        """``source`` reaches the same object as ``first`` (an alias the graph relies on)."""
        self._add(
            f"{self.ns.ref(source)} is {self.ns.ref(first)}",
            f"{source.name()} is {first.name()}",
        )

    def different_objects(self, source: Source, other: Source) -> None:
        """``source`` and ``other`` reach different objects (the code compared them)."""
        self._add(
            f"{self.ns.ref(source)} is not {self.ns.ref(other)}",
            f"{source.name()} is not {other.name()}",
        )

    def type_match(self, source: Source, obj: Any) -> None:
        cls = self.ns.name_of(type(obj), "T")
        self._add(
            f"type({self.ns.ref(source)}) is {cls}",
            f"type({source.name()}) is {type(obj).__name__}",
        )

    def constant(self, source: Source, value: Any) -> None:
        """A Python constant: by identity for None/bools, else by exact type and equality."""
        e = self.ns.ref(source)
        if isinstance(value, _CONSTANT_BY_IDENTITY):
            self._add(f"{e} is {value!r}", f"{source.name()} is {value!r}")
            return
        if _is_interned(value):
            self.identity(source, value)
            return
        self.type_match(source, value)
        if isinstance(value, float) and value != value:
            self._add(f"{e} != {e}", f"{source.name()} is nan")
            return
        lit = self.ns.name_of(value, "k") if not _has_literal(value) else repr(value)
        scalar = source.name() if type(value) in (int, float) else None
        self._add(
            f"{e} == {lit}", f"{source.name()} == {value!r}", scalar=scalar,
            float_scalar=type(value) is float,
        )  # fmt: skip

    def comparison(self, source: Source, symbol: str, other: Any, result: bool) -> None:
        """``<source's value> <symbol> other`` came out ``result``: a number that changes
        between calls compared with a constant (``if momentum != 0``) guards the outcome, so
        the next value takes the same graph unless the comparison turns."""
        e = self.ns.ref(source)
        lit = repr(other) if _has_literal(other) else self.ns.name_of(other, "k")
        self._add(
            f"bool({e} {symbol} {lit}) is {result!r}",
            f"({source.name()} {symbol} {other!r}) is {result!r}",
        )

    def equal(self, source: Source, snapshot: Any) -> None:
        """``source == snapshot`` (a frozen copy taken at capture time)."""
        e = self.ns.ref(source)
        self._add(f"{e} == {self.ns.name_of(snapshot, 'k')}", f"{source.name()} == {snapshot!r}")

    def length(self, source: Source, obj: Any) -> None:
        self.type_match(source, obj)
        self._add(
            f"len({self.ns.ref(source)}) == {len(obj)}", f"len({source.name()}) == {len(obj)}"
        )

    def dict_keys(self, source: Source, d: dict) -> None:
        """The dict's keys, in order: constants by value, other keys (tensors, objects) by
        identity (``==`` on tensors compares values)."""
        self.type_match(source, d)
        keys = list(d.keys())
        e = self.ns.ref(source)
        text = f"keys of {source.name()} == [{', '.join(map(_short, keys))}]"
        if all(_has_literal(k) for k in keys):
            self._add(f"list({e}) == {keys!r}", text)
        elif all(is_constant_value(k) for k in keys):
            self._add(f"list({e}) == {self.ns.name_of(keys, 'keys')}", text)
        else:
            match = self.ns.name_of(_keys_match, "keys_match")
            expected = self.ns.name_of(tuple(keys), "keys")
            by_value = self.ns.name_of(tuple(is_constant_value(k) for k in keys), "by_value")
            self._add(f"{match}({e}, {expected}, {by_value})", text)

    def module_hooks_absent(self, source: Source, tables: tuple[str, ...]) -> None:
        """The module at ``source`` has nothing in its hook ``tables`` and no global module hook
        is set: a hook registered after capture makes the next call recompile and run it (as
        PyTorch guards a module's hook dicts). Inline dict reads: one per module call."""
        e = self.ns.ref(source)
        flag = self.ns.name_of(_hooks.GLOBAL_HOOKS_ACTIVE, "global_hooks")
        reads = " or ".join(f"{e}.__dict__[{table!r}]" for table in tables)
        what = "hooks" if tables == _hooks.HOOK_DICTS else "hooks in " + ", ".join(tables)
        self._add(f"not ({flag}[0] or {reads})", f"{source.name()} has no {what}")

    def module_forward(self, source: Source, module: Module) -> None:
        """The module at ``source`` is still of its class and still has (or has not) a
        ``forward`` of its own: what ``Module.__call__`` would call is what was inlined."""
        e = self.ns.ref(source)
        cls = self.ns.name_of(type(module), "T")
        own = "forward" in module.__dict__
        self._add(
            f"type({e}) is {cls} and ({'forward'!r} in {e}.__dict__) is {own}",
            f"{source.name()} is a {type(module).__name__} "
            + ("with a forward of its own" if own else "calling its class's forward"),
        )

    def absent(self, source: Source, key: str) -> None:
        """``key`` is not in the dict at ``source`` (a builtin is not shadowed by a global)."""
        self._add(f"{key!r} not in {self.ns.ref(source)}", f"{key!r} not in {source.name()}")

    def global_state(self) -> None:
        """Grad mode (and inference mode without it), the default dtype and autocast: they change
        what eager code would do. The modes are read from the calling thread's state, as eager
        code would."""
        state = per_thread.state
        local = self.ns.name_of(per_thread, "per_thread")
        dflt = self.ns.name_of(_dtypes._default_dtype, "default_dtype")
        current = _dtypes.get_default_dtype()
        grad = state.grad_enabled
        self._add(f"{local}.state.grad_enabled is {grad}", f"grad mode is {grad}")
        if not grad:  # compiled results are inference tensors under inference_mode only
            inference = state.inference_mode
            self._add(
                f"{local}.state.inference_mode is {inference}", f"inference mode is {inference}"
            )
        self._add(
            f"{dflt}[0] is {self.ns.name_of(current, 'dtype')}", f"default dtype is {current}"
        )
        config = state.autocast
        expected = "None" if config is None else self.ns.name_of(config, "autocast_config")
        self._add(f"{local}.state.autocast is {expected}", f"autocast is {config or 'off'}")

    def logging_disabled(self, logger, level: int) -> None:
        """A dropped ``logger.debug(...)``: its level is still off (``isEnabledFor`` reads the
        logger's cache, a dict lookup on the hot path)."""
        name = self.ns.name_of(logger, "logger")
        self._add(
            f"not {name}.isEnabledFor({level})",
            f"logger {logger.name!r} has level {level} off",
        )

    def allow_overlapping_inputs(self) -> None:
        """The graph writes to none of its inputs: it holds however they alias, so the guard
        that the frame's tensors view apart is dropped."""
        self._distinct.clear()

    def _distinct_guard(self) -> None:
        srcs = self._distinct
        if len(srcs) < 2:
            return
        exprs = [self.ns.ref(s) for s in srcs]
        names = ", ".join(s.name() for s in srcs)
        # different objects, viewing no common memory (the graph treats them as separate
        # buffers): for a few tensors inline (a storage compare each), else in one call
        apart = self.ns.name_of(views_apart, "views_apart")
        if len(srcs) <= 3:
            for i in range(len(srcs)):
                for j in range(i + 1, len(srcs)):
                    a, b = exprs[i], exprs[j]
                    self._add(f"{a} is not {b}", f"{names} are different tensors")
                    self._add(
                        f"({a}._storage is not {b}._storage or {apart}({a}, {b}))",
                        f"{names} view no common memory",
                    )
        else:
            ids = ", ".join(f"id({e})" for e in exprs)
            self._add(f"len({{{ids}}}) == {len(srcs)}", f"{names} are different tensors")
            self._add(f"{apart}({', '.join(exprs)})", f"{names} view no common memory")

    # ------------------------------------------------------------------ compile
    def compile(self, params: str, defaults: dict[str, Any], name: str) -> CompiledGuard:
        self._distinct_guard()
        if self.strides_read:
            self._read_unit_strides()
        self._shape_env_guards()
        if self.shape_env is not None:
            self.shape_env.freeze()
        lines = [f"def ___guard(___closure, {params}):" if params else "def ___guard(___closure):"]
        lines.append("    try:")
        # the checks between two setup lines make one ``if``: a statement per check made a
        # GPT-2 optimizer step's guard 11,000 lines whose compile took 0.13-0.18 s (0.07 s so);
        # ``failed_guard`` still tells which check failed
        run: list[str] = []
        for g in self.guards:
            if g.setup:
                lines += _checks_line(run)
                lines += [f"        {name} = {expr}" for name, expr in g.setup]
            run.append(g.expr)
        lines += _checks_line(run)
        lines.append("    except Exception:")
        lines.append("        return False")
        lines.append("    return True")
        src = "\n".join(lines) + "\n"
        namespace = dict(self.ns.values)
        namespace.update(defaults)
        exec(compile_source(src, f"<kiln guards for {name}>"), namespace)
        guard = CompiledGuard(namespace["___guard"], src, list(self.guards), params, namespace)
        guard.weak_refs = tuple(self.weak_refs)
        return guard


def _checks_line(run: list[str]) -> list[str]:
    """The lines returning False unless every check in ``run`` holds (emptying ``run``)."""
    if not run:
        return []
    if len(run) == 1:
        lines = [f"        if not ({run[0]}):"]
    else:
        lines = ["        if not ("]
        lines += [f"            ({expr})" for expr in run[:1]]
        lines += [f"            and ({expr})" for expr in run[1:]]
        lines.append("        ):")
    run.clear()
    return [*lines, "            return False"]


class CompiledGuard:
    """A generated guard function plus what is needed to explain why it failed."""

    def __init__(self, fn, src: str, guards: list[Guard], params: str, namespace: dict):
        self.fn = fn
        self.src = src
        self.guards = guards
        self._params = params
        self._namespace = namespace
        self._checks = None
        self.weak_refs: tuple = ()

    def dead(self) -> bool:
        """An object an identity guard names has died: the entry can never match again."""
        return any(ref() is None for ref in self.weak_refs)

    def _define(self, lines: list[str], filename: str, name: str):
        """Compile the function ``name`` written in ``lines`` in (a copy of) the guard's
        namespace; ``filename`` names it in tracebacks."""
        namespace = dict(self._namespace)
        exec(compile("\n".join(lines) + "\n", filename, "exec"), namespace)
        return namespace[name]

    def scalar_checks(self, closure, args: tuple, kwargs: dict) -> dict[str, bool]:
        """Each int/float guard's source name -> whether it holds for these arguments (each is
        checked on its own: a number that changed alongside another still counts)."""
        if not any(g.scalar for g in self.guards):
            return {}
        if getattr(self, "_scalar_checks", None) is None:
            params = f"___closure, {self._params}" if self._params else "___closure"
            body = [f"def ___scalars({params}):", "    ___held = {}"]
            for g in self.guards:
                for name, expr in g.setup:
                    body += ["    try:", f"        {name} = {expr}", "    except Exception:"]
                    body.append("        pass")
                if g.scalar:
                    # a guard that cannot be evaluated says nothing about the number
                    key = repr(g.scalar)
                    body += ["    try:", f"        ___ok = bool({g.expr})", "    except Exception:"]
                    body += ["        pass", "    else:"]
                    body.append(f"        ___held[{key}] = ___held.get({key}, True) and ___ok")
            body.append("    return ___held")
            self._scalar_checks = self._define(body, "<kiln scalar guards>", "___scalars")
        try:
            return self._scalar_checks(closure, *args, **kwargs)
        except TypeError:
            return {}

    def value_of(self, guard: Guard, closure, args: tuple, kwargs: dict):
        """The value of ``guard.value`` (a size a user's range guard checks) for these
        arguments (only on a miss)."""
        params = f"___closure, {self._params}" if self._params else "___closure"
        body = [f"def ___value({params}):", f"    return {guard.value}"]
        try:
            return self._define(body, "<kiln guard value>", "___value")(closure, *args, **kwargs)
        except Exception as e:  # only a message depends on it
            return f"<unknown: {type(e).__name__}>"

    def failure_reason(self, closure, args: tuple, kwargs: dict) -> str | None:
        """The text of the first guard that fails for these arguments (None if all pass)."""
        guard = self.failed_guard(closure, args, kwargs)
        return guard if guard is None or isinstance(guard, str) else guard.text

    def failed_guard(self, closure, args: tuple, kwargs: dict) -> Guard | str | None:
        """The first guard that fails for these arguments (a message if they do not bind)."""
        if self._checks is None:
            body = [
                f"def ___why(___closure, {self._params}):"
                if self._params
                else "def ___why(___closure):"
            ]
            body.append("    ___i = -1")
            body.append("    try:")
            for i, g in enumerate(self.guards):
                body.append(f"        ___i = {i}")
                body += [f"        {name} = {expr}" for name, expr in g.setup]
                body.append(f"        if not ({g.expr}):")
                body.append(f"            return {i}")
            body.append("    except Exception:")
            body.append("        return ___i")
            body.append("    return -1")
            self._checks = self._define(body, "<kiln guard explain>", "___why")
        try:
            index = self._checks(closure, *args, **kwargs)
        except TypeError as e:  # the arguments no longer bind to the signature
            return f"arguments do not match the signature: {e}"
        return None if index < 0 else self.guards[index]


def signature_source(code: types.CodeType, defaults: tuple | None, kwdefaults: dict | None):
    """``(params_source, namespace)``: a parameter list equal to ``code``'s, defaults by name."""
    argcount = code.co_argcount
    posonly = code.co_posonlyargcount
    kwonly = code.co_kwonlyargcount
    names = code.co_varnames
    flags = code.co_flags
    parts: list[str] = []
    ns: dict[str, Any] = {}
    defaults = defaults or ()
    first_default = argcount - len(defaults)
    for i in range(argcount):
        name = names[i]
        if i >= first_default:
            key = f"___default_{i}"
            ns[key] = defaults[i - first_default]
            parts.append(f"{name}={key}")
        else:
            parts.append(name)
        if posonly and i == posonly - 1:
            parts.append("/")
    index = argcount + kwonly
    if flags & inspect.CO_VARARGS:
        parts.append("*" + names[index])
    elif kwonly:
        parts.append("*")
    for i in range(argcount, argcount + kwonly):
        name = names[i]
        if kwdefaults and name in kwdefaults:
            key = f"___kwdefault_{name}"
            ns[key] = kwdefaults[name]
            parts.append(f"{name}={key}")
        else:
            parts.append(name)
    if flags & inspect.CO_VARKEYWORDS:
        parts.append("**" + names[index + (1 if flags & inspect.CO_VARARGS else 0)])
    return ", ".join(parts), ns


def _by_name(symbol) -> tuple:
    return (symbol.name[0], int(symbol.name[1:]))


def _keys_match(d: dict, keys: tuple, by_value: tuple) -> bool:
    """``d``'s keys are ``keys`` in order: the same objects, or (where ``by_value``) equal
    constants of the same type."""
    if len(d) != len(keys):
        return False
    for actual, expected, compare in zip(d, keys, by_value):
        if actual is not expected and not (
            compare and type(actual) is type(expected) and actual == expected
        ):
            return False
    return True


def _has_literal(value: Any) -> bool:
    """Whether ``repr(value)`` is Python source that evaluates back to it. An infinite or NaN
    float is not (``inf`` is no name in a guard), so it is held as a named constant."""
    if type(value) is float:
        return math.isfinite(value)
    if isinstance(value, (int, float, str, bytes, bool, type(None))):
        return type(value) in (int, float, str, bytes, bool, type(None))
    if isinstance(value, tuple) and type(value) is tuple:
        return all(_has_literal(v) for v in value)
    return False


def _is_interned(value: Any) -> bool:
    """Objects compared by identity: dtypes, devices, types, functions, modules."""
    from ..runtime.device import device

    return isinstance(value, (_dtypes.dtype, device, type, types.FunctionType, types.ModuleType))


def _short(obj: Any) -> str:
    """A guard's text for ``obj``. Tensors and modules are described by type, shape and
    settings, not by ``repr``: a parameter's repr formats its values and a model's walks
    every submodule (a warm nanoGPT compile spent a tenth of its capture there)."""
    if isinstance(obj, Tensor):
        text = f"{type(obj).__name__}(shape={tuple(obj.shape)}, dtype={obj.dtype})"
    elif isinstance(obj, Module):
        text = f"{type(obj).__name__}({obj.extra_repr()})"
    else:
        text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."
