"""A hypothesis strategy for random fuzz programs over kiln's op set.

``programs(config)`` draws a ``Program`` one line at a time. It keeps each value's metadata
(shape, dtype, whether its value is exact, whether it requires grad, which values alias it) so
every program it makes is valid PyTorch: broadcasting shapes, dtypes an op accepts, in-place ops
only where PyTorch allows them (no leaf that requires grad, no overlapping memory, nothing saved
for backward). Discontinuous ops (comparisons, rounding, integer casts, argmax, ``//``) only read
*exact* values (inputs, and results of exact ops): two correct implementations may round an
``exp`` differently, and a comparison of it would then legitimately differ.

Hypothesis shrinks the draws: fewer lines, earlier ops in each table, smaller shapes.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .builder import KNOWN_ISSUES, Builder, FuzzConfig, known_issues_for
from .dtype_rules import DTYPE_NEEDS, DTYPE_OPS
from .nn_rules import NN_NEEDS, NN_OPS
from .op_rules import NEEDS, OPS
from .placement_rules import PLACEMENT_NEEDS, PLACEMENT_OPS
from .programs import Program
from .reduction_rules import REDUCTION_NEEDS, REDUCTION_OPS

__all__ = [
    "COUNTS",
    "FAMILIES",
    "config_for",
    "FuzzConfig",
    "programs",
    "KNOWN_ISSUES",
    "known_issues_for",
]

# tensor ops first (hypothesis shrinks towards them), then the ops of model code
_OPS = OPS + NN_OPS + PLACEMENT_OPS + DTYPE_OPS + REDUCTION_OPS
_EMITTERS = dict(_OPS)
_NEEDS = {**NEEDS, **NN_NEEDS, **PLACEMENT_NEEDS, **DTYPE_NEEDS, **REDUCTION_NEEDS}
# rule families a campaign can focus on (--focus): most lines then come from the family's ops
FAMILIES = {
    "op": dict(OPS), "nn": dict(NN_OPS), "placement": dict(PLACEMENT_OPS),
    "dtype": dict(DTYPE_OPS), "reduction": dict(REDUCTION_OPS),
}  # fmt: skip

# programs per check and profile (KILN_FUZZ); compiling is the cost (~50-300 ms a graph with
# LLVM, more with Triton's interpreter), so the fast profile spreads its programs over the
# backends; the long one runs over 10,000
COUNTS = {
    "fast": {
        "pytorch": 150, "eager": 40, "aot_eager": 50, "inductor": 60, "inductor-numpy": 40,
        "inductor-triton": 12, "inductor-verify": 25, "inductor-dynamic": 25,
    },
    "long": {
        "pytorch": 4000, "eager": 800, "aot_eager": 1200, "inductor": 2000,
        "inductor-numpy": 1200, "inductor-triton": 300, "inductor-verify": 600,
        "inductor-dynamic": 1200,
    },
}  # fmt: skip


def config_for(check: str, profile: str = "fast") -> FuzzConfig:
    """Programs for ``check``: Triton's interpreter runs each program instance as numpy code, so
    its tensors are smaller; known bugs another change is fixing are left out (KNOWN_ISSUES)."""
    if check == "inductor-triton":
        return FuzzConfig(max_lines=5, max_numel=24, known_issues=known_issues_for(check))
    lines = 6 if profile == "fast" else 8
    return FuzzConfig(max_lines=lines, known_issues=known_issues_for(check))


@st.composite
def programs(draw, config: FuzzConfig = FuzzConfig()) -> Program:
    """A random valid program (see the module docstring)."""
    b = Builder(draw, config)
    b.new_input(b.shape())
    if b.coin(0.3):
        b.new_input(b.shape())
    # uniform (integers() favours its bounds), shrinking towards fewer lines
    wanted = draw(st.sampled_from(range(1, config.max_lines + 1)))
    made = attempts = 0
    while made < wanted and attempts < 4 * wanted:
        attempts += 1
        x = b.operand()
        names = [name for name, _ in _OPS if _NEEDS.get(name, lambda v: True)(x)]
        focused = [name for name in names if name in config.focus]
        if focused and b.coin(0.7):
            names = focused
        name = b.pick(names)
        emitter = _EMITTERS[name]
        if emitter(b, x) is not None:
            made += 1
    return b.finish()
