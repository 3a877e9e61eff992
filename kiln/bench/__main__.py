"""The command line of ``python -m kiln.bench`` (``--help`` lists the flags).

Checks what it can before the long run starts (workload names, the device, matplotlib for
``--plot``), shows a progress line on stderr while measuring, then prints the table to stdout.
"""

from __future__ import annotations

import argparse
import sys

import kiln

from .workloads import DEFAULT_SUITE, QUICK_SUITE, WORKLOADS

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.bench",
        description="Time kiln eager vs kiln.compile (and PyTorch eager vs torch.compile when "
        "PyTorch is installed) on a suite of workloads, and dump the compiler's IR.",
    )
    parser.add_argument("--quick", action="store_true", help="small shapes and fewer repeats")
    parser.add_argument(
        "--workload",
        action="append",
        choices=tuple(WORKLOADS),
        metavar="NAME",
        help="run only this workload (repeatable; --list names them)",
    )
    parser.add_argument(
        "--gpt2-small",
        action="store_true",
        help="add the GPT-2 small training step (full shapes: GBs of memory, seconds per step)",
    )
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--repeat",
        type=_positive,
        help="exactly this many timed rounds (default: at least 10, quick 5, more while the "
        "sampling budget lasts)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        help="seconds of extra sampling rounds per workload (2; quick 0.3)",
    )
    parser.add_argument("--warmup", type=_non_negative, default=2, help="warm-up steps (2)")
    parser.add_argument(
        "--threads", type=_positive, help="threads for compiled kernels and PyTorch (cores)"
    )
    parser.add_argument("--backend", default="inductor", help="kiln backend (inductor)")
    parser.add_argument("--json", metavar="FILE", help="write every measurement as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="bar chart of speedups (matplotlib)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument(
        "--debug-dir", default="kiln_debug", help="where IR dumps go (kiln_debug/<workload>/)"
    )
    parser.add_argument("--no-dump", action="store_true", help="do not write IR dumps")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    parser.add_argument(
        "--no-memory", action="store_true", help="do not measure resident memory per column"
    )
    parser.add_argument(
        "--torch-compile",
        action="store_true",
        help="measure torch.compile in a --quick run too (its cold compiles take seconds each)",
    )
    return parser


def _suites_of(name: str) -> str:
    """Which runs leave a workload out (empty: every run has it)."""
    if name not in DEFAULT_SUITE:
        return "opt-in: --workload or its flag"
    if name not in QUICK_SUITE:
        return "full run only"
    return ""


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


# per-column and per-round progress lines, left out of a log (a terminal shows them in place)
_DETAILS = (": timing ", ": warm-up ", ": peak memory ")


class _Progress:
    """One status line on stderr, rewritten in place on a terminal; plain lines otherwise
    (without the per-sample ones, so logs stay short)."""

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.tty = stream.isatty()
        self.width = 0

    def __call__(self, message: str) -> None:
        if message.startswith("warning:"):
            self.done()
            self.stream.write(message + "\n")
        elif self.tty:
            text = message[:100]
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        elif not any(detail in message for detail in _DETAILS):
            self.stream.write(message + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        for workload in WORKLOADS.values():
            where = _suites_of(workload.name)
            print(f"{workload.name:29s} {workload.summary}" + (f" [{where}]" if where else ""))
        return 0
    if args.plot:
        from .plot import PlotUnavailableError, require_matplotlib

        try:
            require_matplotlib()
        except PlotUnavailableError as error:
            parser.exit(2, f"error: {error}\n")
    try:
        kiln.backends.lookup(args.backend)
    except ValueError as error:
        parser.error(str(error))
    if args.device == "cuda":
        if not kiln.cuda.is_available():
            from kiln.runtime.cuda import unavailable_reason

            parser.exit(
                2, f"error: --device cuda: kiln has no CUDA device ({unavailable_reason()})\n"
            )

    from .report import format_report, write_json
    from .runner import Settings, run_suite
    from .workloads import get_workload

    settings = Settings(
        quick=args.quick,
        repeat=args.repeat or (5 if args.quick else 10),
        max_rounds=args.repeat or 200,
        sample_budget=args.budget if args.budget is not None else (0.3 if args.quick else 2.0),
        memory=not args.no_memory,
        warmup=args.warmup,
        device=args.device,
        threads=args.threads or 0,
        backend=args.backend,
        debug_dir=None if args.no_dump else args.debug_dir,
        torch=not args.no_torch,
        torch_compile=args.torch_compile or not args.quick,
    )
    names = list(args.workload or (QUICK_SUITE if args.quick else DEFAULT_SUITE))
    if args.gpt2_small and "gpt2_small_train_step" not in names:
        names.append("gpt2_small_train_step")
    workloads = [get_workload(name) for name in names]
    progress = _Progress()
    try:
        suite = run_suite(workloads, settings, progress)
    finally:
        progress.done()
    print(format_report(suite, markdown=args.markdown))
    if args.json:
        write_json(suite, args.json)
        print(f"JSON: {args.json}")
    if args.plot:
        from .plot import plot_speedups

        print(f"plot: {plot_speedups(suite, args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
