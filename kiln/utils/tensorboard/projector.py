"""``add_embedding``'s files for TensorBoard's embedding projector, laid out as PyTorch's writer
lays them out: under ``<log_dir>/<step>/<tag>/`` the vectors (``tensors.tsv``), their labels
(``metadata.tsv``) and a sprite of their images (``sprite.png``), and in ``log_dir`` one
``projector_config.pbtxt`` naming every embedding the writer has added.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from google.protobuf import text_format
from tensorboard.plugins.projector.projector_config_pb2 import EmbeddingInfo, ProjectorConfig

from .summary import encode_png, image_grid, to_numpy

__all__ = ["ProjectorConfig", "embedding_subdir", "write_embedding", "write_config"]


def embedding_subdir(tag: str, global_step: int) -> str:
    """``<step, five digits>/<tag>``, with ``%``, ``/`` and ``\\`` in the tag escaped as
    ``%xx`` so the tag stays one directory."""
    for char in "%/\\":
        tag = tag.replace(char, f"%{ord(char):02x}")
    return f"{str(global_step).zfill(5)}/{tag}"


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _metadata_tsv(metadata: list, header: list | None) -> bytes:
    if not header:
        lines = [str(x) for x in metadata]
    else:
        if len(header) != len(metadata[0]):
            raise AssertionError("len of header must be equal to the number of columns in metadata")
        lines = ["\t".join(str(e) for e in row) for row in [header] + list(metadata)]
    return ("\n".join(lines) + "\n").encode()


def _sprite_png(label_img: np.ndarray) -> bytes:
    """The images on a square canvas ``ceil(sqrt(N))`` images wide (its height the grid's
    width: the projector wants a square), pixels as floats in [0, 1]."""
    grid = image_grid(label_img, columns=math.ceil(label_img.shape[0] ** 0.5))
    square = np.zeros((grid.shape[2], grid.shape[2], 3))
    square[: grid.shape[1]] = grid.transpose(1, 2, 0)
    return encode_png(np.uint8((square * 255).clip(0, 255)))


def write_embedding(
    log_dir: str,
    mat: Any,
    metadata: list | None,
    label_img: Any,
    global_step: int,
    tag: str,
    metadata_header: list | None,
) -> EmbeddingInfo:
    """Write one embedding's files under ``log_dir``; its entry for the projector config."""
    mat = to_numpy(mat)
    subdir = embedding_subdir(tag, global_step)
    save_path = os.path.join(log_dir, subdir)
    if os.path.isdir(save_path):
        print("warning: Embedding dir exists, did you set global_step for add_embedding()?")
    elif os.path.exists(save_path):
        raise NotADirectoryError(f"Path: `{save_path}` exists, but is a file. Cannot proceed.")
    else:
        os.makedirs(save_path)
    info = EmbeddingInfo(
        tensor_name=f"{tag}:{str(global_step).zfill(5)}",
        tensor_path=os.path.join(subdir, "tensors.tsv"),
    )
    if metadata is not None:
        if mat.shape[0] != len(metadata):
            raise AssertionError("#labels should equal with #data points")
        _write(os.path.join(save_path, "metadata.tsv"), _metadata_tsv(metadata, metadata_header))
        info.metadata_path = os.path.join(subdir, "metadata.tsv")
    if label_img is not None:
        images = to_numpy(label_img)
        if mat.shape[0] != images.shape[0]:
            raise AssertionError("#images should equal with #data points")
        _write(os.path.join(save_path, "sprite.png"), _sprite_png(images))
        info.sprite.image_path = os.path.join(subdir, "sprite.png")
        info.sprite.single_image_dim.extend([images.shape[3], images.shape[2]])
    if mat.ndim != 2:
        raise AssertionError("mat should be 2D, where mat.size(0) is the number of data points")
    rows = ("\t".join(str(x.item()) for x in row) + "\n" for row in mat)
    _write(os.path.join(save_path, "tensors.tsv"), "".join(rows).encode())
    return info


def write_config(log_dir: str, config: ProjectorConfig) -> None:
    """``projector_config.pbtxt``: every embedding added so far, as protobuf text."""
    _write(
        os.path.join(log_dir, "projector_config.pbtxt"),
        text_format.MessageToString(config).encode(),
    )
