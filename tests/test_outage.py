"""Database outages under real mpiexec jobs: a PostgreSQL server stopped and started again
mid-study, an SQLite file locked by another process, and an outage longer than
storage.retry_timeout, whose finished results wait in the recovery file for the resume.

Each asserts what users need: the job ends or finishes in bounded time, no finished
result is lost, and nothing is evaluated twice.
"""
from __future__ import annotations

import os
import shlex
import signal
import sqlite3
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from conftest import BIN, ROOT, mpiopt, resume_with, subprocess_env
from mpiopt.kept import read_line
from mpiopt.trial import StudyStatus, TrialStatus

FUNCTIONS = ROOT / "tests" / "objectives" / "functions.py"


def spec_file(tmp_path: Path, trials: int, storage: dict | None = None) -> Path:
    spec = {
        "study": {"name": "o"},
        "objective": {"function": f"{FUNCTIONS}:steady", "direction": "minimize"},
        "search_space": {"x": {"type": "real", "low": -5.0, "high": 10.0},
                         "y": {"type": "real", "low": 0.0, "high": 15.0}},
        "search": {"algorithm": "random", "trials": trials, "seed": 5},
    }
    if storage:
        spec["storage"] = storage
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def state(url):
    from mpiopt.storage import open_storage

    with open_storage(url) as st:
        study = st.get_study("o")
        return study, st.get_trials(study.id)


def start(tmp_path, spec, url, np=3, env=None):
    """The job under mpiexec -n NP, or in a single process where np is None (a process
    group of its own, for os.killpg)."""
    cmd = [str(BIN / "mpiopt"), "search", str(spec), "--storage", url]
    if np:
        cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
    return subprocess.Popen(cmd, cwd=tmp_path, env={**subprocess_env(), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


@contextmanager
def outage_under_way(tmp_path, np, trials, sleep):
    """A job on SQLite whose file another process then locks until the block ends; the
    block starts once the job has written a held result ahead to its recovery file."""
    db = tmp_path / "o.db"
    url = f"sqlite:///{db}"
    spec = spec_file(tmp_path, trials)
    job = start(tmp_path, spec, url, np=np,
                env={"MPIOPT_TEST_SLEEP": str(sleep), "MPIOPT_SQLITE_BUSY_MS": "300"})
    recovery = tmp_path / "o.mpiopt-recovery.jsonl"
    lock = None
    try:
        wait_finished(url, 2, job)
        for _ in range(4):
            lock = sqlite3.connect(db, isolation_level=None, timeout=30)
            lock.execute("BEGIN EXCLUSIVE")   # the database away (a script holding it)
            end = time.monotonic() + 8
            while not recovery.exists() and time.monotonic() < end and job.poll() is None:
                time.sleep(0.1)
            if recovery.exists() or job.poll() is not None:
                break
            # The job met the lock on a write that holds no result (a single process
            # starting its next trial waits for it before running it): nothing to write
            # ahead. The database back for one more trial, then away again.
            lock.close()
            lock = None
            wait_finished(url, sum(t.status.is_finished() for t in state(url)[1]) + 1, job)
        yield job, url, spec, recovery
    finally:
        if lock is not None:
            lock.close()                        # (the lock goes with the connection)
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


def wait_finished(url, n, job, limit_s=90):
    end = time.monotonic() + limit_s
    while time.monotonic() < end and job.poll() is None:
        try:
            if sum(t.status.is_finished() for t in state(url)[1]) >= n:
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError("the study never got going: " + (job.communicate()[1] if job.poll() else ""))


def assert_complete(url, budget):
    study, trials = state(url)
    assert study.status is StudyStatus.COMPLETE
    assert sorted(t.number for t in trials) == list(range(budget))
    assert all(t.status is TrialStatus.COMPLETE for t in trials)
    assert len({(t.params["x"], t.params["y"]) for t in trials}) == budget
    return trials


@contextmanager
def server_stopped_mid_study(tmp_path, pg_server, trials):
    """A 3-rank job on the server, which is stopped once 3 trials finished; started again
    (and the job killed, where it still runs) as the block ends."""
    url = pg_server.new_database()
    spec = spec_file(tmp_path, trials)
    job = start(tmp_path, spec, url, env={"MPIOPT_TEST_SLEEP": "0.3"})
    try:
        wait_finished(url, 3, job)
        pg_server.stop()
        yield job, url, spec
    finally:
        pg_server.start()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


def test_a_postgresql_server_restarted_mid_study_is_ridden_out(tmp_path, pg_server):
    with server_stopped_mid_study(tmp_path, pg_server, 16) as (job, url, _):
        time.sleep(6)                       # groups finish trials while the server is away
        pg_server.start()
        out, err = job.communicate(timeout=180)
    assert job.returncode == 0, out + err
    assert "database unavailable" in out and "database back after" in out
    assert_complete(url, 16)


def test_a_job_killed_during_a_postgresql_outage_runs_no_trial_twice(tmp_path, pg_server):
    """The server stopped, then the whole job killed (kill -9, the walltime's SIGKILL)
    while it waits: every result finished before the kill is in the recovery file. Two
    went missing: the one being written when the server went, since the queue of
    parameter sets is read first and that read met the outage while the result was not
    yet held for the file; and the other groups' results, left unreceived. Those trials
    ran again on resume."""
    with server_stopped_mid_study(tmp_path, pg_server, 12) as (job, url, spec):
        time.sleep(2.5)                     # (every trial begun has finished)
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate(timeout=30)
    recovery = tmp_path / "o.mpiopt-recovery.jsonl"
    assert recovery.is_file()
    proc = mpiopt("search", spec, "--storage", url, "--resume", np=3, cwd=tmp_path, timeout=180,
                  env={**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.05"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "imported" in proc.stdout and not recovery.exists()
    trials = assert_complete(url, 12)
    assert [t.number for t in trials if t.attempt] == []      # nothing ran twice


def test_a_postgresql_server_that_stops_answering_is_an_outage_a_stop_signal_ends(
        tmp_path, pg_server):
    """A server frozen in its tracks (a paused VM, a hung disk under it) keeps its
    connections open and the kernel acknowledges their packets, so no libpq timeout ends a
    statement waiting on it: the coordinator waited without a word, deaf to SIGTERM, for as
    long as the freeze lasted (a 150 s freeze: 150 s of silence). Now a call that waits
    makes mpiopt ask the server for a fresh connection; unanswered, the waiting connection
    is shut down and the outage is ridden out as any other: the progress says so, and a
    SIGTERM ends the job well within Slurm's 30 s, the results kept for the resume."""
    url = pg_server.new_database()
    spec = spec_file(tmp_path, 14)
    job = start(tmp_path, spec, url, env={"MPIOPT_TEST_SLEEP": "0.3"})
    recovery = tmp_path / "o.mpiopt-recovery.jsonl"
    try:
        wait_finished(url, 3, job)
        with pg_server.frozen():
            time.sleep(2.0)
            os.killpg(job.pid, signal.SIGTERM)          # Slurm's, 30 s before its SIGKILL
            started = time.monotonic()
            try:
                out, err = job.communicate(timeout=40)
            except subprocess.TimeoutExpired:
                out, err = "", "the job did not end within 40 s of SIGTERM"
            took = time.monotonic() - started
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    closing = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    assert len(closing) == 1 and "database was unavailable" in closing[0], err
    assert took < 25, took
    kept = [r for r in map(read_line, recovery.read_text().splitlines()) if r["kind"] == "finish"]
    proc = mpiopt("search", spec, "--storage", url, "--resume", np=3, cwd=tmp_path,
                  timeout=180, env={**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.05"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "was running when its job ended" not in proc.stdout, proc.stdout
    assert not recovery.exists()
    trials = assert_complete(url, 14)
    assert not [t.number for t in trials if t.lost_attempts], proc.stdout   # all in order
    by_id = {t.id: t for t in trials}
    for k in kept:                                     # the held results, not run again
        assert by_id[k["trial_id"]].value == k["value"] and by_id[k["trial_id"]].attempt == 0


def test_an_sqlite_file_locked_by_another_process_is_waited_for(tmp_path):
    db = tmp_path / "o.db"
    url = f"sqlite:///{db}"
    spec = spec_file(tmp_path, 12)
    job = start(tmp_path, spec, url, env={"MPIOPT_TEST_SLEEP": "0.3", "MPIOPT_SQLITE_BUSY_MS": "500"})
    try:
        wait_finished(url, 2, job)
        lock = sqlite3.connect(db, isolation_level=None, timeout=30)
        lock.execute("BEGIN EXCLUSIVE")      # as a careless script with the file open would
        time.sleep(5)
        lock.execute("ROLLBACK")
        lock.close()
        out, err = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, out + err
    assert "database unavailable" in out
    assert_complete(url, 12)


@pytest.mark.parametrize("np", [3, None], ids=["3-ranks", "single-process"])
def test_an_outage_past_the_retry_limit_keeps_every_result_for_the_resume(tmp_path, pg_server, np):
    url = pg_server.new_database()
    # Enough trials that the outage starts long before the last (a loaded 2-core CI
    # machine takes seconds to stop the server); the resume runs the rest at 0.05 s each.
    trials = 30
    spec = spec_file(tmp_path, trials, storage={"url": "sqlite:///unused.db", "retry_timeout": "3s"})
    job = start(tmp_path, spec, url, np=np, env={"MPIOPT_TEST_SLEEP": "0.4"})
    try:
        wait_finished(url, 3, job)
        before = {t.number: t.value for t in state(url)[1] if t.status.is_finished()}
        pg_server.stop()
        started = time.monotonic()
        out, err = job.communicate(timeout=120)
        ended_in = time.monotonic() - started
    finally:
        pg_server.start()
        if job.poll() is None:
            job.kill()
    assert job.returncode == 1, out + err
    closing = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    assert len(closing) == 1 and "unavailable" in closing[0] and f"resume with: {resume_with(np)} o" in closing[0]
    recovery = tmp_path / "o.mpiopt-recovery.jsonl"
    assert recovery.is_file() and str(recovery) in closing[0]
    kept = [r for r in map(read_line, recovery.read_text().splitlines()) if r["kind"] == "finish"]
    assert kept                                     # results finished during the outage
    assert ended_in < 3 + 15 + 10 + 20              # retry limit + last pause + wind-down + slack

    env = {**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.05"}
    if np:
        proc = mpiopt("search", spec, "--storage", url, "--resume", np=np, cwd=tmp_path,
                      timeout=180, env=env)
    else:   # the closing line's own command, from another folder (it names the file)
        printed = shlex.split(closing[0].split("resume with: ", 1)[1])
        assert printed[0] == "mpiopt" and printed[-2:] == ["--recovery", str(recovery)]
        (tmp_path / "elsewhere").mkdir()
        proc = mpiopt(*printed[1:], cwd=tmp_path / "elsewhere", timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "imported" in proc.stdout and not recovery.exists()
    trials = assert_complete(url, trials)
    for t in trials:                               # nothing finished before was touched
        if t.number in before:
            assert t.value == before[t.number] and t.attempt == 0
    assert sum(t.attempt == 0 for t in trials) >= len(before) + len(kept)  # kept: not re-run


@pytest.mark.parametrize("np", [3, None], ids=["3-ranks", "single-process"])
def test_a_job_killed_while_it_rides_out_an_outage_keeps_the_result_it_held(tmp_path, np):
    """A result the coordinator retries during an outage waited in its memory: a job
    killed meanwhile (kill -9, a lost node, the walltime's SIGKILL) lost it and the resume
    ran the trial again. It is written ahead to the recovery file at the first failed
    try, so the resume imports it; a run that ends normally leaves no file behind. Under
    mpiexec the other group's results, finished while the coordinator waited (its trial
    and the one sent ahead to it), waited unreceived and were lost too; now they are
    taken in between tries and written ahead as well, so no trial runs twice."""
    with outage_under_way(tmp_path, np, 12, 0.3) as (job, url, spec, recovery):
        time.sleep(2.5)                             # (every trial begun has finished)
        os.killpg(job.pid, signal.SIGKILL)          # the whole job, without a word
        out, err = job.communicate(timeout=30)
    assert recovery.exists(), out + err
    kept = [read_line(line) for line in recovery.read_text().splitlines()]
    assert kept and all(k["status"] == "COMPLETE" for k in kept), kept
    if np is None:     # `mpiopt resume NAME` from another folder: found where the job wrote
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        proc = mpiopt("resume", "o", "--storage", url, cwd=elsewhere, timeout=180,
                      env={**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.05"})
    else:
        proc = mpiopt("search", spec, "--storage", url, "--resume", np=3, cwd=tmp_path,
                      timeout=180, env={**subprocess_env(), "MPIOPT_TEST_SLEEP": "0.05"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "imported" in proc.stdout and not recovery.exists()
    trials = {t.id: t for t in assert_complete(url, 12)}
    for k in kept:                                  # the held results, not run again
        assert trials[k["trial_id"]].value == k["value"]
        assert trials[k["trial_id"]].attempt == 0
    assert [t.number for t in trials.values() if t.attempt] == []     # nothing ran twice
    if np:
        assert len(kept) >= 2, kept                 # (each group's)


@pytest.mark.parametrize("np", [None, 3], ids=["single-process", "3-ranks"])
def test_a_stop_signal_during_an_outage_ends_the_job_at_once_with_the_results_kept(tmp_path, np):
    """SIGTERM while the coordinator rides out an outage: in a single process the signal
    never reached the retry loop, which waited out the whole retry_timeout (10 minutes:
    Slurm's SIGKILL comes 30 s after its SIGTERM); under mpiexec it waited for the end of
    a pause of up to 15 s. Now the job ends within a second or two, the result it held in
    the recovery file."""
    with outage_under_way(tmp_path, np, 40, 0.2) as (job, url, spec, recovery):
        time.sleep(2.0)                                # well into the pauses
        os.killpg(job.pid, signal.SIGTERM)
        started = time.monotonic()
        out, err = job.communicate(timeout=60)
        took = time.monotonic() - started
    closing = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    assert len(closing) == 1 and "kept in" in closing[0] and "--recovery" in closing[0], err
    assert took < 12, took              # (the wind-down's own bound is 10 s under mpiexec)
