"""Every module-level import in the library and its tests resolves to a package the project
declares, so a clean CI install can import them all.

A package that happens to be installed on one developer's machine (scipy, say) passes every local
run and fails CI at collection; this test reads the imports from the source instead of trusting the
environment. Imports inside functions or ``try`` blocks are optional by construction and are not
checked.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# distribution name in pyproject -> the top-level modules it provides
_PROVIDES = {
    "numpy": {"numpy"},
    "ml_dtypes": {"ml_dtypes"},
    "triton": {"triton"},
    "llvmlite": {"llvmlite"},
    "bytecode": {"bytecode"},
    "networkx": {"networkx"},
    "pytest": {"pytest", "_pytest"},
    "pytest-xdist": {"xdist"},
    "hypothesis": {"hypothesis"},
    # torch pulls sympy, whose mpmath the special-function tests read reference digits from
    "torch": {"torch", "mpmath", "sympy"},
    "mpi4py": {"mpi4py"},
    "mpich": set(),
    "safetensors": {"safetensors"},
    # tensorboard's event writer brings protobuf (``google.protobuf``)
    "tensorboard": {"tensorboard", "google"},
    "pillow": {"PIL"},
    "onnx": {"onnx"},
    "onnxruntime": {"onnxruntime"},
    "ruff": set(),
    "import-linter": {"importlinter"},
    "matplotlib": {"matplotlib"},
}


def _requirement_name(spec: str) -> str:
    for i, ch in enumerate(spec):
        if not (ch.isalnum() or ch in "-_."):
            return spec[:i]
    return spec


def _declared(groups: tuple[str, ...]) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for group in groups:
        specs += project["optional-dependencies"][group]
    modules: set[str] = set()
    for spec in specs:
        name = _requirement_name(spec)
        assert name in _PROVIDES, f"pyproject names {name!r}: add the modules it provides here"
        modules |= _PROVIDES[name]
    return modules


def _module_level_imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in tree.body:  # module level only: nested and ``try`` imports are optional
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def _undeclared(folder: str, allowed: set[str], extras: dict[str, set[str]]) -> list[str]:
    """Module-level imports under ``folder`` outside ``allowed``; ``extras`` maps a subfolder
    (imported only when its extra is installed, as ``torch.utils.tensorboard`` is) to what it may
    import besides."""
    known = allowed | {"kiln", "tests", "benchmarks"} | set(sys.stdlib_module_names)
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        relative = path.relative_to(ROOT)
        here = known.union(*(m for sub, m in extras.items() if relative.is_relative_to(sub)))
        for module, line in _module_level_imports(path):
            if module not in here:
                bad.append(f"{relative}:{line} imports {module}")
    return bad


def test_library_imports_only_its_runtime_dependencies():
    # other extras' packages are imported inside the functions that need them
    extras = {"kiln/utils/tensorboard": _declared(("tensorboard",))}
    assert _undeclared("kiln", _declared(()), extras) == []


def test_tests_import_only_declared_test_dependencies():
    assert _undeclared("tests", _declared(("test", "dev")), {}) == []
