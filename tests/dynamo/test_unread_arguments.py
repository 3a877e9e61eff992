"""Arguments the captured code never reads add no guards (PyTorch's lazy variables): a new
dtype, shape or ``requires_grad`` of an unused parameter or of a tensor in ``*args`` compiles
nothing again, while one that is read still recompiles."""

from __future__ import annotations

import pytest

import kiln
from kiln.dynamo.testing import CompileCounter

from .helpers import assert_same


def ignores_its_second_argument(x, unused):
    return x * 2


def ignores_its_extra_arguments(x, *rest, scale=1.0):
    return x * scale


def reads_its_second_argument_after_a_break(x, other):
    y = x * 2
    kiln._dynamo.graph_break()
    return y + other


_CHANGES = [
    kiln.ones(3),
    kiln.ones(3, requires_grad=True),
    kiln.ones(3, dtype=kiln.float64),
    kiln.ones(2, 5),
]


@pytest.mark.parametrize("fn", [ignores_its_second_argument, ignores_its_extra_arguments])
def test_an_unread_tensor_argument_changing_compiles_nothing_again(fn):
    counter = CompileCounter()
    compiled = kiln.compile(fn, backend=counter)
    x = kiln.arange(3.0)
    for other in _CHANGES:
        assert_same(compiled(x, other), fn(x, other))
    assert counter.frame_count == 1


def test_an_argument_read_after_a_break_is_guarded_where_it_is_read():
    counter = CompileCounter()
    compiled = kiln.compile(reads_its_second_argument_after_a_break, backend=counter)
    x = kiln.arange(3.0)
    for other in _CHANGES[:3]:
        assert_same(compiled(x, other), reads_its_second_argument_after_a_break(x, other))
    # the graph before the break once (it passes ``other`` on unread), the one after it once
    # per change of ``other`` (as PyTorch: 4)
    assert counter.frame_count == 1 + 3
