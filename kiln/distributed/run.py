"""``python -m kiln.distributed.run``: torchrun's command line, ranks started by ``mpiexec``.

    python -m kiln.distributed.run --nproc-per-node 2 train.py --epochs 3
    python -m kiln.distributed.run --nproc-per-node 4 -m mypackage.train

Every rank runs under a small supervisor (``rank_supervisor.py``) that sets torchrun's variables
(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT),
prefixes the rank's output with ``[rankN]:`` and records how the rank ended. When a rank fails,
the others fail too (``kiln.distributed.health``); if the job is still running a few seconds
later, the launcher stops it, and it always ends with a summary naming the rank that failed
first and exits with that rank's status.

Several machines: run the launcher once, on one machine, with ``--nnodes M --hosts
host1,host2,...`` (or, inside a Slurm allocation, just ``--nnodes M``: MPICH's ``mpiexec`` reads
the allocation). ``mpiexec`` starts ``--nproc-per-node`` ranks on each host (over ssh, or srun
under Slurm); the machines need the same Python environment at the same path. Since node 0's
launcher starts every node's ranks, an invocation with ``--node-rank`` > 0 (as a torchrun
script would make on every node) does nothing and exits 0. For example, under Slurm::

    salloc -N 2 python -m kiln.distributed.run --nnodes 2 --nproc-per-node 8 train.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

__all__ = ["main", "parse_args", "build_command"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_SUPERVISOR = os.path.join(_HERE, "rank_supervisor.py")
_ENTRY = os.path.join(_HERE, "rank_entry.py")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m kiln.distributed.run",
        description="Start the ranks of a kiln.distributed job (torchrun's flags, via mpiexec).",
    )
    p.add_argument("--nnodes", default="1", help="number of machines (or MIN:MAX, MAX used)")
    p.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        default="1",
        help="ranks per machine: a number, 'cpu' (one per core) or 'auto'",
    )
    p.add_argument("--node-rank", "--node_rank", type=int, default=0)
    p.add_argument("--master-addr", "--master_addr", default=None)
    p.add_argument("--master-port", "--master_port", type=int, default=29500)
    p.add_argument("--standalone", action="store_true", help="single machine (the default here)")
    p.add_argument("--rdzv-backend", "--rdzv_backend", default="static")
    p.add_argument("--rdzv-endpoint", "--rdzv_endpoint", default="")
    p.add_argument("--rdzv-id", "--rdzv_id", default="none")
    p.add_argument("--rdzv-conf", "--rdzv_conf", default="")
    p.add_argument("--max-restarts", "--max_restarts", type=int, default=0)
    p.add_argument("--monitor-interval", "--monitor_interval", type=float, default=0.1)
    p.add_argument("--start-method", "--start_method", default="spawn")
    p.add_argument("--role", default="default")
    p.add_argument("-m", "--module", action="store_true", help="run the script as a module")
    p.add_argument(
        "--no-python",
        "--no_python",
        action="store_true",
        help="run the script as an executable, not with python",
    )
    p.add_argument("--run-path", "--run_path", action="store_true")
    p.add_argument("--log-dir", "--log_dir", default=None)
    p.add_argument("-r", "--redirects", default="0")
    p.add_argument("-t", "--tee", default="0")
    p.add_argument(
        "--local-ranks-filter",
        "--local_ranks_filter",
        default="",
        help="show only these local ranks' output, e.g. 0 or 0,2",
    )
    p.add_argument("--local-addr", "--local_addr", default=None)
    p.add_argument(
        "--hosts",
        default=None,
        help="kiln: comma-separated machines for --nnodes > 1 (see the module doc)",
    )
    p.add_argument("--mpiexec", default=None, help="kiln: the mpiexec to use")
    p.add_argument("training_script")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.max_restarts:
        p.error("--max-restarts: kiln's launcher does not restart failed ranks (use 0)")
    return args


def _nproc(value: str) -> int:
    if value in ("cpu", "auto", "gpu"):
        return os.cpu_count() or 1
    n = int(value)
    if n < 1:
        raise ValueError(f"--nproc-per-node must be positive, got {n}")
    return n


def _nnodes(value: str) -> int:
    return int(value.split(":")[-1])


def find_mpiexec(explicit: str | None = None) -> str:
    """``mpiexec`` beside this Python (the mpich wheel installs it there), else on PATH."""
    if explicit:
        return explicit
    if os.environ.get("KILN_MPIEXEC"):
        return os.environ["KILN_MPIEXEC"]
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(beside):
        return beside
    found = shutil.which("mpiexec")
    if found is None:
        raise SystemExit(
            "kiln.distributed.run: mpiexec not found; install MPI with "
            "pip install 'kiln-ml[distributed]' (or: pip install mpich mpi4py)"
        )
    return found


def build_command(args: argparse.Namespace, mpiexec: str) -> list[str]:
    """The ``mpiexec`` command line that starts every rank under its supervisor."""
    per_node = _nproc(args.nproc_per_node)
    nodes = _nnodes(args.nnodes)
    cmd = [mpiexec, "-n", str(per_node * nodes)]
    if nodes > 1:
        cmd += ["-ppn", str(per_node)]
        if args.hosts:
            hosts = [h for h in args.hosts.split(",") if h]
            if len(hosts) != nodes:
                raise SystemExit(
                    f"kiln.distributed.run: --hosts names {len(hosts)} machines, --nnodes {nodes}"
                )
            cmd += ["-hosts", ",".join(f"{h}:{per_node}" for h in hosts)]
        elif not os.environ.get("SLURM_JOB_ID"):
            raise SystemExit(
                "kiln.distributed.run: --nnodes > 1 needs --hosts host1,host2,... (or a Slurm "
                "allocation)"
            )
    if args.no_python:
        rank_cmd = [args.training_script]
    elif args.module:
        rank_cmd = [sys.executable, _ENTRY, "-m", args.training_script]
    else:
        rank_cmd = [sys.executable, _ENTRY, args.training_script]
    return [*cmd, sys.executable, _SUPERVISOR, *rank_cmd, *args.training_script_args]


def job_environment(args: argparse.Namespace, run_dir: str) -> dict:
    env = dict(os.environ)
    per_node = _nproc(args.nproc_per_node)
    master = args.master_addr
    if master is None:
        master = args.hosts.split(",")[0] if args.hosts else "127.0.0.1"
    env.update(
        MASTER_ADDR=master,
        MASTER_PORT=str(args.master_port),
        KILN_RUN_DIR=run_dir,
        KILN_NPROC_PER_NODE=str(per_node),
        KILN_LOCAL_RANKS_FILTER=args.local_ranks_filter,
        TORCHELASTIC_RUN_ID=args.rdzv_id if args.rdzv_id != "none" else uuid.uuid4().hex[:12],
        TORCHELASTIC_RESTART_COUNT="0",
        TORCHELASTIC_MAX_RESTARTS="0",
    )
    if per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        sys.stderr.write(
            "kiln.distributed.run: setting OMP_NUM_THREADS=1 for each rank so that "
            f"{per_node} ranks do not oversubscribe the cores; set it to tune\n"
        )
        env["OMP_NUM_THREADS"] = "1"
    return env


def _records(run_dir: str, kind: str) -> list[dict]:
    found = []
    for name in os.listdir(run_dir):
        if name.endswith(f".{kind}.json"):
            try:
                with open(os.path.join(run_dir, name)) as f:
                    found.append(json.load(f))
            except (OSError, ValueError):
                pass
    return sorted(found, key=lambda r: r.get("time", 0))


def _failed_exits(run_dir: str) -> list[dict]:
    return [r for r in _records(run_dir, "exit") if r.get("exit_code")]


def _describe_exit(record: dict) -> str:
    if "signal" in record:
        try:
            name = signal.Signals(record["signal"]).name
        except ValueError:
            name = "?"
        return f"was killed by signal {record['signal']} ({name})"
    return f"exited with status {record['exit_code']}"


def failure_summary(run_dir: str, returncode: int) -> tuple[str, int]:
    """(a report naming the rank that failed first, the status the launcher exits with)."""
    errors = _records(run_dir, "error")
    primary = [r for r in errors if r.get("primary")]
    exits = {r["rank"]: r for r in _records(run_dir, "exit")}
    failed = _failed_exits(run_dir)
    if primary:
        root = primary[0]
        code = exits.get(root["rank"], {}).get("exit_code") or _status_in(root["error"])
        return f"rank {root['rank']} failed first: {root['error']}", code
    if failed:
        root = failed[0]
        return f"rank {root['rank']} (pid {root['pid']}) {_describe_exit(root)}", root["exit_code"]
    if errors:
        first = errors[0]
        return f"rank {first['rank']} reported: {first['error']}", returncode
    return f"mpiexec exited with status {returncode}", returncode


def _status_in(error: str) -> int:
    """The status of an "exited with status N" record (1 for an exception)."""
    words = error.split()
    if error.startswith("exited with status") and words[-1].isdigit():
        return int(words[-1])
    return 1


def _stop(process: subprocess.Popen) -> None:
    """End the job: SIGTERM to mpiexec's process group, SIGKILL if it lingers."""
    for sig, pause in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(pause)
            return
        except subprocess.TimeoutExpired:
            continue


def run(args: argparse.Namespace) -> int:
    if _nnodes(args.nnodes) > 1 and args.node_rank > 0:
        print(
            f"kiln.distributed.run: node {args.node_rank}: nothing to start here (the launcher "
            "on node 0 starts every node's ranks through mpiexec)"
        )
        return 0
    mpiexec = find_mpiexec(args.mpiexec)
    run_dir = tempfile.mkdtemp(prefix="kiln-run-")
    try:
        cmd = build_command(args, mpiexec)
        process = subprocess.Popen(cmd, env=job_environment(args, run_dir), start_new_session=True)
        grace = float(os.environ.get("KILN_DISTRIBUTED_ABORT_GRACE", "1.0")) + 3.0
        first_failure = None
        interrupted = False

        def forward(signum, _frame):
            nonlocal interrupted
            interrupted = True
            try:
                os.killpg(process.pid, signum)
            except ProcessLookupError:
                pass

        previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while process.poll() is None:
                time.sleep(args.monitor_interval)
                if first_failure is None and _failed_exits(run_dir):
                    first_failure = time.monotonic()
                if first_failure is not None and time.monotonic() - first_failure > grace:
                    sys.stderr.write("kiln.distributed.run: a rank failed; stopping the job\n")
                    _stop(process)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        if process.returncode == 0 and not _failed_exits(run_dir):
            return 0
        report, code = failure_summary(run_dir, process.returncode)
        if interrupted:
            report = "interrupted; " + report
        sys.stderr.write(f"kiln.distributed.run: {report}\n")
        return code or 1
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    sys.exit(run(parse_args(argv)))


if __name__ == "__main__":
    main()
