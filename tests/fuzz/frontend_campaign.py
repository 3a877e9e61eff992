"""A campaign of the capture frontend's fuzzer: for triage, not for the suite.

    python -m tests.fuzz.frontend_campaign --programs 500 --seed 0
    python -m tests.fuzz.frontend_campaign --programs 50 --check inductor --check pytorch

draws the programs of seeds ``seed .. seed + programs - 1`` (frontend_programs.draw_program),
runs each check on each (``pytorch``: kiln eager against PyTorch eager; ``eager``,
``aot_eager``, ``inductor``, ``inductor-dynamic``: ``kiln.compile`` against kiln eager, which
also reports compile warnings and a recompile on a call that repeats the first), shrinks each
failure greedily (drop statements, returned values, calls; plainer calls) while it fails the
same way, and prints each distinct minimized failure once, with a reproducer.
``--replay SEED`` runs one seed's checks and prints its source.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import signal
import sys
import time
import warnings

from .campaign import shrink_greedily
from .frontend_differential import MODES, find_mismatch
from .frontend_programs import Call, FrontendProgram, draw_program

CHECKS = ("pytorch", *MODES)
_PER_PROGRAM_SECONDS = 120


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout


STRICT_GRADIENTS = False  # --strict-gradients: zero gradients where eager has None count


def check(program: FrontendProgram, name: str) -> str | None:
    """The first difference for check ``name`` (harness errors and timeouts count too)."""
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(_PER_PROGRAM_SECONDS)
    try:
        return find_mismatch(program, name, zero_gradients=not STRICT_GRADIENTS)
    except _Timeout:
        return f"timeout after {_PER_PROGRAM_SECONDS} s"
    except Exception as e:  # noqa: BLE001 - a harness error is a finding too
        return f"harness error {type(e).__name__}: {str(e)[:200]}"
    finally:
        signal.alarm(0)


def signature(problem: str) -> str:
    """What kind of difference a problem is (kept while the program shrinks)."""
    problem = re.sub(r"^call \d+:? ?", "", problem)
    problem = re.sub(r"\[\d+\]|\['r\d+'\]", "", problem)
    problem = re.sub(r"by [\d.e+-]+|\(.*? vs .*?\)", "", problem)
    problem = re.sub(r"\d+ graph", "N graph", problem)
    problem = re.sub(r"(f|resume_at_line)_\d+", r"\1_N", problem)
    return problem[:120]


def _plainer_calls(call: Call):
    for name, plain in (("rest", 0), ("grads", (False, False)), ("rest_grad", False),
                        ("dtypes", ("float32",) * 3), ("scale", None), ("flag", None),
                        ("gscale", 1.5), ("alpha", 2.0), ("use_relu", True), ("training", True)):  # fmt: skip
        if getattr(call, name) != plain:
            yield dataclasses.replace(call, **{name: plain})


def candidates(program: FrontendProgram):
    """Simpler variants of ``program`` (each may no longer fail, or fail another way)."""
    body = list(program.body)
    for i in range(len(body) - 1, -1, -1):
        yield dataclasses.replace(program, body=tuple(body[:i] + body[i + 1 :]))
    returns = list(program.returns)
    for i in range(len(returns)):
        if len(returns) > 1:
            yield dataclasses.replace(program, returns=tuple(returns[:i] + returns[i + 1 :]))
    if program.returns_kind != "tuple":
        yield dataclasses.replace(program, returns_kind="tuple")
    calls = list(program.calls)
    for i in range(len(calls)):
        if len(calls) > 1:
            yield dataclasses.replace(program, calls=tuple(calls[:i] + calls[i + 1 :]))
    for i, call in enumerate(calls):
        for plainer in _plainer_calls(call):
            yield dataclasses.replace(program, calls=tuple(calls[:i] + [plainer] + calls[i + 1 :]))


def shrink(program: FrontendProgram, name: str, wanted: str, budget: int = 150) -> FrontendProgram:
    """The simplest variant of ``program`` found that fails check ``name`` with signature
    ``wanted`` (greedily, as the op fuzzer's campaign shrinks)."""

    def keeps_failing(candidate: FrontendProgram) -> bool:
        problem = check(candidate, name)
        return problem is not None and signature(problem) == wanted

    return shrink_greedily(program, candidates, keeps_failing, budget)


def report(program: FrontendProgram, name: str, problem: str) -> str:
    """A failure as text a person can paste: the difference, the source and the program."""
    body = program.source().split("MOD = Mod()\n", 1)[1].strip()
    return (f"--- {name}: {problem}\n{body}\ncalls: {list(program.calls)!r}\n"
            f"program: {program!r}\n")  # fmt: skip


def campaign(checks: list[str], count: int, first_seed: int, do_shrink: bool = True) -> int:
    """Run ``checks`` on ``count`` programs; print distinct failures and a summary line per
    check; returns the number of failing (program, check) pairs."""
    found: dict[tuple[str, str], int] = {}
    failures = {name: 0 for name in checks}
    start = time.time()
    for seed in range(first_seed, first_seed + count):
        program = draw_program(seed)
        for name in checks:
            problem = check(program, name)
            if problem is None:
                continue
            failures[name] += 1
            key = (name, signature(problem))
            found[key] = found.get(key, 0) + 1
            if found[key] > 1:
                print(f"seed {seed}: {name}: {problem} (seen before)", flush=True)
                continue
            small = shrink(program, name, key[1]) if do_shrink else program
            print(f"seed {seed}:\n" + report(small, name, check(small, name) or problem),
                  flush=True)  # fmt: skip
    seconds = time.time() - start
    for name in checks:
        distinct = sum(1 for key in found if key[0] == name)
        print(f"{name}: {count} programs, {failures[name]} failed, {distinct} distinct")
    print(f"all: {count} programs x {len(checks)} checks in {seconds:.0f} s", flush=True)
    return sum(failures.values())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="the first program's seed")
    parser.add_argument("--check", action="append", choices=["all", *CHECKS],
                        help="a check to run (repeatable; default all)")  # fmt: skip
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--strict-gradients", action="store_true",
                        help="report zero gradients where eager has None")  # fmt: skip
    parser.add_argument("--replay", type=int, default=None, help="one seed: print and check it")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    global STRICT_GRADIENTS
    STRICT_GRADIENTS = args.strict_gradients
    checks = list(CHECKS) if not args.check or "all" in args.check else args.check
    if args.replay is not None:
        program = draw_program(args.replay)
        print(program.source())
        for name in checks:
            print(f"{name}: {check(program, name)}")
        return 0
    return 1 if campaign(checks, args.programs, args.seed, not args.no_shrink) else 0


if __name__ == "__main__":
    sys.exit(main())
