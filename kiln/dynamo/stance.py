"""``torch.compiler.set_stance``: how compiled functions behave for a while, globally.

``"default"`` compiles as usual (``force_backend`` then replaces every context's backend);
``"force_eager"`` runs compiled functions as plain Python; ``"eager_on_recompile"`` runs
eagerly whenever a call would recompile (cached entries still run); ``"fail_on_recompile"``
raises instead of recompiling; ``"eager_then_compile"`` (and ``"aot_eager_then_compile"``)
run a function's first call eagerly and compile from the second. ``eval_frame`` reads
``STANCE`` on each call (one comparison on the hot path).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["set_stance", "Stance", "STANCE", "current"]

_STANCES = frozenset(
    {
        "default", "force_eager", "eager_on_recompile", "fail_on_recompile",
        "eager_then_compile", "aot_eager_then_compile",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Stance:
    stance: str = "default"
    skip_guard_eval_unsafe: bool = False
    backend: str | Callable | None = None


DEFAULT = Stance()
# the current stance, in a list so the hot path reads it without a global lookup chain
STANCE: list[Stance] = [DEFAULT]


def current() -> Stance:
    return STANCE[0]


class set_stance:  # noqa: N801 - PyTorch's name; a class so it works as call, ``with`` and decorator
    """Set the compiler's stance now; as a context manager, until the block ends; as a decorator
    (``@set_stance("force_eager")``), only while the decorated function runs."""

    def __init__(
        self,
        stance: str = "default",
        *,
        skip_guard_eval_unsafe: bool = False,
        force_backend: str | Callable | None = None,
    ):
        if stance not in _STANCES:
            raise RuntimeError(
                f"invalid torch.compile stance '{stance}', should be one of: "
                f"{', '.join(sorted(_STANCES))}"
            )
        if force_backend is not None and stance != "default":
            raise RuntimeError("non-default stance cannot have force_backend set")
        self.prev = STANCE[0]
        new = Stance(stance, skip_guard_eval_unsafe, force_backend)
        self.new = DEFAULT if new == DEFAULT else new  # the hot path tests ``is DEFAULT``
        STANCE[0] = self.new

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        STANCE[0] = self.prev

    def __call__(self, fn: Callable) -> Callable:
        STANCE[0] = self.prev  # a decorator's stance holds only inside the calls
        new = self.new

        @functools.wraps(fn)
        def with_stance(*args, **kwargs):
            prev = STANCE[0]
            STANCE[0] = new
            try:
                return fn(*args, **kwargs)
            finally:
                STANCE[0] = prev

        return with_stance
