"""Random Python programs for the capture frontend's fuzzer: control flow, containers, closures,
globals, graph breaks, in-place ops and modules around small tensor ops.

A program is a function ``f(x, y, z, *rest, scale=..., flag=...)`` written against a module
named ``torch``, rendered with a preamble of globals, helpers and one ``nn.Module``, so the same
source runs under kiln and under PyTorch. Its body is a tuple of statements (each a tuple of
lines), drawn so that every statement is valid for any input size, float dtype and
``requires_grad`` the call schedule uses; the shrinker drops statements and calls. ``z`` never
requires grad (it is the input that statements mutate in place); ``x`` and ``y`` may.
Everything is drawn from ``random.Random(seed)``: one seed, one program. The statements' drawers
are in frontend_statements.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from .frontend_statements import Drawer

__all__ = ["Call", "FrontendProgram", "draw_program"]

PREAMBLE = """\
import io

COUNTER = 0
GSCALE = 1.5
GT = None
STATE = []
TABLE = {}
SINK = io.StringIO()


@torch.no_grad()
def no_grad_helper(t):
    return t * 2


def raising_helper(t, limit):
    if t.shape[0] > limit:
        raise ValueError("too many rows")
    return t + 1


@torch.compiler.disable
def disabled_helper(t, k):
    STATE.append(k)
    return t * k + 1


def helper(t, k=2.0, *more, bias=0.0):
    out = t * k + bias
    for extra in more:
        out = out + extra
    return out


class Mod(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(0.5))
        self.alpha = 2.0
        self.use_relu = True
        self.calls = 0

    def forward(self, t):
        out = t * self.w + self.alpha
        if self.use_relu:
            out = out.relu()
        if not self.training:
            out = out * 0.5
        return out

    def extra(self, t, k=2):
        self.calls += 1
        return t * k - self.w * self.alpha


MOD = Mod()
"""


@dataclass(frozen=True)
class Call:
    """One call of the program: input metadata, argument values and the globals set before it."""

    rows: int = 3
    cols: int = 4
    dtypes: tuple[str, str, str] = ("float32", "float32", "float32")  # x, y, z
    grads: tuple[bool, bool] = (True, False)  # x, y requires_grad
    rest: int = 0  # extra positional tensors (dtype of x)
    rest_grad: bool = False
    scale: float | int | None = None  # None: the default
    flag: bool | None = None
    gscale: float = 1.5
    alpha: float = 2.0
    use_relu: bool = True
    training: bool = True
    seed: int = 0


@dataclass(frozen=True)
class FrontendProgram:
    """A drawn program: its body statements, the returned expressions and the call schedule."""

    seed: int
    body: tuple[tuple[str, ...], ...]
    returns: tuple[str, ...]
    calls: tuple[Call, ...]
    returns_kind: str = "tuple"  # tuple, list or dict
    globals_written: tuple[str, ...] = field(default=())

    def source(self) -> str:
        """The module text: preamble, then ``f``."""
        lines = ["def f(x, y, z, *rest, scale=0.5, flag=False):"]
        written = [g for g in self.globals_written if any(g in "".join(s) for s in self.body)]
        if written:
            lines.append(f"    global {', '.join(written)}")
        for statement in self.body:
            lines += ["    " + line for line in statement]
        lines.append("    return " + self.return_expression())
        return PREAMBLE + "\n\n" + "\n".join(lines) + "\n"

    def return_expression(self) -> str:
        if self.returns_kind == "list":
            return "[" + ", ".join(self.returns) + "]"
        if self.returns_kind == "dict":
            return "{" + ", ".join(f"'r{i}': {r}" for i, r in enumerate(self.returns)) + "}"
        return "(" + "".join(f"{r}, " for r in self.returns) + ")"


def _draw_call(rng: random.Random, seed: int) -> Call:
    dtype = rng.choice(["float32", "float32", "float64"])
    dtypes = (dtype, dtype, dtype)
    if rng.random() < 0.15:
        dtypes = tuple(rng.choice(["float32", "float64"]) for _ in range(3))
    return Call(
        rows=rng.randint(2, 5),
        cols=rng.randint(3, 6),
        dtypes=dtypes,  # type: ignore[arg-type]
        grads=(rng.random() < 0.6, rng.random() < 0.4),
        rest=rng.randint(0, 2),
        rest_grad=rng.random() < 0.3,
        scale=rng.choice([None, 0.5, 1.0, 2, 0.75]),
        flag=rng.choice([None, True, False]),
        gscale=rng.choice([1.5, 1.5, 0.5]),
        alpha=rng.choice([2.0, 2.0, -1.0]),
        use_relu=rng.random() < 0.7,
        training=rng.random() < 0.7,
        seed=seed,
    )


def _vary(rng: random.Random, call: Call, seed: int) -> Call:
    """The next call: the same as ``call`` with new values and one or two other fields changed."""
    other = _draw_call(rng, seed)
    fields = rng.sample(
        ["rows", "cols", "dtypes", "grads", "rest", "rest_grad", "scale", "flag", "gscale",
         "alpha", "use_relu", "training"],
        rng.choice([0, 1, 1, 2]),
    )  # fmt: skip
    changes = {name: getattr(other, name) for name in fields}
    if "rows" in changes and rng.random() < 0.5:
        changes["cols"] = other.cols
    return replace(call, seed=seed, **changes)


def draw_program(seed: int, statements: int | None = None) -> FrontendProgram:
    """The program for ``seed``: 2-8 statements, 2-4 returned values, 4-5 calls."""
    rng = random.Random(seed)
    d = Drawer(rng)
    body = []
    for _ in range(statements if statements is not None else rng.randint(2, 10)):
        body.append(tuple(d.statement()))
    names = [t for t in d.tensors if t not in ("x", "y", "z")] or ["x * 2"]
    returns = rng.sample(names, min(len(names), rng.randint(1, 3)))
    if rng.random() < 0.35:
        returns.append(rng.choice(["x", "z", "y[0]", "z.t()", "x.view(-1)", "z[:, 1:]"]))
    if rng.random() < 0.2:
        returns.append(rng.choice(["COUNTER", "len(STATE)", "scale", "x.shape[0]"]))
    calls = [_draw_call(rng, rng.randrange(1 << 16))]
    for _ in range(rng.randint(2, 3)):
        calls.append(_vary(rng, calls[-1], rng.randrange(1 << 16)))
    calls.append(calls[0])  # the first call again: a cache hit
    return FrontendProgram(
        seed=seed,
        body=tuple(body),
        returns=tuple(returns),
        calls=tuple(calls),
        returns_kind=rng.choice(["tuple", "tuple", "list", "dict"]),
        globals_written=("COUNTER", "GT"),
    )
