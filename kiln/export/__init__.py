"""``kiln.export``: whole-graph programs, saved safely, and ahead-of-time compiled packages.

``export(model, args)`` captures one pure graph with its signature (``ExportedProgram``);
``save``/``load`` keep it in one file (graph as versioned text, weights in safetensors layout,
checksums); ``aot_compile`` builds a package of compiled kernels that ``load_package`` runs
without the compiler's frontend. Names load on first use: ``load_package`` in a deployed process
never imports the capture or lowering code.
"""

from __future__ import annotations

import importlib

__all__ = [
    "export",
    "ExportedProgram",
    "ExportError",
    "ExportGraphSignature",
    "InputKind",
    "InputSpec",
    "OutputKind",
    "OutputSpec",
    "Dim",
    "save",
    "load",
    "ExportFileError",
    "aot_compile",
    "load_package",
    "CompiledPackage",
    "PackageError",
]

_HOME = {
    "export": "capture",
    "ExportError": "capture",
    "ExportedProgram": "program",
    "ExportGraphSignature": "signature",
    "InputKind": "signature",
    "InputSpec": "signature",
    "OutputKind": "signature",
    "OutputSpec": "signature",
    "Dim": "dims",
    "save": "archive",
    "load": "archive",
    "ExportFileError": "container",
    "aot_compile": "aot_package",
    "load_package": "package_runtime",
    "CompiledPackage": "package_runtime",
    "PackageError": "container",
}


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'kiln.export' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
