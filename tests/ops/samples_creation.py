"""Samples for creation, copy and random ops (random ones are not compared with PyTorch's RNG)."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = [
    Sample("tril", (T((4, 5)),)),
    Sample("tril", (T((3, 4)),), kwargs={"diagonal": -1}, id="tril-diag-1"),
    Sample("triu", (T((4, 5)),)),
    Sample(
        "triu", (T((2, 3, 4), layout="transposed"),), kwargs={"diagonal": 1}, id="triu-batched-t"
    ),
    # a bool mask (attention's causal mask) stays bool; so do integer inputs
    Sample("tril", (T((4, 4), dtype="bool", requires_grad=False),), id="tril-bool"),
    Sample(
        "triu",
        (T((4, 5), dtype="bool", requires_grad=False),),
        kwargs={"diagonal": 1},
        id="triu-bool",
    ),
    Sample("triu", (T((3, 4), dtype="int32", requires_grad=False),), id="triu-int32"),
    Sample("linspace", (), fn=lambda lib: lib.linspace(-1.0, 3.0, 9), grad=False, id="linspace"),
    Sample(
        "linspace",
        (),
        fn=lambda lib: lib.linspace(0, 10, 5, dtype=lib.float64),
        grad=False,
        id="linspace-f64",
    ),
    Sample(
        "fill",
        (T((3, 4)), 2.5),
        fn=lambda lib, x, v: x.clone().fill_(v),
        ops=("fill", "fill_"),
        id="fill_",
    ),
    Sample(
        "_copy_from",
        (T((3, 4), requires_grad=False), T((4,))),
        fn=lambda lib, x, src: x.clone().copy_(src),
        ops=("copy_", "_copy_from"),
        gradcheck=False,
        id="copy_-broadcast",
    ),
    Sample(
        "_copy_from",
        (T((3, 4), dtype="int64", low=-3, high=3, requires_grad=False), T((3, 4))),
        fn=lambda lib, x, src: x.clone().copy_(src),
        ops=("copy_", "_copy_from"),
        grad=False,
        id="copy_-float-to-int",
    ),
    Sample("clone", (T((3, 4), layout="transposed"),)),
    Sample(
        "convert_element_type", (T((3, 4)),), fn=lambda lib, x: x.to(lib.float64), id="to-float64"
    ),
    Sample(
        "convert_element_type",
        (T((3, 4), low=-5, high=5),),
        fn=lambda lib, x: x.to(lib.int32),
        grad=False,
        id="to-int32",
    ),
    Sample("rand", (), fn=lambda lib: lib.rand(3, 4), oracle=False, grad=False, id="rand"),
    Sample(
        "randn",
        (),
        fn=lambda lib: lib.randn(2, 5, dtype=lib.float64),
        oracle=False,
        grad=False,
        id="randn",
    ),
    Sample(
        "randint",
        (),
        fn=lambda lib: lib.randint(0, 7, (3, 3)),
        oracle=False,
        grad=False,
        id="randint",
    ),
]
