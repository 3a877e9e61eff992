"""kiln's LLVM JIT layer: compiling IR to callable machine code, dumps, the on-disk object cache,
engine lifetime and thread safety."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from llvmlite import binding as llvm_binding
from llvmlite import ir

from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.inductor.codegen.llvm import object_worker
from kiln.runtime import logs as klog

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "llvm"


def scale_ir(factor: float, name: str = "scale") -> str:
    """``void name(float* x, float* out, i64 n)``: out = x * factor, as a plain scalar loop."""
    return textwrap.dedent(
        f"""
        define void @{name}(ptr noalias %x, ptr noalias %out, i64 %n) {{
        entry:
          %empty = icmp sle i64 %n, 0
          br i1 %empty, label %done, label %loop
        loop:
          %i = phi i64 [0, %entry], [%next, %loop]
          %src = getelementptr float, ptr %x, i64 %i
          %v = load float, ptr %src
          %r = fmul float %v, {float(factor)!r}
          %dst = getelementptr float, ptr %out, i64 %i
          store float %r, ptr %dst
          %next = add i64 %i, 1
          %more = icmp slt i64 %next, %n
          br i1 %more, label %loop, label %done
        done:
          ret void
        }}
        """
    )


def call_scale(compiled: llvm_jit.CompiledModule, x: np.ndarray, name: str = "scale") -> np.ndarray:
    function = compiled.cfunc(name, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    out = np.empty_like(x)
    function(x.ctypes.data, out.ctypes.data, x.size)
    return out


def test_compiles_ir_text_and_runs_it_on_numpy_buffers():
    x = np.arange(37, dtype=np.float32)
    out = call_scale(llvm_jit.compile_module(scale_ir(2.5)), x)
    np.testing.assert_array_equal(out, x * np.float32(2.5))


def test_compiles_llvmlite_modules():
    module = ir.Module(name="adder")
    i64 = ir.IntType(64)
    function = ir.Function(module, ir.FunctionType(i64, [i64, i64]), "add")
    builder = ir.IRBuilder(function.append_basic_block())
    builder.ret(builder.add(*function.args))
    helper = ir.Function(module, ir.FunctionType(i64, [i64]), "helper")
    helper.linkage = "internal"
    ir.IRBuilder(helper.append_basic_block()).ret(helper.args[0])
    compiled = llvm_jit.compile_module(module)
    assert compiled.cfunc("add", ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(40, 2) == 42
    assert compiled.functions == ("add",)


def test_invalid_ir_raises_with_llvm_message():
    with pytest.raises(RuntimeError, match="invalid LLVM IR"):
        llvm_jit.compile_module("define void @f() { ret i32 0 }")
    with pytest.raises(TypeError, match="LLVM IR text or llvmlite.ir.Module"):
        llvm_jit.compile_module(42)


def test_unknown_function_name_raises_key_error():
    compiled = llvm_jit.compile_module(scale_ir(1.0))
    with pytest.raises(KeyError, match="defines \\('scale',\\)"):
        compiled.address("missing")


def test_function_keeps_its_engine_alive():
    function = llvm_jit.compile_module(scale_ir(3.0), cache=False).cfunc(
        "scale", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
    )
    gc.collect()
    x = np.ones(8, np.float32)
    out = np.zeros_like(x)
    function(x.ctypes.data, out.ctypes.data, x.size)
    assert out.tolist() == [3.0] * 8


def test_vectorizers_are_off_by_default_and_on_when_asked():
    scalar_only = llvm_jit.asm(scale_ir(3.0))
    vectorized = llvm_jit.asm(scale_ir(3.0), vectorize=True)
    assert "vmulss" in scalar_only and "vmulps" not in scalar_only
    assert "vmulps" in vectorized


# x[5 i] * 3 -> y[3 i]: loop strength reduction would turn both indices into pointer increments
STRIDED = """
define void @"kernel"(i64 %start, i64 %end, i8** %args) nounwind {
entry:
  %p = getelementptr i8*, i8** %args, i64 0
  %raw = load i8*, i8** %p
  %x = bitcast i8* %raw to float*
  %q = getelementptr i8*, i8** %args, i64 1
  %rawq = load i8*, i8** %q
  %y = bitcast i8* %rawq to float*
  br label %head
head:
  %i = phi i64 [%start, %entry], [%next, %body]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %done
body:
  %i5 = mul i64 %i, 5
  %at = getelementptr float, float* %x, i64 %i5
  %v = load float, float* %at
  %w = fmul float %v, 3.0
  %i3 = mul i64 %i, 3
  %to = getelementptr float, float* %y, i64 %i3
  store float %w, float* %to
  %next = add i64 %i, 1
  br label %head
done:
  ret void
}
"""


def test_kernels_compile_under_kilns_llvm_options():
    """``object_worker.LLVM_OPTIONS`` (no loop strength reduction: compile time, no speed) hold
    for kiln's compiles: the machine code differs from LLVM's default and computes the same."""
    ours = llvm_jit.asm(STRIDED)
    try:
        llvm_binding.set_option("kiln", "-disable-lsr=false")
        default = llvm_jit.asm(STRIDED)
    finally:
        object_worker.set_llvm_options()
    assert ours != default and llvm_jit.asm(STRIDED) == ours
    kernel = llvm_jit.compile_module(STRIDED).cfunc(
        "kernel", None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
    )
    x = np.arange(50, dtype=np.float32)
    y = np.zeros(30, np.float32)
    kernel(0, 10, (ctypes.c_void_p * 2)(x.ctypes.data, y.ctypes.data))
    np.testing.assert_array_equal(y[::3], x[::5] * 3)


def test_the_llvm_options_are_part_of_the_cache_key(monkeypatch):
    """An object made under other LLVM options is never loaded: the key covers them."""
    key = llvm_jit.kernel_key(STRIDED)
    monkeypatch.setattr(object_worker, "LLVM_OPTIONS", ())
    assert llvm_jit.kernel_key(STRIDED) != key


def test_optimized_ir_is_text_of_the_optimized_module():
    text = llvm_jit.optimized_ir(scale_ir(2.0))
    assert "define void @scale" in text
    assert "fmul float" in text


def test_host_target_describes_this_cpu():
    host = llvm_jit.host_target()
    assert host.triple.startswith(("x86_64", "aarch64", "arm64"))
    assert host.cpu_name and "+" in host.features


def test_cache_miss_writes_an_object_and_a_hit_skips_the_optimizer(cache_dir):
    llvm_jit.reset_jit_stats()
    first = llvm_jit.compile_module(scale_ir(4.0))
    assert not first.cache_hit and list(cache_dir.rglob("*.o"))
    optimized = llvm_jit.jit_stats().optimize_runs
    second = llvm_jit.compile_module(scale_ir(4.0))
    stats = llvm_jit.jit_stats()
    assert second.cache_hit
    assert (stats.cache_hits, stats.cache_misses, stats.optimize_runs) == (1, 1, optimized)
    assert stats.objects_generated == 1  # the hit ran no code generation
    x = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(call_scale(second, x), x * 4)


def test_cache_key_covers_ir_and_compile_options():
    llvm_jit.reset_jit_stats()
    for source, options in [
        (scale_ir(5.0), {}),
        (scale_ir(6.0), {}),
        (scale_ir(5.0), {"opt_level": 2}),
        (scale_ir(5.0), {"vectorize": True}),
    ]:
        assert not llvm_jit.compile_module(source, **options).cache_hit
    assert llvm_jit.jit_stats().cache_misses == 4


def _flip_last_byte(blob: bytes) -> bytes:
    return blob[:-1] + bytes([blob[-1] ^ 0x40])


@pytest.mark.parametrize(
    "damage",
    [
        lambda blob: blob[:100],  # truncated
        lambda blob: blob + b"\0" * 8,  # padded
        _flip_last_byte,  # a bit flipped in the object
        lambda blob: blob.replace(b"KILNREC 1", b"KILNREC 0", 1),  # another record format
        lambda blob: blob[blob.index(b"\n") + 1 :],  # a bare object (kiln's first format)
        lambda blob: b"",
    ],
    ids=["truncated", "padded", "flipped", "format", "headerless", "empty"],
)
def test_damaged_cache_entry_is_recompiled_and_rewritten(cache_dir, damage):
    llvm_jit.compile_module(scale_ir(7.0))
    (entry,) = cache_dir.rglob("*.o")
    entry.write_bytes(damage(entry.read_bytes()))
    compiled = llvm_jit.compile_module(scale_ir(7.0))
    assert not compiled.cache_hit
    np.testing.assert_array_equal(call_scale(compiled, np.ones(3, np.float32)), [7.0] * 3)
    assert llvm_jit.compile_module(scale_ir(7.0)).cache_hit  # the file was replaced


def test_an_object_file_is_loaded_only_for_its_own_key(cache_dir):
    """Two object files swapped (same function name and signature, other code) pass any check
    of the file alone: the key stored inside each one tells them apart."""
    twice, thrice = llvm_jit.compile_module(scale_ir(2.0)), llvm_jit.compile_module(scale_ir(3.0))
    first, second = (cache_dir / m.key[:2] / f"{m.key}.o" for m in (twice, thrice))
    first_bytes = first.read_bytes()
    first.write_bytes(second.read_bytes())
    second.write_bytes(first_bytes)
    x = np.arange(6, dtype=np.float32)
    for factor, module in [(2.0, twice), (3.0, thrice)]:
        assert llvm_jit.load_object(module.key, ("scale",)) is None
        again = llvm_jit.compile_module(scale_ir(factor))
        assert not again.cache_hit
        np.testing.assert_array_equal(call_scale(again, x), x * np.float32(factor))
        reloaded = llvm_jit.load_object(module.key, ("scale",))  # rewritten for its key
        np.testing.assert_array_equal(call_scale(reloaded, x), x * np.float32(factor))


def test_an_unwritable_cache_dir_compiles_in_memory_and_says_why(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("a cache directory cannot live under a file")
    monkeypatch.setenv("KILN_CACHE_DIR", str(blocker / "cache"))
    klog.set_logs(inductor=True)
    try:
        compiled = llvm_jit.compile_module(scale_ir(5.0))
    finally:
        klog.set_logs(inductor=False)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(call_scale(compiled, x), x * 5)
    assert "cannot write the compile cache" in capsys.readouterr().err


def test_cache_false_leaves_the_disk_alone(cache_dir):
    llvm_jit.compile_module(scale_ir(8.0), cache=False)
    assert not cache_dir.exists()


WARM_PROCESS = """
import ctypes, json, sys
import numpy as np
from kiln.inductor.codegen.llvm import jit as llvm_jit
compiled = llvm_jit.compile_module(sys.argv[1])
scale = compiled.cfunc("scale", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
x = np.arange(5, dtype=np.float32)
out = np.empty_like(x)
scale(x.ctypes.data, out.ctypes.data, x.size)
stats = llvm_jit.jit_stats()
print(json.dumps({"hit": compiled.cache_hit, "hits": stats.cache_hits, "misses": stats.cache_misses,
                  "optimize_runs": stats.optimize_runs, "optimize_seconds": stats.optimize_seconds,
                  "generated": stats.objects_generated, "out": out.tolist()}))
"""


def test_a_second_process_loads_the_object_without_optimizing(tmp_path):
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path / "shared"), "PYTHONPATH": str(REPO)}

    def run_process() -> dict:
        command = [sys.executable, "-c", WARM_PROCESS, scale_ir(9.0)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    cold, warm = run_process(), run_process()
    assert (cold["hit"], cold["misses"], cold["optimize_runs"]) == (False, 1, 1)
    assert (warm["hit"], warm["hits"], warm["misses"]) == (True, 1, 0)
    assert warm["optimize_runs"] == 0 and warm["optimize_seconds"] == 0.0
    assert (cold["generated"], warm["generated"]) == (1, 0)
    assert cold["out"] == warm["out"] == [0.0, 9.0, 18.0, 27.0, 36.0]


def test_concurrent_compiles_from_threads():
    results: dict[int, list[float]] = {}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            source = scale_ir(float(index), name=f"scale{index}")
            compiled = llvm_jit.compile_module(source, cache=index % 2 == 0)
            results[index] = call_scale(compiled, np.ones(4, np.float32), f"scale{index}").tolist()
        except BaseException as error:  # surfaced by the assert below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert results == {index: [float(index)] * 4 for index in range(8)}


_DOUBLE_TO_HALF_IR = """
define void @convert(double* %src, i16* %dst, i64 %n) nounwind {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %p = getelementptr double, double* %src, i64 %i
  %d = load double, double* %p
  %h = fptrunc double %d to half
  %bits = bitcast half %h to i16
  %q = getelementptr i16, i16* %dst, i64 %i
  store i16 %bits, i16* %q
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


def test_double_to_half_rounds_once_through_kilns_own_runtime_helper(cache_dir):
    """x86 has no instruction for double -> half: LLVM calls ``__truncdfhf2``, which kiln defines
    (a Python process need not have libgcc's loaded; resolved to address 0, the kernel jumped
    there). One correct rounding, as numpy's cast, on ties, subnormals, overflow and NaN."""
    module = llvm_jit.compile_module(_DOUBLE_TO_HALF_IR)
    convert = module.cfunc("convert", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    rng = np.random.default_rng(0)
    edges = [1 + 2**-11 + 2**-40, 1 + 2**-11, 1 + 2**-11 - 2**-40, -(1 + 3 * 2**-11 + 2**-45),
             65504.0, 65520.0, 65519.99, 2.0**-25 + 1e-20, 2.0**-25, 1.5 * 2.0**-24, 1e-300, 3e39,
             np.inf, -np.inf, np.nan, 0.0, -0.0]  # fmt: skip
    src = np.concatenate([edges, rng.standard_normal(5000) * 10.0 ** rng.integers(-9, 6, 5000)])
    dst = np.empty(src.size, np.uint16)
    convert(src.ctypes.data, dst.ctypes.data, src.size)
    np.testing.assert_array_equal(dst.view(np.float16), src.astype(np.float16))


def test_a_float16_scan_feeding_math_compiles_and_runs():
    """The graph the fuzzer found (seed 777): a float16 cumsum, accumulated in float64, feeding
    atan; instruction selection merged its two roundings into the libgcc call."""
    import kiln

    x = kiln.randn(3, 4).to(kiln.float16)
    got = kiln.compile(lambda t: kiln.atan(t.cumsum(1)), backend="inductor")(x)
    np.testing.assert_allclose(
        got.float().numpy(), kiln.atan(x.cumsum(1)).float().numpy(), atol=1e-3
    )
