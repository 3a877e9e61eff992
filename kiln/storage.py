"""``torch.storage``'s namespace: untyped and typed storages (the classes live in the runtime,
``runtime/untyped_storage.py`` and ``runtime/typed_storage.py``)."""

from __future__ import annotations

from .runtime.storage import UntypedStorage
from .runtime.typed_storage import LEGACY_STORAGE_CLASSES, TypedStorage
from .runtime.typed_storage import _LegacyStorage as _LegacyStorage  # noqa: F401
from .runtime.typed_storage import (  # noqa: F401 - PyTorch's switch, by its private name
    get_always_warn_typed_storage_removal as _get_always_warn_typed_storage_removal,
)
from .runtime.typed_storage import (  # noqa: F401
    set_always_warn_typed_storage_removal as _set_always_warn_typed_storage_removal,
)
from .runtime.typed_storage import (  # noqa: F401
    warn_typed_storage_removal as _warn_typed_storage_removal,
)

__all__ = ["TypedStorage", "UntypedStorage", "LEGACY_STORAGE_CLASSES"]
