"""The user's part of the ``weights_only`` allowlist: ``add_safe_globals`` and friends.

A ``weights_only`` load (the default, as in PyTorch 2.6+) imports only the globals PyTorch allows
by default (``pickled_names``) and those the user vouches for here, by object or as an
``(object, "module.name")`` pair. ``unsafe_globals_in`` lists what a load would refuse.
"""

from __future__ import annotations

import _compat_pickle
import pickletools
from collections.abc import Iterable

from .pickled_names import weights_only_defaults

__all__ = [
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "safe_globals",
    "user_allowed",
    "python3_name",
    "unsafe_globals_in",
]

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


def user_allowed() -> dict[str, object]:
    """``module.name`` -> object for every global the user allowlisted."""
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


def python3_name(module: str, name: str) -> tuple[str, str]:
    """Protocol-2 pickles spell builtins the Python 2 way (``__builtin__.set``)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


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
    allowed = weights_only_defaults() | set(user_allowed())
    found: list[str] = []
    for module, name in _globals_named(data):
        full = ".".join(python3_name(module, name))
        if full not in allowed and full not in found:
            found.append(full)
    return found
