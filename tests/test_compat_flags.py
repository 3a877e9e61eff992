"""PyTorch's global switches against torch: ``torch.backends.*`` namespaces, matmul precision,
deterministic algorithms, warn-always, ``typename``/``is_storage`` and pinned memory.

Every test that flips a switch restores both libraries' state (the ``restore_flags`` fixture),
since xdist runs several tests in one process."""

from __future__ import annotations

import sys
import warnings

import pytest

import kiln
from tests.oracle import needs_torch, torch

LIBS = [pytest.param("kiln", id="kiln"), pytest.param("torch", id="torch", marks=needs_torch)]


@pytest.fixture(params=LIBS)
def lib(request):
    """Each test taking ``lib`` runs once on kiln and once on torch (when installed)."""
    return kiln if request.param == "kiln" else torch


def _assert_same_trace(record) -> None:
    """Run one switch-flipping script on kiln and on torch and compare what each reported."""
    assert record(kiln) == record(torch)


def _state(lib):
    b = lib.backends
    return {
        "cudnn": (b.cudnn.enabled, b.cudnn.benchmark, b.cudnn.deterministic, b.cudnn.allow_tf32),
        "precision": lib.get_float32_matmul_precision(),
        "deterministic": (
            lib.are_deterministic_algorithms_enabled(),
            lib.is_deterministic_algorithms_warn_only_enabled(),
        ),
        "warn_always": lib.is_warn_always_enabled(),
        "sdp": tuple(
            getattr(b.cuda, f"{k}_sdp_enabled")()
            for k in ("flash", "mem_efficient", "math", "cudnn")
        ),
        "bf16": b.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }


def _set_state(lib, saved):
    b = lib.backends
    (b.cudnn.enabled, b.cudnn.benchmark, b.cudnn.deterministic, b.cudnn.allow_tf32) = saved["cudnn"]
    lib.set_float32_matmul_precision(saved["precision"])
    mode, warn_only = saved["deterministic"]
    lib.use_deterministic_algorithms(mode, warn_only=warn_only)
    lib.set_warn_always(saved["warn_always"])
    for kind, value in zip(("flash", "mem_efficient", "math", "cudnn"), saved["sdp"]):
        getattr(b.cuda, f"enable_{kind}_sdp")(value)
    b.cuda.matmul.allow_bf16_reduced_precision_reduction = saved["bf16"]


@pytest.fixture(autouse=True)
def restore_flags():
    libs = [kiln] + ([torch] if torch is not None else [])
    saved = [(lib, _state(lib)) for lib in libs]
    yield
    for lib, state in saved:
        _set_state(lib, state)


@needs_torch
def test_defaults_match_a_cpu_torch():
    assert _state(kiln) == _state(torch)
    for lib in (kiln, torch):
        b = lib.backends
        assert b.cudnn.is_available() is False and b.cudnn.version() is None
        assert b.cudnn.benchmark_limit is None
        assert b.mps.is_available() is False and b.mps.is_built() is False
        assert b.cuda.matmul.allow_tf32 is False
        assert b.cuda.matmul.allow_fp16_reduced_precision_reduction is True
        assert b.cuda.fp16_bf16_reduction_math_sdp_allowed() is False
        assert b.mkldnn.deterministic is False and b.mkldnn.enabled is True


@needs_torch
@pytest.mark.parametrize("name", ["enabled", "benchmark", "deterministic", "allow_tf32"])
def test_cudnn_switches_take_bools_only(name):
    for lib in (kiln, torch):
        setattr(lib.backends.cudnn, name, True)
        assert getattr(lib.backends.cudnn, name) is True
        setattr(lib.backends.cudnn, name, False)
        assert getattr(lib.backends.cudnn, name) is False
        for bad in (1, "yes", None):
            with pytest.raises(RuntimeError, match="expects a bool, but got"):
                setattr(lib.backends.cudnn, name, bad)
        assert getattr(lib.backends.cudnn, name) is False


def test_cudnn_flags_context_sets_defaults_and_restores(lib):
    cudnn = lib.backends.cudnn
    cudnn.benchmark = True
    with cudnn.flags():
        assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic) == (False, False, False)
    with cudnn.flags(enabled=True, benchmark=False, deterministic=True):
        assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic) == (True, False, True)
    assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic) == (True, True, False)


def test_mkldnn_flags_context():
    # (torch's own mkldnn.flags also sets TF32 switches through its newer precision API, after
    # which torch.get_float32_matmul_precision raises: not run on torch here)
    mkldnn = kiln.backends.mkldnn
    with mkldnn.flags(enabled=False, deterministic=True):
        assert (mkldnn.enabled, mkldnn.deterministic) == (False, True)
    assert (mkldnn.enabled, mkldnn.deterministic) == (True, False)
    with pytest.raises(RuntimeError, match="set_enabled_mkldnn expects a bool"):
        mkldnn.enabled = 0


def test_namespaces_import_as_modules_beside_the_backend_registry():
    import kiln.backends.cuda as cuda_ns
    import kiln.backends.cudnn as cudnn_ns

    assert cudnn_ns is kiln.backends.cudnn and sys.modules["kiln.backends.cudnn"] is cudnn_ns
    assert cuda_ns is kiln.backends.cuda
    assert {"eager", "aot_eager", "inductor"} <= set(kiln.backends.list_backends())
    assert callable(kiln.backends.lookup("eager"))
    assert kiln.backends.openmp.is_available() is False
    assert kiln.backends.mkl.is_available() is False
    assert kiln.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2", "AVX512")


@needs_torch
def test_matmul_precision_and_allow_tf32_are_one_switch():
    # (torch raises from get_float32_matmul_precision after allow_tf32=False follows "high":
    # it then holds per-backend precisions that disagree; kiln reports "highest")
    def record(lib) -> list:
        matmul = lib.backends.cuda.matmul
        matmul.allow_tf32 = True
        seen = [lib.get_float32_matmul_precision()]
        for precision in ("medium", "high", "highest"):
            lib.set_float32_matmul_precision(precision)
            seen.append((lib.get_float32_matmul_precision(), matmul.allow_tf32))
        matmul.allow_tf32 = False
        return [*seen, lib.get_float32_matmul_precision()]

    _assert_same_trace(record)


def test_matmul_precision_validation(lib):
    with pytest.raises(RuntimeError, match="set_float32_matmul_precision expects a str"):
        lib.set_float32_matmul_precision(3)
    lib.set_float32_matmul_precision("high")
    for bad in ("HIGH", "low"):
        with pytest.warns(UserWarning, match="is not one of 'highest', 'high', or 'medium'"):
            lib.set_float32_matmul_precision(bad)
    assert lib.get_float32_matmul_precision() == "high"
    with pytest.raises(RuntimeError, match="set_allow_tf32_cublas expects a bool"):
        lib.backends.cuda.matmul.allow_tf32 = 1


def test_reduced_precision_reduction_settings(lib):
    matmul = lib.backends.cuda.matmul
    matmul.allow_bf16_reduced_precision_reduction = False
    assert matmul.allow_bf16_reduced_precision_reduction is False
    assert matmul.allow_bf16_reduced_precision_reduction_split_k is True
    matmul.allow_bf16_reduced_precision_reduction = (False, False)
    assert matmul.allow_bf16_reduced_precision_reduction_split_k is False
    with pytest.raises(RuntimeError, match="allow_splitk=False is not supported"):
        matmul.allow_bf16_reduced_precision_reduction = (True, False)
    with pytest.raises(TypeError, match="expects a bool or a tuple/list of bools"):
        matmul.allow_bf16_reduced_precision_reduction = 1
    with pytest.raises(TypeError, match="expects at least one boolean argument"):
        matmul.allow_bf16_reduced_precision_reduction = ()
    with pytest.raises(AttributeError, match="Unknown attribute foo"):
        matmul.foo = True
    with pytest.raises(AttributeError, match="Unknown attribute foo"):
        matmul.foo  # noqa: B018


def test_sdp_switches_and_deprecated_sdp_kernel(lib):
    cuda = lib.backends.cuda
    cuda.enable_flash_sdp(False)
    assert cuda.flash_sdp_enabled() is False
    with pytest.raises(RuntimeError, match="expects a bool"):
        cuda.enable_math_sdp(1)
    with pytest.warns(FutureWarning, match="sdp_kernel"):
        with cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False):
            assert (cuda.flash_sdp_enabled(), cuda.math_sdp_enabled()) == (True, False)
            assert cuda.mem_efficient_sdp_enabled() is False
    assert (cuda.flash_sdp_enabled(), cuda.math_sdp_enabled()) == (False, True)
    assert cuda.mem_efficient_sdp_enabled() is True


@needs_torch
def test_deterministic_algorithms_and_debug_mode_match_torch():
    def record(lib) -> list:
        seen = [lib.get_deterministic_debug_mode()]
        lib.use_deterministic_algorithms(True)
        seen.append(lib.get_deterministic_debug_mode())
        lib.use_deterministic_algorithms(True, warn_only=True)
        seen.append(lib.get_deterministic_debug_mode())
        for mode in ("default", "error", 1, 0, "warn"):
            lib.set_deterministic_debug_mode(mode)
            seen.append(
                (
                    lib.get_deterministic_debug_mode(),
                    lib.are_deterministic_algorithms_enabled(),
                    lib.is_deterministic_algorithms_warn_only_enabled(),
                )
            )
        return seen

    _assert_same_trace(record)


def test_deterministic_argument_errors(lib):
    with pytest.raises(TypeError, match="argument 'mode' \\(position 1\\) must be bool, not int"):
        lib.use_deterministic_algorithms(1)
    with pytest.raises(TypeError, match="argument 'warn_only' must be bool, not int"):
        lib.use_deterministic_algorithms(True, warn_only=1)
    with pytest.raises(TypeError, match="positional argument"):
        lib.use_deterministic_algorithms(True, True)
    with pytest.raises(RuntimeError, match="expected 0, 1, or 2, but got 3"):
        lib.set_deterministic_debug_mode(3)
    with pytest.raises(RuntimeError, match="expected one of `default`, `warn`, `error`"):
        lib.set_deterministic_debug_mode("strict")
    with pytest.raises(TypeError, match="debug_mode must be str or int"):
        lib.set_deterministic_debug_mode(1.0)


def test_warn_always(lib):
    lib.set_warn_always(True)
    assert lib.is_warn_always_enabled() is True
    lib.set_warn_always(False)
    assert lib.is_warn_always_enabled() is False
    with pytest.raises(RuntimeError, match="expects a bool, but got int"):
        lib.set_warn_always(1)


@needs_torch
def test_typename_and_is_storage_match_torch():
    def names(lib):
        return [
            lib.typename(lib.ones(2)),
            lib.typename(lib.zeros(2, dtype=lib.int64)),
            lib.typename(lib.zeros(2, dtype=lib.bool)),
            lib.typename(lib.zeros(2, dtype=lib.float64)),
            lib.typename(lib.nn.Parameter(lib.zeros(1))),
            lib.typename(lib.nn.Linear(2, 2)),
            lib.typename(lib.nn.Linear),
            lib.typename(3),
            lib.typename("s"),
            lib.typename(None),
            lib.typename(len),
        ]

    assert [n.replace("kiln.", "torch.") for n in names(kiln)] == names(torch)
    for lib in (kiln, torch):
        x = lib.ones(2)
        assert lib.is_storage(x.untyped_storage()) and not lib.is_storage(x)
        assert not lib.is_storage(3)


@pytest.mark.skipif(kiln.cuda.is_available(), reason="checks the no-accelerator behaviour")
def test_pin_memory_without_accelerator_raises_like_torch(lib):
    x = lib.ones(3)
    assert x.is_pinned() is False
    with pytest.raises(RuntimeError, match="Cannot access accelerator device"):
        x.pin_memory()


@pytest.mark.skipif(not kiln.cuda.is_available(), reason="pinning needs an accelerator")
def test_pin_memory_with_cuda_returns_pinned_copy():
    x = kiln.arange(4.0)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and not x.is_pinned()
    assert pinned.pin_memory() is pinned and kiln.equal(pinned, x)
    assert kiln.equal(pinned.to("cuda", non_blocking=True).cpu(), x)


def test_dataloader_with_pin_memory_iterates(lib):
    ds = lib.utils.data.TensorDataset(lib.arange(12.0).reshape(6, 2), lib.arange(6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that nothing will be pinned
        batches = [yb.tolist() for _, yb in lib.utils.data.DataLoader(ds, 4, pin_memory=True)]
    assert batches == [[0, 1, 2, 3], [4, 5]]


def test_interop_threads_are_set_once():
    from kiln.runtime import flags

    saved = flags.STATE["interop_threads"]
    flags.STATE["interop_threads"] = None
    try:
        assert kiln.get_num_interop_threads() >= 1
        with pytest.raises(RuntimeError, match="expects a positive integer"):
            kiln.set_num_interop_threads(0)
        kiln.set_num_interop_threads(3)
        assert kiln.get_num_interop_threads() == 3
        with pytest.raises(RuntimeError, match="cannot set number of interop threads"):
            kiln.set_num_interop_threads(2)
    finally:
        flags.STATE["interop_threads"] = saved


@needs_torch
def test_interop_threads_argument_error_matches_torch():
    for lib in (kiln, torch):
        with pytest.raises(
            RuntimeError, match="set_num_interop_threads expects a positive integer"
        ):
            lib.set_num_interop_threads(0)


@needs_torch
def test_version_fields_like_a_cpu_torch():
    assert kiln.version.__version__ == kiln.__version__
    for field in ("cuda", "hip"):
        assert getattr(kiln.version, field) is None
        if torch.version.cuda is None:  # the CPU oracle: same answers
            assert getattr(torch.version, field) is None
    assert kiln.version.debug is False


def _default_threads(omp_num_threads: str) -> list[str]:
    """kiln's and torch's thread counts in a fresh process (both read the variable at start)."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    libs = "kiln, torch" if torch is not None else "kiln"
    counts = "kiln.get_num_threads()" + (", torch.get_num_threads()" if torch is not None else "")
    code = f"import {libs}; print({counts})"
    env = dict(os.environ, OMP_NUM_THREADS=omp_num_threads, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@needs_torch
def test_omp_num_threads_sets_the_default_thread_count_like_torch():
    # the distributed launcher sets OMP_NUM_THREADS=1 for each rank
    assert _default_threads("1") == ["1", "1"]


def test_omp_num_threads_above_the_cores_is_capped_at_the_cores():
    import os

    assert _default_threads(str(4 * (os.cpu_count() or 1)))[0] == str(os.cpu_count() or 1)
