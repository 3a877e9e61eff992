"""``kiln.bench.dumps``: observing inductor compiles and writing every stage of a compile."""

from __future__ import annotations

import warnings

import numpy as np

import kiln
import kiln.nn.functional as F
from kiln.bench.dumps import count_kernels, dump_compiled, loop_ir, observe_compiled_graphs
from kiln.dynamo.testing import CompileCounter
from kiln.inductor import compile_fx


def _scaled_softmax(x, w):
    return F.softmax(x * w, dim=-1).sum()


def test_observing_sees_forward_and_backward_graphs_and_restores_compile_graph():
    original = compile_fx.compile_graph
    x, w = kiln.randn(8, 16), kiln.randn(16, requires_grad=True)
    compiled = kiln.compile(_scaled_softmax, backend=lambda gm, ex: compile_fx.inductor(gm, ex))
    with observe_compiled_graphs() as observed:
        compiled(x, w).backward()
    assert compile_fx.compile_graph is original
    assert len(observed) == 2 and not any(o.eager_op for o in observed)
    assert count_kernels(observed) == sum(o.graph.num_kernels for o in observed) >= 2


def test_observing_leaves_graphs_with_symbolic_sizes_compiled_and_counts_each_kernel_set_once():
    """The inductor's symbolic route calls ``compile_graph`` again with more arguments: observing
    must neither break it (the graph would run eagerly, with a warning) nor count it twice."""
    counter = CompileCounter("inductor")
    compiled = kiln.compile(lambda x: (x.sigmoid() * 2).sum(0), backend=counter, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with observe_compiled_graphs() as observed, kiln.no_grad():
            for n in (3, 5, 9):
                x = kiln.randn(n, 4)
                np.testing.assert_allclose(
                    compiled(x).numpy(), (x.sigmoid() * 2).sum(0).numpy(), rtol=1e-6
                )
    assert counter.frame_count == 1
    assert len(observed) == 1 and observed[0].graph.num_kernels >= 1


def test_observing_sees_graphs_the_compiled_graph_cache_loads(cache_dir):
    """A warm compile takes its graphs from the on-disk cache without ``compile_graph``: the
    bench's kernel counts must still include them, and their loop IR says why it is missing."""
    x, w = kiln.randn(8, 16), kiln.randn(16, requires_grad=True)
    with observe_compiled_graphs() as cold:
        kiln.compile(_scaled_softmax)(x, w).backward()
    kiln.dynamo.reset()
    with observe_compiled_graphs() as warm:
        kiln.compile(_scaled_softmax)(x, w).backward()
    assert len(cold) == len(warm) == 2
    assert count_kernels(warm) == count_kernels(cold) >= 2
    assert all(o.graph.schedule is None for o in warm)
    assert "compiled-graph cache" in loop_ir(warm[0].graph)


def test_loop_ir_shows_each_buffer_with_its_loops_and_body(cache_dir):
    with observe_compiled_graphs() as observed:
        kiln.compile(_scaled_softmax)(kiln.randn(8, 16), kiln.randn(16))
    text = loop_ir(observed[0].graph)
    assert "max reduction over (r0 < 16) for (x0 < 8)" in text
    assert "exp(" in text and "load(" in text and "return tmp" in text


def test_dump_compiled_writes_every_stage_without_touching_the_callers_cache(tmp_path):
    x, w = kiln.randn(8, 16), kiln.randn(16, requires_grad=True)
    compiled = kiln.compile(_scaled_softmax)
    compiled(x, w)
    entries = list(compiled._kiln_cache.entries)
    files = dump_compiled(compiled, (x, w), str(tmp_path))
    names = [f[len(str(tmp_path)) + 1 :] for f in files]
    assert compiled._kiln_cache.entries == entries  # captured again in a private context
    assert "explain.txt" in names
    assert any(n.endswith("_graph.py") for n in names)
    assert any(n.endswith("_guards.py") for n in names)
    assert any(n.endswith("aot_joint.py") for n in names)
    folders = sorted({n.split("/")[1] for n in names if n.startswith("inductor/")})
    assert len(folders) == 2  # the forward and the backward graph
    for folder in folders:
        for name in ("graph.py", "schedule.txt", "output_code.py", "kernels.ll", "loop_ir.txt"):
            assert f"inductor/{folder}/{name}" in names
    loop_irs = [(tmp_path / "inductor" / f / "loop_ir.txt").read_text() for f in folders]
    assert [text.splitlines()[0].split()[5] for text in loop_irs] == ["forward", "backward"]
