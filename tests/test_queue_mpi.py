"""The queue of parameter sets under mpiexec -n 3 (a coordinator and two groups): a set
enqueued into a running study is taken by its next dispatch, search.initial_trials and
--retry-failed run first and exactly once across a kill -9 and a resume. (SIGUSR1, the
Slurm template's "walltime is near", is in test_chaos.py's signal cases.)"""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time


from conftest import BIN, mpiopt, subprocess_env
from test_search_mpi import db_url, trials_of, write_spec
from mpiopt.trial import StudyStatus, TrialStatus


def _job(tmp_path, spec, *extra, env=None):
    cmd = [str(BIN / "mpiexec"), "-n", "3", str(BIN / "mpiopt"), "search", str(spec),
           "--storage", db_url(tmp_path), *extra]
    return subprocess.Popen(cmd, cwd=tmp_path, env=env or subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait(tmp_path, enough, timeout=60):
    """Poll the database until enough(trials) holds; returns those trials."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            trials = trials_of(tmp_path)[1]
        except Exception:
            trials = []
        if trials and enough(trials):
            return trials
        time.sleep(0.05)
    raise AssertionError("the study did not reach the wanted state")


def _statuses(tmp_path) -> list[str]:
    """The trials' statuses by a bare read-only SQLite query: cheap enough to poll often
    on a loaded machine, where a state may last only one trial's length."""
    path = tmp_path / "study.db"
    if not path.exists():
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as conn:
            return [r[0] for r in conn.execute("SELECT status FROM trials ORDER BY number")]
    except sqlite3.Error:
        return []


def _finished(trials):
    return [t for t in trials if t.status.is_finished()]


def test_a_set_enqueued_into_a_running_study_is_taken_at_the_next_dispatch(tmp_path, monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "0.3")
    spec = write_spec(tmp_path, trials=500)      # a budget that never runs out here
    job = _job(tmp_path, spec)
    _wait(tmp_path, lambda ts: len(_finished(ts)) >= 2)
    queued = mpiopt("enqueue", "t", "--set", "x=1.25", "--set", "y=2.5",
                    "--storage", db_url(tmp_path), check=True)
    assert "the running job takes it at its next dispatch" in queued.stdout
    mine = lambda ts: [t for t in ts if t.params == {"x": 1.25, "y": 2.5}]  # noqa: E731
    _wait(tmp_path, lambda ts: any(t.status.is_finished() for t in mine(ts)), timeout=30)
    os.killpg(job.pid, signal.SIGTERM)           # done with it: a clean stop
    out, err = job.communicate(timeout=60)
    assert job.returncode == 130, out + err
    _, trials = trials_of(tmp_path)
    assert len(mine(trials)) == 1 and mine(trials)[0].status is TrialStatus.COMPLETE
    number = mine(trials)[0].number
    assert f"queued as trial {number} " in queued.stdout
    # Taken before the searcher's newer suggestions: only the one dispatch round (both
    # groups, when their results came together) that read the queue just before the
    # enqueue committed may have started newer trials first.
    later = [t for t in trials if t.number > number]
    begun = [t for t in later if t.started_at is not None]   # (one sent ahead and called
    assert begun and sum(t.started_at < mine(trials)[0].started_at for t in begun) <= 2  # back never began)


def test_initial_trials_and_retries_run_first_and_once_across_a_kill(tmp_path, monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "1.0")   # a failure is at once, a success 1 s
    initial = [{"x": -3.0, "y": 1.0}, {"x": 1.0, "y": 2.0}, {"x": 2.0, "y": 3.0},
               {"x": 3.0, "y": 4.0}, {"x": 4.0, "y": 5.0}, {"x": 4.5, "y": 5.5},
               {"x": 5.0, "y": 6.0}]
    spec = write_spec(tmp_path, function="fails_while_told", trials=10, initial_trials=initial,
                      max_initial_failures=10)
    env = {**subprocess_env(), "MPIOPT_TEST_FAIL": "1"}
    job = _job(tmp_path, spec, "--resume-or-start", env=env)   # starts it: it is new
    # #0 failed, #1 and #2 running, the rest queued (or, once #1 succeeded, some sent ahead:
    # RUNNING, not begun, and counted as no lost attempt by the kill)
    deadline = time.time() + 60
    while not {"FAILED", "RUNNING", "PENDING"} <= set(_statuses(tmp_path)):
        assert time.time() < deadline, "the study did not reach the wanted state"
        time.sleep(0.02)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    _, trials = trials_of(tmp_path)
    assert {TrialStatus.RUNNING, TrialStatus.PENDING} <= {t.status for t in trials}
    assert [t.params for t in sorted(trials, key=lambda t: t.number)][:7] == initial
    first = _job(tmp_path, spec, "--resume-or-start", env=env)  # resumes it now
    out, err = first.communicate(timeout=90)
    assert first.returncode == 0, out + err
    _, trials = trials_of(tmp_path)
    for params in initial:        # each queued set ran exactly once (a re-run keeps its row)
        assert sum(t.params == params and t.status.is_finished() for t in trials) == 1
    failed = [t for t in trials if t.status is TrialStatus.FAILED]
    assert failed and all(t.params["x"] < 0 for t in failed)
    last = max(t.number for t in trials)

    proc = mpiopt("search", spec, "--resume", "--retry-failed", "--storage", db_url(tmp_path),
                  np=3, cwd=tmp_path, timeout=90)               # the cause is fixed now
    assert proc.returncode == 0, proc.stderr
    assert f"--retry-failed: {len(failed)} FAILED trial(s)" in proc.stdout
    study, trials = trials_of(tmp_path)
    by_number = {t.number: t for t in trials}
    assert all(by_number[t.number].status is TrialStatus.RETRIED for t in failed)
    retries = [t for t in trials if t.number > last]
    assert [t.params for t in retries] == [t.params for t in failed]   # only those, in order
    assert all(t.status is TrialStatus.COMPLETE for t in retries)
    assert sum(t.status.counts() for t in trials) == 10 and study.status is StudyStatus.COMPLETE

