"""The ``weights_only`` allowlist behind ``kiln.load``: which pickled globals may be imported.

A checkpoint that is not a plain tree (see ``kiln.serialization``) is a pickle, and unpickling
imports and calls whatever globals it names. With ``weights_only=True`` (the default, as in
PyTorch 2.6+) only a small set of harmless builtins and kiln's own value types may be named, plus
whatever the user vouches for with ``add_safe_globals`` / ``safe_globals``; anything else is
refused with PyTorch's "Weights only load failed" message, naming the global to allowlist.
"""

from __future__ import annotations

import _compat_pickle
import pickle
import pickletools
from collections.abc import Iterable

__all__ = [
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "safe_globals",
    "unsafe_globals_in",
    "WeightsOnlyUnpickler",
]

# (module, name) pairs a weights-only load may always import: the containers and scalars that
# pickle spells as globals, and kiln's dtype / device / Size
_DEFAULT_ALLOWED = {
    ("_codecs", "encode"),
    ("builtins", "bytearray"),
    ("builtins", "complex"),
    ("builtins", "set"),
    ("collections", "Counter"),
    ("collections", "OrderedDict"),
    ("kiln.runtime.dtypes", "_dtype_by_name"),
    ("kiln", "device"),
    ("kiln", "Size"),
    ("kiln.runtime.device", "device"),
    ("kiln.runtime.tensor", "Size"),
}

_user_globals: list = []


def _global_name(entry) -> tuple[str, object]:
    """The ``module.qualname`` a pickle names ``entry`` by, and the object itself."""
    if isinstance(entry, tuple):
        if len(entry) != 2 or not isinstance(entry[1], str):
            raise ValueError(
                "Expected tuple of length 2 of the form (obj, 'fully qualified name of obj'), "
                f"but got {entry!r}"
            )
        return entry[1], entry[0]
    return f"{entry.__module__}.{entry.__qualname__}", entry


def _user_allowed() -> dict[str, object]:
    return dict(_global_name(entry) for entry in _user_globals)


def add_safe_globals(safe_globals: list) -> None:
    """Allow these classes/functions (or ``(obj, "module.name")`` pairs) in weights-only loads."""
    for entry in safe_globals:
        _global_name(entry)  # validates tuple entries now rather than at load time
    _user_globals.extend(safe_globals)


def clear_safe_globals() -> None:
    """Forget every global added with ``add_safe_globals``."""
    _user_globals.clear()


def get_safe_globals() -> list:
    """The globals added with ``add_safe_globals`` (or an active ``safe_globals``), in order."""
    return list(_user_globals)


class safe_globals:  # noqa: N801 - PyTorch's name
    """Context manager: ``add_safe_globals`` for the duration of a ``with`` block."""

    def __init__(self, safe_globals: list):
        self.safe_globals = list(safe_globals)
        self._saved: list = []

    def __enter__(self):
        self._saved = list(_user_globals)
        add_safe_globals(self.safe_globals)

    def __exit__(self, *exc) -> None:
        _user_globals[:] = self._saved


def _python3_name(module: str, name: str) -> tuple[str, str]:
    """Protocol-2 pickles spell builtins the Python 2 way (``__builtin__.set``)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def _is_allowed(module: str, name: str) -> bool:
    return (module, name) in _DEFAULT_ALLOWED or f"{module}.{name}" in _user_allowed()


def _refusal(module: str, name: str) -> pickle.UnpicklingError:
    full = f"{module}.{name}"
    return pickle.UnpicklingError(
        "Weights only load failed. This file can still be loaded, to do so you have two options, "
        "\033[1mdo those steps only if you trust the source of the checkpoint\033[0m. \n"
        "\t(1) Re-running `kiln.load` with `weights_only` set to `False` will likely succeed, "
        "but it can result in arbitrary code execution. Do it only if you got the file from a "
        "trusted source.\n"
        "\t(2) Alternatively, to load with `weights_only=True` please check the recommended "
        "steps in the following error message.\n"
        f"\tWeightsUnpickler error: Unsupported global: GLOBAL {full} was not an allowed global "
        f"by default. Please use `kiln.serialization.add_safe_globals([{full}])` or the "
        f"`kiln.serialization.safe_globals([{full}])` context manager to allowlist this global "
        "if you trust this class/function.\n\n"
        "Check the documentation of kiln.load to learn more about types accepted by default "
        "with weights_only."
    )


class WeightsOnlyUnpickler(pickle.Unpickler):
    """An unpickler that imports only allowlisted globals; ``persistent_load`` is the caller's."""

    def find_class(self, module: str, name: str):
        module, name = _python3_name(module, name)
        if not _is_allowed(module, name):
            raise _refusal(module, name)
        user = _user_allowed().get(f"{module}.{name}")
        if user is not None:
            return user
        return super().find_class(module, name)


_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING",
               "BINSTRING", "SHORT_BINSTRING"}  # fmt: skip
_MEMO_PUT = {"PUT", "BINPUT", "LONG_BINPUT"}
_MEMO_GET = {"GET", "BINGET", "LONG_BINGET"}


def _globals_named(data: bytes) -> Iterable[tuple[str, str]]:
    """Every (module, name) a pickle imports, following memoised strings for STACK_GLOBAL."""
    pushed: list = []  # values of recent pushes, None for anything but a string
    memo: dict = {}
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            module, name = arg.split(" ", 1)
            pushed.append(None)
            yield module, name
        elif op.name == "STACK_GLOBAL":
            if len(pushed) >= 2 and isinstance(pushed[-2], str) and isinstance(pushed[-1], str):
                yield pushed[-2], pushed[-1]
            pushed.append(None)
        elif op.name in _STRING_OPS:
            pushed.append(arg)
        elif op.name == "MEMOIZE":
            memo[len(memo)] = pushed[-1] if pushed else None
        elif op.name in _MEMO_PUT:
            memo[arg] = pushed[-1] if pushed else None
        elif op.name in _MEMO_GET:
            pushed.append(memo.get(arg))
        elif op.stack_after:
            pushed.append(None)


def unsafe_globals_in(data: bytes) -> list[str]:
    """The ``module.name`` globals a pickle names that a weights-only load would refuse."""
    found: list[str] = []
    for module, name in _globals_named(data):
        module, name = _python3_name(module, name)
        full = f"{module}.{name}"
        if not _is_allowed(module, name) and full not in found:
            found.append(full)
    return found
