"""Dynamic dims (``Dim``): symbolic programs, files and packages that serve every size in range.

PyTorch's ``torch.export`` is the reference: the same range constraints, the same sizes accepted
and refused, the same constraint violations for code that specializes a declared dim.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import kiln
from kiln.export import Dim, aot_compile, export, load, load_package, save
from tests.models.models import GPTConfig, models_for
from tests.oracle import assert_close, needs_torch, to_torch, torch

from .test_save_load import _parts, _write

MODELS = models_for(kiln)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mlp_program(lib, model, strict: bool = True):
    batch = lib.export.Dim("batch", min=1, max=512)
    x = lib.randn(4, 8)
    if lib is kiln:
        return lib.export.export(model, (x,), dynamic_shapes={"x": {0: batch}}, strict=strict)
    return lib.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})


def _torch_mlp(model):
    from tests.models.models import copy_weights

    reference = models_for(torch).MLP()
    copy_weights(torch, reference, model)
    return reference.eval()


# ---------------------------------------------------------------------------- export


@needs_torch
def test_range_constraints_are_over_symbols_like_torch():
    model = MODELS.MLP().eval()
    ep = _mlp_program(kiln, model)
    reference = _mlp_program(torch, _torch_mlp(model))
    assert [repr(v) for v in ep.range_constraints.values()] == [
        str(v) for v in reference.range_constraints.values()
    ]
    assert ep.range_constraints == {"s0": ep.range_constraints["s0"]}
    assert ep.dim_names == {"s0": "batch"}
    assert ep.input_metas[0].dims == ("s0", 8)
    assert not ep.specialized
    assert "Range constraints: {s0: VR[1, 512]}" in str(ep)


def test_graph_has_the_symbolic_sizes():
    ep = _mlp_program(kiln, MODELS.MLP().eval())
    (x,) = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "x"]
    assert str(x.meta["val"].shape) == "kiln.Size([s0, 8])"
    text = str(ep)
    assert "x: Tensor(float32, [s0, 8])" in text
    assert "Tensor(float32, [s0, 4])" in text  # the MLP's output


@pytest.mark.parametrize("strict", [True, False])
def test_module_runs_at_every_size_in_range_like_eager(strict):
    model = MODELS.MLP().eval()
    module = _mlp_program(kiln, model, strict).module()
    for batch in (1, 2, 3, 4, 37, 512):  # 4 was the example's size
        x = kiln.randn(batch, 8)
        with kiln.no_grad():
            assert_close(module(x), model(x))


@needs_torch
def test_sizes_out_of_range_are_refused_like_torch():
    model = MODELS.MLP().eval()
    module = _mlp_program(kiln, model).module()
    reference = _mlp_program(torch, _torch_mlp(model)).module()
    for shape in ((600, 8), (4, 9)):
        with pytest.raises(AssertionError):
            reference(torch.randn(*shape))
    with pytest.raises(
        RuntimeError,
        match=r"input x\.shape\[0\] \(Dim 'batch', range \[1, 512\]\) to be <= 512, but got 600",
    ):
        module(kiln.randn(600, 8))
    with pytest.raises(AssertionError, match=r"x\.shape\[1\] to be equal to 8 .*got 9"):
        module(kiln.randn(4, 9))
    with pytest.raises(RuntimeError, match="dtype kiln.float32"):
        module(kiln.ones(4, 8, dtype=kiln.float64))


class _ViewToConstant(kiln.nn.Module):
    def forward(self, x):
        return x.view(4, 8) * 2  # ties the batch to 4


class _BranchOnSize(kiln.nn.Module):
    def forward(self, x):
        if x.shape[0] > 16:  # a guard on the batch
            return x * 2
        return x + 1


@needs_torch
@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(
    "name, kiln_model, message",
    [
        ("view", _ViewToConstant, r"specialized it to be a constant \(4\)"),
        ("branch", _BranchOnSize, r"in the specified range \[0, 512\] satisfy .*batch <= 16"),
    ],
)
def test_code_that_specializes_a_dim_is_a_constraint_violation_like_torch(
    strict, name, kiln_model, message
):
    x = kiln.randn(4, 8)
    with pytest.raises(RuntimeError, match=r"Constraints violated \(batch\)!") as info:
        export(kiln_model(), (x,), dynamic_shapes={"x": {0: Dim("batch", max=512)}},
               strict=strict)  # fmt: skip
    assert __file__ in str(info.value)  # the user's line
    assert re.search(message, str(info.value))
    torch_model = type(name, (torch.nn.Module,), {"forward": kiln_model.forward})
    with pytest.raises(Exception, match=r"Constraints violated \(batch\)!"):
        torch.export.export(torch_model(), (to_torch(x),),
                            dynamic_shapes={"x": {0: torch.export.Dim("batch", max=512)}})  # fmt: skip


@needs_torch
def test_dims_the_code_ties_together_must_be_one_dim_like_torch():
    def add(x, y):
        return x + y

    x, y = kiln.randn(4, 8), kiln.randn(4, 8)
    with pytest.raises(RuntimeError, match="The values of b = y.shape.0. and a = x.shape.0. must"):
        export(add, (x, y), dynamic_shapes={"x": {0: Dim("a")}, "y": {0: Dim("b")}})
    torch_add = type("Add", (torch.nn.Module,), {"forward": lambda self, x, y: add(x, y)})
    with pytest.raises(Exception, match="must always be equal"):
        torch.export.export(
            torch_add(), (to_torch(x), to_torch(y)),
            dynamic_shapes={"x": {0: torch.export.Dim("a")}, "y": {0: torch.export.Dim("b")}},
        )  # fmt: skip
    a = Dim("a")
    ep = export(add, (x, y), dynamic_shapes={"x": {0: a}, "y": {0: a}})
    assert list(ep.range_constraints) == ["s0"]
    module = ep.module()
    x5, y5 = kiln.randn(5, 8), kiln.randn(5, 8)
    assert_close(module(x5, y5), x5 + y5)
    with pytest.raises(RuntimeError, match=r"y\.shape\[0\] to be equal to x\.shape\[0\] = 5"):
        module(x5, kiln.randn(6, 8))


def test_dims_the_code_keeps_apart_stay_apart():
    def fn(x, y):
        return x.sum(0) + y.sum(0)

    ep = export(fn, (kiln.randn(4, 8), kiln.randn(4, 8)),
                dynamic_shapes={"x": {0: Dim("a")}, "y": {0: Dim("b")}})  # fmt: skip
    assert ep.dim_names == {"s0": "a", "s1": "b"}
    x, y = kiln.randn(3, 8), kiln.randn(9, 8)
    assert_close(ep.module()(x, y), fn(x, y))


@needs_torch
def test_example_of_size_one_for_a_dim_is_an_error_like_torch():
    x = kiln.randn(1, 8)
    with pytest.raises(RuntimeError, match=r"Constraints violated \(batch\)!.*constant \(1\)"):
        export(MODELS.MLP(), (x,), dynamic_shapes={"x": {0: Dim("batch", min=1)}})
    with pytest.raises(Exception, match="specialized it to be a constant"):
        torch.export.export(_torch_mlp(MODELS.MLP()), (to_torch(x),),
                            dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1)}})  # fmt: skip


def test_returning_a_size_is_refused_rather_than_baked_in():
    def fn(x):
        return x * 2, x.shape[0] * 2

    with pytest.raises(RuntimeError, match="returns the int 8 while it has dynamic dims"):
        export(fn, (kiln.randn(4, 3),), dynamic_shapes=({0: Dim("n")},))
    with pytest.raises(RuntimeError, match="returns the int 2\\*s0"):
        export(fn, (kiln.randn(4, 3),), dynamic_shapes=({0: Dim("n")},), strict=False)


def test_tiny_gpt_over_batch_and_sequence_length_matches_eager():
    kiln.manual_seed(0)
    model = MODELS.TinyGPT(GPTConfig()).eval()
    dims = {"idx": {0: Dim("batch", max=8), 1: Dim("seq", min=1, max=16)}}
    module = export(model, (kiln.randint(0, 32, (2, 8)),), dynamic_shapes=dims).module()
    for batch, seq in ((2, 8), (3, 5), (1, 16), (4, 1)):
        idx = kiln.randint(0, 32, (batch, seq))
        with kiln.no_grad():
            assert_close(module(idx)[0], model(idx)[0])


# ---------------------------------------------------------------------------- save / load


def test_saved_program_keeps_its_symbolic_sizes_and_runs_at_other_sizes(tmp_path):
    model = MODELS.MLP().eval()
    ep = _mlp_program(kiln, model)
    save(ep, tmp_path / "mlp.kiln")
    text = _parts(tmp_path / "mlp.kiln")["graph.txt"].decode()
    assert text.startswith("# kiln.export graph, format 2\ns0 = kiln.sym.symbol(4, 2, 512)\n")
    loaded = load(tmp_path / "mlp.kiln")
    assert loaded.range_constraints == ep.range_constraints
    assert loaded.dim_names == {"s0": "batch"} and not loaded.specialized
    for batch in (1, 7, 300):
        x = kiln.randn(batch, 8)
        with kiln.no_grad():
            assert_close(loaded.module()(x), model(x))
    with pytest.raises(RuntimeError, match="Dim 'batch', range"):
        loaded.module()(kiln.randn(513, 8))


def test_saved_size_computations_round_trip(tmp_path):
    def fn(x):
        flat = x.reshape(x.shape[0] * 2, -1)
        return flat * (x.shape[0] // 2)

    ep = export(fn, (kiln.randn(4, 6),), dynamic_shapes=({0: Dim("n", max=64)},))
    save(ep, tmp_path / "fn.kiln")
    text = _parts(tmp_path / "fn.kiln")["graph.txt"].decode()
    assert "kiln.sym.mul(sym_size, 2)" in text and "Tensor(float32, [2*s0, 3])" in text
    loaded = load(tmp_path / "fn.kiln")
    for n in (3, 10):
        x = kiln.randn(n, 6)
        assert_close(loaded.module()(x), fn(x))


def test_edited_symbolic_annotation_is_refused(tmp_path):
    ep = _mlp_program(kiln, MODELS.MLP().eval())
    save(ep, tmp_path / "mlp.kiln")
    parts = _parts(tmp_path / "mlp.kiln")
    parts["graph.txt"] = parts["graph.txt"].replace(b"[s0, 32]", b"[2*s0, 32]", 1)
    _write(tmp_path / "edited.kiln", parts)
    with pytest.raises(kiln.export.ExportFileError, match="annotated .*2\\*s0"):
        load(tmp_path / "edited.kiln")


def test_file_of_format_version_1_still_loads(tmp_path):
    """A file written before symbolic export: graph text format 1, ranges keyed by the Dim's
    name, ``specialized``: it serves the example's sizes and says why it refuses others."""
    model = MODELS.MLP().eval()
    save(export(model, (kiln.randn(4, 8),)), tmp_path / "static.kiln")
    parts = _parts(tmp_path / "static.kiln")
    parts["graph.txt"] = parts["graph.txt"].replace(b"format 2", b"format 1", 1)
    program = json.loads(parts["program.json"])
    program["inputs"][0]["dims"] = ["batch", 8]
    program["range_constraints"] = {"batch": [1, 8]}
    program["specialized"] = True
    del program["dim_names"]
    parts["program.json"] = json.dumps(program).encode()
    manifest = json.loads(parts["MANIFEST.json"])
    manifest["version"] = 1
    parts["MANIFEST.json"] = json.dumps(manifest).encode()
    _write(tmp_path / "v1.kiln", parts)
    loaded = load(tmp_path / "v1.kiln")
    assert loaded.specialized
    x = kiln.randn(4, 8)
    with kiln.no_grad():
        assert_close(loaded.module()(x), model(x))
    with pytest.raises(RuntimeError, match="specialized to the example's sizes .batch=4."):
        loaded.module()(kiln.randn(3, 8))


# ---------------------------------------------------------------------------- packages


def test_package_kernels_serve_every_size(tmp_path):
    model = MODELS.MLP().eval()
    aot_compile(_mlp_program(kiln, model), tmp_path / "mlp.kpkg")
    plan = json.loads(zipfile.ZipFile(tmp_path / "mlp.kpkg").read("plan.json"))
    assert plan["symbols"] == [{"name": "s0", "input": 8, "dim": 0}]  # x, after 8 weights
    assert any(isinstance(s["rows"], dict) for s in plan["steps"] if s["kind"] == "kernel")
    package = load_package(tmp_path / "mlp.kpkg")
    for batch in (1, 2, 3, 4, 100, 512):  # 1: the stored graph with the eager kernels
        x = kiln.randn(batch, 8)
        with kiln.no_grad():
            assert_close(package(x), model(x))
    with pytest.raises(RuntimeError, match=r"x\.shape\[0\] \(Dim 'batch', range \[1, 512\]\)"):
        package(kiln.randn(513, 8))


def test_package_of_unfold_windows_serves_every_size(tmp_path):
    """``unfold``'s window count ``n - 1`` may be 1 where the symbolic compile assumes sizes of
    at least 2; its result's layout is known dense for every size, so the package's kernels
    serve every length, a single window included (the package was refused before)."""

    def fn(x):
        return x.unfold(0, 2, 1) * 2

    ep = export(fn, (kiln.randn(6, 3),), dynamic_shapes=({0: Dim("n", max=64)},))
    aot_compile(ep, tmp_path / "unfold.kpkg")
    package = load_package(tmp_path / "unfold.kpkg")
    for n in (2, 9, 64):
        x = kiln.randn(n, 3)
        assert_close(package(x), fn(x))
        assert_close(ep.module()(x), fn(x))


def test_package_refuses_a_step_run_by_numpy(tmp_path):
    """``erfinv`` has no LLVM kernel: its step runs through numpy, which serves every size in
    a process but cannot be stored as object code, so the package names that step instead."""

    def fn(x):
        return kiln.special.erfinv(x.tanh()) * 2

    ep = export(fn, (kiln.randn(6, 3),), dynamic_shapes=({0: Dim("n", max=64)},))
    with pytest.raises(NotImplementedError, match=r"runs through the numpy executor \(op erfinv\)"):
        aot_compile(ep, tmp_path / "erfinv.kpkg")
    x = kiln.randn(9, 3)
    assert_close(ep.module()(x), fn(x))


def test_package_of_a_flip_serves_every_size(tmp_path):
    """``flip`` reads its input at ``size - 1 - i``: the index is an expression of the size
    symbol, so the package's kernels serve every length (it was refused before)."""

    def fn(x):
        return x.flip(0) * 2

    ep = export(fn, (kiln.randn(6, 3),), dynamic_shapes=({0: Dim("n", max=64)},))
    aot_compile(ep, tmp_path / "flip.kpkg")
    package = load_package(tmp_path / "flip.kpkg")
    for n in (2, 7, 64):
        x = kiln.randn(n, 3)
        assert_close(package(x), fn(x))


_FRESH = """
import json, sys
import numpy as np
import kiln
import kiln.export
package = kiln.export.load_package(sys.argv[1])
for k, path in enumerate(sys.argv[2:]):
    logits, _ = package(kiln.tensor(np.load(path)))
    np.save(path + ".out.npy", logits.numpy())
compiler = ("kiln.dynamo", "kiln.aot", "kiln.ir", "kiln.inductor.lowering",
            "kiln.inductor.graph_lowering", "kiln.inductor.scheduler", "kiln.inductor.ir",
            "kiln.inductor.compile_fx", "kiln.inductor.codegen.llvm", "kiln.inductor.codegen.cpu")
loaded = sorted(m for m in sys.modules if m in compiler or m.startswith(tuple(c + "." for c in compiler)))
print(json.dumps({"compiler": loaded}))
"""


def test_tiny_gpt_package_runs_at_several_sizes_in_a_fresh_process(tmp_path):
    """Kernels compiled once for every (batch, sequence length); the deployed process imports
    no capture, AOT or lowering module."""
    kiln.manual_seed(0)
    model = MODELS.TinyGPT(GPTConfig()).eval()
    dims = {"idx": {0: Dim("batch", max=8), 1: Dim("seq", min=1, max=16)}}
    ep = export(model, (kiln.randint(0, 32, (2, 8)),), dynamic_shapes=dims)
    aot_compile(ep, tmp_path / "gpt.kpkg")
    inputs = []
    for batch, seq in ((2, 8), (3, 5), (8, 16)):
        idx = kiln.randint(0, 32, (batch, seq))
        path = str(tmp_path / f"idx_{batch}_{seq}.npy")
        np.save(path, idx.numpy())
        inputs.append((idx, path))
    env = dict(os.environ, PYTHONPATH=_ROOT)
    args = [sys.executable, "-c", _FRESH, str(tmp_path / "gpt.kpkg"), *(p for _, p in inputs)]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["compiler"] == []
    for idx, path in inputs:
        with kiln.no_grad():
            expected, _ = model(idx)
        assert_close(kiln.tensor(np.load(path + ".out.npy")), expected)
