"""``python -m kiln.distributed.run``: torchrun's flags, the mpiexec command it builds, the
variables each rank sees, the failure summary; and the example training under it."""

from __future__ import annotations

import json
import os
import sys

import pytest

from kiln.distributed import run as launcher
from kiln.distributed.rank_supervisor import torchrun_environment
from tests.distributed.launch import ROOT, report, run_launcher


def _command(argv: list[str]) -> list[str]:
    return launcher.build_command(launcher.parse_args(argv), "/bin/mpiexec")


def test_torchrun_spellings_of_the_flags_are_accepted():
    for spelling in ("--nproc-per-node", "--nproc_per_node"):
        args = launcher.parse_args(
            [spelling, "3", "--master_port", "1234", "train.py", "--lr", "1"]
        )
        assert (args.nproc_per_node, args.master_port) == ("3", 1234)
        assert args.training_script_args == ["--lr", "1"]


def test_one_machine_starts_every_rank_under_its_supervisor():
    cmd = _command(["--nproc-per-node", "2", "train.py", "--epochs", "3"])
    assert cmd[:3] == ["/bin/mpiexec", "-n", "2"]
    python, supervisor, entry_python, entry = cmd[3:7]
    assert python == entry_python == sys.executable
    assert supervisor.endswith("rank_supervisor.py") and entry.endswith("rank_entry.py")
    assert cmd[7:] == ["train.py", "--epochs", "3"]


def test_module_and_no_python_forms():
    assert _command(["-m", "pkg.train", "x"])[-3:] == ["-m", "pkg.train", "x"]
    assert _command(["--no-python", "./run.sh", "x"])[-2:] == ["./run.sh", "x"]


def test_several_machines_give_mpiexec_the_hosts():
    cmd = _command(["--nnodes", "2", "--nproc-per-node", "4", "--hosts", "a,b", "t.py"])
    assert cmd[:7] == ["/bin/mpiexec", "-n", "8", "-ppn", "4", "-hosts", "a:4,b:4"]


def test_several_machines_without_hosts_outside_slurm_is_an_error(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(SystemExit, match="--hosts"):
        _command(["--nnodes", "2", "t.py"])


def test_other_machines_launchers_start_nothing(capsys):
    code = launcher.run(launcher.parse_args(["--nnodes", "2", "--node-rank", "1", "t.py"]))
    assert code == 0
    assert "node 0" in capsys.readouterr().out


def test_restarts_are_refused():
    with pytest.raises(SystemExit):
        launcher.parse_args(["--max-restarts", "1", "t.py"])


def test_each_rank_sees_torchruns_variables():
    pmi = {"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4",
           "KILN_NPROC_PER_NODE": "4"}  # fmt: skip
    assert torchrun_environment(pmi) == {
        "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1", "ROLE_RANK": "5", "ROLE_WORLD_SIZE": "8",
    }  # fmt: skip


def test_job_environment_keeps_ranks_from_oversubscribing(monkeypatch, tmp_path):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = launcher.job_environment(launcher.parse_args(["--nproc-per-node", "2", "t.py"]), "d")
    assert env["OMP_NUM_THREADS"] == "1" and env["MASTER_PORT"] == "29500"
    assert env["KILN_RUN_DIR"] == "d" and env["TORCHELASTIC_RUN_ID"]


def test_failure_summary_names_the_rank_that_failed_first(tmp_path):
    def write(name, record):
        (tmp_path / name).write_text(json.dumps(record))

    write(
        "rank0.error.json",
        {"rank": 0, "time": 2.0, "error": "DistBackendError: x", "primary": False},
    )
    write(
        "rank1.error.json", {"rank": 1, "time": 1.0, "error": "ValueError: boom", "primary": True}
    )
    write("rank1.exit.json", {"rank": 1, "pid": 7, "time": 3.0, "exit_code": 1})
    assert launcher.failure_summary(str(tmp_path), 1) == (
        "rank 1 failed first: ValueError: boom",
        1,
    )
    os.remove(tmp_path / "rank1.error.json")
    write("rank1.exit.json", {"rank": 1, "pid": 7, "time": 3.0, "exit_code": 137, "signal": 9})
    report_text, code = launcher.failure_summary(str(tmp_path), 1)
    assert report_text == "rank 1 (pid 7) was killed by signal 9 (SIGKILL)" and code == 137


@pytest.mark.distributed
def test_example_trains_with_ddp_under_the_launcher():
    example = os.path.join(ROOT, "examples", "train_tiny_gpt.py")
    args = ["--ddp", "--steps", "3", "--width", "16", "--layers", "1", "--block", "16",
            "--time-steps", "1", "--sample-chars", "10"]  # fmt: skip
    job = run_launcher(example, 2, *args, timeout=300, as_module=True)
    assert job.returncode == 0, report(job)
    assert not job.leftovers
    assert "[rank0]: DDP over 2 ranks" in job.stdout, report(job)
    assert "[rank0]: step    3  loss" in job.stdout, report(job)
    assert "[rank1]:" not in job.stdout  # only rank 0 prints
    assert "[rank0]: sample:" in job.stdout
