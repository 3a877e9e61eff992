"""Starting multi-rank jobs from tests: ``mpiexec -n N python script`` (or the launcher) in a
process group of its own, killed whole on timeout, with the ranks' JSON results collected.

Rank scripts hand their results to ``emit`` (a JSON file per rank in the job's result
directory: ranks' stdout lines can interleave); ``Job.results`` maps rank -> that object. After
every job the tests check that none of its processes is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(ROOT, "kiln", "distributed", "run.py")
RESULT_DIR = "KILN_TEST_RESULT_DIR"


class Checks:
    """Named checks run in a rank (as a decorator: the function runs at once); each records
    success or its error, so one failure does not stop the others, and every rank runs the same
    collectives in the same order."""

    def __init__(self):
        self.results: list[dict] = []

    def __call__(self, name: str):
        def run(fn):
            try:
                fn()
                self.results.append({"name": name, "ok": True})
            except Exception as e:
                detail = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}"
                self.results.append({"name": name, "ok": False, "detail": detail})
            return fn

        return run


def failed_checks(job: Job) -> list[str]:
    """Every failed check of every rank, with its error."""
    return [
        f"rank {r}: {c['name']}: {c['detail']}"
        for r, result in sorted(job.results.items())
        for c in result["checks"]
        if not c["ok"]
    ]


def emit(record: dict) -> None:
    """Called in a rank: store this rank's results for the test that started the job."""
    path = os.path.join(os.environ[RESULT_DIR], f"rank{record['rank']}.json")
    with open(path, "w") as f:
        json.dump(record, f)


@dataclass
class Job:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    leftovers: list[int]
    results: dict[int, dict] = field(default_factory=dict)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def _read_results(directory: str) -> dict[int, dict]:
    found = {}
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as f:
            record = json.load(f)
        found[record["rank"]] = record
    return found


def _environment(extra: dict | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("KILN_CACHE_DIR", os.path.join("/tmp", "kiln-cache-distributed-tests"))
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


def mpiexec() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else "mpiexec"


def _processes_in_group(pgid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def run(command: list[str], timeout: float, env: dict | None = None) -> Job:
    """Run ``command`` in a new session; on timeout kill its whole process group."""
    start = time.monotonic()
    results = tempfile.mkdtemp(prefix="kiln-test-results-")
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environment({**(env or {}), RESULT_DIR: results}),
        start_new_session=True,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        stderr += f"\n[test harness] killed after {timeout} s"
    seconds = time.monotonic() - start
    deadline = time.monotonic() + 5
    leftovers = _processes_in_group(process.pid)
    while leftovers and time.monotonic() < deadline:
        time.sleep(0.1)
        leftovers = _processes_in_group(process.pid)
    if leftovers:
        os.killpg(process.pid, signal.SIGKILL)
    found = _read_results(results)
    shutil.rmtree(results, ignore_errors=True)
    return Job(process.returncode, stdout, stderr, seconds, leftovers, found)


def run_ranks(script: str, ranks: int, *args: str, timeout: float = 120, env=None) -> Job:
    """``mpiexec -n ranks python script args`` (the plain MPI way to start ranks)."""
    path = os.path.join(HERE, script)
    return run([mpiexec(), "-n", str(ranks), sys.executable, path, *args], timeout, env)


def run_launcher(script: str, ranks: int, *args: str, timeout: float = 120, env=None,
                 as_module: bool = False) -> Job:  # fmt: skip
    """The launcher, started by path (its process then does not import kiln) or, with
    ``as_module``, as users start it: ``python -m kiln.distributed.run``."""
    path = script if os.path.isabs(script) else os.path.join(HERE, script)
    launcher = ["-m", "kiln.distributed.run"] if as_module else [LAUNCHER]
    command = [sys.executable, *launcher, "--nproc-per-node", str(ranks), path, *args]
    return run(command, timeout, env)


def report(job: Job) -> str:
    """What to show when a job did not do what a test expected."""
    tail = "\n".join(job.output.splitlines()[-60:])
    return f"exit status {job.returncode} after {job.seconds:.1f} s; output tail:\n{tail}"
