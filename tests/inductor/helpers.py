"""The inductor tests' one way to compile: trace a function to an ir graph, compile it with given
inductor options (``cpu_codegen``, Triton knobs...), and compare what it returns with eager.

``compile_traced`` only compiles (for tests that inspect kernels, plans or schedules);
``check_against_eager`` also runs the compiled graph and checks every output's dtype, shape and
values; ``inductor_compiler`` is the same compiler as a backend for ``aot_function``, and
``compiled_by_inductor`` goes through dynamo (``kiln.compile``) with the given CPU codegen.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln.inductor.compile_fx import compile_graph
from kiln.ir.tracer import trace


def compile_traced(fn, *inputs, codegen="llvm", options=None, decompositions="prims"):
    """``fn`` traced on ``inputs`` (decomposed to prims unless told otherwise) and compiled with
    the ``codegen`` CPU kernel generator and any further inductor ``options``."""
    gm = trace(fn, *inputs, decompositions=decompositions)
    return compile_graph(gm, list(inputs), {"cpu_codegen": codegen, **(options or {})})


def check_against_eager(fn, *inputs, codegen="llvm", options=None, rtol=1e-5, atol=1e-6):
    """Compile ``fn``'s prim graph, run it, and compare each output with eager ``fn``: same dtype
    and shape, floats within ``rtol``/``atol`` (NaNs equal), other dtypes exactly. Returns the
    compiled graph for further checks (kernel counts, schedules)."""
    compiled = compile_traced(fn, *inputs, codegen=codegen, options=options)
    got = compiled(*inputs)
    expected = fn(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype is e.dtype, f"dtype {g.dtype} vs eager {e.dtype}"
        assert tuple(g.shape) == tuple(e.shape), f"shape {tuple(g.shape)} vs {tuple(e.shape)}"
        if e.dtype.is_floating_point:
            np.testing.assert_allclose(
                g.float().numpy(), e.float().numpy(), rtol=rtol, atol=atol, equal_nan=True
            )
        else:
            np.testing.assert_array_equal(g.numpy(), e.numpy())
    return compiled


def inductor_compiler(codegen: str):
    """A backend for ``aot_function`` compiling each graph with the given CPU codegen."""

    def compile_(gm, example_inputs):
        return compile_graph(gm, example_inputs, {"cpu_codegen": codegen})

    return compile_


def compiled_by_inductor(fn, codegen: str):
    """``kiln.compile(fn)`` with the inductor backend and the given CPU codegen."""
    return kiln.compile(fn, backend="inductor", options={"cpu_codegen": codegen})


def close_to_torch(ours, theirs, rtol=1e-4, atol=1e-5) -> None:
    """A kiln tensor against a PyTorch one, values only (training comparisons)."""
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol, atol)


def assert_training_state_matches(ours, theirs, our_opt, their_opt) -> None:
    """After a step, a kiln model and optimizer hold what the PyTorch ones hold: parameters,
    gradients, optimizer state (the step count aside) and buffers (running statistics)."""
    for p, q in zip(ours.parameters(), theirs.parameters()):
        close_to_torch(p, q)
        close_to_torch(p.grad, q.grad)
        for key, value in our_opt.state[p].items():
            if key != "step":
                close_to_torch(value, their_opt.state[q][key])
    for (name, b), c in zip(ours.named_buffers(), theirs.buffers()):
        assert b.dtype.is_floating_point == c.dtype.is_floating_point, name
        close_to_torch(b, c)


def assert_every_size_served(stats) -> None:
    """The compile counters say every graph got kernels for every size: none was refused the
    symbolic route, compiled per size or run eagerly for a size."""
    assert stats.symbolic_compiles >= 1
    assert stats.symbolic_refused == 0
    assert stats.static_compiles == stats.eager_first_calls == stats.fallback_calls == 0


def kernels_ir(tmp_path, monkeypatch, compiled, *args) -> tuple:
    """What ``compiled(*args)`` returns, and its kernels' LLVM IR (``KILN_DEBUG_DIR`` dumps)."""
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path))
    out = compiled(*args)
    monkeypatch.delenv("KILN_DEBUG_DIR")
    return out, "\n".join(p.read_text() for p in sorted(tmp_path.rglob("kernels.ll")))


def seeded_values(shape, dtype: str, seed: int = 7) -> np.ndarray:
    """Values of ``dtype`` for kernel tests: booleans, small integers of both signs, normals."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith("int"):
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
