"""A long fuzzing campaign that keeps going past failures: for triage, not for the suite.

    python -m tests.fuzz.campaign --check inductor --programs 500 --seed 3

draws random programs, checks each (``pytorch``: eager kiln against PyTorch; a backend name of
``differential.BACKENDS``: compiled against eager kiln), shrinks every failure greedily (drop
outputs, lines, inputs; plainer layouts and values) while it fails the same way, and prints each
distinct minimized failure once, with the count of programs run. (``KILN_FUZZ=long pytest``
runs the same checks under hypothesis, which stops a test at its first failure.)
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
import warnings

from hypothesis import HealthCheck, Phase, given, seed, settings

from .differential import BACKENDS, ProgramMismatch, check_backend, check_eager
from .generator import FuzzConfig, known_issues_for, programs
from .programs import Program, names_in


def _check(program: Program, check: str) -> str | None:
    """The first problem line of the mismatch report, or None when the runs agree."""
    try:
        if check == "pytorch":
            check_eager(program)
        else:
            check_backend(program, check)
    except ProgramMismatch as e:
        return str(e).split("\n")[1].strip()
    except Exception as e:  # noqa: BLE001 - a harness error is a finding too
        return f"harness error {type(e).__name__}: {e}"
    return None


def signature(problem: str) -> str:
    """What kind of mismatch a problem line reports (the same bug keeps its signature as the
    program shrinks): which value, and how it differs."""
    where = re.match(r"(output|input|gradient|the backend|raised|ran|gradients)", problem)
    how = re.search(
        r"(NaN/inf placement|values differ|requires_grad|dtype|shape|raised \w+|failed|None)",
        problem,
    )
    return f"{where.group(1) if where else problem[:30]}: {how.group(1) if how else problem[:60]}"


def _candidates(program: Program):
    """Simpler variants of ``program`` (each may or may not be valid)."""
    outputs = list(program.outputs)
    for i in range(len(outputs)):
        if len(outputs) > 1:
            yield dataclasses.replace(program, outputs=tuple(outputs[:i] + outputs[i + 1 :]))
    lines = list(program.lines)
    for i in range(len(lines) - 1, -1, -1):
        name = lines[i].split(" = ", 1)[0]
        rest = lines[i + 1 :]
        if i > 0 or len(lines) > 1:
            # end the program at line i (its value the output) ...
            if re.fullmatch(r"v\d+", name):
                yield dataclasses.replace(program, lines=tuple(lines[: i + 1]), outputs=(name,))
        # ... or leave line i out, when nothing after it reads it
        if not any(name in names_in(line) for line in rest) and name not in outputs:
            yield dataclasses.replace(program, lines=tuple(lines[:i] + rest))
    used = set(names_in(" ".join(lines))) | set(outputs)
    inputs = list(program.inputs)
    for i, spec in enumerate(inputs):
        if spec.name not in used:
            yield dataclasses.replace(program, inputs=tuple(inputs[:i] + inputs[i + 1 :]))
            continue
        for field, plain in (("layout", "contiguous"), ("requires_grad", False), ("seed", 0),
                             ("fill", "integral"), ("fill", "normal")):  # fmt: skip
            if getattr(spec, field) != plain:
                simpler = dataclasses.replace(spec, **{field: plain})
                yield dataclasses.replace(
                    program, inputs=tuple(inputs[:i] + [simpler] + inputs[i + 1 :])
                )


def shrink(program: Program, check: str, wanted: str, budget: int = 200) -> Program:
    """Greedy shrinking: take the first simpler variant that fails with signature ``wanted``."""
    changed = True
    while changed and budget > 0:
        changed = False
        for candidate in _candidates(program):
            if candidate == program:
                continue
            budget -= 1
            problem = _check(candidate, check)
            if problem is not None and signature(problem) == wanted:
                program, changed = candidate, True
                break
            if budget <= 0:
                break
    return program


def _programs(count: int, seed_value: int, config: FuzzConfig) -> list[Program]:
    drawn: list[Program] = []

    @seed(seed_value)
    @settings(max_examples=count, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(programs(config))
    def collect(program):
        drawn.append(program)

    collect()
    return drawn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", default="inductor", choices=["pytorch", *BACKENDS])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-lines", type=int, default=8)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    known = known_issues_for(args.check)
    config = FuzzConfig(max_lines=args.max_lines, known_issues=known)
    if args.check == "inductor-triton":
        config = FuzzConfig(max_lines=min(args.max_lines, 5), max_numel=24, known_issues=known)
    found: dict[str, tuple[Program, str, int]] = {}
    start = time.time()
    drawn = _programs(args.programs, args.seed, config)
    for program in drawn:
        problem = _check(program, args.check)
        if problem is None:
            continue
        key = signature(problem)
        small = shrink(program, args.check, key)
        ops = tuple(
            sorted(set(re.findall(r"torch\.(\w+)|\.(\w+)\(|(\W\W?) ", " ".join(small.lines))))
        )
        full_key = f"{key} {ops}"
        if full_key in found:
            found[full_key] = (*found[full_key][:2], found[full_key][2] + 1)
            continue
        found[full_key] = (small, _check(small, args.check) or problem, 1)
        print(f"--- {args.check}: {full_key}\n{_check(small, args.check)}\n{small.source()}"
              f"inputs: {list(small.inputs)!r}\n", flush=True)  # fmt: skip
    print(
        f"{args.check}: {len(drawn)} programs, {sum(v[2] for v in found.values())} failed, "
        f"{len(found)} distinct, {time.time() - start:.0f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
