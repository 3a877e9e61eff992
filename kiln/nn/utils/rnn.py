"""``kiln.nn.utils.rnn``: packing variable-length sequences for the recurrent modules.

A ``PackedSequence`` stores a batch of sequences time step by time step: ``data`` holds, for each
step ``t``, the rows of the ``batch_sizes[t]`` sequences still running (sequences sorted longest
first), so a recurrent layer can shrink its batch as sequences end. Packing and padding are
written as one ``index_select`` over kiln tensors each, so gradients flow through them; the
bookkeeping (lengths, batch sizes) is plain integer work on the CPU, as in PyTorch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from ...ops.public import arange, as_tensor, cat, empty_like, full, stack
from ...runtime import dtypes
from ...runtime.tensor import Tensor

__all__ = [
    "PackedSequence",
    "invert_permutation",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpad_sequence",
    "pack_sequence",
    "unpack_sequence",
]


class _PackedSequenceFields(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None


class PackedSequence(_PackedSequenceFields):
    """Sequences of different lengths packed time-major; made by :func:`pack_padded_sequence` or
    :func:`pack_sequence`. ``batch_sizes`` is an int64 CPU tensor; ``sorted_indices`` maps the
    packed batch order to the caller's order (``None`` when the input was already sorted)."""

    def __new__(
        cls,
        data: Tensor,
        batch_sizes: Tensor | None = None,
        sorted_indices: Tensor | None = None,
        unsorted_indices: Tensor | None = None,
    ) -> PackedSequence:
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:
            # PyTorch also accepts the pair (data, batch_sizes) as the first argument
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        elif batch_sizes.device.type != "cpu":
            raise ValueError(
                "batch_sizes should always be on CPU. Instances of PackedSequence should never "
                "be created manually. They should be instantiated by functions like "
                "pack_sequence and pack_padded_sequences in nn.utils.rnn."
            )
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def _with_data(self, data: Tensor) -> PackedSequence:
        """The same packing around converted ``data``; index tensors follow its device."""
        if data is self.data:
            return self
        sorted_indices = _move(self.sorted_indices, data.device)
        unsorted_indices = _move(self.unsorted_indices, data.device)
        return type(self)(data, self.batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        """``Tensor.to`` applied to ``data`` (``batch_sizes`` stays an int64 CPU tensor)."""
        return self._with_data(self.data.to(*args, **kwargs))

    def cuda(self, *args: Any, **kwargs: Any) -> PackedSequence:
        return self._with_data(self.data.cuda(*args, **kwargs))

    def cpu(self, *args: Any, **kwargs: Any) -> PackedSequence:
        return self._with_data(self.data.cpu(*args, **kwargs))

    def double(self) -> PackedSequence:
        return self.to(dtype=dtypes.float64)

    def float(self) -> PackedSequence:
        return self.to(dtype=dtypes.float32)

    def half(self) -> PackedSequence:
        return self.to(dtype=dtypes.float16)

    def long(self) -> PackedSequence:
        return self.to(dtype=dtypes.int64)

    def int(self) -> PackedSequence:
        return self.to(dtype=dtypes.int32)

    def short(self) -> PackedSequence:
        return self.to(dtype=dtypes.int16)

    def char(self) -> PackedSequence:
        return self.to(dtype=dtypes.int8)

    def byte(self) -> PackedSequence:
        return self.to(dtype=dtypes.uint8)

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda


def _move(index: Tensor | None, device) -> Tensor | None:
    return None if index is None else index.to(device)


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The permutation ``q`` with ``q[permutation[i]] == i`` (``None`` stays ``None``)."""
    if permutation is None:
        return None
    output = empty_like(permutation)
    positions = arange(permutation.numel(), dtype=permutation.dtype, device=permutation.device)
    return output.scatter_(0, permutation, positions)


def _lengths_tensor(lengths) -> Tensor:
    if isinstance(lengths, Tensor):
        return lengths.to(dtype=dtypes.int64)
    return as_tensor(lengths, dtype=dtypes.int64, device="cpu")


def _batch_sizes_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """``batch_sizes[t]``: how many (descending) lengths exceed ``t``."""
    steps = np.arange(int(lengths[0]))
    return (lengths[None, :] > steps[:, None]).sum(axis=1).astype(np.int64)


def _check_lengths(lengths: Tensor, batch_size: int, max_steps: int) -> np.ndarray:
    """PyTorch's checks on ``lengths`` for packing, returning them as numpy int64."""
    if lengths.dim() != 1 or lengths.device.type != "cpu":
        raise RuntimeError(
            "'lengths' argument should be a 1D CPU int64 tensor, but got "
            f"{lengths.dim()}D {lengths.device} Long tensor"
        )
    values = lengths.numpy().astype(np.int64)
    if values.shape[0] != batch_size:
        raise RuntimeError(
            "Expected `len(lengths)` to be equal to batch_size, but got "
            f"{values.shape[0]} (batch_size={batch_size})"
        )
    if values[-1] <= 0:
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in "
            "'lengths' that is <= 0"
        )
    if np.any(values[1:] > values[:-1]):
        raise RuntimeError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
            "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
            "sidestep this requirement if you do not need ONNX exportability."
        )
    if values[0] > max_steps:
        # PyTorch reads past the end of the input here; kiln refuses instead
        raise RuntimeError(
            f"the longest length in 'lengths' ({int(values[0])}) exceeds the padded input's "
            f"sequence length ({max_steps})"
        )
    return values


def pack_padded_sequence(
    input: Tensor,
    lengths: Tensor | list[int],
    batch_first: bool = False,
    enforce_sorted: bool = True,
) -> PackedSequence:
    """Pack a padded ``(T, B, *)`` (or ``(B, T, *)`` with ``batch_first``) batch whose sequence
    ``b`` has ``lengths[b]`` valid steps. Unless ``enforce_sorted``, the batch is sorted by length
    first and the permutation is kept in the result."""
    lengths = _lengths_tensor(lengths)
    sorted_indices = None
    if not enforce_sorted:
        lengths, sorted_indices = lengths.sort(descending=True, stable=True)
        sorted_indices = sorted_indices.to(input.device)
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    if batch_first:
        input = input.transpose(0, 1)
    if input.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    steps, batch = input.shape[0], input.shape[1]
    values = _check_lengths(lengths, batch, steps)
    batch_sizes = _batch_sizes_from_lengths(values)
    # row t*B + b of the flattened input is step t of sequence b; keep b < batch_sizes[t]
    rows = np.concatenate([t * batch + np.arange(n) for t, n in enumerate(batch_sizes)])
    flat = input.reshape(steps * batch, *input.shape[2:])
    data = flat.index_select(0, as_tensor(rows, dtype=dtypes.int64, device=input.device))
    return PackedSequence(data, as_tensor(batch_sizes, dtype=dtypes.int64), sorted_indices)


def pad_packed_sequence(
    sequence: PackedSequence,
    batch_first: bool = False,
    padding_value: float = 0.0,
    total_length: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Undo :func:`pack_padded_sequence`: ``(padded, lengths)`` in the caller's batch order,
    padded with ``padding_value`` to ``total_length`` steps (default: the longest sequence)."""
    data, batch_sizes = sequence.data, sequence.batch_sizes
    sizes = batch_sizes.numpy().astype(np.int64)
    steps = int(sizes.shape[0])
    if total_length is not None:
        if total_length < steps:
            raise ValueError(
                "Expected total_length to be at least the length of the longest sequence in "
                f"input, but got total_length={total_length} and max sequence length being "
                f"{steps}"
            )
        steps = total_length
    batch = int(sizes[0])
    # source row of every (t, b) cell: its packed row, or the padding row appended at the end
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rows = np.full((steps, batch), data.shape[0], dtype=np.int64)
    for t, (start, n) in enumerate(zip(starts, sizes)):
        rows[t, :n] = start + np.arange(n)
    padding = full((1, *data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    source = cat([data, padding])
    index = as_tensor(rows.reshape(-1), dtype=dtypes.int64, device=data.device)
    padded = source.index_select(0, index).reshape(steps, batch, *data.shape[1:])
    lengths = (sizes[None, :] > np.arange(batch)[:, None]).sum(axis=1).astype(np.int64)
    lengths = as_tensor(lengths, dtype=dtypes.int64)
    if batch_first:
        padded = padded.transpose(0, 1)
    unsorted = sequence.unsorted_indices
    if unsorted is not None:
        padded = padded.index_select(0 if batch_first else 1, unsorted)
        lengths = lengths[unsorted.cpu()]
    return padded, lengths


def pad_sequence(
    sequences: Tensor | Iterable[Tensor],
    batch_first: bool = False,
    padding_value: float = 0.0,
    padding_side: str = "right",
) -> Tensor:
    """Stack ``(L_i, *)`` tensors into ``(max L, B, *)`` (``(B, max L, *)`` with ``batch_first``),
    filling with ``padding_value`` on the ``padding_side``; the result has the first tensor's
    dtype and trailing shape, as in PyTorch."""
    if not isinstance(sequences, Iterable):
        raise RuntimeError(
            "pad_sequence: Expected iterable for input sequences, but got arg of type: "
            f"{type(sequences)}"
        )
    sequences = tuple(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise RuntimeError(
            f"Expected padding_side to be one of left or right, but got {padding_side}."
        )
    first = sequences[0]
    if any(seq.dim() == 0 for seq in sequences):
        raise RuntimeError("pad_sequence: every sequence must have at least one dimension")
    trailing = tuple(first.shape[1:])
    max_len = max(seq.shape[0] for seq in sequences)
    columns = []
    for seq in sequences:
        length = seq.shape[0]
        body = seq.to(first.dtype).expand(length, *trailing)
        pad = full(
            (max_len - length, *trailing), padding_value, dtype=first.dtype, device=first.device
        )
        columns.append(cat([body, pad] if padding_side == "right" else [pad, body]))
    return stack(columns, 0 if batch_first else 1)


def unpad_sequence(
    padded_sequences: Tensor, lengths: Tensor, batch_first: bool = False
) -> list[Tensor]:
    """Split a padded batch back into its ``lengths[b]``-step sequences. Unlike PyTorch, the
    input is not transposed in place when ``batch_first`` is False."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [seq[: int(length)] for seq, length in zip(padded_sequences, lengths, strict=True)]


def pack_sequence(sequences: list[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of ``(L_i, *)`` tensors (longest first unless ``enforce_sorted=False``)."""
    lengths = as_tensor([seq.size(0) for seq in sequences], dtype=dtypes.int64)
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The list of sequences a :class:`PackedSequence` holds, in the caller's order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
