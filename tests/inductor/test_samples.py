"""Every op sample, compiled by inductor through AOT autograd, equals eager: outputs, mutated
inputs and input gradients.

The sample database (tests/ops/samples_*.py) covers contiguous, transposed, broadcast, empty and
odd-sized inputs; each is compiled with every available CPU kernel generator. The samples that
cannot be captured into one graph are listed in ``NOT_ONE_GRAPH`` with the error capture stops
on (dynamo turns both into a graph break); for those the test asserts exactly that error, and a
listed sample that starts compiling fails the test until it is taken off the list.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.aot import aot_function
from kiln.ops.indexing.subscript import DataDependentOutputError
from kiln.runtime.symbolic import GuardOnDataDependentError
from tests.inductor.helpers import inductor_compiler
from tests.ops import test_oracle as oracle

CODEGENS = ["numpy", "llvm"]

_SAMPLES = [
    pytest.param(s, id=i)
    for s, i in zip(oracle.SAMPLES, oracle._IDS)
    if s.oracle and "inplace" not in i
]


# an output whose shape depends on tensor values (boolean masks, nonzero, unique, bincount...):
# AOT traces it with an unbacked size symbol, which the inductor's kernels cannot take as a size
# yet (through kiln.compile such graphs run, see tests/dynamo/test_dynamic_shapes.py)
_SHAPE_FROM_VALUES = (
    (DataDependentOutputError, GuardOnDataDependentError),
    "has a data-dependent output shape|output length depends on the largest input value"
    "|is needed as a Python int .* but it is only known when the graph runs"
    "|could not decide .*: it depends on u[0-9]+ .*, known only when the graph runs",
)
# an op that reads values into Python (a bool, split sizes, a repeat count, a matrix rank) or
# rewrites storage (resize_, apply_, map_): fake tensors have no data to give
_READS_VALUES = (RuntimeError, r"a fake \(being captured into a graph\) tensor: it has no data")
NOT_ONE_GRAPH = {
    # a mask's count broadcast against a tensor index traces now (size-oblivious broadcasting);
    # the inductor cannot yet take a size symbol that only an index shape reads
    "get-mask-and-tensor": (RuntimeError, "is not read by any value of this graph"),
    **dict.fromkeys(
        [
            "unique_consecutive-values",
            "unique_consecutive-both",
            "unique_consecutive-dim0",
            "unique_consecutive-dim1",
            "unique_consecutive-nan",
            "unique_consecutive-2d",
            "unique_consecutive-empty",
            "unique_consecutive-method",
            "bincount-int64[10]",
            "bincount-minlength",
            "bincount-weights-f32",
            "bincount-weights-f64",
            "bincount-weights-int",
            "bincount-empty",
        ],
        _SHAPE_FROM_VALUES,
    ),
    **dict.fromkeys(
        [
            "lstsq-gelsd",
            "resize_-shrink",
            "resize_-reads-storage-order",
            "resize_-grow-keeps-contents",
            "resize_as_-float32[3, 4]-float32[2, 2]",
            "apply_-float32[3, 4]",
            "apply_-int-truncates",
            "map_-broadcast",
            "one_hot-int64[2, 3]",
            "one_hot-infer",
            "tensor_split-tensor",
            "ri-one-tensor",
            "allclose-random",
            "allclose-same",
            "allclose-method-random",
            "allclose-method-same",
            "equal-random",
            "equal-same",
            "equal-method-random",
            "equal-method-same",
            "allclose-nan",
            "equal-mixed-dtypes",
            "is_nonzero-0",
            "is_nonzero-method",
            "cond-true-branch",  # eager cond reads its predicate (capture records both branches)
            "cond-false-branch",
        ],
        _READS_VALUES,
    ),
}


def _run(sample, args, fn_wrapper):
    tensor_pos = [i for i, a in enumerate(args) if isinstance(a, kiln.Tensor)]

    def fn(*tensors):
        call = list(args)
        for p, t in zip(tensor_pos, tensors):
            call[p] = t
        return tuple(oracle._tensors(sample.call(kiln, call, sample.kwargs)))

    inputs = [args[p] for p in tensor_pos]
    outs = fn_wrapper(fn)(*inputs)
    grads = []
    diff = [o for o in outs if o.dtype.is_floating_point and o.requires_grad]
    leaves = [t for t in inputs if t.requires_grad]
    if diff and leaves:
        cot = [kiln.ones(o.shape, dtype=o.dtype) * 0.5 for o in diff]
        grads = kiln.autograd.grad(diff, leaves, cot, allow_unused=True)
    return outs, grads


def _fresh_args(sample, arrays):
    args, _ = oracle._build(kiln, sample, arrays, grad=sample.grad)
    return args


def _assert_close(got, expected):
    assert tuple(got.shape) == tuple(expected.shape)
    assert got.dtype is expected.dtype, f"dtype {got.dtype} vs eager {expected.dtype}"
    g, e = got.detach().float().numpy(), expected.detach().float().numpy()
    if expected.dtype.is_floating_point:
        tol = 2e-2 if expected.dtype in (kiln.float16, kiln.bfloat16) else 2e-5
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("sample", _SAMPLES)
def test_compiled_sample_matches_eager(sample, codegen):
    arrays = oracle._arrays(sample)
    eager_args = _fresh_args(sample, arrays)
    compiled_args = _fresh_args(sample, arrays)
    kiln.manual_seed(0)
    expected, expected_grads = _run(sample, eager_args, lambda f: f)
    kiln.manual_seed(0)

    def compiled_run():
        return _run(sample, compiled_args, lambda f: aot_function(f, inductor_compiler(codegen)))

    stop = NOT_ONE_GRAPH.get(sample.label())
    if stop is not None:
        error, message = stop
        with pytest.raises(error, match=message):
            compiled_run()
        return
    got, got_grads = compiled_run()
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        _assert_close(g, e)
    for g, e in zip(compiled_args, eager_args):  # inputs mutated in place (running stats)
        if isinstance(e, kiln.Tensor):
            _assert_close(g, e)
    for g, e in zip(got_grads, expected_grads):
        assert (g is None) == (e is None)
        if e is not None:
            _assert_close(g, e)
