"""Strides and memory formats as PyTorch computes them: empty and size-1 tensors,
channels_last through creation, copies and elementwise ops, and the errors for wrong ranks."""

from __future__ import annotations

import pickle

import kiln
from tests.oracle import needs_torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch


STRIDES = {
    "empty-rows": lambda lib: lib.zeros(0, 6).stride(),
    "empty-cols": lambda lib: lib.zeros(6, 0).stride(),
    "empty-middle": lambda lib: lib.zeros(2, 0, 3).stride(),
    "empty-1d": lambda lib: lib.empty(0).stride(),
    "empty-arange": lambda lib: lib.arange(0).stride(),
    "empty-transposed": lambda lib: lib.zeros(0, 6).t().stride(),
    "empty-view": lambda lib: lib.zeros(0, 6).view(3, 0, 2).stride(),
    "empty-squeeze": lambda lib: lib.zeros(0, 1, 6).squeeze(1).stride(),
    "empty-clone": lambda lib: lib.zeros(0, 6).clone().stride(),
    "empty-cat": lambda lib: lib.cat([lib.zeros(0, 3), lib.zeros(0, 3)]).stride(),
    "empty-matmul": lambda lib: (lib.zeros(0, 3) @ lib.zeros(3, 4)).stride(),
    "empty-full": lambda lib: lib.full((0, 4, 1), 1.0).stride(),
    "empty-from-data": lambda lib: lib.tensor([[], []]).stride(),
    "empty-transpose-batch": lambda lib: lib.zeros(2, 0, 3).transpose(1, 2).stride(),
    "empty-unbind": lambda lib: [t.stride() for t in lib.zeros(2, 0, 3).unbind(0)],
    "empty-strided": lambda lib: lib.empty_strided((0, 3), (1, 5)).stride(),
    "empty-as-strided-contiguous": lambda lib: (
        lib.zeros(0, 3).as_strided((0, 3), (5, 7)).is_contiguous()
    ),
    "size1-transposed-contiguous": lambda lib: lib.zeros(1, 6).t().is_contiguous(),
    "size1-expand": lambda lib: lib.zeros(3, 1).expand(3, 5).stride(),
    "mixed-layout-add": lambda lib: (lib.zeros(2, 3).t() + lib.zeros(3, 2)).stride(),
    "size1-expand-keeps-stride": lambda lib: lib.zeros(1, 1)[::2].expand(3, 1, 1).stride(),
    "size1-unsqueeze-of-slice": lambda lib: lib.zeros(1, 1)[::2].unsqueeze(0)[0].stride(),
    "size1-empty-like-exact": lambda lib: lib.empty_like(lib.zeros(4, 1).movedim(0, -1)).stride(),
    "size1-clone-exact": lambda lib: lib.zeros(1, 4).t().clone().stride(),
    "empty-expand": lambda lib: lib.zeros(0).expand(3, 0).stride(),
    "empty-unsqueeze": lambda lib: lib.zeros(0, 3).unsqueeze(1).stride(),
    "empty-permuted-clone": lambda lib: lib.zeros(2, 0, 3).transpose(0, 2).clone().stride(),
}


@cases(STRIDES)
def test_strides_match_torch(case):
    same_as_torch(case)


def _cl(lib):
    return lib.arange(120.0).reshape(2, 3, 4, 5).to(memory_format=lib.channels_last)


MEMORY_FORMATS = {
    "repr": lambda lib: (repr(lib.channels_last), str(lib.contiguous_format)),
    "type": lambda lib: type(lib.preserve_format).__name__,
    "to": lambda lib: _cl(lib).stride(),
    "to-same": lambda lib: _cl(lib).to(memory_format=lib.channels_last).stride(),
    "to-back": lambda lib: _cl(lib).to(memory_format=lib.contiguous_format).stride(),
    "values": lambda lib: _cl(lib)[1, :, 2],
    "is-contiguous": lambda lib: (
        _cl(lib).is_contiguous(),
        _cl(lib).is_contiguous(memory_format=lib.channels_last),
        _cl(lib).is_contiguous(memory_format=lib.preserve_format),
    ),
    "contiguous": lambda lib: lib.zeros(2, 3, 4, 5).contiguous(memory_format=lib.channels_last),
    "contiguous-back": lambda lib: _cl(lib).contiguous().stride(),
    "contiguous-preserve": lambda lib: _cl(lib).contiguous(memory_format=lib.preserve_format),
    "n111": lambda lib: lib.zeros(1, 3, 1, 1).contiguous(memory_format=lib.channels_last).stride(),
    "3d": lambda lib: lib.zeros(2, 3, 4, 5, 6).to(memory_format=lib.channels_last_3d).stride(),
    "rank-error": lambda lib: lib.zeros(2, 3).contiguous(memory_format=lib.channels_last),
    "rank-error-empty": lambda lib: lib.empty(2, 3, memory_format=lib.channels_last),
    "str-error": lambda lib: lib.zeros(2).is_contiguous(memory_format="channels_last"),
    "empty": lambda lib: lib.empty(2, 3, 4, 5, memory_format=lib.channels_last).stride(),
    "empty-like": lambda lib: lib.empty_like(_cl(lib)).stride(),
    "zeros-like-contiguous": lambda lib: lib.zeros_like(
        _cl(lib), memory_format=lib.contiguous_format
    ).stride(),
    "ones-like-channels-last": lambda lib: lib.ones_like(
        lib.zeros(2, 3, 4, 5), memory_format=lib.channels_last
    ).stride(),
    "zeros-like-transposed": lambda lib: lib.zeros_like(lib.zeros(2, 3).t()).stride(),
    "zeros-like-sliced": lambda lib: lib.zeros_like(_cl(lib)[:, :2]).stride(),
    "full-like-grad": lambda lib: lib.full_like(_cl(lib), 2.0, requires_grad=True).stride(),
    "clone": lambda lib: _cl(lib).clone().stride(),
    "clone-contiguous": lambda lib: _cl(lib).clone(memory_format=lib.contiguous_format).stride(),
    "clone-strided-slice": lambda lib: _cl(lib)[:, :, ::2].clone().stride(),
    "add-scalar": lambda lib: (_cl(lib) + 1).stride(),
    "mul-contiguous": lambda lib: (_cl(lib) * lib.ones(2, 3, 4, 5)).stride(),
    "contiguous-mul": lambda lib: (lib.ones(2, 3, 4, 5) * _cl(lib)).stride(),
    "mul-broadcast": lambda lib: (lib.ones(1, 3, 1, 1) * _cl(lib)).stride(),
    "view-error": lambda lib: _cl(lib).view(2, -1),
}


@cases(MEMORY_FORMATS)
def test_memory_formats_match_torch(case):
    same_as_torch(case)


def test_memory_format_pickles_to_the_constant():
    assert pickle.loads(pickle.dumps(kiln.channels_last)) is kiln.channels_last


def test_module_to_memory_format_runs():
    model = kiln.nn.Conv2d(3, 4, 3).to(memory_format=kiln.channels_last)
    assert model(_cl(kiln)).shape == (2, 4, 2, 3)
