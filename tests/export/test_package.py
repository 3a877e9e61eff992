"""``aot_compile`` / ``load_package``: compiled kernels, plan and weights in one package."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.export import (
    Dim,
    ExportFileError,
    PackageError,
    aot_compile,
    export,
    load,
    load_package,
    package_runtime,
)
from kiln.inductor.package import CPU_LEVELS
from tests.models.models import GPTConfig, models_for
from tests.oracle import assert_close

from .models import export_models

M = export_models(kiln)
MODELS = models_for(kiln)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def gpt_package(tmp_path_factory):
    kiln.manual_seed(0)
    model = MODELS.TinyGPT(GPTConfig()).eval()
    idx = kiln.randint(0, 32, (2, 16))
    path = tmp_path_factory.mktemp("gpt") / "gpt.kpkg"
    aot_compile(export(model, (idx,)), path)
    return model, idx, path


def test_tiny_gpt_package_matches_eager(gpt_package):
    model, idx, path = gpt_package
    package = load_package(path)
    with kiln.no_grad():
        expected, _ = model(idx)
    logits, loss = package(idx)
    assert loss is None
    assert_close(logits, expected)
    other = kiln.randint(0, 32, (2, 16))
    with kiln.no_grad():
        assert_close(package(other)[0], model(other)[0])


_FRESH = """
import json, sys, time
import numpy as np
import kiln
wall, cpu = time.perf_counter(), time.process_time()
import kiln.export
package = kiln.export.load_package(sys.argv[1])
cpu_ms, wall_ms = (time.process_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3
logits, _ = package(kiln.tensor(np.load(sys.argv[2])))
np.save(sys.argv[3], logits.numpy())
compiler = ("kiln.dynamo", "kiln.aot", "kiln.ir", "kiln.inductor.lowering",
            "kiln.inductor.graph_lowering", "kiln.inductor.scheduler", "kiln.inductor.ir",
            "kiln.inductor.compile_fx", "kiln.inductor.codegen.llvm", "kiln.inductor.codegen.cpu")
loaded = sorted(m for m in sys.modules if m in compiler or m.startswith(tuple(c + "." for c in compiler)))
print(json.dumps({"cpu_ms": cpu_ms, "wall_ms": wall_ms, "compiler": loaded}))
"""


def _fresh_runs(gpt_package, tmp_path, count: int) -> list[dict]:
    """Load and run the package in ``count`` fresh processes (the bytecode cache on, as in a
    deployed process); each reports its load time and the compiler modules it imported."""
    model, idx, path = gpt_package
    np.save(tmp_path / "idx.npy", idx.numpy())
    env = dict(os.environ, PYTHONPATH=_ROOT, PYTHONPYCACHEPREFIX=str(tmp_path / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    args = [sys.executable, "-c", _FRESH, str(path), str(tmp_path / "idx.npy"),
            str(tmp_path / "out.npy")]  # fmt: skip
    runs = []
    for _ in range(count):
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    with kiln.no_grad():
        expected, _ = model(idx)
    assert_close(kiln.tensor(np.load(tmp_path / "out.npy")), expected)
    return runs


def test_package_runs_in_a_fresh_process_without_the_compiler(gpt_package, tmp_path):
    """No capture, AOT or lowering module is imported, and the result matches eager."""
    (run,) = _fresh_runs(gpt_package, tmp_path, 1)
    assert run["compiler"] == []


@pytest.mark.parametrize("side", [8, 32])
def test_cnn_package_runs_its_convolutions_and_matches_eager(tmp_path, side):
    model = MODELS.SmallCNN(size=side).eval()
    x = kiln.randn(2, 3, side, side)
    aot_compile(export(model, (x,)), tmp_path / "cnn.kpkg")
    package = load_package(tmp_path / "cnn.kpkg")
    plan = json.loads(zipfile.ZipFile(tmp_path / "cnn.kpkg").read("plan.json"))
    kinds = {s["kind"] for s in plan["steps"]}
    # convolutions: the channels-in-lanes loop (8x8 images) or the direct loops where the rows
    # are wide enough to pay (32x32), by name; the classifier a BLAS product; no eager kernel
    assert "fallback" not in kinds
    assert "convolution" in kinds and "matmul" in kinds
    called = {s.get("function") for s in plan["steps"] if s["kind"] == "convolution"}
    loop = "conv2d_channels_out" if side == 8 else "conv2d_direct_out"
    assert loop in called, called
    with kiln.no_grad():
        for _ in range(2):
            x = kiln.randn(2, 3, side, side)
            assert_close(package(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_package_runs_each_layer_as_one_call_and_matches_eager(tmp_path, kind):
    """Each layer and direction is one op with several results (output, final states, the
    workspace): the package calls its kernel once and takes the other results from that call."""
    model = getattr(nn, kind)(4, 6, num_layers=2, bidirectional=True, batch_first=True).eval()
    x = kiln.randn(2, 5, 4)
    aot_compile(export(model, (x,)), tmp_path / "rnn.kpkg")
    plan = json.loads(zipfile.ZipFile(tmp_path / "rnn.kpkg").read("plan.json"))
    assert {"fallback", "fallback_result"} <= {s["kind"] for s in plan["steps"]}
    package = load_package(tmp_path / "rnn.kpkg")
    with kiln.no_grad():
        for _ in range(2):
            x = kiln.randn(2, 5, 4)
            assert_close(package(x), model(x))


def test_positional_calls_skip_the_tree_walks(tmp_path, monkeypatch):
    """A call with the exported positional tensors costs what kiln.compile's does: no pytree
    flattening (4x kiln.compile's time for ``x + 1`` before); other calls are still walked and
    checked."""
    from kiln.export import structure

    aot_compile(export(lambda x, y: (x + y, x * y), (kiln.ones(3), kiln.ones(3))),
                tmp_path / "add.kpkg")  # fmt: skip
    package = load_package(tmp_path / "add.kpkg")
    walked = []
    flatten = structure.tree_flatten
    monkeypatch.setattr(structure, "tree_flatten", lambda v: walked.append(v) or flatten(v))
    x, y = kiln.randn(3), kiln.randn(3)
    assert_close(package(x, y), (x + y, x * y))
    assert walked == []
    with pytest.raises(TypeError, match="structure the program was exported with"):
        package(x, y=y)
    assert len(walked) == 1


def test_package_updates_its_buffers_like_eager(tmp_path):
    model = M.WithBuffers()
    twin = copy.deepcopy(model)
    aot_compile(export(model, (kiln.randn(5, 4),)), tmp_path / "bn.kpkg")
    package = load_package(tmp_path / "bn.kpkg")
    for _ in range(3):
        x = kiln.randn(5, 4)
        with kiln.no_grad():
            assert_close(package(x), twin(x))
    assert_close(package.state_dict["bn.running_mean"], twin.bn.running_mean)
    assert int(package.state_dict["bn.num_batches_tracked"]) == 3


def test_cond_package_takes_either_branch(tmp_path):
    model = M.Branchy()
    aot_compile(export(model, (kiln.ones(2, 3),)), tmp_path / "cond.kpkg")
    package = load_package(tmp_path / "cond.kpkg")
    with kiln.no_grad():
        for x in (kiln.ones(2, 3), -kiln.ones(2, 3), kiln.randn(2, 3)):
            assert_close(package(x), model(x))


def test_package_checks_inputs_against_the_dims(tmp_path):
    model = MODELS.MLP()
    batch = Dim("batch", min=1, max=8)
    ep = export(model, (kiln.randn(4, 8),), dynamic_shapes={"x": {0: batch}})
    aot_compile(ep, tmp_path / "mlp.kpkg")
    package = load_package(tmp_path / "mlp.kpkg")
    x = kiln.randn(4, 8)
    with kiln.no_grad():
        assert_close(package(x), model(x))
    with pytest.raises(RuntimeError, match=r"Dim 'batch', range \[1, 8\]\) to be <= 8, but got 9"):
        package(kiln.randn(9, 8))
    x = kiln.randn(2, 8)  # another size in range: the kernels serve every size
    with kiln.no_grad():
        assert_close(package(x), model(x))


def _host_features() -> set[str]:
    return package_runtime.host_cpu()[1]


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_portable_package_records_its_level_and_runs(tmp_path, level):
    if not set(CPU_LEVELS[level]) <= _host_features():
        pytest.skip(f"this CPU does not run {level} code")
    model = MODELS.MLP()
    x = kiln.randn(3, 8)
    aot_compile(export(model, (x,)), tmp_path / "mlp.kpkg", target=level)
    manifest = json.loads(zipfile.ZipFile(tmp_path / "mlp.kpkg").read("MANIFEST.json"))
    assert manifest["target"]["cpu"] == level
    assert set(manifest["target"]["features"]) == set(CPU_LEVELS[level])
    with kiln.no_grad():
        assert_close(load_package(tmp_path / "mlp.kpkg")(x), model(x))


def test_host_package_is_refused_by_a_cpu_without_its_features(gpt_package, monkeypatch):
    _, _, path = gpt_package
    triple, features, _ = package_runtime.host_cpu()
    assert "sse2" in features
    monkeypatch.setattr(
        package_runtime, "host_cpu", lambda: (triple, features - {"sse2", "sse4.1"}, "old-cpu")
    )
    with pytest.raises(PackageError, match=r"this CPU \(old-cpu\) lacks sse2, sse4.1"):
        load_package(path)


def test_package_for_a_level_this_cpu_lacks_is_refused(tmp_path):
    features = _host_features()
    missing = [lv for lv, needs in CPU_LEVELS.items() if not set(needs) <= features]
    if not missing:
        pytest.skip("this CPU runs every named level")
    level = missing[0]
    aot_compile(export(MODELS.MLP(), (kiln.randn(1, 8),)), tmp_path / "p.kpkg", target=level)
    lacking = sorted(set(CPU_LEVELS[level]) - features)
    with pytest.raises(PackageError, match=f"CPU level '{level}'.*lacks {lacking[0]}"):
        load_package(tmp_path / "p.kpkg")


def test_unknown_target_level_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown target 'x86-64-v9'"):
        aot_compile(export(MODELS.MLP(), (kiln.randn(1, 8),)), tmp_path / "p", target="x86-64-v9")


def test_tampered_object_code_is_refused(gpt_package, tmp_path):
    _, _, path = gpt_package
    with zipfile.ZipFile(path) as z:
        parts = {n: z.read(n) for n in z.namelist()}
    code = bytearray(parts["kernels.o"])
    code[len(code) // 2] ^= 0xFF
    parts["kernels.o"] = bytes(code)
    with zipfile.ZipFile(tmp_path / "bad.kpkg", "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)
    with pytest.raises(ExportFileError, match="checksum of part kernels.o"):
        load_package(tmp_path / "bad.kpkg")


def test_programs_and_packages_are_not_confused(gpt_package, tmp_path):
    _, _, path = gpt_package
    with pytest.raises(ExportFileError, match="use kiln.export.load_package"):
        load(path)
    from kiln.export import save

    save(export(MODELS.MLP(), (kiln.randn(1, 8),)), tmp_path / "mlp.kiln")
    with pytest.raises(ExportFileError, match="use kiln.export.load"):
        load_package(tmp_path / "mlp.kiln")


def test_package_needs_a_cpu_device():
    ep = export(MODELS.MLP(), (kiln.randn(1, 8),))
    with pytest.raises(NotImplementedError, match="CPU packages only"):
        aot_compile(ep, "unused.kpkg", device="cuda")


def test_package_of_a_function_with_a_scalar_and_views(tmp_path):
    def fn(x, y):
        z = (x.t() @ y).softmax(-1)
        return z[:, :2], z.sum(0)

    x, y = kiln.randn(4, 3), kiln.randn(4, 5)
    aot_compile(export(fn, (x, y)), tmp_path / "fn.kpkg")
    package = load_package(tmp_path / "fn.kpkg")
    assert_close(package(x, y), fn(x, y))
    assert isinstance(package, package_runtime.CompiledPackage)
    assert not isinstance(package, nn.Module)


class _Lookup(nn.Module):
    """One index read: PyTorch raises IndexError for embedding's and x[idx]'s index out of
    range, RuntimeError for gather's."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.emb = nn.Embedding(8, 4)

    def forward(self, idx, x):
        if self.kind == "embedding":
            return self.emb(idx).sum(0)
        if self.kind == "getitem":
            return x[idx] * 2
        return x.reshape(2, 4).gather(1, idx.reshape(2, 1)) * 2


@pytest.mark.parametrize(
    "kind, error",
    [("embedding", IndexError), ("getitem", IndexError), ("gather", RuntimeError)],
)
def test_package_raises_eagers_exception_type_for_an_index_out_of_range(tmp_path, kind, error):
    model = _Lookup(kind)
    x = kiln.randn(8)
    path = tmp_path / "lookup.kpkg"
    aot_compile(export(model, (kiln.tensor([1, 2]), x)), path)
    package = load_package(path)
    bad = kiln.tensor([1, 20])
    with pytest.raises(error):
        model(bad, x)
    with pytest.raises(error, match="index out of bounds"):
        package(bad, x)
