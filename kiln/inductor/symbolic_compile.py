"""Graphs with symbolic sizes: one set of kernels for every size, else the interim route.

The graph is lowered, scheduled and compiled once, on fakes whose sizes are ``SymInt``s, inside
``ShapeEnv.kernel_scope``: loop bounds, strides and buffer sizes stay expressions over the size
symbols, the kernels read the symbols' values after their buffer pointers (LLVM) or take the
size expressions they need as integer arguments (Triton), and the wrapper works out layouts,
row counts and grids per call (``symbolic_sizes``). Whatever the compiler would decide
from a size's value — a comparison the symbols' ranges leave open, a size needed as a plain int —
raises ``SizeDependentError`` in that scope instead of guarding, so kernels compiled this way
never depend on the sizes seen; the scope assumes every symbol is at least 2, which each call
checks. A step the LLVM generator leaves to numpy (``erfinv``, ``asin``, bfloat16 arithmetic, a
scatter computing one of those) is part of the same compile: its loop bodies are recorded once
in that scope and replayed by numpy at each call's symbol values
(``numpy_backend.EverySizeStep``), and so is every step of the numpy code generator. A graph the
symbolic route cannot compile (that error) takes the interim route of ``specialize.py``, and so
does a call outside the kernels' assumptions (a size of 1), which is compiled for only once it
has come ``config.unserved_size_eager_calls`` times. Reasons are logged under
``KILN_LOGS=inductor`` and ``recompiles``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

from ..runtime import logs as klog
from ..runtime.symbolic import SizeDependentError, shape_env_of
from . import config
from .lowering.convolution import static_images_only
from .specialize import COMPILE_STATS, has_unbacked_sizes, specializing
from .symbolic_sizes import SizeBinding, graph_symbols

__all__ = ["compile_symbolic"]


def compile_symbolic(
    gm, example_inputs, options: dict, compile_static: Callable, compile_graph: Callable
) -> Callable:
    """The graph's kernels for every size, or the interim route (see the module docstring)."""
    from .compile_fx import SymbolicUnsupportedError

    interim: list = []

    def fallback(*args):
        if not interim:
            eager_calls = config.unserved_size_eager_calls
            interim.append(specializing(gm, example_inputs, compile_static, eager_calls))
        COMPILE_STATS.fallback_calls += 1
        return interim[0](*args)

    env = shape_env_of(example_inputs)
    if env is None or has_unbacked_sizes(gm) or options.get("symbolic_kernels") is False:
        return specializing(gm, example_inputs, compile_static)
    try:
        binding = SizeBinding(example_inputs, graph_symbols(example_inputs))
        try:
            with env.kernel_scope():
                compiled = compile_graph(gm, example_inputs, options, binding, fallback)
        except SizeDependentError as why:
            if not _has_convolution(gm):
                raise
            # the convolution lowering's loops over symbolic image sizes are the likeliest
            # cause: once more with those convolutions as eager calls, before the whole graph
            # goes per size
            klog.log(
                "inductor",
                f"inductor: no kernels for every size with symbolic convolution images ({why},"
                f" at {_where(why)}); compiling again with their eager kernels",
            )
            with static_images_only(), env.kernel_scope():
                compiled = compile_graph(gm, example_inputs, options, binding, fallback)
    except (SizeDependentError, SymbolicUnsupportedError) as why:
        message = (
            f"inductor: no kernels for every size ({why}, at {_where(why)});"
            " compiling per size instead"
        )
        klog.log("inductor", message)
        klog.log("recompiles", message)
        COMPILE_STATS.symbolic_refused += 1
        return specializing(gm, example_inputs, compile_static)
    COMPILE_STATS.symbolic_compiles += 1
    klog.log("inductor", f"inductor: kernels for every size of {binding.symbols}")
    return compiled


def _has_convolution(gm) -> bool:
    return any(
        node.op == "call_function" and getattr(node.target, "name", None) == "convolution"
        for node in gm.graph.nodes
    )


def _where(error: BaseException) -> str:
    """The compiler's own line that needed a size's value (the innermost inductor frame)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "inductor" in f.filename]
    if not frames:
        return "?"
    frame = frames[-1]
    return f"{frame.filename.rsplit('kiln/', 1)[-1]}:{frame.lineno} {frame.name}"
