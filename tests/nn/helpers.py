"""The module oracle shared by the nn tests: build a layer in kiln and in PyTorch with the same
weights (copied through state dicts), feed both the same inputs, and compare outputs, input
gradients, parameter gradients, updated buffers and reprs.

A ``Case`` names a layer (``build(lib)``), its inputs (``In`` specs, drawn from a generator seeded
by the case name) and optionally how to call it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch


@dataclass
class In:
    """An input: float normal (``kind="f"``), int in [0, high) ("i"), probability ("p"), bool ("b")."""

    shape: tuple
    kind: str = "f"
    high: int = 0
    grad: bool = True
    values: np.ndarray | None = None

    def make(self, rng: np.random.Generator) -> np.ndarray:
        if self.values is not None:
            return self.values
        if self.kind == "i":
            return rng.integers(0, self.high, self.shape).astype(np.int64)
        if self.kind == "p":
            return rng.uniform(0.05, 0.95, self.shape).astype(np.float32)
        if self.kind == "b":
            return rng.random(self.shape) < 0.3
        return rng.standard_normal(self.shape).astype(np.float32)


@dataclass
class Case:
    name: str
    build: object  # fn(lib) -> module, lib is kiln or torch
    inputs: list
    call: object = None  # fn(lib, module, tensors) -> output; default module(*tensors)
    train: bool = True
    rtol: float = 1e-5
    atol: float = 1e-5


def copy_weights(kmod, tmod) -> None:
    """Load the PyTorch module's state into the kiln one; every key must match."""
    state = {k: kiln.tensor(v.detach().numpy().copy()) for k, v in tmod.state_dict().items()}
    result = kmod.load_state_dict(state)
    assert not result.missing_keys and not result.unexpected_keys


def _tensors(lib, arrays, specs):
    out = []
    for arr, spec in zip(arrays, specs):
        t = lib.tensor(arr)
        if spec.grad and arr.dtype.kind == "f":
            t.requires_grad_(True)
        out.append(t)
    return out


def _outputs(result) -> list:
    items = result if isinstance(result, tuple) else (result,)
    return list(items)


def run_case(case: Case):
    """Both modules, their inputs and outputs, and the case's generator for cotangents."""
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    arrays = [spec.make(rng) for spec in case.inputs]
    tmod = case.build(torch)
    kmod = case.build(kiln)
    copy_weights(kmod, tmod)
    tmod.train(case.train)
    kmod.train(case.train)
    call = case.call or (lambda lib, m, xs: m(*xs))
    t_in = _tensors(torch, arrays, case.inputs)
    k_in = _tensors(kiln, arrays, case.inputs)
    return (
        tmod,
        kmod,
        t_in,
        k_in,
        _outputs(call(torch, tmod, t_in)),
        _outputs(call(kiln, kmod, k_in)),
        rng,
    )


def check_forward_and_backward(case: Case, every_output_differentiable: bool = False) -> None:
    """Outputs, then one backward through every differentiable output with the same random
    cotangents: input and parameter gradients and buffers must match PyTorch's.

    With ``every_output_differentiable`` the case must have a differentiable output (and every
    parameter a gradient); otherwise ``None`` outputs and parameters without gradients are
    allowed where PyTorch has them too.
    """
    tmod, kmod, t_in, k_in, t_out, k_out, rng = run_case(case)
    assert len(t_out) == len(k_out)
    for t, k in zip(t_out, k_out):
        if t is None and not every_output_differentiable:
            assert k is None
            continue
        assert_close(k, t, rtol=case.rtol, atol=case.atol)
    t_terms, k_terms = [], []
    for t, k in zip(t_out, k_out):
        if (t is not None or every_output_differentiable) and t.requires_grad:
            cot = rng.standard_normal(tuple(t.shape)).astype(np.float32)
            t_terms.append((t * torch.tensor(cot)).sum())
            k_terms.append((k * kiln.tensor(cot)).sum())
    if every_output_differentiable:
        assert t_terms, "every case has a differentiable output"
    if t_terms:
        sum(t_terms).backward()
        sum(k_terms).backward()
    for t, k in zip(t_in, k_in):
        if t.grad is not None:
            assert_close(k.grad, t.grad, rtol=case.rtol, atol=case.atol)
    k_params = dict(kmod.named_parameters())
    for name, p in tmod.named_parameters():
        if p.grad is not None or every_output_differentiable:
            assert_close(k_params[name].grad, p.grad, rtol=case.rtol, atol=case.atol)
    for (name, tb), (kname, kb) in zip(tmod.named_buffers(), kmod.named_buffers()):
        assert name == kname
        assert_close(kb, tb, rtol=case.rtol, atol=case.atol)


def check_repr_and_state(case: Case) -> None:
    """Same repr, parameter names and shapes, and state-dict keys as PyTorch's module."""
    tmod, kmod = case.build(torch), case.build(kiln)
    assert repr(kmod) == repr(tmod)
    assert [(n, tuple(p.shape)) for n, p in kmod.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in tmod.named_parameters()
    ]
    assert list(kmod.state_dict()) == list(tmod.state_dict())


def module_case_tests(cases: list, every_output_differentiable: bool = False) -> tuple:
    """The two tests a feature file's table of cases gets (assign them to these names at module
    level): outputs and gradients (``check_forward_and_backward``), and repr and state
    (``check_repr_and_state``), parametrized over the cases by name."""
    ids = [c.name for c in cases]

    @needs_torch
    @pytest.mark.parametrize("case", cases, ids=ids)
    def test_forward_and_backward_match_torch(case: Case) -> None:
        check_forward_and_backward(case, every_output_differentiable)

    @needs_torch
    @pytest.mark.parametrize("case", cases, ids=ids)
    def test_repr_and_state_match_torch(case: Case) -> None:
        check_repr_and_state(case)

    return test_forward_and_backward_match_torch, test_repr_and_state_match_torch


def float64_pair(make, seed=0):
    """The same module in kiln and torch (float64, equal parameters)."""
    k, t = make(kiln).double(), make(torch).double()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for (_, kp), (_, tp) in zip(k.named_parameters(), t.named_parameters()):
            value = rng.standard_normal(tuple(kp.shape))
            tp.copy_(torch.tensor(value))
            with kiln.no_grad():
                kp.copy_(kiln.tensor(value))
    return k, t
