"""Samples for matrix and tensor products: mm/bmm/matmul, einsum, the addmm family, vector
products, kron, tensordot, cross, and the diagonal helpers (diag, diag_embed, trace)."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []


def _einsum(equation):
    return lambda lib, *ts: lib.einsum(equation, *ts)


# ------------------------------------------------------------------------------ mm / bmm / matmul

SAMPLES += [
    Sample("mm", (T((2, 3)), T((3, 4)))),
    Sample("mm", (T((2, 3), layout="transposed"), T((3, 4), layout="strided")), gradcheck=False),
    Sample("mm", (T((0, 3)), T((3, 2))), gradcheck=False, id="mm-empty"),
    Sample("bmm", (T((2, 2, 3)), T((2, 3, 4)))),
    Sample("matmul", (T((3,)), T((3,)))),
    Sample("matmul", (T((2, 3, 4)), T((4,)))),
    Sample("matmul", (T((4,)), T((2, 4, 3)))),
    Sample("matmul", (T((2, 1, 2, 3)), T((3, 3, 2)))),
    Sample(
        "matmul",
        (T((3, 4), dtype="int64", low=-3, high=3), T((4, 2), dtype="int64", low=-3, high=3)),
    ),
]

# ------------------------------------------------------------------------------ einsum

EINSUM = {
    "ij,jk->ik": [(2, 3), (3, 4)],
    "bij,bjk->bik": [(2, 2, 3), (2, 3, 4)],
    "ii": [(3, 3)],
    "ii->i": [(3, 3)],
    "iij->ji": [(2, 2, 3)],
    "i,j->ij": [(3,), (4,)],
    "ij->": [(2, 3)],
    "ij->ji": [(2, 3)],
    "ij,kj": [(2, 3), (4, 3)],
    "bA": [(2, 3)],
    "...ij,...jk": [(2, 1, 2, 3), (5, 3, 4)],
    "i...,i->...": [(3, 2, 2), (3,)],
    "ij,jk,kl->il": [(2, 3), (3, 4), (4, 2)],
    "ij,j->i": [(2, 1), (3,)],
    "ab,cd->": [(2, 3), (2, 2)],
    "ijk,ikj->k": [(2, 3, 4), (2, 4, 3)],
}
for equation, shapes in EINSUM.items():
    SAMPLES.append(
        Sample("einsum", tuple(T(s) for s in shapes), fn=_einsum(equation), id=f"einsum-{equation}")
    )
SAMPLES += [
    Sample(
        "einsum",
        (T((3, 4), layout="transposed"), T((4, 2), layout="strided")),
        fn=_einsum("ij,jk"),
        gradcheck=False,
        id="einsum-noncontig",
    ),
    Sample(
        "einsum",
        (T((2, 3), dtype="int64", low=-3, high=3), T((3,), dtype="int64", low=-3, high=3)),
        fn=_einsum("ij,j->i"),
        id="einsum-int",
    ),
    Sample(
        "einsum",
        (T((2, 3)), T((3, 4))),
        fn=lambda lib, a, b: lib.einsum("ij,jk", [a, b]),
        id="einsum-list",
    ),
    Sample(
        "einsum",
        (T((2, 3)), T((3,))),
        fn=lambda lib, a, b: lib.einsum(a, [0, 1], b, [1], [0]),
        id="einsum-sublist",
    ),
    Sample(
        "einsum",
        (T((2, 3, 4)),),
        fn=lambda lib, a: lib.einsum(a, [..., 1]),
        id="einsum-sublist-ellipsis",
    ),
    Sample(
        "einsum", (T((0, 3)), T((3, 2))), fn=_einsum("ij,jk"), gradcheck=False, id="einsum-empty"
    ),
]

# ------------------------------------------------------------------------------ vector products

SAMPLES += [
    Sample("dot", (T((4,)), T((4,)))),
    Sample("dot", (T((5,), dtype="int32", low=-3, high=3), T((5,), dtype="int32", low=-3, high=3))),
    Sample("dot", (T((0,)), T((0,))), gradcheck=False, id="dot-empty"),
    Sample("vdot", (T((4,)), T((4,)))),
    Sample("outer", (T((3,)), T((4,)))),
    Sample("outer", (T((3,), dtype="int64"), T((2,))), id="outer-promote"),
    Sample("ger", (T((2,)), T((3,))), ops=("outer",)),
    Sample("mv", (T((3, 4)), T((4,)))),
    Sample("mv", (T((4, 3), layout="transposed"), T((3,))), gradcheck=False),
]

# ------------------------------------------------------------------------------ beta*self + alpha*product

SAMPLES += [
    Sample("addmm", (T((2, 4)), T((2, 3)), T((3, 4)))),
    Sample(
        "addmm", (T((4,)), T((2, 3)), T((3, 4))), kwargs={"beta": 0.5, "alpha": 2}, id="addmm-bcast"
    ),
    Sample(
        "addmm",
        (T((2, 4), values=[[float("nan")] * 4] * 2, requires_grad=False), T((2, 3)), T((3, 4))),
        kwargs={"beta": 0},
        id="addmm-beta0-nan",
    ),
    Sample(
        "addmm",
        (T((2, 4), layout="transposed"), T((2, 3), layout="strided"), T((3, 4))),
        kwargs={"alpha": -1},
        gradcheck=False,
        id="addmm-noncontig",
    ),
    Sample(
        "addmm",
        tuple(T(s, dtype="int64", low=-3, high=3) for s in ((2, 2), (2, 3), (3, 2))),
        kwargs={"beta": 2, "alpha": 3},
        id="addmm-int",
    ),
    # integer operands: PyTorch truncates float scales to the integer type (1.5 -> 1, -0.5 -> 0)
    *(
        Sample(
            name,
            tuple(T(s, dtype="int64", low=-3, high=3) for s in shapes),
            kwargs={"beta": -0.5, "alpha": 1.5},
            id=f"{name}-int-float-scales",
        )
        for name, shapes in (
            ("addmm", ((2, 2), (2, 3), (3, 2))),
            ("addmv", ((2,), (2, 3), (3,))),
            ("baddbmm", ((2, 2, 2), (2, 2, 3), (2, 3, 2))),
            ("addbmm", ((2, 2), (2, 2, 3), (2, 3, 2))),
        )
    ),
    Sample("addmv", (T((3,)), T((3, 4)), T((4,)))),
    Sample("addmv", (T(()), T((3, 4)), T((4,))), kwargs={"beta": 2, "alpha": 0.5}, id="addmv-0dim"),
    Sample("baddbmm", (T((2, 3, 4)), T((2, 3, 5)), T((2, 5, 4)))),
    Sample(
        "baddbmm",
        (T((1, 4)), T((2, 3, 5)), T((2, 5, 4))),
        kwargs={"beta": -1, "alpha": 2},
        id="baddbmm-bcast",
    ),
    Sample("addbmm", (T((3, 4)), T((2, 3, 5)), T((2, 5, 4)))),
    Sample(
        "addbmm", (T((4,)), T((2, 3, 5)), T((2, 5, 4))), kwargs={"alpha": 0.5}, id="addbmm-bcast"
    ),
]

# ------------------------------------------------------------------------------ kron / tensordot / cross

SAMPLES += [
    Sample("kron", (T((2, 3)), T((2, 2)))),
    Sample("kron", (T((2, 3)), T((4,))), id="kron-ranks"),
    Sample("kron", (T((2,), dtype="int64", low=-3, high=3), T((3,))), id="kron-promote"),
    Sample("tensordot", (T((2, 3, 4)), T((3, 4, 5))), ops=("mm",)),
    Sample(
        "tensordot",
        (T((2, 3, 4)), T((4, 3, 5))),
        kwargs={"dims": ([1, 2], [1, 0])},
        ops=("mm",),
        id="tensordot-pairs",
    ),
    Sample(
        "tensordot", (T((2, 3)), T((4,))), kwargs={"dims": 0}, ops=("mm",), id="tensordot-outer"
    ),
    Sample(
        "tensordot",
        (T((3, 4)), T((4, 2))),
        kwargs={"dims": ([-1], [0])},
        ops=("mm",),
        id="tensordot-neg",
    ),
    Sample(
        "tensordot",
        (T((1, 2, 3)), T((2, 2, 2))),
        kwargs={"dims": ([0, 1], [2, 0])},
        ops=("mm",),
        id="tensordot-size-one-broadcasts",
    ),
    Sample("cross", (T((4, 3)), T((4, 3))), kwargs={"dim": 1}, ops=("cat",)),
    Sample("cross", (T((3, 2)), T((3, 1))), kwargs={"dim": 0}, ops=("cat",), id="cross-bcast"),
    Sample(
        "cross",
        (T((2, 3)), T((2, 3))),
        fn=lambda lib, a, b: a.cross(b, dim=-1),
        ops=("cat",),
        id="cross-method",
    ),
]

# ------------------------------------------------------------------------------ diagonals

SAMPLES += [
    Sample("diag", (T((3,)),)),
    Sample("diag", (T((3,)), 2), id="diag-vec-offset"),
    Sample("diag", (T((3,)), -1), id="diag-vec-neg"),
    Sample("diag", (T((3, 4)),)),
    Sample("diag", (T((3, 4)), -1), id="diag-mat-neg"),
    Sample("diag", (T((4, 3), layout="transposed"), 1), gradcheck=False, id="diag-mat-noncontig"),
    Sample("diag_embed", (T((2, 3)),)),
    Sample("diag_embed", (T((2, 3)), 1, 0, 2), id="diag_embed-dims"),
    Sample("diag_embed", (T((3,)), -2, -1, 0), id="diag_embed-neg"),
    Sample("trace", (T((3, 3)),)),
    Sample("trace", (T((2, 4)),), id="trace-rect"),
    Sample("trace", (T((3, 3), dtype="int32", low=-5, high=5),), id="trace-int"),
]
