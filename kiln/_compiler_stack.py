"""The compiler stack (dynamo, AOT autograd, the inductor) loads on first use, not on ``import kiln``.

Eager programs and deployed packages (``kiln.export.load_package``) never capture or lower a
graph, so ``import kiln`` leaves the compiler out: ``kiln.compile``, ``kiln.cond``,
``kiln.dynamo`` and PyTorch's private namespaces (``kiln._dynamo``, ``kiln._inductor``) are
resolved when first read. ``import kiln._dynamo.config``-style imports find the very modules kiln
itself reads through a small import hook (a second copy would take settings and ignore them),
and the same hook gives the compiler its built-in backends once ``kiln.dynamo`` is loaded.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from .runtime.switch_interval import quick_handoff

__all__ = ["install", "facade_attribute", "MISSING"]

MISSING = object()

# PyTorch's private names for kiln's compiler packages: torch._dynamo -> kiln.dynamo
_ALIASES = {"kiln._dynamo": "kiln.dynamo", "kiln._inductor": "kiln.inductor"}

# facade names that live in the compiler stack: name -> (module, attribute or None for the module)
_LAZY_NAMES = {
    "compile": ("kiln.dynamo", "compile"),
    "cond": ("kiln.dynamo.control_flow", "cond"),
    "_assert": ("kiln.dynamo.control_flow", "_assert"),
    "dynamo": ("kiln.dynamo", None),
    "_dynamo": ("kiln.dynamo", None),
    "_inductor": ("kiln.inductor", None),
    "export": ("kiln.export", None),
    "onnx": ("kiln.onnx", None),
}


def facade_attribute(name: str):
    """The value of ``kiln.<name>`` for a name served by the compiler stack, else ``MISSING``."""
    entry = _LAZY_NAMES.get(name)
    if entry is None:
        return MISSING
    module_name, attribute = entry
    module = sys.modules.get(module_name)
    if module is None:
        # the first read loads hundreds of files: another busy thread must not stall it
        with quick_handoff():
            module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)


def _real_name(fullname: str) -> str | None:
    """``kiln.dynamo.config`` for ``kiln._dynamo.config``; None for names that are no alias."""
    for alias, real in _ALIASES.items():
        if fullname == alias or fullname.startswith(alias + "."):
            return real + fullname[len(alias) :]
    return None


def _load_builtin_backends() -> None:
    """``kiln.compile``'s built-in backends sit above the compiler's registry (in dynamo), so
    they are registered through this hook, on the first lookup."""
    importlib.import_module("kiln.builtin_backends")


def _after_dynamo(module: ModuleType) -> None:
    module.backends.set_builtin_loader(_load_builtin_backends)


def _after_inductor(module: ModuleType) -> None:
    """``torch._inductor.config`` is an attribute as soon as ``torch._inductor`` is (scripts such
    as gpt-fast set ``torch._inductor.config.coordinate_descent_tuning`` after ``import torch``)."""
    importlib.import_module("kiln.inductor.config")


_AFTER_IMPORT = {"kiln.dynamo": _after_dynamo, "kiln.inductor": _after_inductor}


class _AliasLoader(importlib.abc.Loader):
    """Loads an alias as the real module itself (one module object under two names)."""

    def __init__(self, real: str):
        self.real = real
        self.real_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.real)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system stamped the alias's spec on the real module: give it its own back
        module.__spec__ = self.real_spec


class _HookedLoader(importlib.abc.Loader):
    """Runs the module's own loader, then a hook that wires it to the facade."""

    def __init__(self, loader, hook):
        self.loader = loader
        self.hook = hook

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.hook(module)

    def __getattr__(self, name: str):  # get_source, get_filename ... for tracebacks and inspect
        return getattr(self.loader, name)


class _CompilerStackFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path, target=None):
        hook = _AFTER_IMPORT.get(fullname)
        if hook is not None:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _HookedLoader(spec.loader, hook)
            return spec
        real = _real_name(fullname)
        if real is None:
            return None
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real))


def install() -> None:
    """Put the import hook in place (once per process), or wire an already loaded dynamo."""
    if not any(isinstance(f, _CompilerStackFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _CompilerStackFinder())
    dynamo = sys.modules.get("kiln.dynamo")
    if dynamo is not None:
        _after_dynamo(dynamo)
