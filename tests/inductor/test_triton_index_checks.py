"""Triton kernels flag an index read from memory that lies outside its dimension, as the CPU
(LLVM) kernels do: the graph's wrapper raises the exception type the op raises eagerly, naming
the user's line, instead of returning what a load through a clamped index read (or reading past a
buffer). Valid indices, negative ones counted from the end included, still give PyTorch's values.

Kernels run in Triton's interpreter: on host buffers (``cpu_codegen="triton"``) and on the CUDA
stand-in (the ``gpu`` fixture: ``CudaKernelRuntime`` over host memory).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.dynamo.test_compiled_refusals import OUT_OF_RANGE, _error
from tests.inductor.helpers import compile_traced
from tests.oracle import needs_torch, torch

TRITON = {"cpu_codegen": "triton"}
# reductions looped over blocks of 8 (the checks then sit inside the loop)
LOOPED = {**TRITON, "triton.persistent_reduction_max": 4, "triton.looped_rblock": 8}


def _compiled(case, codegen: str, options: dict | None = None):
    options = {"cpu_codegen": codegen, **(options or {})}
    return kiln.compile(lambda x: case(kiln, x), backend="inductor", options=options)


def _is_index_error(error, user_file: str, expected: type[Exception] = RuntimeError) -> None:
    assert type(error) is expected, error
    assert str(error).startswith("index out of bounds"), error
    assert user_file in str(error), error  # the user's line


@pytest.mark.parametrize("name", list(OUT_OF_RANGE))
def test_triton_kernels_refuse_indices_out_of_range_as_cpu_kernels_do(name):
    """Every case of the CPU kernels' checks (gathers, scatters, ``_checked_index``): the same
    exception (eager's type), naming the user's code."""
    case = OUT_OF_RANGE[name]
    x = kiln.arange(20.0).reshape(4, 5)
    eager = type(_error(case, kiln, x))
    cpu = _error(_compiled(case, "llvm"), x)
    triton = _error(_compiled(case, "triton"), x)
    _is_index_error(cpu, "test_compiled_refusals.py", eager)
    _is_index_error(triton, "test_compiled_refusals.py", eager)
    assert str(triton).split(" (")[0] == str(cpu).split(" (")[0]


F_TORCH = None if torch is None else torch.nn.functional

# the cases above with indices in range: both ends of each dimension, and negative ones where
# PyTorch counts them from the end
IN_RANGE = {
    "x[idx]": lambda lib, x: x[lib.tensor([3, -4, 0])] * 2,
    "index_fill": lambda lib, x: x.clone().index_fill(0, lib.tensor([3, 0]), 1.0),
    "gather": lambda lib, x: lib.gather(x, 1, lib.tensor([[4], [0], [1], [2]])) + 1,
    "scatter": lambda lib, x: x.scatter(0, lib.tensor([[3, 0]]), 1.0),
    "scatter_add": lambda lib, x: x.scatter_add(0, lib.tensor([[3, 0], [3, 1]]), lib.ones(2, 2)),
    "index_add": lambda lib, x: x.index_add(0, lib.tensor([3, 0, 3]), lib.ones(3, 5)),
    "take": lambda lib, x: lib.take(x, lib.tensor([19, -20, 7])),
    "embedding": lambda lib, x: lib.nn.functional.embedding(lib.tensor([3, 0, 1]), x),
    "index_select": lambda lib, x: x.index_select(1, lib.tensor([4, 0])),
    "index_put_": lambda lib, x: x.clone().index_put_((lib.tensor([3, -4]),), lib.tensor(1.0)),
    "one_hot": lambda lib, x: lib.nn.functional.one_hot(lib.tensor([2, 0]), 3) + x.sum().long(),
    "cross_entropy ignoring one target": lambda lib, x: lib.nn.functional.cross_entropy(
        x, lib.tensor([0, -100, 4, 2])
    ),
    "nll_loss": lambda lib, x: lib.nn.functional.nll_loss(x, lib.tensor([0, 1, 4, 3])),
    "masked_scatter of exactly enough values": lambda lib, x: x.masked_scatter(
        x > 15, lib.arange(4.0) + 100
    ),
}


@needs_torch
@pytest.mark.parametrize("name", list(IN_RANGE))
def test_triton_kernels_of_valid_indices_give_pytorchs_values(name):
    case = IN_RANGE[name]
    expected = case(torch, torch.arange(20.0).reshape(4, 5))
    got = _compiled(case, "triton")(kiln.arange(20.0).reshape(4, 5))
    kiln.testing.assert_close(got, kiln.from_numpy(expected.numpy()))


def _losses(lib, logits, target):
    return lib.nn.functional.cross_entropy(logits, target), lib.nn.functional.nll_loss(
        logits.log_softmax(-1), target, reduction="none"
    )


@needs_torch
def test_targets_checked_inside_a_looped_reduction():
    """19 classes reduced in blocks of 8: the target's check runs in the loop over the row (and
    a target in the ragged last block is valid)."""
    logits = np.random.default_rng(0).standard_normal((3, 19)).astype(np.float32)
    fn = kiln.compile(lambda x, t: _losses(kiln, x, t), backend="inductor", options=LOOPED)
    target = np.array([18, 0, 9])
    got = fn(kiln.tensor(logits), kiln.tensor(target))
    expected = _losses(torch, torch.tensor(logits), torch.tensor(target))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
    # a target out of range: IndexError, as eager's and PyTorch's nll_loss
    _is_index_error(_error(fn, kiln.tensor(logits), kiln.tensor([0, 19, 1])), __file__, IndexError)


def test_a_matmul_epilogue_gathering_rows_flags_them():
    """A bias gathered per row, fused after the matmul template's K loop."""
    a, b, bias = kiln.randn(6, 10), kiln.randn(10, 8), kiln.randn(3, 8)
    fn = lambda a, b, bias, i: (a @ b) + bias[i]  # noqa: E731
    compiled = compile_traced(fn, a, b, bias, kiln.tensor([0, 2, 1, 1, 0, 2]), codegen="triton")
    assert [k.kind for k in compiled.module.kernels] == ["matmul"]
    good = kiln.tensor([0, -1, 1, 1, 0, 2])
    np.testing.assert_allclose(
        compiled(a, b, bias, good)[0].numpy(), fn(a, b, bias, good).numpy(), rtol=1e-5, atol=1e-5
    )
    bad = kiln.tensor([0, 2, 1, 3, 0, 2])
    _is_index_error(_error(compiled, a, b, bias, bad), __file__, IndexError)  # as bias[i] eagerly


def test_a_call_after_a_refused_one_starts_with_clear_flags():
    """The flags are the call's own: a bad index refuses that call only."""
    fn = kiln.compile(lambda x, i: x.gather(1, i) * 2, backend="inductor", options=TRITON)
    x = kiln.arange(20.0).reshape(4, 5)
    _is_index_error(_error(fn, x, kiln.tensor([[5], [0], [0], [0]])), __file__)
    kiln.testing.assert_close(
        fn(x, kiln.tensor([[4], [0], [1], [2]])), x.gather(1, kiln.tensor([[4], [0], [1], [2]])) * 2
    )


def test_kernels_for_every_size_check_against_each_calls_size(stats):
    """Symbolic sizes: the dimension an index is checked against is the call's (one graph
    serves every call)."""
    fn = kiln.compile(lambda x, i: x[i] + 1, dynamic=True, options=TRITON)
    for rows in (3, 7, 12):
        x = kiln.arange(rows * 2.0).reshape(rows, 2)
        good = kiln.tensor(
            [rows - 1, -rows, 0, 1]
        )  # 4 long: no row count (equal sizes share a symbol)
        kiln.testing.assert_close(fn(x, good), x[good] + 1)
        for bad in (rows, -rows - 1):
            _is_index_error(_error(fn, x, kiln.tensor([0, bad, 1, 0])), __file__, IndexError)
    assert stats.symbolic_compiles == 1 and stats.static_compiles == stats.fallback_calls == 0


DEVICE_CASES = {
    "x[idx]": (lambda x, i: x[i] * 2, [3, -4], [4]),
    "gather": (lambda x, i: x.gather(0, i.view(1, -1)) + 1, [3, 0], [0, -1]),
    "embedding": (lambda x, i: kiln.nn.functional.embedding(i, x).sum(-1), [3, 0], [-1]),
    "index_add": (lambda x, i: x.index_add(0, i, kiln.ones(len(i), 5, device=x.device)), [3], [9]),
    "cross_entropy": (
        lambda x, i: kiln.nn.functional.cross_entropy(x, i),
        [4, 0, 1, 2],
        [0, 1, 2, 5],
    ),
}


@pytest.mark.parametrize("name", list(DEVICE_CASES))
def test_kernels_on_a_cuda_device_flag_indices_out_of_range(gpu, name):
    """The CUDA runtime's flags: zeroed device memory per call, read back once after the
    graph. Valid indices give eager CPU kiln's values."""
    fn, good, bad = DEVICE_CASES[name]
    compiled = kiln.compile(fn)
    x = kiln.arange(20.0).reshape(4, 5)
    got = compiled(x.to("cuda"), kiln.tensor(good).to("cuda"))
    kiln.testing.assert_close(got.cpu(), fn(x, kiln.tensor(good)))
    error = _error(compiled, x.to("cuda"), kiln.tensor(bad).to("cuda"))
    _is_index_error(error, __file__, type(_error(fn, x, kiln.tensor(bad))))


def test_flagging_kernels_pass_the_gpu_compiler():
    """The checks in a matmul epilogue and in a looped reduction compile to cubins (sm_90, no
    GPU needed): the interpreter is laxer than Triton's compiler."""
    from kiln.inductor.codegen.triton_wrapper import compile_for_gpu

    a, b, bias, i = kiln.randn(6, 10), kiln.randn(10, 8), kiln.randn(3, 8), kiln.tensor([0, 2, 1])

    def fn(a, b, bias, i):
        rows = i.repeat(2)
        return (a @ b) + bias[rows], kiln.nn.functional.cross_entropy(a, rows)

    compiled = compile_traced(fn, a, b, bias, i, codegen="triton", options=LOOPED)
    checking = [k.name for k in compiled.module.kernels if "_index_errors" in k.args]
    assert len(checking) == 2
    binaries = compile_for_gpu(compiled.module, (9, 0))
    assert all(binaries[name].asm.get("cubin") for name in checking)
