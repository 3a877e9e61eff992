"""The backend registry: a backend is a callable ``(GraphModule, example_inputs) -> callable``.

``register_backend`` adds one by name (as a decorator, with or without a name, or as a plain
call); ``lookup`` turns ``kiln.compile``'s ``backend=`` argument (a name or a callable) into the
callable. The built-in backends (``kiln.builtin_backends``) sit above the compiler layers this
registry serves, so they register themselves the same way, loaded on the first lookup through a
loader the facade installs (``set_builtin_loader``).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["register_backend", "list_backends", "lookup", "BACKENDS", "set_builtin_loader"]

BACKENDS: dict[str, Callable] = {}
_builtin_loader: list = [None]


def set_builtin_loader(loader: Callable[[], object] | None) -> None:
    """Install what imports the built-in backends (run once, on the first lookup)."""
    _builtin_loader[0] = loader


def _load_builtins() -> None:
    loader = _builtin_loader[0]
    if loader is not None:
        loader()  # if it fails, the next lookup tries again (and fails as loudly)
        _builtin_loader[0] = None


def register_backend(
    compiler_fn: Callable | str | None = None, name: str | None = None
) -> Callable:
    """Register ``compiler_fn`` under ``name`` (default: its ``__name__``).

    ``@register_backend``, ``@register_backend("name")``, ``@register_backend(name="name")`` and
    ``register_backend(fn, "name")`` all work; the function is returned unchanged.
    """
    if isinstance(compiler_fn, str):
        name, compiler_fn = compiler_fn, None
    if compiler_fn is None:
        return lambda fn: register_backend(fn, name)
    if not callable(compiler_fn):
        raise TypeError(f"a backend must be callable, got {compiler_fn!r}")
    key = name or compiler_fn.__name__
    if key in BACKENDS and BACKENDS[key] is not compiler_fn:
        raise ValueError(f"a backend named {key!r} is already registered")
    BACKENDS[key] = compiler_fn
    return compiler_fn


def list_backends() -> list[str]:
    """Names of the registered backends, sorted."""
    _load_builtins()
    return sorted(BACKENDS)


def lookup(backend: str | Callable) -> Callable:
    """The compiler function for ``backend`` (a registered name or any callable)."""
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a name or a callable, got {backend!r}")
    _load_builtins()
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(
            f"unknown kiln backend {backend!r}; registered backends: {', '.join(list_backends())}"
        ) from None
