"""The parent of one rank: started by ``mpiexec`` for ``python -m kiln.distributed.run``.

Run by path (``python .../rank_supervisor.py python script.py args``), with the standard library
only, so it starts in milliseconds. It turns MPI's process-manager variables into torchrun's
(RANK, LOCAL_RANK, WORLD_SIZE, ...), starts the rank as its child, prefixes each line the rank
prints with ``[rank N]:``, and when the rank ends writes how (exit status or signal) to the job's
run directory. Being the parent is what makes a killed rank visible: ``mpiexec`` sees this
process exit normally (it does not tear the job down), the other ranks see the dead process and
the record (``kiln.distributed.health``), and the launcher reports which rank failed and why.

The child dies with this process (``PR_SET_PDEATHSIG``), so killing the job leaves no strays.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1


def torchrun_environment(environ: dict) -> dict:
    """torchrun's per-rank variables, from what MPICH's process manager sets (PMI_*)."""
    rank = int(environ.get("PMI_RANK", "0"))
    size = int(environ.get("PMI_SIZE", "1"))
    local_rank = int(environ.get("MPI_LOCALRANKID", "0"))
    local_size = int(environ.get("MPI_LOCALNRANKS", "1"))
    per_node = int(environ.get("KILN_NPROC_PER_NODE", str(local_size)) or local_size)
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_size),
        "GROUP_RANK": str(rank // max(per_node, 1)),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(size),
    }


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _pump(source, sink, prefix: bytes, show: bool) -> None:
    """Copy ``source`` to ``sink`` line by line, each line prefixed (whole lines, one write)."""
    for line in iter(source.readline, b""):
        if show:
            sink.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
            sink.flush()
    source.close()


def _write_record(run_dir: str | None, rank: int, record: dict) -> None:
    if not run_dir:
        return
    path = os.path.join(run_dir, f"rank{rank}.exit.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: rank_supervisor.py COMMAND [ARGS...]\n")
        return 2
    env = dict(os.environ)
    env.update(torchrun_environment(env))
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the prefixing pipe as printed
    rank = int(env["RANK"])
    shown = os.environ.get("KILN_LOCAL_RANKS_FILTER")
    show = shown is None or shown == "" or env["LOCAL_RANK"] in shown.split(",")
    # the rank talks to MPI's process manager over an inherited socket (PMI_FD)
    pmi_fds = tuple(int(env[k]) for k in ("PMI_FD",) if env.get(k, "").isdigit())
    child = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=pmi_fds,
        preexec_fn=_die_with_parent,
    )

    def forward(signum, _frame):
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    prefix = f"[rank{rank}]: ".encode()
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, sys.stdout.buffer, prefix, show)),
        threading.Thread(target=_pump, args=(child.stderr, sys.stderr.buffer, prefix, show)),
    ]
    for p in pumps:
        p.start()
    status = child.wait()
    for p in pumps:
        p.join()
    record = {"rank": rank, "pid": child.pid, "time": time.time()}
    if status < 0:
        record["signal"] = -status
        record["exit_code"] = 128 - status
    else:
        record["exit_code"] = status
    _write_record(os.environ.get("KILN_RUN_DIR"), rank, record)
    if status < 0:
        # a killed rank could not tell its peers (a failing one does, then waits this long
        # before it aborts): MPI's process manager ends every rank as soon as this process
        # exits, so leave the peers watching the rank's pid their moment to report it
        time.sleep(float(os.environ.get("KILN_DISTRIBUTED_ABORT_GRACE", "1.0")))
    return record["exit_code"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
