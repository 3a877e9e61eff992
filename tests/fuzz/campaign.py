"""A long fuzzing campaign that keeps going past failures: for triage, not for the suite.

    python -m tests.fuzz.campaign --check inductor --programs 500 --seed 3
    python -m tests.fuzz.campaign --check all --profile long   # the long profile, >10,000

draws random programs, checks each (``pytorch``: eager kiln against PyTorch; a backend name of
``differential.BACKENDS``: compiled against eager kiln), shrinks every failure greedily (drop
outputs, lines, inputs; plainer layouts and values) while it fails the same way, and prints each
distinct minimized failure once, with the count of programs run. (``KILN_FUZZ=long pytest``
runs the same checks under hypothesis, which stops a test at its first failure;
``KILN_FUZZ_STRIDES=1`` compares the outputs' strides as well.)
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
from .generator import COUNTS, FAMILIES, FuzzConfig, config_for, programs
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
        r"(NaN/inf placement|values differ|requires_grad|dtype|shape|strides|raised \w+|failed|None)",
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


def shrink_greedily(item, candidates, keeps_failing, budget: int = 200):
    """Greedy shrinking: take the first simpler variant (of ``candidates(item)``) for which
    ``keeps_failing`` holds and start again from it, until none does or ``budget`` checks are
    spent (the frontend fuzzer shrinks its programs the same way)."""
    changed = True
    while changed and budget > 0:
        changed = False
        for candidate in candidates(item):
            if candidate == item:
                continue
            budget -= 1
            if keeps_failing(candidate):
                item, changed = candidate, True
                break
            if budget <= 0:
                break
    return item


def shrink(program: Program, check: str, wanted: str, budget: int = 200) -> Program:
    """The simplest variant of ``program`` found that fails with signature ``wanted``."""

    def keeps_failing(candidate: Program) -> bool:
        problem = _check(candidate, check)
        return problem is not None and signature(problem) == wanted

    return shrink_greedily(program, _candidates, keeps_failing, budget)


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


def campaign(check: str, count: int, seed_value: int, config: FuzzConfig) -> tuple[int, int]:
    """Run ``count`` programs for ``check``, print each distinct minimized failure once and a
    summary line; returns (programs run, programs that failed)."""
    found: dict[str, int] = {}
    start = time.time()
    drawn = _programs(count, seed_value, config)
    failed = 0
    for program in drawn:
        problem = _check(program, check)
        if problem is None:
            continue
        failed += 1
        key = signature(problem)
        small = shrink(program, check, key)
        ops = tuple(
            sorted(set(re.findall(r"torch\.(\w+)|\.(\w+)\(|(\W\W?) ", " ".join(small.lines))))
        )
        full_key = f"{key} {ops}"
        found[full_key] = found.get(full_key, 0) + 1
        if found[full_key] > 1:
            continue
        print(f"--- {check}: {full_key}\n{_check(small, check)}\n{small.source()}"
              f"inputs: {list(small.inputs)!r}\n{small!r}\n", flush=True)  # fmt: skip
    seconds = time.time() - start
    print(
        f"{check}: {len(drawn)} programs, {failed} failed, {len(found)} distinct, "
        f"{seconds:.0f} s ({len(drawn) / max(seconds, 1e-9):.2f} programs/s)",
        flush=True,
    )
    return len(drawn), failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", default="inductor", choices=["all", "pytorch", *BACKENDS])
    parser.add_argument("--programs", type=int, default=None,
                        help="programs per check (default: the profile's count)")  # fmt: skip
    parser.add_argument("--profile", default="long", choices=sorted(COUNTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--focus", choices=sorted(FAMILIES), default=None,
                        help="draw most lines from this rule family's ops")  # fmt: skip
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    checks = ["pytorch", *BACKENDS] if args.check == "all" else [args.check]
    total = failed = 0
    start = time.time()
    for check in checks:
        count = args.programs or COUNTS[args.profile][check]
        config = config_for(check, args.profile)
        if args.focus:
            config = dataclasses.replace(config, focus=frozenset(FAMILIES[args.focus]))
        ran, bad = campaign(check, count, args.seed, config)
        total, failed = total + ran, failed + bad
    seconds = time.time() - start
    print(f"all: {total} programs, {failed} failed, {seconds:.0f} s "
          f"({total / max(seconds, 1e-9):.2f} programs/s)", flush=True)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
