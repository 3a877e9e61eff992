"""Ops whose tensor operands have different dtypes: PyTorch casts every operand to the promoted
dtype before computing (a bfloat16 operand beside float32 ones is not multiplied in bfloat16),
so kiln must give the same values, not just the same result dtype."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

_RNG = np.random.default_rng(0)
_X, _A, _B = (_RNG.standard_normal((5, 5)) * 30 for _ in range(3))


def _operands(lib, dtypes):
    return [lib.tensor(v, dtype=getattr(lib, d)) for v, d in zip((_X, _A, _B), dtypes)]


CASES = {
    "addcmul": lambda lib, x, a, b: lib.addcmul(x, a, b, value=3.14),
    "addcdiv": lambda lib, x, a, b: lib.addcdiv(x, a, b.abs() + 1, value=-3.14),
    "addcmul-method": lambda lib, x, a, b: x.addcmul(a, b, value=3),
}
DTYPES = [
    ("float32", "bfloat16", "float32"),
    ("float32", "float16", "float16"),
    ("float64", "float32", "bfloat16"),
    ("bfloat16", "bfloat16", "float32"),
]


@pytest.mark.parametrize("dtypes", DTYPES, ids="-".join)
@pytest.mark.parametrize("name", sorted(CASES))
def test_operands_cast_to_the_result_dtype_first(name, dtypes):
    got = CASES[name](kiln, *_operands(kiln, dtypes))
    want = CASES[name](torch, *_operands(torch, dtypes))
    assert_close(got, want)


# true division and atan2 of a 16-bit float tensor: the other operand (an int64 tensor, a 0-d
# float32 one) is rounded to the 16-bit dtype first, so values past its range become inf
_WIDE = [0.0, 1.0, -3.0, 7e4, -1e6, 2.0**62, 3e38, -3e38]
_HALF = [1.0, -2.0, float("inf"), float("-inf"), 0.5, float("-inf"), 3.0, -0.0]
DIVISIONS = {
    "div-int64": lambda lib, h: h / lib.tensor([int(v) for v in _WIDE[:6]] + [5, -5]),
    "div-int64-left": lambda lib, h: lib.tensor([int(v) for v in _WIDE[:6]] + [5, -5]) / h,
    "div-0d-float32": lambda lib, h: lib.div(h, lib.tensor(3e38)),
    "atan2-float32-0d": lambda lib, h: lib.atan2(h, lib.tensor(-3e38)),
    "atan2-int64": lambda lib, h: lib.atan2(h, lib.tensor([2**62] * 8)),
    "true_divide-float32-0d": lambda lib, h: lib.true_divide(lib.tensor(1e6), h),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(DIVISIONS))
def test_sixteen_bit_division_rounds_the_other_operand_first(name, dtype):
    got = DIVISIONS[name](kiln, kiln.tensor(_HALF, dtype=getattr(kiln, dtype)))
    want = DIVISIONS[name](torch, torch.tensor(_HALF, dtype=getattr(torch, dtype)))
    assert_close(got, want, equal_nan=True)


# einsum replays PyTorch's steps: a pair with no letter contracted between them multiplies
# (promoting), a contracted letter goes through bmm (equal dtypes only), a letter one side alone
# holds is summed out first (integers become int64)
EINSUMS = [
    ("i,j->ij", (3,), (4,)),
    ("ij,ij->ij", (2, 3), (2, 3)),
    ("ij,j->ij", (2, 3), (3,)),
    ("bi,bj->bij", (2, 3), (2, 4)),
    ("ij,j->i", (2, 3), (3,)),
    ("i,i->", (3,), (3,)),
    ("ij,jk->ik", (2, 3), (3, 4)),
    ("ij,k->ik", (2, 3), (4,)),
    ("ij,k->", (2, 3), (4,)),
    ("ij,jk->ijk", (2, 0), (0, 3)),
]
EINSUM_DTYPES = [("float32", "float64"), ("float64", "float32"), ("float32", "int64")]
EINSUM_DTYPES += [("int32", "float32"), ("int64", "bool"), ("bool", "int32")]


def _assert_same_outcome(got, want) -> None:
    """``want``: PyTorch's result, or its (exception type, message)."""
    if isinstance(want, tuple):
        assert got == want
    else:
        assert_close(got, want)


def _einsum_operands(lib, shapes, dtypes):
    values = [np.arange(1, 1 + int(np.prod(s))).reshape(s) % 5 - 1.5 for s in shapes]
    return [lib.tensor(v, dtype=getattr(lib, d)) for v, d in zip(values, dtypes)]


def _einsum_outcome(lib, equation, operands, compiled: bool):
    fn = (lambda *ts: lib.einsum(equation, *ts)) if not compiled else None
    if compiled:
        fn = kiln.compile(lambda *ts: kiln.einsum(equation, *ts), backend="inductor")
    try:
        return fn(*operands)
    except (RuntimeError, NotImplementedError) as e:
        return type(e), str(e)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtypes", EINSUM_DTYPES, ids="-".join)
@pytest.mark.parametrize("equation,left,right", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_of_two_dtypes_promotes_or_refuses_as_pytorch(
    equation, left, right, dtypes, compiled
):
    want = _einsum_outcome(torch, equation, _einsum_operands(torch, (left, right), dtypes), False)
    got = _einsum_outcome(kiln, equation, _einsum_operands(kiln, (left, right), dtypes), compiled)
    _assert_same_outcome(got, want)


@pytest.mark.parametrize("dtypes", [("float32", "float64"), ("float64", "float32")], ids="-".join)
@pytest.mark.parametrize("equation,left,right", EINSUMS[:4], ids=[e[0] for e in EINSUMS[:4]])
def test_einsum_gradients_of_two_dtypes_match_pytorch(equation, left, right, dtypes):
    grads = []
    for lib in (kiln, torch):
        operands = [t.requires_grad_() for t in _einsum_operands(lib, (left, right), dtypes)]
        out = lib.einsum(equation, *operands)
        (out * out).sum().backward()
        grads.append([t.grad for t in operands])
    for got, want in zip(*grads):
        assert_close(got, want)


# the products refuse operands of two dtypes with the error of the kernel PyTorch reaches:
# matmul picks mv, mm (a vector or batch folded in) or bmm by the operands' ranks
_RANK_SHAPES = {1: (4,), 2: (4, 4), 3: (2, 4, 4), 4: (2, 2, 4, 4)}
PRODUCTS = {
    "matmul": lambda lib, a, b, c: lib.matmul(a, b),
    "mm": lambda lib, a, b, c: lib.mm(a, b),
    "bmm": lambda lib, a, b, c: lib.bmm(a, b),
    "mv": lambda lib, a, b, c: lib.mv(a, b),
    "dot": lambda lib, a, b, c: lib.dot(a, b),
    "vdot": lambda lib, a, b, c: lib.vdot(a, b),
    "addmm": lambda lib, a, b, c: lib.addmm(c, a, b),
    "addmv": lambda lib, a, b, c: lib.addmv(c[0], a, b[0]),
    "baddbmm": lambda lib, a, b, c: lib.baddbmm(
        c.expand(2, 4, 4), a.expand(2, 4, 4), b.expand(2, 4, 4)
    ),
    "addbmm": lambda lib, a, b, c: lib.addbmm(c, a.expand(2, 4, 4), b.expand(2, 4, 4)),
}
_PRODUCT_DTYPES = [
    ("float32", "float64", "float32"),
    ("float64", "float32", "float32"),
    ("float32", "float32", "float64"),
    ("int64", "float32", "int64"),
    ("float32", "int8", "float16"),
]


def _product_outcome(lib, fn, tensors, compiled: bool):
    if compiled:
        fn = kiln.compile(fn, backend="inductor")
    try:
        return fn(*tensors)
    except (RuntimeError, NotImplementedError) as e:
        return type(e), str(e)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtypes", _PRODUCT_DTYPES, ids="-".join)
@pytest.mark.parametrize("ranks", [(1, 2), (2, 1), (1, 3), (2, 3), (3, 1), (3, 2), (3, 3), (4, 3)])
def test_matmul_of_two_dtypes_raises_the_error_of_pytorchs_kernel(ranks, dtypes, compiled):
    def make(lib):
        return [lib.ones(_RANK_SHAPES[r], dtype=getattr(lib, d)) for r, d in zip(ranks, dtypes)]

    want = _product_outcome(torch, torch.matmul, make(torch), False)
    _assert_same_outcome(_product_outcome(kiln, kiln.matmul, make(kiln), compiled), want)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtypes", _PRODUCT_DTYPES, ids="-".join)
@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_products_of_two_dtypes_raise_pytorchs_errors(name, dtypes, compiled):
    def make(lib):
        ranks = {"bmm": 3, "dot": 1, "vdot": 1}.get(name, 2)
        a, b, c = (
            lib.ones((4,) * ranks if ranks < 3 else (2, 4, 4), dtype=getattr(lib, d))
            for d in dtypes
        )
        return (a, b[..., 0] if name == "mv" else b, c)

    want = _product_outcome(torch, lambda *ts: PRODUCTS[name](torch, *ts), make(torch), False)
    got = _product_outcome(kiln, lambda *ts: PRODUCTS[name](kiln, *ts), make(kiln), compiled)
    _assert_same_outcome(got, want)
