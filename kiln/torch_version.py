"""``kiln.torch_version``: the version string that scripts compare, as PyTorch's ``TorchVersion``.

Third-party code branches on ``torch.__version__`` (``>= "2.0"``, ``< (1, 10)``, splitting it on
dots): with ``import kiln as torch`` it reads ``kiln.__version__``, which therefore names the
PyTorch API kiln follows (2.13), with kiln's own release in the local part (``+kiln0.1.0``, as
a PyTorch build names its variant in ``+cpu``). ``TorchVersion`` is still a ``str`` but compares
by PEP 440's order, so ``"2.13.0" >= "2.2"`` holds where plain strings would say otherwise.
"""

from __future__ import annotations

import re

from .version import __version__ as internal_version

__all__ = ["TorchVersion", "Version", "InvalidVersion", "__version__"]


class InvalidVersion(ValueError):  # noqa: N818 - PyTorch's (packaging's) name
    """A string that is not a PEP 440 version."""


_PATTERN = re.compile(
    r"""^\s*v?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre>alpha|beta|preview|pre|rc|a|b|c)[-_.]?(?P<pre_n>\d*))?
    (?P<post>[-_.]?(?:post|rev|r)[-_.]?(?P<post_n>\d*)|-(?P<post_implicit>\d+))?
    (?:[-_.]?(?P<dev>dev)[-_.]?(?P<dev_n>\d*))?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_PRE_ORDER = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_INF = float("inf")


class Version:
    """A parsed PEP 440 version, ordered as PEP 440 orders them."""

    def __init__(self, text: str):
        match = _PATTERN.match(text)
        if match is None:
            raise InvalidVersion(f"Invalid version: {text!r}")
        self.text = text
        self.release = tuple(int(part) for part in match["release"].split("."))
        pre = match["pre"]
        self.pre = None if pre is None else (_PRE_ORDER[pre.lower()], int(match["pre_n"] or 0))
        self.post = (
            None if match["post"] is None else int(match["post_n"] or match["post_implicit"] or 0)
        )
        self.dev = None if match["dev"] is None else int(match["dev_n"] or 0)
        self.local = None if match["local"] is None else match["local"].lower()
        self._key = self._sort_key()

    def _sort_key(self) -> tuple:
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        if self.pre is None and self.post is None and self.dev is not None:
            pre: tuple = (-_INF, 0)  # 1.0.dev0 sorts before 1.0a0
        elif self.pre is None:
            pre = (_INF, 0)
        else:
            pre = self.pre
        post = -_INF if self.post is None else self.post
        dev = _INF if self.dev is None else self.dev
        local: tuple = ()
        if self.local is not None:  # numbers above words, each segment in turn
            local = tuple(
                (1, int(part), "") if part.isdigit() else (0, 0, part)
                for part in re.split(r"[-_.]", self.local)
            )
        return (tuple(release), pre, post, dev, local)

    @property
    def major(self) -> int:
        return self.release[0]

    @property
    def minor(self) -> int:
        return self.release[1] if len(self.release) > 1 else 0

    @property
    def micro(self) -> int:
        return self.release[2] if len(self.release) > 2 else 0

    def __repr__(self) -> str:
        return f"<Version({self.text!r})>"

    def __str__(self) -> str:
        return self.text

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Version) and self._key == other._key

    def __lt__(self, other: Version) -> bool:
        return self._key < other._key

    def __le__(self, other: Version) -> bool:
        return self._key <= other._key

    def __gt__(self, other: Version) -> bool:
        return self._key > other._key

    def __ge__(self, other: Version) -> bool:
        return self._key >= other._key


class TorchVersion(str):
    """A version string that compares with strings, tuples and versions by PEP 440's order (a
    string that is no version, ``"parrot"``, compares as a string)."""

    __slots__ = ()

    @staticmethod
    def _as_version(other) -> Version:
        if isinstance(other, Version):
            return other
        if isinstance(other, str):
            return Version(other)
        if isinstance(other, (tuple, list)):  # (2, 1) is 2.1
            return Version(".".join(str(part) for part in other))
        if hasattr(other, "release"):  # another library's version object
            return Version(str(other))
        raise InvalidVersion(f"{other!r} is not a version")

    def _compare(self, other, method: str) -> bool:
        try:
            mine, theirs = Version(str(self)), self._as_version(other)
        except InvalidVersion:
            return getattr(str(self), method)(other)
        return getattr(mine, method)(theirs)

    def __eq__(self, other) -> bool:
        return self._compare(other, "__eq__")

    def __lt__(self, other) -> bool:
        return self._compare(other, "__lt__")

    def __le__(self, other) -> bool:
        return self._compare(other, "__le__")

    def __gt__(self, other) -> bool:
        return self._compare(other, "__gt__")

    def __ge__(self, other) -> bool:
        return self._compare(other, "__ge__")

    __hash__ = str.__hash__


__version__ = TorchVersion(internal_version)
