"""``RemovableHandle``: what every ``register_*_hook`` returns (``kiln.utils.hooks``).

Hooks live in ordered dicts keyed by a process-wide increasing id, so the handle can delete its
entry (and the same key from companion dicts such as "called with kwargs") without holding the
module alive: it keeps only weak references to the dicts.
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict

__all__ = ["RemovableHandle"]

_ids = itertools.count()


class RemovableHandle:
    """Removes one hook from its dict (and from ``extra_dict``\\s) on ``remove()`` or ``with`` exit."""

    def __init__(self, hooks_dict: OrderedDict, *, extra_dict=None) -> None:
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = next(_ids)
        if extra_dict is None:
            extras = ()
        elif isinstance(extra_dict, (list, tuple)):
            extras = tuple(extra_dict)
        else:
            extras = (extra_dict,)
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras)

    def remove(self) -> None:
        for ref in (self.hooks_dict_ref, *self.extra_dict_ref):
            table = ref()
            if table is not None:
                table.pop(self.id, None)

    def __getstate__(self):
        return (self.hooks_dict_ref(), self.id, tuple(ref() for ref in self.extra_dict_ref))

    def __setstate__(self, state) -> None:
        hooks, self.id, extras = state
        # a handle unpickled without its dict refers to a fresh, empty one (removal is a no-op)
        self._dead = OrderedDict() if hooks is None else None
        self.hooks_dict_ref = weakref.ref(hooks if hooks is not None else self._dead)
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras if d is not None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
