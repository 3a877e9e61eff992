"""Shared test setup: a fixed seed per test so failures reproduce, and CUDA as a machine without
a driver has it (``no_driver``) or as the host-memory stand-in gives it (``gpu``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kiln


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """The run's own on-disk compile cache, cold at the start as on a clean CI machine (a warm
    ``~/.cache/kiln`` from earlier runs would hide tests that rely on compiling), unless the
    caller chose one with ``KILN_CACHE_DIR``."""
    import os

    if "KILN_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["KILN_CACHE_DIR"] = str(tmp_path_factory.mktemp("kiln-cache"))
    try:
        yield
    finally:
        os.environ.pop("KILN_CACHE_DIR", None)


@pytest.fixture(scope="session", autouse=True)
def _verify_kernel_reuse():
    """Every kernel the inductor reuses by structure (``codegen.kernel_structure``) is emitted
    anyway and compared: a structure key that misses something the emitter reads fails the run
    instead of reusing the wrong IR."""
    import os

    previous = os.environ.get("KILN_VERIFY_KERNEL_REUSE")
    os.environ["KILN_VERIFY_KERNEL_REUSE"] = "1"
    yield
    if previous is None:
        os.environ.pop("KILN_VERIFY_KERNEL_REUSE", None)
    else:
        os.environ["KILN_VERIFY_KERNEL_REUSE"] = previous


@pytest.fixture(autouse=True)
def _seed():
    kiln.manual_seed(0)
    np.random.seed(0)
    yield


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A fresh (cold) on-disk compile cache for one test, and no compiled frames in memory."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    kiln.dynamo.reset()
    return tmp_path / "cache"


@pytest.fixture
def no_driver(monkeypatch):
    """CUDA as on a machine without libcuda (whatever this machine has)."""
    from kiln.runtime import cuda

    def missing(*args, **kwargs):
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(cuda, "CudaDriver", missing)
    cuda.use_driver(None)
    yield
    cuda.use_driver(None)


@pytest.fixture
def gpu():
    """A host-memory CUDA device (two of them)."""
    from kiln.runtime import cuda

    driver = cuda.HostMemoryDriver(devices=2)
    cuda.use_driver(driver)
    yield driver
    cuda.use_driver(None)
