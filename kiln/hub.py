"""``kiln.hub``: PyTorch's helpers for pretrained weights at a URL.

Model files copied from torchvision and its kin start with ``from torch.hub import
load_state_dict_from_url``; this module gives them that function, ``download_url_to_file`` and
the cache directory (``get_dir``/``set_dir``). The cache is PyTorch's own (``$TORCH_HOME/hub``,
``~/.cache/torch/hub`` by default): the files are ``torch.save`` checkpoints, which
``kiln.load`` reads, so weights downloaded by either library serve both. Loading models from
GitHub repositories (``hub.load``, ``hub.list``: they run the repository's ``hubconf.py``, which
imports torch) is left out.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import uuid
import warnings
from typing import Any
from urllib.parse import urlparse

from .serialization import load

__all__ = ["get_dir", "set_dir", "download_url_to_file", "load_state_dict_from_url"]

HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")
_READ_CHUNK = 128 * 1024
_hub_dir: str | None = None


def get_dir() -> str:
    """The cache directory: the one ``set_dir`` gave, else ``$TORCH_HOME/hub`` (``TORCH_HOME``
    defaults to ``$XDG_CACHE_HOME/torch``, and that to ``~/.cache/torch``)."""
    if os.getenv("TORCH_HUB"):
        warnings.warn("TORCH_HUB is deprecated, please use env TORCH_HOME instead", stacklevel=2)
    if _hub_dir is not None:
        return _hub_dir
    cache = os.getenv("XDG_CACHE_HOME", "~/.cache")
    return os.path.join(os.path.expanduser(os.getenv("TORCH_HOME", f"{cache}/torch")), "hub")


def set_dir(d: str | os.PathLike) -> None:
    """Keep downloads in ``d`` from now on."""
    global _hub_dir
    _hub_dir = os.path.expanduser(d)


def download_url_to_file(
    url: str, dst: str, hash_prefix: str | None = None, progress: bool = True
) -> None:
    """Download ``url`` to ``dst``, through a ``.partial`` file beside it that is renamed when
    complete (a broken download never replaces a good file). With ``hash_prefix``, the file's
    SHA256 must start with it (``RuntimeError`` otherwise). ``progress`` is accepted for
    PyTorch's signature; no progress bar is drawn."""
    import hashlib  # with urllib.request (http, ssl), 20 ms that `import kiln` need not pay
    from urllib.request import Request, urlopen

    dst = os.path.expanduser(dst)
    partial = f"{dst}.{uuid.uuid4().hex}.partial"
    sha256 = hashlib.sha256() if hash_prefix is not None else None
    try:
        with urlopen(Request(url, headers={"User-Agent": "torch.hub"})) as source:
            with open(partial, "w+b") as sink:
                while chunk := source.read(_READ_CHUNK):
                    sink.write(chunk)
                    if sha256 is not None:
                        sha256.update(chunk)
        if sha256 is not None:
            digest = sha256.hexdigest()
            if digest[: len(hash_prefix)] != hash_prefix:
                raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got "{digest}")')
        shutil.move(partial, dst)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def load_state_dict_from_url(
    url: str,
    model_dir: str | None = None,
    map_location: Any = None,
    progress: bool = True,
    check_hash: bool = False,
    file_name: str | None = None,
    weights_only: bool = False,
) -> Any:
    """The checkpoint at ``url``, downloaded once into ``model_dir`` (``<get_dir()>/checkpoints``
    by default) under ``file_name`` or the URL's file name, then read with ``kiln.load``. With
    ``check_hash``, the file name's ``-<hex digits>.`` part must begin the file's SHA256."""
    if os.getenv("TORCH_MODEL_ZOO"):
        warnings.warn(
            "TORCH_MODEL_ZOO is deprecated, please use env TORCH_HOME instead", stacklevel=2
        )
    if model_dir is None:
        model_dir = os.path.join(get_dir(), "checkpoints")
    os.makedirs(model_dir, exist_ok=True)
    filename = file_name if file_name is not None else os.path.basename(urlparse(url).path)
    cached_file = os.path.join(model_dir, filename)
    if not os.path.exists(cached_file):
        sys.stdout.write(f'Downloading: "{url}" to {cached_file}\n')
        match = HASH_REGEX.search(filename) if check_hash else None
        download_url_to_file(url, cached_file, match.group(1) if match else None, progress)
    return load(cached_file, map_location=map_location, weights_only=weights_only)
