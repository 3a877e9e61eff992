"""Minimized fuzz programs that once failed: each always runs (tests/fuzz/test_regressions.py).

Add a failing program the fuzzer reports by pasting the ``Case`` its report prints, with a title
that says what went wrong. A case that fails today because of a bug being fixed elsewhere names
that bug's key in ``generator.KNOWN_ISSUES`` in ``xfail`` (per check: ``"pytorch"`` is eager kiln
against PyTorch, other keys are ``differential.BACKENDS``); the xfail is strict, so the test fails
loudly once the fix lands — then delete the ``xfail`` and the ``KNOWN_ISSUES`` entry (which also
lets the fuzzer generate the construct again).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .programs import Input, Program

__all__ = ["Case", "REGRESSIONS"]

COMPILED = ("eager", "aot_eager", "inductor", "inductor-numpy")


@dataclass(frozen=True)
class Case:
    """A program and the checks it must pass (``backends``; empty: eager against PyTorch), with
    the known bug (a ``KNOWN_ISSUES`` key) that makes a check fail today."""

    title: str
    program: Program
    backends: tuple[str, ...] = ()
    xfail: dict[str, str] = field(default_factory=dict)


def _one(inputs, lines, outputs=None) -> Program:
    lines = tuple(lines)
    return Program(tuple(inputs), lines, tuple(outputs or (lines[-1].split(" = ")[0],)))


_SPECIAL = Input("x0", (8,), fill="special", seed=2)
_SPECIAL_GRAD = Input("x0", (8,), fill="special", requires_grad=True, seed=2)

REGRESSIONS: list[Case] = [
    # ---------------------------------------------------------------- compiled against eager
    Case(
        "a returned expand() of an intermediate gets the gradient of one copy",
        _one([Input("x0", (1, 3), requires_grad=True)], ["v0 = x0 * x0", "v1 = v0.expand(2, 3)"]),
        COMPILED,
    ),
    Case(
        "a returned expand() of a vector-matrix product (not requiring grad itself)",
        _one(
            [Input("x1", (4,), fill="integral"), Input("x2", (4, 2), requires_grad=True)],
            ["v0 = torch.matmul(x1, x2)", "v1 = v0.expand(2, -1)"],
        ),
        COMPILED,
    ),
    Case(
        "a returned stride-0 as_strided view of an intermediate",
        _one(
            [Input("x0", (2, 1), dtype="float16", fill="integral", requires_grad=True)],
            ["v0 = x0.expand(2, 2)", "v1 = v0.contiguous().as_strided((2, 2), (1, 0))"],
        ),
        COMPILED,
    ),
    Case(
        "vector @ matrix returned with a view of it: both lose requires_grad",
        _one(
            [Input("x0", (5,), requires_grad=True), Input("x1", (5, 2), requires_grad=True)],
            ["v0 = x0 @ x1", "v1 = v0.view(2)"],
            ("v1", "v0"),
        ),
        COMPILED,
    ),
    Case(
        "vector @ matrix returned with a squeeze of it",
        _one(
            [Input("x0", (5,), requires_grad=True), Input("x1", (5, 1), requires_grad=True)],
            ["v0 = x0 @ x1", "v1 = v0.squeeze(-1)"],
            ("v1", "v0"),
        ),
        COMPILED,
    ),
    Case(
        "a returned detach() of a strided input that requires grad",
        _one(
            [Input("x0", (2, 2, 2), layout="strided", requires_grad=True)],
            ["v0 = torch.exp(x0)", "v1 = v0.sum()", "v2 = x0.detach()"],
            ("v2", "v1"),
        ),
        COMPILED,
    ),
    Case(
        "index_select backward of an empty tensor (index_add's decomposition reshaped with -1; "
        "found by the long profile)",
        _one(
            [Input("x0", (3, 0), fill="integral", requires_grad=True)],
            ["v1 = x0.index_select(0, torch.tensor([0, 1, 1]))"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "bfloat16 clamp of an expand keeps eager's row-major strides (the float32 upcast's meta "
        "sorted the stride-0 dims column-major; found by the stride comparison)",
        _one(
            [Input("x0", (1, 1, 1), dtype="bfloat16", layout="transposed", fill="special")],
            ["v0 = x0.expand(3, 3, 2)", "v1 = v0.unsqueeze(-1)", "v2 = v1.clamp(max=0.5)"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "sum over an empty dim in an LLVM reduction kernel (mapping the merged loop index back "
        "divided by the empty dim's stride, 0; found by the long profile)",
        _one(
            [Input("x0", (1, 0, 0), dtype="float16"), Input("x1", (4, 0), dtype="int32")],
            ["v0 = torch.stack([x0, x0], 1)", "v1 = v0.sum()", "v2 = x1.sum()"],
            ("v1", "v2"),
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "a returned view of a detach() of a strided input that requires grad",
        _one(
            [Input("x0", (2, 2, 2), layout="strided", requires_grad=True)],
            ["v0 = x0 * 2", "v1 = v0.sum()", "v2 = x0.detach()", "v3 = v2.transpose(0, 2)[1]"],
            ("v3", "v1"),
        ),
        COMPILED,
    ),
    Case(
        "clamp(min=0.0) of -0.0 is -0.0 (eager took numpy's maximum, +0.0; found by the long "
        "profile through atan2's sign of zero)",
        _one(
            [Input("x0", (4, 4), fill="special", seed=7)],
            [
                "v0 = x0.clamp(min=0.0)",
                "v1 = v0.clamp(min=-0.5, max=1.0)",
                "v2 = v1.to(torch.float16)",
                "v3 = torch.atan2(v2, x0)",
            ],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "bool + bool is logical or",
        _one([Input("x0", (4,), dtype="bool", seed=1)], ["v0 = x0 + x0"]),
        COMPILED,
    ),
    Case(
        "in-place bool add on an input",
        Program((Input("x0", (4,), dtype="bool", seed=1),), ("x0.add_(x0)",), ("x0",)),
        COMPILED,
    ),
    *(
        Case(
            f"relu keeps NaN ({dtype})",
            _one([Input("x0", (8,), dtype=dtype, fill="special", seed=2)], ["v0 = torch.relu(x0)"]),
            COMPILED,
        )
        for dtype in ("float32", "float16", "bfloat16")
    ),
    Case(
        "float floor division of +-inf is NaN",
        _one([_SPECIAL], ["v0 = x0 // 2"]),
        COMPILED,
    ),
    *(
        Case(
            f"a float->{dtype} cast of NaN/inf equals eager's (INT_MIN)",
            _one([_SPECIAL], [f"v0 = x0.to(torch.{dtype})"]),
            COMPILED,
        )
        for dtype in ("int32", "int64")
    ),
    Case(
        "2 ** int tensor with negative exponents",
        _one([Input("x0", (8,), dtype="int64", seed=2)], ["v0 = 2 ** x0"]),
        ("pytorch", *COMPILED),
    ),
    Case(
        "sign of a bool tensor (isnan of bfloat16)",
        _one(
            [Input("x0", (8,), dtype="bfloat16", fill="special", seed=2)],
            ["v0 = torch.isnan(x0)", "v1 = torch.sign(v0)"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "masked_fill with a bool mask made in the graph",
        _one(
            [Input("x0", (3, 3), seed=2)],
            [
                "v0 = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)",
                "v1 = x0.masked_fill(v0, float('-inf'))",
            ],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "softmax and log_softmax over an empty dim (the decomposition took an amax of nothing)",
        _one(
            [Input("x0", (0, 1), layout="transposed", requires_grad=True, seed=6)],
            [
                "v0 = x0.mT",
                "v1 = torch.nn.functional.softmax(v0, dim=-1)",
                "v2 = torch.log_softmax(v0, 1)",
            ],
            ("v1", "v2", "v0"),
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "batched matmul over an empty contracted dim (the decomposition reshaped with -1)",
        _one(
            [Input("x0", (2, 2, 0), dtype="int32"), Input("x1", (0,), dtype="int32")],
            ["v0 = x0 @ x1"],
        ),
        COMPILED,
    ),
    Case(
        "int32 vector @ vector stays int32 (matmul's decomposition summed into int64)",
        _one(
            [Input("x0", (4,), dtype="int32"), Input("x1", (4,), dtype="int32", layout="expanded")],
            ["v0 = x0 @ x1"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "reshape of exp of an expanded float16 tensor (eager returns column-major strides)",
        _one(
            [Input("x0", (1, 3), dtype="float16", fill="integral")],
            ["v0 = x0.expand(2, 3)", "v1 = v0.exp()", "v2 = v1.reshape(-1)"],
        ),
        ("pytorch", *COMPILED),
    ),
    *(
        Case(
            f"{dtype} -> bfloat16 cast in a Triton kernel",
            _one([Input("x0", (2, 3), dtype=dtype)], ["v0 = x0.to(torch.bfloat16)"]),
            ("inductor", "inductor-triton"),
        )
        for dtype in ("bool", "int32", "int64")
    ),
    Case(
        "a bfloat16 scatter-add with duplicate indices (Triton: one program, adds in float32)",
        _one(
            [Input("x0", (4, 2, 1), dtype="bfloat16", fill="integral", requires_grad=True)],
            ["v0 = x0.expand(4, 2, 3)", "v2 = v0[:, torch.tensor([0, 0])]"],
        ),
        ("inductor-triton",),
    ),
    Case(
        "topk among ties: compiled picks the element eager (and PyTorch) picks",
        _one(
            [Input("x1", (4,), fill="integral", requires_grad=True, seed=5)],
            ["v2 = x1.clamp(max=2.0)", "v6 = v2.topk(1, -1).values"],
        ),
        COMPILED,
    ),
    Case(
        "topk of a stride-0 view with ties: the gradient goes where eager's goes",
        _one(
            [Input("x0", (3, 3), layout="expanded", fill="integral", requires_grad=True)],
            [
                "v1 = x0.mT",
                "v2 = v1.contiguous().as_strided((1, 5), (0, 2))",
                "v3 = v2.topk(2, 1).values",
            ],
        ),
        COMPILED,
    ),
    # ---------------------------------------------------------------- eager against PyTorch
    Case("sign(NaN) is 0", _one([_SPECIAL], ["v0 = torch.sign(x0)"])),
    *(
        Case(
            f"bfloat16 -> {dtype} cast of NaN/+-inf is INT_MIN",
            _one(
                [Input("x0", (8,), dtype="bfloat16", fill="special", seed=2)],
                [f"v0 = x0.to(torch.{dtype})"],
            ),  # fmt: skip
            (),
        )
        for dtype in ("int32", "int64")
    ),
    Case(
        "prod backward where the input holds a zero: exclusive products, so a NaN factor's own "
        "gradient is the product of the others (found by the long profile)",
        _one(
            [Input("x1", (2, 2, 2), fill="special", requires_grad=True)],
            ["v0 = x1.prod(0, keepdim=True)"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "prod backward with NaN/inf/zeros in a full product",
        _one([_SPECIAL_GRAD], ["v0 = x0.prod()"]),
        ("pytorch", *COMPILED),
    ),
    Case(
        "compiled cumsum of a bool tensor over a leading dim is contiguous (the decomposition "
        "returned a permuted view: strides (9, 1, 3))",
        _one([Input("x0", (3, 3, 3), dtype="bool")], ["v0 = x0.cumsum(1)"]),
        ("pytorch", *COMPILED),
    ),
    Case(
        "prod of an expanded input that requires grad: AOT traced it through a dense clone, so "
        "the backward's flattening became a view, invalid on the real input (found by the long "
        "profile)",
        _one(
            [Input("x1", (2, 4, 3), "bfloat16", layout="expanded", requires_grad=True)],
            ["v0 = x1.prod()"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "a 0-d float -> int cast is writable (the kernel returned a read-only numpy scalar; found "
        "by the long profile)",
        Program((Input("x0", ()),), ("v1 = x0.to(torch.int32)", "v1.fill_(3)"), ("v1",)),
        ("pytorch", *COMPILED),
    ),
    Case(
        "roll of a cumsum: the scheduler fused a read of a neighbour's element of a buffer "
        "computed in the same kernel (found by the long profile)",
        _one(
            [Input("x0", (2,), dtype="float16", fill="special", seed=7)],
            ["v1 = x0.cumsum(0)", "v3 = torch.roll(v1, 3, 0)"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "cumsum of a prefix of -0.0 is +0.0, as PyTorch's sums start from +0.0 (found by the "
        "long profile through atan2's sign of zero)",
        _one(
            [Input("x0", (2, 2), dtype="float16", fill="special", seed=9)],
            ["v0 = x0[:, 1:3:2]", "v3 = v0.cumsum(-2)", "v4 = torch.atan2(x0, v3)"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "exp of exp: one rounding of the inner exp moves the outer one by |x| ulps (tolerance)",
        _one(
            [Input("x0", (), requires_grad=True, seed=4)],
            ["v0 = torch.tanh(x0)", "v1 = v0 + 5", "v2 = torch.exp(v1)", "v3 = torch.exp(v2)"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "relu backward of an inf upstream gradient is 0 where relu is inactive",
        _one([_SPECIAL_GRAD], ["v0 = torch.relu(x0)", "v1 = v0 * float('inf')"]),
        (),
    ),
    Case(
        "floor backward is zero even for an inf upstream gradient",
        _one(
            [Input("x0", (4, 3), layout="offset", fill="special", requires_grad=True, seed=7)],
            ["v0 = torch.floor(x0)", "v1 = torch.exp(v0)"],
        ),
        (),
    ),
    Case(
        "abs backward at NaN is 0 (sign(NaN) is 0)",
        _one(
            [
                Input(
                    "x0",
                    (4, 4, 1),
                    dtype="bfloat16",
                    layout="strided",
                    fill="special",
                    requires_grad=True,
                    seed=7,
                )
            ],
            ["v0 = torch.abs(x0)"],
        ),
        (),
    ),
    Case(
        "maximum/minimum backward: a NaN operand gets the whole gradient",
        _one(
            [
                Input("x0", (), dtype="bfloat16", fill="special", requires_grad=True),
                Input("x1", (), dtype="int64"),
            ],
            ["v0 = torch.minimum(x0, x1)"],
        ),
        (),
    ),
    Case(
        "maximum backward splits the gradient at +-inf ties",
        _one(
            [Input("x0", (1, 1, 2), dtype="float16", fill="special", requires_grad=True)],
            ["v0 = torch.ceil(x0)", "v1 = x0.expand(1, 2, 1, 2)", "v2 = torch.maximum(v0, v1)"],
        ),
        (),
    ),
    Case(
        "changing neg's input in place after the neg is no error (neg saves nothing)",
        _one(
            [Input("x0", (2,), requires_grad=True)],
            [
                "v0 = x0 + 2",
                "v1 = v0 + 2",
                "v2 = v1.sum()",
                "v3 = -v2",
                "v4 = v2.add_(v3)",
                "v5 = v1.frac()",
                "v6 = v1.add_(1)",
            ],
            ("v3", "v5"),
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "masked_fill and where backward: 0 where masked, even for an inf upstream gradient",
        _one(
            [Input("x0", (2,), requires_grad=True), Input("x1", (2,), dtype="bool", seed=3)],
            [
                "v0 = x0 + 2",
                "v1 = v0.masked_fill(x1, 0.0)",
                "v2 = torch.log(v1)",
                "v3 = torch.where(x1, 0.0, v0)",
                "v4 = torch.log(v3)",
            ],
            ("v2", "v4"),
        ),
        (),
    ),
    Case(
        "matmul over an empty contracted dim gives zeros",
        _one(
            [Input("x0", (3, 1, 0), dtype="int64", seed=2), Input("x1", (0, 3), dtype="int64")],
            ["v0 = torch.matmul(x0, x1)"],
        ),
        (),
    ),
    Case(
        "atan2 backward at (0, 0) is 0",
        _one(
            [
                Input(
                    "x0",
                    (2, 2),
                    dtype="bfloat16",
                    layout="strided",
                    fill="special",
                    requires_grad=True,
                    seed=2,
                )
            ],
            ["v0 = torch.atan2(x0, x0)"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "masked_fill_ whose mask is the written memory seen with other strides: PyTorch raises",
        _one(
            [Input("x0", (), dtype="bool", fill="integral")],
            ["v0 = torch.sign(x0)", "v1 = v0.unsqueeze(0)", "v1.masked_fill_(v0, False)"],
            ["v0"],
        ),
        ("pytorch",),
    ),
    Case(
        "remainder's gradient by an infinite divisor: floored division (3 // -inf is -1)",
        _one(
            [
                Input("x0", (4, 4), dtype="float16", fill="integral"),
                Input("x1", (1, 4), layout="offset", fill="special", requires_grad=True, seed=1),
            ],
            ["v0 = x0 % x1"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "a 0-dim bfloat16 input cast to bool in a Triton kernel (interpreter: its buffer)",
        _one(
            [Input("x1", (), dtype="bfloat16", fill="integral")],
            ["v0 = x1.bool()", "v1 = torch.isnan(v0)", "v2 = v1 / v1"],
        ),
        ("inductor-triton",),
    ),
    Case(
        "float32 -> bfloat16 in a Triton kernel rounds to nearest even (the interpreter "
        "truncated: exp(3) became 20.0, not 20.125; seed 9595)",
        _one(
            [Input("x0", (), dtype="bfloat16", fill="integral")],
            ["v0 = x0.expand(2)", "v1 = torch.exp(v0)", "v2 = torch.exp(v1)"],
        ),
        ("inductor-triton",),
    ),
    Case(
        "a flip of an empty tensor in a Triton reduction: its constant index -1 is checked for "
        "no element (it raised an index error; seed 9898)",
        _one(
            [
                Input("x0", (0,), dtype="int64", fill="integral"),
                Input("x1", (0,), dtype="int64", layout="transposed", seed=8),
            ],
            ["v1 = x0 % -3", "v3 = v1.flip(-1)", "v4 = torch.matmul(v3, x1)"],
            ["v4"],
        ),
        ("pytorch", *COMPILED, "inductor-triton"),
    ),
    Case(
        "sort along a non-last dim with ties: a contiguous result (aot_eager replays flatten "
        "as a view; seed 90004)",
        _one(
            [Input("x1", (4, 3, 4), fill="integral")],
            ["v1 = torch.sort(x1, 0).values", "v2 = v1.flatten()"],
            ["v2"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "lerp towards a finite end from an infinite start with a weight of 0.5 or more: the "
        "compiled decomposition x + w * (e - x) gave NaN (-inf + inf) where eager's two-sided "
        "formula, PyTorch's, gives the infinity (inductor-dynamic campaign, seed 22)",
        _one(
            [Input("x0", (2, 2), fill="special"), Input("x1", (2, 2))],
            ["v0 = torch.maximum(x0, x0)", "v1 = torch.lerp(v0, x1, x1.sigmoid())"],
        ),
        ("pytorch", *COMPILED, "inductor-dynamic"),
    ),
    Case(
        "the backward of a bfloat16 sort (a scatter-add of the gradient): its LLVM kernel added "
        "the stored bits with fadd on i16 and failed to parse, raising instead of running "
        "(inductor-dynamic campaign, seed 22; numpy takes it now)",
        _one(
            [Input("x1", (2, 3, 4), dtype="bfloat16", requires_grad=True)],
            ["v1 = torch.sort(x1, 2, descending=False).values"],
        ),
        ("pytorch", *COMPILED, "inductor-dynamic"),
    ),
    Case(
        "a number's power of a 0-d tensor: the row-major copy of the result made it 1-d "
        "(np.ascontiguousarray; inductor-dynamic campaign, seed 41)",
        _one(
            [Input("x0", (), dtype="int32", fill="integral")],
            ["v0 = torch.neg(x0)", "v5 = 2 ** v0"],
        ),
        ("pytorch", *COMPILED, "inductor-dynamic"),
    ),
    Case(
        "embedding with a padding_idx over infinite weights: the decomposition's gradient "
        "trick frozen + (rows - frozen) * scale gave NaN (inf - inf) in compiled code "
        "(inductor-dynamic campaign, seed 41)",
        _one(
            [Input("x0", (2, 4), fill="special", requires_grad=True)],
            ["v1 = torch.nn.functional.embedding(torch.tensor([1, 0, 0]), x0, padding_idx=1)"],
        ),
        ("pytorch", *COMPILED, "inductor-dynamic"),
    ),
    Case(
        "copy_ into an empty expanded view raised the internal-overlap error: a stride-0 dim "
        "of size 2 in a tensor of no elements writes nothing (pytorch campaign, seed 106)",
        Program(
            (Input("x0", (0, 3), dtype="bool"),),
            (
                "v0 = x0.flatten()",
                "v1 = v0.expand(2, 0)",
                "v2 = v1.flip(1)",
                "v3 = v2.detach()",
                "v4 = v0.squeeze(-1)",
                "v3.copy_(v0)",
            ),
            ("v4",),
        ),
    ),
    Case(
        "out-of-place index_put laid its result out row-major where PyTorch clones its input "
        "in the input's layout (KILN_FUZZ_STRIDES pytorch campaign, seed 106)",
        _one(
            [
                Input("x0", (1, 2, 2), layout="expanded", fill="integral"),
                Input("x1", (1, 2, 2), layout="transposed", fill="integral", seed=9),
                Input("x2", (2, 2, 2), fill="special", seed=1),
            ],
            [
                "v3 = torch.mul(x0, x1)",
                "v5 = v3.index_put((torch.tensor([0, 0]),), x2, accumulate=True)",
            ],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "a view scatter of a sliced input was dense where PyTorch's copy keeps the slice's "
        "strides (clone_preserve_strides), eager and compiled (placement rules, focused "
        "pytorch campaign, seed 147; inductor-dynamic, seed 153)",
        _one(
            [Input("x0", (3, 2), layout="strided"), Input("x1", (3,), seed=1)],
            ["v0 = torch.select_scatter(x0, x1, 1, 0)"],
        ),
        ("pytorch", *COMPILED, "inductor-dynamic"),
    ),
    Case(
        "a compiled unfold's gathered windows were row-major, so a view scatter of a "
        "transposed input's windows had other strides than eager's view (inductor, seed 150)",
        _one(
            [
                Input("x0", (3, 3), dtype="bool", layout="transposed"),
                Input("x1", (2, 3, 1), dtype="bool", layout="transposed", seed=1),
            ],
            ["v1 = x0.unfold(0, 1, 1)", "v2 = torch.slice_scatter(v1, x1, 0, None, None, 2)"],
        ),
        ("pytorch", *COMPILED),
    ),
    Case(
        "masked_scatter's source gradient took masked_select's data-dependent count, which a "
        "float16 capture refused: aot_eager and inductor fell back to eager (inductor, seed 152)",
        _one(
            [Input("x0", (1, 2), dtype="float16", fill="integral", requires_grad=True)],
            ["v0 = x0 == -1.5", "v2 = x0.masked_scatter(v0, x0)"],
        ),
        ("pytorch", *COMPILED, "inductor-dynamic"),
    ),
]
