"""An exception raised after a graph break inside a grad-mode or autocast ``with`` block leaves
the block: the grad mode and autocast state after the call are those the call began with, as
eager PyTorch and ``torch.compile`` leave them. The break (``.item()``) makes the transformed
code switch the mode for real before it runs the rest of the block."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import needs_torch, torch


def _shape_error_in_no_grad(lib, x):
    with lib.no_grad():
        scale = x.sum().item()
        return x * scale + lib.ones(x.shape[0] + 1)  # mismatched sizes: RuntimeError


def _enable_grad_inside_no_grad(lib, x):
    with lib.no_grad():
        y = x * 2
        with lib.enable_grad():
            scale = y.sum().item()
            return y[x.shape[0] + 3] * scale  # IndexError


def _set_grad_enabled_block(lib, x):
    with lib.set_grad_enabled(False):
        scale = x.sum().item()
        return x.view(x.shape[0] + 1) * scale  # RuntimeError


def _raise_in_block(lib, x):
    with lib.no_grad():
        scale = x.sum().item()
        if scale > -1e9:
            raise ValueError("raised inside the block")
        return x


def _ambiguous_condition_in_block(lib, x):
    with lib.no_grad():
        scale = x.sum().item()
        if x * scale:  # more than one value: RuntimeError at the branch
            return x
        return -x


def _autocast_block(lib, x):
    with lib.autocast("cpu", dtype=lib.bfloat16):
        y = lib.mm(x[None], x[:, None])
        scale = y.sum().item()
        return y.view(x.shape[0] + 2) * scale  # RuntimeError


_PROGRAMS = [
    _shape_error_in_no_grad,
    _enable_grad_inside_no_grad,
    _set_grad_enabled_block,
    _raise_in_block,
    _ambiguous_condition_in_block,
    _autocast_block,
]


def _state_after_failing_call(lib, call, x, grad_enabled: bool):
    """(error type, grad mode after, autocast after) of ``call(x)`` made in ``grad_enabled``."""
    previous = lib.is_grad_enabled()
    lib.set_grad_enabled(grad_enabled)
    try:
        with pytest.raises(Exception) as raised:
            call(x)
        return raised.type, lib.is_grad_enabled(), lib.is_autocast_enabled("cpu")
    finally:
        lib.set_grad_enabled(previous)


_X = [1.0, 2.0, 3.0]


@pytest.mark.parametrize("grad_enabled", [True, False])
@pytest.mark.parametrize("program", _PROGRAMS, ids=lambda p: p.__name__.strip("_"))
def test_compiled_call_leaves_the_modes_as_eager_does(program, grad_enabled):
    def call(t):
        return program(kiln, t)

    expected = _state_after_failing_call(
        kiln, call, kiln.tensor(_X, requires_grad=True), grad_enabled
    )
    compiled = kiln.compile(call, backend="eager")
    for _ in range(2):  # the capture's call and a call of the cached code
        got = _state_after_failing_call(
            kiln, compiled, kiln.tensor(_X, requires_grad=True), grad_enabled
        )
        assert got == expected


@needs_torch
@pytest.mark.parametrize("grad_enabled", [True, False])
@pytest.mark.parametrize("program", _PROGRAMS, ids=lambda p: p.__name__.strip("_"))
def test_eager_modes_after_the_error_match_pytorch(program, grad_enabled):
    def state(lib):
        x = lib.tensor(_X, requires_grad=True)
        error, *modes = _state_after_failing_call(lib, lambda t: program(lib, t), x, grad_enabled)
        return error.__name__, modes

    assert state(kiln) == state(torch)


@needs_torch
def test_torch_compile_restores_the_modes_too():
    """The reference the test above follows: ``torch.compile`` leaves the blocks as eager does."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: _shape_error_in_no_grad(torch, t), backend="eager")
    state = _state_after_failing_call(torch, compiled, torch.ones(3, requires_grad=True), True)
    assert state[1:] == (True, False)


def test_the_block_still_switches_the_mode_when_nothing_raises():
    def fn(x):
        with kiln.no_grad():
            scale = x.sum().item()
            y = x * scale
        return y, x * 2, kiln.is_grad_enabled()

    x = kiln.ones(3, requires_grad=True)
    eager = fn(x)
    got = kiln.compile(fn, backend="eager")(x)
    assert [t.requires_grad for t in got[:2]] == [t.requires_grad for t in eager[:2]]
    assert got[2] is eager[2] is True and kiln.is_grad_enabled()
