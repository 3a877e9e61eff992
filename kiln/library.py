"""``kiln.library``: PyTorch's ``torch.library``, for ops defined by user code.

The machinery is the op registry's (``ops/core/custom_ops.py``, schemas in
``ops/core/custom_schema.py``); this facade adds ``opcheck``, which needs the compiler.
"""

from __future__ import annotations

from collections.abc import Callable

from .ops.core.custom_ops import (
    CustomOpDef,
    Library,
    custom_op,
    get_ctx,
    lookup,
    register_autograd,
    register_fake,
    register_kernel,
)
from .ops.core.custom_schema import infer_schema
from .runtime.tensor import Tensor
from .utils._pytree import tree_flatten, tree_map

__all__ = [
    "CustomOpDef",
    "Library",
    "custom_op",
    "define",
    "get_ctx",
    "impl",
    "infer_schema",
    "opcheck",
    "OpCheckError",
    "register_autograd",
    "register_fake",
    "register_kernel",
]

# Libraries ``define`` made, kept alive as PyTorch's module-level registrations are
_LIBRARIES: dict[str, Library] = {}


def define(qualname: str, schema: str, *, lib: Library | None = None, tags=()) -> None:
    """``torch.library.define("mylib::foo", "(Tensor x) -> Tensor")``."""
    namespace_name, _, name = qualname.partition("::")
    library = lib or _LIBRARIES.setdefault(namespace_name, Library(namespace_name, "FRAGMENT"))
    library.define(name + schema)


def impl(qualname: str, types: str | tuple, func: Callable | None = None, *, lib=None):
    """``torch.library.impl("mylib::foo", "cpu")``: an implementation for device types."""
    return register_kernel(qualname, types, func)


class OpCheckError(Exception):
    """One of ``opcheck``'s checks failed."""


def _check_close(expected, got, what: str, atol: float, rtol: float) -> None:
    from . import testing

    try:
        testing.assert_close(got, expected, atol=atol, rtol=rtol, equal_nan=True)
    except AssertionError as error:
        raise OpCheckError(f"opcheck: {what} differs from the eager result: {error}") from None


def opcheck(
    op,
    args: tuple,
    kwargs: dict | None = None,
    *,
    test_utils: str | tuple = (
        "test_schema",
        "test_autograd_registration",
        "test_faketensor",
        "test_aot_dispatch_dynamic",
    ),  # fmt: skip
    raise_exception: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
) -> dict[str, str]:
    """A light ``torch.library.opcheck``: the op runs eagerly; its fake function gives the
    eager result's shapes and dtypes; its gradient (where inputs require grad) runs; and a
    compiled call gives the eager values. Returns ``{check: "SUCCESS" | error}``."""
    from . import compile as kiln_compile

    op = lookup(op) if isinstance(op, str) else op
    kwargs = kwargs or {}
    names = (test_utils,) if isinstance(test_utils, str) else tuple(test_utils)
    eager = op(*args, **kwargs)
    tolerances = {
        "atol": atol if atol is not None else 1e-5,
        "rtol": rtol if rtol is not None else 1.3e-6,
    }

    def schema():
        if not isinstance(op, CustomOpDef):
            raise OpCheckError(f"opcheck: {op!r} is not a custom op")

    def autograd_registration():
        flat, _ = tree_flatten(eager)
        wants = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)]
        if any(t.requires_grad for t in wants):
            outs = [t for t in flat if isinstance(t, Tensor) and t.requires_grad]
            if outs:
                sum(o.sum() for o in outs).backward()

    def faketensor():
        if op.fake is None:
            raise OpCheckError(
                f"There was no fake impl registered for {op!r}. This is necessary for "
                "kiln.compile/export/fx tracing to work. Please use `register_fake` to add one."
            )
        on_meta = tree_map(lambda t: t.detach().to("meta") if isinstance(t, Tensor) else t, args)
        fake = op(*on_meta, **kwargs)
        for real, shaped in zip(tree_flatten(eager)[0], tree_flatten(fake)[0]):
            if isinstance(real, Tensor) and (
                real.shape != shaped.shape or real.dtype != shaped.dtype
            ):
                raise OpCheckError(
                    f"opcheck: the fake function gives {tuple(shaped.shape)} {shaped.dtype}, the "
                    f"kernel {tuple(real.shape)} {real.dtype}"
                )

    def aot_dispatch_dynamic():
        detached = tree_map(lambda t: t.detach() if isinstance(t, Tensor) else t, args)
        compiled = kiln_compile(lambda *a: op(*a, **kwargs), fullgraph=True)(*detached)
        _check_close(tree_map(_detached, eager), compiled, "the compiled result", **tolerances)

    checks = {
        "test_schema": schema,
        "test_autograd_registration": autograd_registration,
        "test_faketensor": faketensor,
        "test_aot_dispatch_dynamic": aot_dispatch_dynamic,
    }
    results = {}
    for name in names:
        try:
            checks[name]()
            results[name] = "SUCCESS"
        except Exception as error:
            if raise_exception:
                raise OpCheckError(f"opcheck(op, ...): {name} failed with {error}") from error
            results[name] = error
    return results


def _detached(value):
    return value.detach() if isinstance(value, Tensor) else value
