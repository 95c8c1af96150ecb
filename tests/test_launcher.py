"""mpiopt.run.launcher: the printed resume line starts the same layout again (`mpiexec -n 3
mpiopt resume ...` for a job of three ranks, the plain line for one process); copies of
mpiopt that a batch system started as several tasks, but MPI sees alone, are stopped."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import BIN, ROOT, resume_with, subprocess_env
from mpiopt.run.launcher import USUAL_LAUNCHER, launch_prefix, launcher_name

FUNCTIONS = ROOT / "tests" / "objectives" / "functions.py"


def _process(proc: Path, pid: int, parent: int, argv: list[str], comm: str) -> None:
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) S {parent} 1 1 0 -1\n")


def test_the_launcher_is_found_among_the_ancestors_as_it_was_run(tmp_path):
    _process(tmp_path, 40, 1, ["bash"], "bash")
    _process(tmp_path, 41, 40, ["/opt/mpich/bin/mpirun", "-n", "4", "mpiopt"], "mpirun")
    _process(tmp_path, 42, 41, ["/opt/mpich/bin/hydra_pmi_proxy", "--control-port"], "hydra_pmi_pr")
    assert launcher_name(42, proc=tmp_path) == "/opt/mpich/bin/mpirun"
    _process(tmp_path, 50, 1, ["slurmstepd: [7.0]"], "slurmstepd")
    assert launcher_name(50, proc=tmp_path) == "srun"
    assert launcher_name(40, proc=tmp_path) == USUAL_LAUNCHER      # (no launcher up there)
    assert launcher_name(99, proc=tmp_path) == USUAL_LAUNCHER      # (no such process)
    assert launch_prefix(1) == "" and launch_prefix(5).endswith(" -n 5 ")


def _spec(tmp_path: Path) -> Path:
    spec = {"study": {"name": "r"},
            "objective": {"function": f"{FUNCTIONS}:sleepy", "direction": "minimize"},
            "search_space": {"x": {"type": "real", "low": -5.0, "high": 10.0},
                             "y": {"type": "real", "low": 0.0, "high": 15.0}},
            "search": {"algorithm": "random", "trials": 6, "seed": 1}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _interrupted_line(tmp_path, url, np) -> str:
    """The closing line of a search interrupted by Ctrl-C once its first trial is done."""
    cmd = [str(BIN / "mpiopt"), "search", str(_spec(tmp_path)), "--storage", url]
    if np:
        cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
    env = {**subprocess_env(), "MPIOPT_TEST_SLEEP": "1.0"}
    job = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        end = time.monotonic() + 120
        for line in job.stdout:
            if "COMPLETE" in line or time.monotonic() > end:
                break
        os.killpg(job.pid, signal.SIGINT)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 130, out + err
    lines = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("np", [3, None], ids=["3-ranks", "single-process"])
def test_the_printed_resume_line_resumes_with_the_same_layout(tmp_path, np):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    line = _interrupted_line(tmp_path, url, np)
    command = line.partition("resume with: ")[2]
    assert command == f"{resume_with(np)} r --storage {url}", line
    env = {**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.05"}
    again = subprocess.run(shlex.split(command), cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    layout = "2 groups x 1 rank + coordinator" if np else "single process"
    assert f"6 trials, {layout}" in again.stdout and "resuming:" in again.stdout, again.stdout


# A batch system's tasks as its launcher starts them ({r}: the task's number)
BATCH_TASKS = {
    "srun": {"SLURM_STEP_NUM_TASKS": "3", "SLURM_NTASKS": "3", "SLURM_PROCID": "{r}",
             "SLURM_STEP_ID": "0", "ENVIRONMENT": "BATCH"},
    "srun-ntasks": {"SLURM_NTASKS": "3", "SLURM_PROCID": "{r}"},
    "flux": {"FLUX_JOB_SIZE": "3", "FLUX_TASK_RANK": "{r}"},
    "pbsdsh": {"PBS_NP": "3", "PBS_VNODENUM": "{r}", "PBS_TASKNUM": "{r}7"},
}


@pytest.mark.parametrize("tasks", BATCH_TASKS.values(), ids=BATCH_TASKS.keys())
def test_tasks_a_batch_system_started_but_mpi_sees_alone_are_stopped(tmp_path, tasks):
    """srun (flux run, pbsdsh) starting three copies of mpiopt that mpi4py's MPI does not
    join (built without the batch system's PMI): each saw a world of one, one ran the
    whole study alone and the others ended with "already exists" or "being run by
    another job". Now every task ends with status 2, the one line says why (from task 0),
    and nothing is written."""
    spec = _spec(tmp_path)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    procs = []
    for rank in range(3):
        env = {**subprocess_env(), **{k: v.format(r=rank) for k, v in tasks.items()}}
        procs.append(subprocess.run([str(BIN / "mpiopt"), "search", str(spec), "--storage", url],
                                    cwd=tmp_path, env=env, capture_output=True, text=True,
                                    timeout=120))
    assert [p.returncode for p in procs] == [2] * 3, [p.stderr for p in procs]
    said = [ln for p in procs for ln in p.stderr.splitlines() if ln.startswith("mpiopt:")]
    assert len(said) == 1 and "started as one of 3 processes" in said[0], said
    assert "but MPI sees only this one" in said[0]
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("env", [
    {"SLURM_NTASKS": "4", "SLURM_PROCID": "0", "ENVIRONMENT": "BATCH"},     # sbatch's script
    {"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1", "SLURM_PROCID": "0",
     "SLURM_STEP_ID": "3", "ENVIRONMENT": "BATCH"},                       # srun -n 1
    {"SLURM_NTASKS": "4"},                                                  # salloc's shell
    {"PBS_NP": "4", "PBS_VNODENUM": "0", "PBS_TASKNUM": "1"},               # PBS's script
    {"FLUX_JOB_SIZE": "1", "FLUX_TASK_RANK": "0"},                          # flux run -n 1
    {}])
def test_one_process_a_batch_job_runs_alone_is_not_taken_for_a_task_of_several(env):
    """A batch script's own environment gives the allocation's size (SLURM_NTASKS, PBS_NP)
    with the script's task number: mpiopt run there alone is a single-process study."""
    from mpiopt.run.launcher import launcher_count

    assert launcher_count(env) is None
