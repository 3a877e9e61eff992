"""``kiln.compile`` and the frame cache: the part of dynamo that runs on every call.

Python has no PEP 523 frame hook, so a compiled function is a wrapper that does what the hook
would: for each cache entry of the code object, call its generated guard function (bound with
the frame's own signature); on a hit run the entry's transformed function (same globals, closure
and defaults); on a miss capture a new entry. Resume functions get the same treatment through a
"resume caller" the transformed code calls. The hot path is a loop, a guard call and a call:
logging, ``inspect`` and failure explanations happen only on misses.

Compiled functions may be called from several threads at once. A hit reads the entry list
without a lock (entries are only ever appended); a miss takes ``compile_lock``, looks again
(another thread may have compiled the entry meanwhile) and only then captures, so one signature
is compiled once. Capturing uses the calling thread's grad mode, autocast and mode stack only.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import os
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ..nn.modules.module import Module
from ..runtime import logs as klog
from ..runtime.state import compile_lock
from ..runtime.switch_interval import quick_handoff
from ..runtime.symbolic import ConstraintViolationError
from . import bytecode_versions as bv
from . import config
from .backends import lookup
from .bytecode_analysis import clear_cache as _clear_frame_code
from .convert_frame import CaptureResult, EagerFrame, convert_frame
from .counters import counters
from .ddp_graph_split import split_for_ddp
from .eager_frames import run_eagerly
from .exc import GraphBreakError, InvalidBackend
from .guards import signature_source
from .regional_split import split_repeated_regions
from .resume import clear_cache as _clear_resume
from .sources import guard_param_name
from .stance import DEFAULT as _DEFAULT_STANCE
from .stance import STANCE
from .symbolic_shapes import ShapePolicy
from .verify import BACKEND_OPTIONS_DROPPED, snapshot_graph, verified, verify_setting

__all__ = [
    "compile", "compile_in_context", "reset", "CompileContext", "OptimizedModule", "FrameCache",
]  # fmt: skip

# ``FrameCache.capture``'s answer for a one-off run of the frame as it is (``EagerFrame.plain``)
PLAIN_RUN = object()

_GENERATOR_FLAGS = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)  # fmt: skip
_CONTEXTS: weakref.WeakSet = weakref.WeakSet()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a capture runs (``config.pause_gc_while_compiling``
    says why); the outermost capture turns the collector back on if it was on."""
    if not (config.pause_gc_while_compiling and gc.isenabled()):
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _accepts_options(fn) -> bool:
    """Backends may take ``options=`` (kiln.compile's options dict); plain ones need not."""
    cached = getattr(fn, "_kiln_accepts_options", None)
    if cached is not None:
        return cached
    import inspect

    try:
        accepts = "options" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        accepts = False
    try:
        fn._kiln_accepts_options = accepts
    except (AttributeError, TypeError):
        pass
    return accepts


class CompileContext:
    """One ``kiln.compile`` call's settings, shared by the wrappers and resume functions it
    creates; listeners (``explain``) hear about every graph and graph break."""

    def __init__(
        self, backend, fullgraph=False, dynamic=None, options=None, mode=None, export=False,
        declared_dims=None,
    ):  # fmt: skip
        self.backend = backend
        try:
            self.compiler_fn = lookup(backend)
        except ValueError:
            raise InvalidBackend(backend) from None
        self.backend_name = (
            backend
            if isinstance(backend, str)
            else getattr(backend, "__name__", type(backend).__name__)
        )
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.options = dict(options or {})
        verify_setting(self.options)  # a bad value is an error of this call, not of a capture
        if backend == "inductor":
            self.options.update(_MODE_OPTIONS.get(mode, {}))
        self.mode = mode
        # capturing for ``kiln.export``: ``kiln.cond`` becomes one conditional node (its branches
        # graphs of their own) instead of both branches merged by ``where``
        self.export = export
        # dims ``kiln.export``'s ``dynamic_shapes`` declares: ``{id(tensor): {dim: (min, max,
        # what)}}`` (``ShapePolicy`` makes them symbolic; ``what`` names the ``Dim``)
        self.declared_dims = declared_dims or {}
        self.listeners: list = []
        # Held weakly: a frame cache lives as long as its wrapper (and so its compiled graphs
        # and their machine code); a process compiling a fresh closure every step must not keep
        # every step's graphs. ``reset`` reaches the live ones through this set.
        self.caches: weakref.WeakSet[FrameCache] = weakref.WeakSet()
        # resume code -> its caller, alive while some transformed code (which calls it) is
        self._resume_callers: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._graph_counter = 0
        _CONTEXTS.add(self)

    def next_graph_name(self, base: str) -> str:
        self._graph_counter += 1
        return f"{base}_{self._graph_counter - 1}"

    def wrapper_for(self, fn: types.FunctionType, split: bool = False) -> Callable:
        """The compiled wrapper of ``fn`` in this context (made once); a function marked by
        ``kiln.compiler.disable`` stays itself. ``split``: a callee whose inlining broke
        (compiled on its own, like a resume function)."""
        if fn.__dict__.get("_kiln_disabled"):
            return fn
        # Kept on ``fn`` itself, not in the context: the wrapper refers to ``fn``, so a table
        # here would keep every function ever compiled (and its graphs) alive; this way fn and
        # wrapper are collected together once the program drops both. The table names its
        # function: ``functools.wraps`` copies it into another function's ``__dict__``.
        table = fn.__dict__.get("_kiln_wrappers")
        if table is None or table[0]() is not fn:
            table = fn.__dict__["_kiln_wrappers"] = (weakref.ref(fn), {})
        wrappers = table[1]
        wrapper = wrappers.get(id(self))
        if wrapper is None or wrapper._kiln_context is not self:
            with compile_lock:  # threads wrapping one function at once make one wrapper
                wrapper = wrappers.get(id(self))
                if wrapper is None or wrapper._kiln_context is not self:
                    wrapper = wrappers[id(self)] = _compiled_function(fn, self, split)
        return wrapper

    def resume_caller(self, code: types.CodeType, f_globals: dict) -> Callable:
        key = (code, id(f_globals))
        caller = self._resume_callers.get(key)
        if caller is None:
            with compile_lock:
                caller = self._resume_callers.get(key)
                if caller is None:
                    caller = self._resume_callers[key] = _resume_caller(code, f_globals, self)
        return caller

    def compile_graph(self, gm, example_inputs: list, name: str) -> Callable:
        """Run the backend; if it fails, the graph runs with the eager ops (and we say why).

        Verify mode (``options["verify"]``/``KILN_VERIFY``) and the minifier (``KILN_REPRO``)
        keep a copy of the graph made before the backend sees it (``dynamo.verify``)."""
        compiler_fn = self.compiler_fn
        forced = STANCE[0].backend  # ``set_stance(force_backend=...)``
        if forced is not None:
            compiler_fn = lookup(forced)
        backend = forced if forced is not None else self.backend
        options = {k: v for k, v in self.options.items() if k not in BACKEND_OPTIONS_DROPPED}
        verify = verify_setting(self.options)
        repro_dir = os.environ.get("KILN_REPRO") or None
        reference = snapshot_graph(gm) if verify or repro_dir else None

        def run_backend(graph_module, inputs) -> Callable:
            if _accepts_options(compiler_fn):
                compiled = compiler_fn(graph_module, inputs, options=dict(options))
            else:
                compiled = compiler_fn(graph_module, inputs)
            if not callable(compiled):
                raise TypeError(f"backend returned {type(compiled).__name__}, not a callable")
            return compiled

        try:
            # a graph reading DDP's parameters compiles in bucket-sized pieces (overlap)
            compiled = split_for_ddp(gm, example_inputs, run_backend)
            if compiled is None and backend == "inductor" and reference is None:
                # a stack of identical blocks compiles once (regional compilation); its pieces
                # compile at the first run, under the lock and pause a capture takes
                def run_piece(graph_module, inputs) -> Callable:
                    with compile_lock, _collector_paused():
                        return run_backend(graph_module, inputs)

                compiled = split_repeated_regions(gm, example_inputs, run_piece)
            if compiled is None:
                compiled = run_backend(gm, example_inputs)
        except Exception as e:
            message = (
                f"backend {self.backend_name!r} failed to compile {name} "
                f"({type(e).__name__}: {e}); running the graph with the eager backend"
            )
            if repro_dir:
                from .repro import Failure, repro_after_failure

                message += repro_after_failure(
                    repro_dir, reference, example_inputs, backend, options, verify or True,
                    Failure(type(e)),
                )  # fmt: skip
            klog.log("graph_breaks", message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            return reference.forward if reference is not None else gm.forward
        if verify:
            on_mismatch = None
            if repro_dir:

                def on_mismatch(mismatches, located, args):
                    from .repro import failure_of, repro_after_failure

                    hint = located.node if located is not None else None
                    return repro_after_failure(
                        repro_dir, reference, list(args), backend, options, verify,
                        failure_of(mismatches), hint,
                    )  # fmt: skip

            compiled = verified(
                compiled, reference, run_backend, name, self.backend_name, verify, on_mismatch
            )
        return compiled

    def record_graph(self, gm, op_count: int, name: str) -> None:
        counters["stats"]["unique_graphs"] += 1
        counters["stats"]["calls_captured"] += op_count
        for listener in self.listeners:
            listener.on_graph(gm, op_count, name)

    def record_break(self, reason) -> None:
        for listener in self.listeners:
            listener.on_break(reason)


class FrameCache:
    """Cache entries of one code object (one wrapper, or one resume code) in one context."""

    def __init__(
        self, ctx: CompileContext, code: types.CodeType, name: str, f_globals: dict,
        resume: bool = False,
    ):  # fmt: skip
        self.ctx = ctx
        self.code = code
        self.name = name
        # a resume function's numbers come from the frame before the break: one that changed
        # there usually changes on every call, so it is not baked in after its first change
        self.scalar_recompiles = 0 if resume else config.scalar_recompiles
        self.f_globals = f_globals
        self.entries: list[tuple[Callable, Callable]] = []  # (guard, run): the hot path reads it
        self.called = False  # called under a non-default stance (``eager_then_compile``)
        self.guards: list = []
        self.eager_reason: str | None = None
        # ints/floats that keep changing (recompiles they caused, by source name): past
        # ``config.scalar_recompiles`` later captures do not bake them in (PyTorch would make
        # them symbolic; kiln breaks the graph where one's value is needed)
        self.scalar_changes: dict[str, int] = {}
        self.dynamic_scalars: set[str] = set()
        # automatic dynamic shapes: dims found to change (source name -> dims, symbolic in
        # later captures) and the sizes of each tensor input at the last capture; a method of
        # a module keeps them per instance (``_histories``): modules are guarded by type, so
        # a DCGAN's generator and discriminator, two ``Sequential``s, share this cache, and the
        # other one's sizes are not this one's changing
        self.automatic_dims: dict[str, set] = {}
        self.seen_shapes: dict[str, tuple] = {}
        self.seen_strides: dict[str, tuple] = {}
        self._histories: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # ints passed as symbols (source names), and those whose symbol got specialized (a
        # graph needed the plain value): they go back to being Python numbers
        self.symbolic_ints: set[str] = set()
        self.static_ints: set[str] = set()
        ctx.caches.add(self)

    def clear(self) -> None:
        self.entries.clear()
        self.guards.clear()
        self.eager_reason = None
        self.scalar_changes.clear()
        self.dynamic_scalars.clear()
        self.automatic_dims.clear()
        self.seen_shapes.clear()
        self.seen_strides.clear()
        self._histories.clear()
        self.symbolic_ints.clear()
        self.static_ints.clear()

    def _new_scalar_values(self, closure, args: tuple, kwargs: dict) -> list[str]:
        """The ints/floats whose guard fails on the latest entry and that no earlier entry was
        made for: a value seen before (two optimizers' weight decays alternating through one
        ``step``) is another object's constant, not a number that changes on every call."""
        checks = [entry.scalar_checks(closure, args, kwargs) for entry in self.guards]
        return [
            scalar
            for scalar, held in checks[-1].items()
            if not held and not any(earlier.get(scalar) for earlier in checks[:-1])
        ]

    def _drop_dead_entries(self) -> None:
        """Entries guarded on an object that has died (a model deleted, and a new one stepped
        through the same code) never match again: dropped, so they neither count toward the
        recompile limit nor keep their compiled code, as PyTorch evicts them."""
        if not any(guard.dead() for guard in self.guards):
            return
        kept = [i for i, guard in enumerate(self.guards) if not guard.dead()]
        self.guards[:] = [self.guards[i] for i in kept]
        self.entries[:] = [self.entries[i] for i in kept]

    def capture(self, closure, arguments: dict, args: tuple, kwargs: dict):
        """On a miss: decide between recompiling and running eagerly; returns a CaptureResult,
        None (run eagerly) or ``PLAIN_RUN`` (run the frame as it is, this once)."""
        if self.eager_reason is None and not bv.SUPPORTED:
            self.eager_reason = bv.unsupported_reason()
            _warn_unsupported_python()
        if self.eager_reason is None and self.code.co_flags & _GENERATOR_FLAGS:
            self.eager_reason = f"{self.name} is a generator or coroutine function"
            klog.log("graph_breaks", f"{self.eager_reason}; it runs eagerly")
        if self.eager_reason is not None:
            return None
        self._drop_dead_entries()
        if self.guards:
            failed = self.guards[-1].failed_guard(closure, args, kwargs)
            why = getattr(failed, "text", failed)
            limit = config.recompile_limit
            recompiles = len(self.entries)
            if self.ctx.dynamic is not False:
                # a float is baked in until its first change, as PyTorch's automatic dynamic
                # makes it a symbolic float then (an int turns symbolic at its first change)
                floats = {g.scalar for g in self.guards[-1].guards if g.float_scalar}
                for scalar in self._new_scalar_values(closure, args, kwargs):
                    changes = self.scalar_changes.get(scalar, 0) + 1
                    self.scalar_changes[scalar] = changes
                    if changes > (0 if scalar in floats else self.scalar_recompiles):
                        self.dynamic_scalars.add(scalar)
            if getattr(failed, "scalar", None) and failed.scalar in self.symbolic_ints:
                self.static_ints.add(failed.scalar)  # symbolic did not help: a plain number
            error = getattr(failed, "error", None)
            if error is not None:  # a size outside a range the user declared
                value = self.guards[-1].value_of(failed, closure, args, kwargs)
                raise ConstraintViolationError(f"{error}, but it is {value}")
            if getattr(failed, "on_shape", False) and self.ctx.dynamic is not False:
                # sizes that changed become symbolic in the next capture (``ShapePolicy``), so
                # shapes rarely recompile; past the limit, a new one runs eagerly, quietly
                if recompiles > config.shape_recompile_limit:
                    klog.log("recompiles", f"{self.name}: new shape ({why}) runs eagerly")
                    return None
            elif recompiles >= limit:  # ``limit`` entries in all, as PyTorch counts
                self.eager_reason = (
                    f"{self.name} hit config.recompile_limit ({limit}) and is not recompiled "
                    f"again (last guard failure: {why}); it now runs eagerly"
                )
                klog.log("recompiles", self.eager_reason)
                warnings.warn(self.eager_reason, RuntimeWarning, stacklevel=4)
                return None
            klog.log("recompiles", f"recompiling {self.name}: guard failed: {why}")
        automatic, seen_shapes, seen_strides = self._history(arguments)
        policy = ShapePolicy(
            self.ctx.dynamic, automatic, seen_shapes, self.name, self.static_ints,
            self.ctx.declared_dims,
        )  # fmt: skip
        policy.seen_strides = seen_strides
        try:
            with klog.compile_stage("dynamo"):
                result = convert_frame(
                    self.ctx, self.code, self.f_globals, closure, arguments,
                    self.ctx.next_graph_name(self.name), frozenset(self.dynamic_scalars),
                    frozenset(self.scalar_changes), policy,
                )  # fmt: skip
        except (GraphBreakError, ConstraintViolationError):
            raise
        except Exception as e:
            if not config.suppress_errors:
                raise
            self.eager_reason = (
                f"internal error while capturing {self.name}: {type(e).__name__}: {e}"
            )
            klog.log("graph_breaks", self.eager_reason)
            warnings.warn(self.eager_reason, RuntimeWarning, stacklevel=4)
            return None
        if isinstance(result, EagerFrame):
            if result.permanent:
                self.eager_reason = str(result.reason)
            return PLAIN_RUN if result.plain else None
        seen_shapes.update(result.input_shapes)
        seen_strides.update(result.input_strides)
        self.symbolic_ints.update(result.symbolic_ints)
        return result

    def _history(self, arguments: dict) -> tuple[dict, dict, dict]:
        """The automatic-dynamic history this capture reads and extends: the frame's own, or
        for a method of a module its instance's (see ``__init__``)."""
        owner = arguments.get("self") if arguments else None
        if not isinstance(owner, Module):
            return self.automatic_dims, self.seen_shapes, self.seen_strides
        history = self._histories.get(owner)
        if history is None:
            history = self._histories[owner] = ({}, {}, {})
        return history

    def add(self, result: CaptureResult, params: str, defaults: dict, run: Callable) -> None:
        with klog.compile_stage("dynamo"):
            guard = result.guards.compile(params, defaults, self.name)
        klog.log("guards", f"guards of {self.name} entry {len(self.entries)}:\n{guard.src}")
        klog.dump(f"{self.name}_guards", "py", guard.src)
        counters["frames"]["ok"] += 1
        if self.entries:
            counters["recompiles"]["total"] += 1
        self.guards.append(guard)
        self.entries.append((guard.fn, run))
        for listener in self.ctx.listeners:
            on_guards = getattr(listener, "on_guards", None)
            if on_guards is not None:
                on_guards(guard.guards)


_warned_unsupported_python = False


def _warn_unsupported_python() -> None:
    """Say once per process that capture is off on this Python (every frame runs eagerly)."""
    global _warned_unsupported_python
    if not _warned_unsupported_python:
        _warned_unsupported_python = True
        warnings.warn(bv.unsupported_reason(), RuntimeWarning, stacklevel=5)


def _recheck(entries: list, closure, args: tuple, kwargs: dict):
    """The run function of the first entry whose guard passes, or None."""
    for guard, run in entries:
        try:
            if guard(closure, *args, **kwargs):
                return run
        except TypeError:  # the arguments do not bind: capture says so, then ``fn`` raises
            return None
    return None


def _compiled_function(
    fn: types.FunctionType, ctx: CompileContext, split: bool = False
) -> Callable:
    """A wrapper of ``fn`` with the frame cache's hot path (see the module docstring)."""
    code = fn.__code__
    cache = FrameCache(ctx, code, fn.__qualname__, fn.__globals__, resume=split)
    entries = cache.entries
    closure = fn.__closure__
    signature = None

    def miss(args: tuple, kwargs: dict):
        if cache.eager_reason is not None:
            return run_eagerly(fn, ctx, args, kwargs)
        with compile_lock:
            run = _recheck(entries, closure, args, kwargs)  # compiled by another thread?
            if run is None:
                with _collector_paused(), quick_handoff():
                    run = capture(args, kwargs)
        if run is not None:
            return run(*args, **kwargs)
        return run_eagerly(fn, ctx, args, kwargs)

    def capture(args: tuple, kwargs: dict):
        """A new entry's function (added to the cache), or None: run ``fn`` eagerly."""
        nonlocal signature
        if cache.eager_reason is None:
            if signature is None:
                # the code's own parameters (not a ``__wrapped__`` or ``__signature__`` override)
                plain = types.FunctionType(
                    code, fn.__globals__, fn.__name__, fn.__defaults__, closure
                )
                plain.__kwdefaults__ = fn.__kwdefaults__
                signature = inspect.signature(plain)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return None  # ``fn`` raises Python's own TypeError
            bound.apply_defaults()
            result = cache.capture(closure, dict(bound.arguments), args, kwargs)
            if result is PLAIN_RUN:
                return fn
            if result is not None:
                run = types.FunctionType(
                    result.code, fn.__globals__, fn.__name__, fn.__defaults__, closure
                )
                run.__kwdefaults__ = fn.__kwdefaults__
                params, defaults = signature_source(code, fn.__defaults__, fn.__kwdefaults__)
                cache.add(result, params, defaults, run)
                return run
        return None

    def compiled(*args, **kwargs):
        if STANCE[0] is not _DEFAULT_STANCE:
            return with_stance(args, kwargs)
        for guard, run in entries:
            try:
                hit = guard(closure, *args, **kwargs)
            except TypeError:  # the arguments do not bind (a guard catches all else itself)
                return fn(*args, **kwargs)  # Python's own error, naming ``fn``
            if hit:
                return run(*args, **kwargs)
        return miss(args, kwargs)

    def with_stance(args: tuple, kwargs: dict):
        """A call under ``kiln.compiler.set_stance`` other than the plain default."""
        stance = STANCE[0].stance
        if stance == "force_eager":
            return fn(*args, **kwargs)
        if stance.endswith("eager_then_compile") and not cache.called:
            cache.called = True
            return fn(*args, **kwargs)
        cache.called = True
        for guard, run in entries:
            try:
                hit = guard(closure, *args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)
            if hit:
                return run(*args, **kwargs)
        if entries and stance == "eager_on_recompile":
            return fn(*args, **kwargs)
        if entries and stance == "fail_on_recompile":
            raise RuntimeError(
                "Detected recompile when torch.compile stance is 'fail_on_recompile'. "
                f"filename: '{code.co_filename}', function name: '{code.co_name}', "
                f"line number: {code.co_firstlineno}"
            )
        return miss(args, kwargs)

    functools.update_wrapper(compiled, fn)
    compiled.__dict__.pop("_kiln_wrappers", None)  # fn's own table, not the wrapper's
    compiled._kiln_original = fn
    compiled._kiln_cache = cache
    compiled._kiln_context = ctx
    return compiled


def _resume_caller(code: types.CodeType, f_globals: dict, ctx: CompileContext) -> Callable:
    """What transformed code calls to continue after a break (compiled on its first call)."""
    cache = FrameCache(ctx, code, code.co_qualname, f_globals, resume=True)
    entries = cache.entries
    names = code.co_varnames[: code.co_argcount]
    params = ", ".join(guard_param_name(n) for n in names)

    def function(closure) -> types.FunctionType:
        return types.FunctionType(code, f_globals, code.co_name, None, closure)

    def miss(closure, args: tuple):
        run = None
        if cache.eager_reason is None:
            with compile_lock:
                for guard, entry_run in entries:  # compiled by another thread meanwhile?
                    if guard(closure, *args):
                        run = entry_run
                        break
                else:
                    with _collector_paused():
                        run = capture(closure, args)
        if run is None:
            return run_eagerly(function(closure), ctx, args, {})
        return run(*args) if closure is None else run(closure, *args)

    def capture(closure, args: tuple):
        result = cache.capture(closure, dict(zip(names, args)), args, {})
        if result is None:
            return None
        if result is PLAIN_RUN:
            if closure is None:
                return function(None)
            return lambda closure, *args: function(closure)(*args)
        if closure is None:
            run = types.FunctionType(result.code, f_globals, code.co_name)
        else:

            def run(closure, *args, _code=result.code):
                return types.FunctionType(_code, f_globals, code.co_name, None, closure)(*args)

        cache.add(result, params, {}, run)
        return run

    if code.co_freevars:

        def resume_with_closure(closure, *args):
            for guard, run in entries:
                if guard(closure, *args):
                    return run(closure, *args)
            return miss(closure, args)

        return resume_with_closure

    def resume(*args):
        for guard, run in entries:
            if guard(None, *args):
                return run(*args)
        return miss(None, args)

    return resume


class OptimizedModule(Module):
    """What ``kiln.compile(module)`` returns: calls the module's ``forward`` through a compiled
    wrapper. Parameters, buffers and attributes are the original module's own."""

    def __init__(self, mod: Module, ctx: CompileContext):
        super().__init__()
        self._orig_mod = mod
        forward = inspect.getattr_static(type(mod), "forward")
        forward = getattr(forward, "_kiln_original", forward)  # ``@kiln.compile def forward``
        # the class's one cache in ``ctx``: modules are guarded by type (and what is read from
        # them), so instances of the class share its entries, as PyTorch's per-code caches do
        object.__setattr__(self, "_compiled_forward", ctx.wrapper_for(forward))
        object.__setattr__(self, "_compiled_call", None)
        object.__setattr__(self, "_class", type(mod))

    def forward(self, *args, **kwargs):
        mod = self._orig_mod
        d = mod.__dict__
        if (
            d["_forward_pre_hooks"]
            or d["_forward_hooks"]
            or "forward" in d
            or type(mod) is not self.__dict__["_class"]
            or type(mod).__call__ is not Module.__call__
        ):
            # the module's own hooks, a forward set on the module (accelerate's fp32 output
            # wrapper), a swapped class or a class's own ``__call__``: ``mod(...)`` is
            # compiled, which calls what eager ``mod(...)`` calls
            call = self.__dict__["_compiled_call"]
            if call is None:
                ctx = self.__dict__["_compiled_forward"]._kiln_context
                call = _compiled_function(_call_module, ctx)
                object.__setattr__(self, "_compiled_call", call)
            return call(mod, *args, **kwargs)
        return self._compiled_forward(mod, *args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_modules"]["_orig_mod"], name)

    def __reduce__(self):
        """Pickling and ``copy.deepcopy`` keep the module and the compile settings; the copy
        compiles afresh (compiled code and caches are not data)."""
        ctx = self.__dict__["_compiled_forward"]._kiln_context
        settings = (ctx.backend, ctx.fullgraph, ctx.dynamic, ctx.options or None, ctx.mode)
        return (_rebuild_optimized_module, (self._orig_mod, *settings))


def _rebuild_optimized_module(mod, backend, fullgraph, dynamic, options, mode):
    return compile(
        mod, backend=backend, fullgraph=fullgraph, dynamic=dynamic, options=options, mode=mode
    )


def _call_module(module, *args, **kwargs):
    """What a compiled module with hooks of its own captures: the call, hooks included."""
    return module(*args, **kwargs)


def compile_module_in_place(mod: Module, **options) -> None:
    """``Module.compile(**options)``: the module's own ``forward`` becomes a compiled wrapper of
    its class's ``forward`` (the cache the class's instances share in these settings); hooks
    keep running around it, eagerly."""
    if options.pop("disable", False):
        return
    ctx = _context_for(
        options.pop("backend", "inductor"), options.pop("fullgraph", False),
        options.pop("dynamic", None), options.pop("options", None), options.pop("mode", None),
    )  # fmt: skip
    if options:
        raise TypeError(f"compile() got unexpected keyword arguments {sorted(options)}")
    forward = inspect.getattr_static(type(mod), "forward")
    mod.forward = types.MethodType(ctx.wrapper_for(forward), mod)


_SHARED_CONTEXTS: dict[tuple, CompileContext] = {}


def _context_for(backend, fullgraph, dynamic, options, mode) -> CompileContext:
    """``kiln.compile`` calls with equal settings share one context (and so, for a function
    compiled twice, one cache), as PyTorch's caches are per code object."""
    key = (
        backend if isinstance(backend, str) else id(backend),
        fullgraph, dynamic, mode, repr(sorted((options or {}).items())),
    )  # fmt: skip
    with compile_lock:  # threads compiling with equal settings share the one context
        ctx = _SHARED_CONTEXTS.get(key)
        if ctx is None or (not isinstance(backend, str) and ctx.backend is not backend):
            ctx = _SHARED_CONTEXTS[key] = CompileContext(backend, fullgraph, dynamic, options, mode)
    return ctx


# PyTorch's ``mode=`` names, in the order its error lists them, and the inductor options they set
_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
_MODE_OPTIONS = {
    "reduce-overhead": {"triton.cudagraphs": True},
    "max-autotune": {"triton.cudagraphs": True},
}


def compile(
    fn: Callable | None = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Callable = "inductor",
    mode: str | None = None,
    options: dict | None = None,
    disable: bool = False,
) -> Any:
    """Capture ``fn`` (a function or an ``nn.Module``) into graphs compiled by ``backend``.

    Works as ``kiln.compile(fn)``, ``@kiln.compile`` and ``@kiln.compile(backend=...)``.
    ``fullgraph=True`` makes any graph break an error naming the user's file and line.
    Shapes: the first call compiles a graph for its sizes; a size that changes makes that dim
    symbolic in the next (one graph for every size), ``dynamic=True`` makes every dim symbolic
    from the start, ``dynamic=False`` compiles each shape; a changing int/float argument
    becomes a graph input where it meets tensors.
    """
    if mode is not None and options is not None:
        raise RuntimeError(
            "Either mode or options can be specified, but both can't be specified at the same time."
        )
    if mode is not None and mode not in _MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(_MODES)}")
    if fn is None:
        return lambda f: compile(
            f, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
            options=options, disable=disable,
        )  # fmt: skip
    if disable or getattr(fn, "_kiln_disabled", None):
        return fn
    return compile_in_context(fn, _context_for(backend, fullgraph, dynamic, options, mode))


def compile_in_context(fn: Callable, ctx: CompileContext) -> Any:
    """``fn`` (a module, function, bound method or other callable) compiled in ``ctx``: what
    ``kiln.compile`` returns, and what ``explain`` runs."""
    if isinstance(fn, Module):
        return OptimizedModule(fn, ctx)
    if isinstance(fn, types.FunctionType):
        original = fn.__dict__.get("_kiln_original", fn)
        return ctx.wrapper_for(original)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        func = fn.__func__
        return types.MethodType(
            ctx.wrapper_for(func.__dict__.get("_kiln_original", func)), fn.__self__
        )
    if not callable(fn):
        raise RuntimeError(f"kiln.compile expects a callable or a Module, got {type(fn).__name__}")

    def call(*args, **kwargs):
        return fn(*args, **kwargs)

    call.__name__ = getattr(fn, "__name__", type(fn).__name__)
    call.__qualname__ = call.__name__
    return ctx.wrapper_for(call)


def reset() -> None:
    """Forget every compiled entry (all contexts) and the capture caches; the next call of any
    compiled function captures again. Also ``kiln.compiler.reset()``."""
    with compile_lock:  # not while another thread captures into one of the caches
        for ctx in list(_CONTEXTS):
            for cache in ctx.caches:
                cache.clear()
        _clear_frame_code()
        _clear_resume()
