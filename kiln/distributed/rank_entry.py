"""Runs the user's script (or ``-m module``) inside a rank started by the launcher.

Run by path with the standard library only, so the script imports kiln itself, after setting
whatever environment it likes. It is ``python script.py args`` except for one thing: when the
script ends with ``sys.exit(status)`` and a non-zero status, the status is handed to
``kiln.distributed`` (if the script used it), which then ends the whole job with it instead of
waiting for the other ranks -- a rank's non-zero exit ends the job with that code.
"""

from __future__ import annotations

import os
import runpy
import sys


def _status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1  # sys.exit("message") prints the message and exits with 1


def main(argv: list[str]) -> None:
    if not argv:
        sys.stderr.write("usage: rank_entry.py SCRIPT [ARGS...] | -m MODULE [ARGS...]\n")
        sys.exit(2)
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = argv[0]
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        status = _status(stop.code)
        health = sys.modules.get("kiln.distributed.health")
        if status and health is not None and health.current() is not None:
            health.current().exit_status = status
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
