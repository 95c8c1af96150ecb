"""examples/slurm/ under a real Slurm: a one-node cluster (tests/slurmcluster.py) runs the
scripts as they ship, through sbatch. The requeue script is stopped by `--signal=USR1@N`
before a short walltime, requeues itself and resumes; the array script's tasks share one
study and its budget, also when one of them is cancelled mid-study.

Every evaluation of the objective that runs to its end leaves a line in a log
(tests/objectives/batch.py), so "every trial finished once" is counted from what ran, not
only from what the database says."""
from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest

import yaml

import conftest
from conftest import BIN, EXAMPLES, ROOT, mpiopt
from mpiopt.trial import StudyStatus, TrialStatus
from slurmcluster import SlurmCluster, SlurmUnavailable, missing_binaries

OBJECTIVE = ROOT / "tests" / "objectives" / "batch.py"
REQUEUE_SCRIPT = EXAMPLES / "slurm" / "mpiopt.sbatch"
ARRAY_SCRIPT = EXAMPLES / "slurm" / "mpiopt-array.sbatch"


def _has_join() -> bool:
    """Whether `mpiopt search` takes --join (asked of the real parser, its refusal muted)."""
    from mpiopt.cli.main import build_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(["search", "spec.yaml", "--join"])
    except SystemExit:
        return False
    return True


needs_join = pytest.mark.skipif(
    not _has_join(), reason="`mpiopt search --help` has no --join yet (issue 51: many jobs on "
    "one study); the array tests run as soon as it has")


@pytest.fixture(scope="session")
def slurm_cluster():
    """The session's one-node cluster. Missing binaries fail the tests (`make test` installs
    them); a daemon that cannot run here skips them, with its own words."""
    missing = missing_binaries()
    if missing:
        if os.environ.get("MPIOPT_TEST_NO_SLURM") == "1":
            pytest.skip("MPIOPT_TEST_NO_SLURM=1: Slurm tests skipped")
        pytest.fail(f"Slurm not found ({', '.join(missing)}): run `make test` (it installs "
                    "Debian's slurm-wlm and munge via .ci/ensure-slurm) or set "
                    "MPIOPT_TEST_NO_SLURM=1")
    try:
        cluster = SlurmCluster()
    except SlurmUnavailable as exc:
        pytest.skip(f"Slurm cannot run on this machine: {exc}")
    yield cluster
    cluster.close()


@pytest.fixture
def slurm(slurm_cluster):
    """The session's cluster, with every job a test left cancelled when it ends (a failed
    test's jobs must not run on beside the next test's)."""
    yield slurm_cluster
    slurm_cluster.cancel_all()


def write_spec(tmp_path: Path, trials: int) -> Path:
    spec = {
        "study": {"name": "s"},
        "objective": {"function": f"{OBJECTIVE}:logged", "direction": "minimize"},
        "search_space": {"x": {"type": "real", "low": -5.0, "high": 10.0},
                         "y": {"type": "real", "low": 0.0, "high": 15.0}},
        "search": {"algorithm": "random", "trials": trials, "seed": 5},
        "resources": {"group_size": 1},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def submit(slurm, tmp_path, script, *options, url, sleep, sleep_requeued="0") -> str:
    """sbatch SCRIPT with these options over its own #SBATCH lines; the venv, spec, storage
    and objective's settings reach the job through sbatch's default --export=ALL."""
    out = slurm.run("sbatch", "--parsable", f"--chdir={tmp_path}", *options, str(script),
                    MPIOPT_VENV=str(BIN.parent), MPIOPT_SPEC=str(tmp_path / "s.yaml"),
                    MPIOPT_STORAGE=url, MPIOPT_TEST_LOG=str(tmp_path / "evaluations.log"),
                    MPIOPT_TEST_SLEEP=sleep, MPIOPT_TEST_SLEEP_REQUEUED=sleep_requeued,
                    PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return out.strip().split(";")[0]


def jobs(slurm, job_id: str) -> list[dict]:
    """`scontrol show job` of a job (of every task, for an array) as key=value dicts."""
    out = slurm.run("scontrol", "show", "job", "-o", job_id, check=False)
    return [dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
            for line in out.splitlines() if line.strip()]


def wait_for(what: str, ready, timeout: float, logs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = ready()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {timeout:.0f} s\n" + _tails(logs))


def _tails(logs) -> str:
    return "\n".join(f"--- {p}\n{Path(p).read_text()[-3000:]}" for p in logs if Path(p).exists())


def evaluations(tmp_path) -> list[dict]:
    path = tmp_path / "evaluations.log"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def study_state(url, name="s"):
    return conftest.study_state(url, name)


def assert_every_trial_finished_once(tmp_path, url, budget):
    """Trials 0..budget-1 COMPLETE, and the evaluations that ran to their end are exactly
    those trials' parameter sets, each once: nothing finished was lost, nothing ran twice.
    The study is COMPLETE (the last job of an array to end records it)."""
    study, trials = study_state(url)
    assert study.status is StudyStatus.COMPLETE
    assert sorted(t.number for t in trials) == list(range(budget))
    assert {t.status for t in trials} == {TrialStatus.COMPLETE}
    ran = Counter((e["x"], e["y"]) for e in evaluations(tmp_path))
    assert ran == Counter((t.params["x"], t.params["y"]) for t in trials)
    return trials


def no_process_of(job_id: str) -> bool:
    """No process on this machine runs for the job (its SLURM_JOB_ID in the environment)."""
    marker = f"SLURM_JOB_ID={job_id}".encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes().split(b"\0"):
                return False
        except OSError:
            continue
    return True


# ---- (a) the requeue script ---------------------------------------------------------------
def test_the_requeue_script_stops_before_the_walltime_requeues_itself_and_resumes(slurm, tmp_path):
    """A one-minute job that cannot finish its budget in time: `--signal=USR1@10` stops it
    cleanly (status 130), the script requeues it, and the requeued run (trials now quick)
    resumes the study to its end, each trial finished once."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_spec(tmp_path, trials=60)                 # 60 s of work on one group: never in time
    out = tmp_path / "job.out"
    job = submit(slurm, tmp_path, REQUEUE_SCRIPT, "--nodes=1", "--ntasks=5", "--time=1",
                 "--signal=USR1@10", f"--output={out}", url=url, sleep="1", sleep_requeued="0.05")

    def requeued():
        [state] = jobs(slurm, job)
        assert state["JobState"] in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING"), \
            f"{state['JobState']} before a requeue\n" + _tails([out])
        return int(state["Restarts"]) >= 1

    wait_for("the job requeued", requeued, timeout=150, logs=[out])
    final = wait_for("the requeued job ended", lambda: [s for s in jobs(slurm, job) if s[
        "JobState"] not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED")], 120, logs=[out])
    log = out.read_text()
    assert final[0]["JobState"] == "COMPLETED" and final[0]["ExitCode"] == "0:0", \
        f"{final}\n" + _tails([out, slurm.dir / "slurmctld.log", slurm.dir / "slurmd.log"])
    assert f"run 0 of job {job}" in log and f"run 1 of job {job}" in log, log
    assert "interrupted by SIGUSR1" in log and f"requeueing job {job}" in log, log
    assert "Traceback" not in log and "MPI_Abort" not in log, log
    assert no_process_of(job)

    trials = assert_every_trial_finished_once(tmp_path, url, 60)
    runs = Counter(e["restart"] for e in evaluations(tmp_path))
    assert runs[0] >= 1 and runs[1] >= 1, runs       # both runs finished trials
    assert len(trials) == 60


# ---- (b), (c) the array script: many jobs, one study --------------------------------------
def submit_array(slurm, tmp_path, url, trials: int) -> tuple[str, list[Path]]:
    """Three tasks of the array script, one group each (2 ranks), on a study of `trials`."""
    write_spec(tmp_path, trials=trials)
    job = submit(slurm, tmp_path, ARRAY_SCRIPT, "--array=0-2", "--ntasks=2", "--time=10",
                 f"--output={tmp_path}/task-%a.out", url=url, sleep="0.5")
    return job, [tmp_path / f"task-{i}.out" for i in range(3)]


def ended(slurm, job: str, tasks: int = 3):
    """Every task's final state, once all of them have ended."""
    states = [s for s in jobs(slurm, job) if "ArrayTaskId" in s]
    done = [s for s in states if s["JobState"] not in ("PENDING", "RUNNING", "COMPLETING")]
    return sorted(done, key=lambda s: int(s["ArrayTaskId"])) if len(done) == tasks else None


@needs_join
def test_an_array_of_three_tasks_finishes_one_study_with_exactly_its_budget(slurm, pg_server, tmp_path):
    """sbatch --array=0-2 on one PostgreSQL study: exactly search.trials finished trials,
    each parameter set evaluated once, every task took part and ended on its own."""
    url = pg_server.new_database()
    job, logs = submit_array(slurm, tmp_path, url, trials=60)   # 10 s of work for each task
    final = wait_for("the array ended", lambda: ended(slurm, job), 150, logs=logs)
    assert [(s["JobState"], s["ExitCode"]) for s in final] == [("COMPLETED", "0:0")] * 3, \
        _tails(logs)
    trials = assert_every_trial_finished_once(tmp_path, url, 60)
    assert {e["task"] for e in evaluations(tmp_path)} == {"0", "1", "2"}, _tails(logs)
    assert len(trials) == 60
    assert all(no_process_of(s["JobId"]) for s in final)
    status = mpiopt("status", "s", "--storage", url, check=True).stdout
    assert all(f"slurm {job}_{i}," in status for i in range(3)), status   # each task a job


@needs_join
def test_a_cancelled_array_task_leaves_its_trials_to_the_others(slurm, tmp_path):
    """scancel of one task mid-study (SIGTERM to its ranks, on SQLite: one host): it ends,
    the other two finish the study, and no finished trial is lost or run twice."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    job, logs = submit_array(slurm, tmp_path, url, trials=48)
    wait_for("task 1 finished trials", lambda: sum(
        e["task"] == "1" for e in evaluations(tmp_path)) >= 3, 90, logs=logs)
    slurm.run("scancel", f"{job}_1")
    final = wait_for("the array ended", lambda: ended(slurm, job), 150, logs=logs)
    assert [s["JobState"] for s in final] == ["COMPLETED", "CANCELLED", "COMPLETED"], _tails(logs)
    assert [final[0]["ExitCode"], final[2]["ExitCode"]] == ["0:0", "0:0"], _tails(logs)
    assert "interrupted by SIGTERM" in logs[1].read_text(), _tails(logs)     # a clean stop
    trials = assert_every_trial_finished_once(tmp_path, url, 48)
    by_task = Counter(e["task"] for e in evaluations(tmp_path))
    assert by_task["1"] >= 3 and by_task["0"] and by_task["2"], by_task
    assert len(trials) == 48
    assert all(no_process_of(s["JobId"]) for s in final)
