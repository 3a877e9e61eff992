"""Generated Python sources compile once per process and once per cache directory; a damaged or
foreign record is recompiled, never trusted."""

from __future__ import annotations

import builtins
import os

import pytest

import kiln
from kiln.runtime import code_cache

SOURCE = "def double(x):\n    return 2 * x\n"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    code_cache.clear_memory()
    yield tmp_path / "python"
    code_cache.clear_memory()


@pytest.fixture
def compiles(monkeypatch):
    """The text sources ``builtins.compile`` is called on (a module imported for the first
    time while the test runs, its bytecode not cached, is compiled from bytes: not counted)."""
    seen: list[str] = []
    original = builtins.compile

    def counting(source, *args, **kwargs):
        if isinstance(source, str):
            seen.append(source)
        return original(source, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    return seen


def _run(code) -> int:
    namespace: dict = {}
    exec(code, namespace)
    return namespace["double"](21)


def _records(root) -> list:
    return [p for p in root.rglob("*") if p.is_file()]


def test_a_source_compiles_once_then_comes_from_memory_and_disk(cache_dir, compiles):
    first = code_cache.compile_source(SOURCE, "<test double>")
    assert _run(first) == 42 and compiles == [SOURCE]
    assert code_cache.compile_source(SOURCE, "<test double>") is first
    code_cache.clear_memory()  # as a new process: the record on disk is read back
    again = code_cache.compile_source(SOURCE, "<test double>")
    assert _run(again) == 42 and again.co_filename == "<test double>"
    assert compiles == [SOURCE]
    # another file name is another key (tracebacks name the file the caller chose)
    other = code_cache.compile_source(SOURCE, "<test other>")
    assert other.co_filename == "<test other>" and len(compiles) == 2


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap"])
def test_a_damaged_or_foreign_record_is_recompiled_and_rewritten(cache_dir, compiles, damage):
    code_cache.compile_source(SOURCE, "<test double>")
    code_cache.compile_source("def double(x):\n    return x\n", "<test double>")
    first, second = sorted(_records(cache_dir), key=os.path.getmtime)
    blob = first.read_bytes()
    if damage == "flip":
        first.write_bytes(blob[:-3] + bytes([blob[-3] ^ 0xFF]) + blob[-2:])
    elif damage == "truncate":
        first.write_bytes(blob[: len(blob) // 2])
    else:  # the other source's record under this name: its key does not match
        first.write_bytes(second.read_bytes())
    code_cache.clear_memory()
    compiles.clear()
    assert _run(code_cache.compile_source(SOURCE, "<test double>")) == 42
    assert compiles == [SOURCE]
    code_cache.clear_memory()
    compiles.clear()
    assert _run(code_cache.compile_source(SOURCE, "<test double>")) == 42
    assert compiles == []  # the record was rewritten


def test_an_unwritable_cache_directory_costs_only_speed(tmp_path, monkeypatch, compiles):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("KILN_CACHE_DIR", str(blocker))
    code_cache.clear_memory()
    assert _run(code_cache.compile_source(SOURCE, "<test double>")) == 42
    code_cache.clear_memory()
    assert _run(code_cache.compile_source(SOURCE, "<test double>")) == 42
    assert len(compiles) == 2


def test_a_recompiled_function_reuses_its_guard_and_wrapper_code(cache_dir, compiles):
    """A warm compile in a new process (memory cleared, the disk cache kept) compiles no guard
    or wrapper source: both come back from the code cache, and the function's result is the
    same."""

    def fn(x, y):
        return (x * y).relu().sum(0)

    x, y = kiln.randn(4, 5), kiln.randn(4, 5)
    expected = fn(x, y)
    kiln.testing.assert_close(kiln.compile(fn)(x, y), expected)
    assert any("def ___guard" in s for s in compiles)  # the guard function
    assert any("def call(" in s for s in compiles)  # the inductor's wrapper
    kiln.compiler.reset()
    code_cache.clear_memory()
    compiles.clear()
    kiln.testing.assert_close(kiln.compile(fn)(x, y), expected)
    assert not [s for s in compiles if "___guard" in s or "def call(" in s]
