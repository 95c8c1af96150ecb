"""Every internal time limit against a trial, a group's part or a job's end that outlasts
it (issue 65, item 1): each limit is set small through its knob, and the study still ends
`study complete`, exit 0, with every trial run once.

The case that started it: a group left with no work was stopped while another group still
ran the study's last, long trial; its ranks went into their exit, whose bound
(MPIOPT_EXIT_GRACE) ran out while MPI_Finalize waited for the long trial, and the job
ended with MPICH's BAD TERMINATION, no mpiopt line, the long trial left RUNNING."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import BIN, on_import, rank0_pid, study_state, subprocess_env
from mpiopt.knobs import EXIT_BACKSTOP_S, EXIT_GRACE_LEAST_S

# The exit's last resort fires at grace + 2 backstops: a part that outlasts it.
EXIT_OUTLASTED_S = EXIT_GRACE_LEAST_S + 2 * EXIT_BACKSTOP_S + 2

SLEEPER = """import time

def f(p):
    time.sleep((p["x"] - 0.5) * 1000 if p["x"] > 0.5 else 0.3)
    return p["x"]


def uneven(p, comm):
    # the group's ranks end their parts of a trial at different times, without collectives
    time.sleep((p["x"] - 0.5) * 1000 if comm.Get_rank() == 0 and p["x"] > 0.5 else 0.3)
    return p["x"]
"""


def _spec(tmp_path: Path, long_s: float, function: str = "f", group_size: int = 1) -> Path:
    """Three queued trials: one of `long_s` seconds, two short ones, on two groups."""
    (tmp_path / "obj.py").write_text(SLEEPER)
    spec = {"study": {"name": "limits"},
            "objective": {"function": f"{tmp_path / 'obj.py'}:{function}", "direction": "minimize"},
            "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
            "search": {"algorithm": "random", "trials": 3, "seed": 1,
                       "initial_trials": [{"x": 0.5 + long_s / 1000}, {"x": 0.1}, {"x": 0.2}]},
            "resources": {"group_size": group_size}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _job(tmp_path: Path, spec: Path, np: int, **knobs) -> subprocess.Popen:
    env = {**subprocess_env(), **{k: str(v) for k, v in knobs.items()}}
    return subprocess.Popen([str(BIN / "mpiexec"), "-n", str(np), str(BIN / "mpiopt"), "search",
                             str(spec), "--storage", f"sqlite:///{tmp_path / 'r.db'}"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _stopping_after_the_summary(tmp_path: Path) -> dict:
    """An environment whose processes stop themselves (SIGSTOP) right after the study's
    summary is printed (mpiopt's Progress.summary wrapped once its module is loaded)."""
    return on_import(tmp_path / "stop-after-summary", ("mpiopt.reporting.progress",), """\
    run(module)
    import signal
    summary = module.Progress.summary

    def summary_then_stop(self, *args, **kwargs):
        summary(self, *args, **kwargs)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSTOP)

    module.Progress.summary = summary_then_stop""")


def _state(pid: int) -> str:
    """The process's state letter in /proc ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _ended_complete(tmp_path: Path, job: subprocess.Popen, out: str, err: str) -> None:
    assert job.returncode == 0, (out[-2000:], err[-3000:])
    assert "study complete: 3 trials (3 complete)" in out, out[-2000:]
    assert "BAD TERMINATION" not in out + err, err[-3000:]
    study, trials = study_state(f"sqlite:///{tmp_path / 'r.db'}", "limits")
    assert study.status.value == "COMPLETE"
    assert sorted(t.status.value for t in trials) == ["COMPLETE"] * 3
    assert [t.attempt for t in trials] == [0, 0, 0]          # nothing ran twice


@pytest.mark.parametrize("knob, value, long_s", [
    ("MPIOPT_EXIT_GRACE", EXIT_GRACE_LEAST_S, EXIT_OUTLASTED_S),   # finalize
    ("MPIOPT_STARTUP_TIMEOUT", 1, 4),                              # the start-up
    ("MPIOPT_SILENCE_LIMIT", 1, 4),                                # the liveness checks
    ("MPIOPT_LEASE_PERIOD", 0.2, 3),                               # the lease: 3 periods
    ("MPIOPT_SQLITE_BUSY_MS", 1, 2),                               # one statement's wait
])
def test_a_trial_that_outlasts_a_limit_ends_the_study_complete(tmp_path, knob, value, long_s):
    """The long trial runs while the other group, its work done, waits for the end."""
    job = _job(tmp_path, _spec(tmp_path, long_s), np=3, **{knob: value})
    try:
        out, err = job.communicate(timeout=120 + long_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    _ended_complete(tmp_path, job, out, err)


def test_a_group_part_that_outlasts_the_group_wait_ends_the_study_complete(tmp_path):
    """MPIOPT_GROUP_WAIT: the leader's part of a group trial goes on 4 s after its other
    rank's part ended, and the other group (its work done) waits meanwhile."""
    job = _job(tmp_path, _spec(tmp_path, 4, function="uneven", group_size=2), np=5,
               MPIOPT_GROUP_WAIT=1)
    try:
        out, err = job.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    _ended_complete(tmp_path, job, out, err)


def test_a_job_end_that_outlasts_the_exit_grace_ends_the_study_complete(tmp_path):
    """Rank 0's closing (its summary written, the study's end and the lease still to be
    recorded) held up past the other ranks' exit grace, as a database that answers slowly
    at the end holds it: the others wait for it before their exit's bound starts. Rank 0
    stops itself right after its summary (a sitecustomize wraps it), so the hold is there
    however late this test reads the summary's line."""
    env = _stopping_after_the_summary(tmp_path)
    job = _job(tmp_path, _spec(tmp_path, 1), np=3, MPIOPT_EXIT_GRACE=EXIT_GRACE_LEAST_S,
               PYTHONPATH=env["PYTHONPATH"])
    try:
        out = ""
        deadline = time.monotonic() + 90
        while "study complete" not in out and time.monotonic() < deadline:
            line = job.stdout.readline()
            if not line:
                break
            out += line
        assert "study complete" in out, out
        rank0 = rank0_pid(job)
        while _state(rank0) not in ("T", "") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(rank0) == "T", "rank 0 did not stop after its summary"
        time.sleep(EXIT_OUTLASTED_S)
        with contextlib.suppress(ProcessLookupError):   # (the launcher ended the job)
            os.kill(rank0, signal.SIGCONT)
        rest, err = job.communicate(timeout=90)
        out += rest
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    _ended_complete(tmp_path, job, out, err)
