"""Chaos: real mpiexec jobs driven through every way a job can go wrong.

Each case asserts that the job ends within its bound, its exit status, the one closing
line, the database state (no RUNNING row after any job ended, attempts counted, FAILED
reasons stored), and that a resume then finishes the budget with no finished trial lost
and none run twice. Bounds are generous for a loaded 2-core CI machine: they catch a hang,
not a slow start.
"""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import BIN, ROOT, mpiopt, resume_with, subprocess_env
from mpiopt.objective.processes import descendants
from mpiopt.trial import StudyStatus, TrialStatus

FUNCTIONS = ROOT / "tests" / "objectives" / "functions.py"
START_S = 60          # a job's start-up on a loaded CI machine, at most
STARTUP_LINE = ("mpiopt: interrupted during the start-up, before the study was opened: nothing "
                "was written; to run it, give the same command again")


def spec_file(tmp_path: Path, function: str, trials=8, algorithm="random", objective=None,
              **search) -> Path:
    spec = {
        "study": {"name": "c"},
        "objective": {"function": f"{FUNCTIONS}:{function}", "direction": "minimize",
                      **(objective or {})},
        "search_space": {"x": {"type": "real", "low": -5.0, "high": 10.0},
                         "y": {"type": "real", "low": 0.0, "high": 15.0}},
        "search": {"algorithm": algorithm, "trials": trials, "seed": 11, **search},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def url(db_url):
    """Every case on SQLite and on a real PostgreSQL server (conftest.db_url), but those
    marked `sqlite_only`."""
    return db_url


# For cases whose subject is the ranks, not the database: the engines share the storage
# calls they make, which tests/test_storage.py runs on both, and the kill campaigns and
# tests/test_outage.py run whole jobs on PostgreSQL (the suite must stay within CI's 20
# minutes; these took 70 s on PostgreSQL)
sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def study_state(url: str):
    from mpiopt.storage import open_storage

    storage = open_storage(url)
    try:
        study = storage.get_study("c")
        return study, storage.get_trials(study.id)
    finally:
        storage.close()


def run(tmp_path, url, spec, np=3, *extra, timeout=START_S + 60):
    start = time.monotonic()
    proc = mpiopt("search", spec, "--storage", url, *extra, np=np, cwd=tmp_path, timeout=timeout)
    return proc, time.monotonic() - start


def closing_line(proc) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("mpiopt:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def assert_settled(url, budget=None):
    """No RUNNING row; with a budget: every number once, the study COMPLETE."""
    study, trials = study_state(url)
    assert not [t for t in trials if t.status is TrialStatus.RUNNING]
    if budget is not None:
        assert study.status is StudyStatus.COMPLETE
        assert sorted(t.number for t in trials) == list(range(budget))
        assert all(t.status.is_finished() for t in trials)
    return study, trials


# ---- user code that misbehaves ------------------------------------------------------------
@pytest.mark.parametrize("isolate", [True, False])
def test_sys_exit_is_a_failed_trial_and_the_study_goes_on(tmp_path, url, isolate):
    spec = spec_file(tmp_path, "exits", trials=10, objective={"isolate": isolate})
    proc, wall = run(tmp_path, url, spec)
    assert proc.returncode == 0, proc.stderr
    _, trials = assert_settled(url, 10)
    for t in trials:
        if t.params["x"] > 0:
            assert t.status is TrialStatus.FAILED and "objective called sys.exit(3)" in t.error
        else:
            assert t.status is TrialStatus.COMPLETE


def test_a_trial_that_kills_its_sandboxed_process_fails_alone(tmp_path, url):
    spec = spec_file(tmp_path, "kills_its_process", trials=10)
    proc, _ = run(tmp_path, url, spec)
    assert proc.returncode == 0, proc.stderr
    _, trials = assert_settled(url, 10)
    killed = [t for t in trials if t.params["x"] > 0]
    assert killed and all(t.status is TrialStatus.FAILED for t in killed)
    assert all("objective killed its process: exit status 1" in t.error for t in killed)
    assert all("world rank" in t.error for t in killed)


def test_a_poison_trial_in_the_ranks_own_process_is_failed_after_max_attempts(tmp_path, url,
                                                                            monkeypatch):
    """isolate: false -- os._exit takes the job down; each resume counts a lost attempt,
    and after search.max_attempts the trial is FAILED and the study finishes. (Hydra misses
    a rank gone by os._exit in 1 to 5 jobs of 100 here, and the heartbeats end such a job
    after the silence limit: 5 s instead of the default 60, which cost this test a minute
    or two when it happened.)"""
    monkeypatch.setenv("MPIOPT_SILENCE_LIMIT", "5")
    spec = spec_file(tmp_path, "kills_its_process", trials=3, objective={"isolate": False},
                     max_attempts=2)
    proc, _ = run(tmp_path, url, spec, 2)
    assert proc.returncode != 0
    for t in resume_until_done(tmp_path, url, spec, 2, budget=3):
        assert t.error.startswith("killed its process 2 times (last: rank 1, host "), t.error


@sqlite_only
def test_a_result_being_written_is_not_lost_when_the_next_trial_kills_the_job(tmp_path, url,
                                                                              monkeypatch):
    """isolate: false, one group: trials 0 and 1 complete (x <= 0), 2 and 3 kill their
    process. Each completing trial's result meets a held write lock (a slow database).
    Trial 2 was sent ahead and began as trial 1's result left, so the job died while rank
    0 waited to write that result: trial 1 stayed RUNNING, ran again on resume and was
    charged the poison trial's lost attempts. Now a trial that can end the job starts
    only once its group's last result is written."""
    monkeypatch.setenv("MPIOPT_SILENCE_LIMIT", "5")
    spec = spec_file(tmp_path, "kills_its_process_after_a_slow_write", trials=4, seed=20,
                     objective={"isolate": False}, max_attempts=1)
    stop = threading.Event()
    holder = threading.Thread(target=_hold_the_write_lock_when_asked, args=(tmp_path, url, stop))
    holder.start()
    try:
        proc, _ = run(tmp_path, url, spec, 2)
    finally:
        stop.set()
        holder.join(30)
    assert proc.returncode != 0
    _, trials = study_state(url)
    assert [(t.number, t.status) for t in trials if t.params["x"] <= 0] == \
        [(0, TrialStatus.COMPLETE), (1, TrialStatus.COMPLETE)], proc.stdout + proc.stderr
    resume_until_done(tmp_path, url, spec, 2, budget=4)


@sqlite_only
def test_a_result_sent_but_not_yet_written_survives_a_kill_of_rank_0(tmp_path, url):
    """One group: the first trial's result reaches rank 0, whose write of it waits on a
    held lock (a slow database), and rank 0 is killed -9 meanwhile (the launcher then
    kills the group). The result lived only in memory, and the trial ran again on
    resume; now the leader keeps it on file before it sends it (mpiopt.kept), the
    resume imports it, and no trial runs twice."""
    spec = spec_file(tmp_path, "asks_for_a_held_write_once", trials=3)
    stop = threading.Event()
    holder = threading.Thread(target=_hold_the_write_lock_when_asked, args=(tmp_path, url, stop))
    holder.start()
    try:
        job = _start(tmp_path, url, spec, 2)
        end = time.monotonic() + START_S
        while not (tmp_path / "held").exists() and time.monotonic() < end and job.poll() is None:
            time.sleep(0.01)
        assert (tmp_path / "held").exists(), "the first trial never asked for the lock"
        time.sleep(0.5)                   # (its result sent; rank 0 waits on the lock)
        _kill(job, "rank0")
        _ended(job, 30, "a job went on after rank 0 was killed")
    finally:
        stop.set()
        holder.join(30)
    _, trials = study_state(url)
    assert not any(t.status.is_finished() for t in trials)      # (the case: nothing written)
    proc, _ = run(tmp_path, url, spec, 2, "--resume")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_settled(url, 3)
    ran = (tmp_path / "ran").read_text().splitlines()
    assert len(ran) == len(set(ran)) == 3, ran
    assert "finished result(s) that the groups kept on file" in proc.stdout + proc.stderr
    assert not list(tmp_path.glob("*.mpiopt-*")), list(tmp_path.iterdir())     # (nor kept)


def _hold_the_write_lock_when_asked(folder: Path, url: str, stop: threading.Event) -> None:
    """Whenever a trial asks (`finished`): take SQLite's write lock, say so (`held`), keep
    it 1.5 s, then wait for the trial to take back its question."""
    import sqlite3

    path = url.split("///", 1)[1]
    while not stop.is_set():
        if not (folder / "finished").exists():
            time.sleep(0.01)
            continue
        con = sqlite3.connect(path, timeout=10, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")
            (folder / "held").touch()
            stop.wait(1.5)
            con.execute("ROLLBACK")
        finally:
            con.close()
            (folder / "held").unlink(missing_ok=True)   # (not made where the lock failed)
        end = time.monotonic() + 20
        while (folder / "finished").exists() and time.monotonic() < end and not stop.is_set():
            time.sleep(0.01)


def resume_until_done(tmp_path, url, spec, np, budget):
    """Resume until a job finishes the study; every trial with x > 0 must then be FAILED
    (after its lost attempts), every other one COMPLETE (never charged another's lost
    attempts). Returns the first. (Where every trial of the budget drew x > 0, the study
    ends FAILED, exit 1, as any study whose trials all failed.)"""
    for _ in range(12):
        proc, _ = run(tmp_path, url, spec, np, "--resume")
        all_failed = proc.returncode == 1 and f"mpiopt: all {budget} trials failed" in proc.stderr
        if proc.returncode == 0 or all_failed:
            break
    assert proc.returncode == 0 or all_failed, proc.stdout + proc.stderr
    study, trials = assert_settled(url)
    assert study.status is (StudyStatus.FAILED if all_failed else StudyStatus.COMPLETE)
    assert sorted(t.number for t in trials) == list(range(budget))
    assert all(t.status.is_finished() for t in trials)
    poison = [t for t in trials if t.params["x"] > 0]
    assert all_failed is all(t.status is TrialStatus.FAILED for t in trials)
    assert poison and all(t.status is TrialStatus.FAILED for t in poison)
    assert all(t.status is TrialStatus.COMPLETE for t in trials if t.params["x"] <= 0)
    return poison


@sqlite_only
def test_a_rank_that_stops_answering_ends_the_job_and_counts_a_lost_attempt(tmp_path, url,
                                                                            monkeypatch):
    """SIGSTOP in a trial: the rank neither dies nor answers, and no launcher notices (nor
    did hydra, about once in a few hundred jobs, for a rank gone by os._exit). Its
    heartbeats stop: the job ends within the silence limit with one line, the stopped trial
    stays RUNNING (the resume counts a lost attempt), and resumes then finish the study."""
    limit = 3
    monkeypatch.setenv("MPIOPT_SILENCE_LIMIT", str(limit))
    spec = spec_file(tmp_path, "stops_its_process", trials=3, objective={"isolate": False},
                     max_attempts=2)
    proc, wall = run(tmp_path, url, spec, 3)
    assert proc.returncode != 0
    line = closing_line(proc)
    assert f"sent no heartbeat for {limit}s" in line and f"resume with: {resume_with(3)} c" in line
    assert wall < START_S + limit + 15
    _, trials = study_state(url)
    running = [t for t in trials if t.status is TrialStatus.RUNNING]
    assert running and all(t.params["x"] > 0 for t in running)   # stopped; the rest INTERRUPTED
    stopped = resume_until_done(tmp_path, url, spec, 3, budget=3)
    assert all(t.error.startswith("killed its process 2 times") for t in stopped)


@sqlite_only
def test_a_silent_coordinator_ends_the_job_from_the_groups(tmp_path, url, monkeypatch):
    """Rank 0 stopped (SIGSTOP): the leaders stop hearing its heartbeats and end the job
    with MPI_Abort and one line; a resume finishes the budget with nothing lost."""
    limit = 3
    monkeypatch.setenv("MPIOPT_SILENCE_LIMIT", str(limit))
    monkeypatch.setenv("MPIOPT_LEASE_PERIOD", "1")
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "0.2")
    spec = spec_file(tmp_path, "steady", trials=30)
    job = _start(tmp_path, url, spec, 3)
    assert _wait_progress(url, 0, job)
    _, before = study_state(url)
    finished = {t.number: t.value for t in before if t.status.is_finished()}
    lines, err = _stop_rank0_until_the_job_ends(job, limit + 30)
    assert lines and all("the coordinator (rank 0) has been silent for" in ln and
                         f"resume with: {resume_with(3)} c" in ln for ln in lines), err
    time.sleep(3.5)                           # the stopped job's lease goes stale
    proc, _ = run(tmp_path, url, spec, 3, "--resume")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = assert_settled(url, 30)
    assert all(t.value == finished[t.number] for t in trials if t.number in finished)


def test_a_coordinator_stopped_during_start_up_ends_the_job_from_the_groups(tmp_path, monkeypatch):
    """Rank 0 stopped (SIGSTOP) while it waits for a rank slow to set up, before any
    heartbeat runs: the other ranks give up on it after twice MPIOPT_STARTUP_TIMEOUT and
    end the job with one line; nothing was written (there is nothing to resume)."""
    monkeypatch.setenv("MPIOPT_STARTUP_TIMEOUT", "4")
    monkeypatch.setenv("MPIOPT_TEST_SLOW_RANK", "1")
    monkeypatch.setenv("MPIOPT_TEST_SLOW_IMPORT_S", "2")
    mark = tmp_path / "rank-1-importing"
    monkeypatch.setenv("MPIOPT_TEST_SLOW_MARK", str(mark))
    db = tmp_path / "c.db"
    job = _start(tmp_path, f"sqlite:///{db}", spec_file(tmp_path, "steady", trials=4), 3)
    end = time.monotonic() + START_S      # rank 1 imports the objective: rank 0 sent the spec
    while not mark.exists() and time.monotonic() < end and job.poll() is None:
        time.sleep(0.05)
    assert mark.exists(), job.communicate()
    lines, err = _stop_rank0_until_the_job_ends(job, 2 * 4 + 10 + 30)
    assert len(lines) == 1 and "rank 1 on " in lines[0] and "rank 0 sent" in lines[0] and \
        "not within 8s" in lines[0] and "nothing was written" in lines[0], err
    assert not db.exists()


@pytest.mark.parametrize("isolate", [True, False])
@sqlite_only
def test_trial_timeout_fails_the_trial_and_the_study_goes_on(tmp_path, url, isolate):
    spec = spec_file(tmp_path, "never_returns", trials=8, objective={"isolate": isolate},
                     trial_timeout="1s")
    proc, wall = run(tmp_path, url, spec)
    assert proc.returncode == 0, proc.stderr
    _, trials = assert_settled(url, 8)
    late = [t for t in trials if t.params["x"] > 0]
    assert late and all(t.status is TrialStatus.FAILED for t in late)
    assert all(t.error.startswith("timed out after 1s") for t in late), [t.error for t in late]


@pytest.mark.parametrize("isolate", [True, False])
def test_programs_a_trial_started_end_with_it_and_do_not_keep_the_job(tmp_path, monkeypatch,
                                                                      isolate):
    """A program a trial left running (a Popen not waited for) or was running when its
    deadline killed it (subprocess.run) held the job's output pipes, and mpiexec waited for
    it after every rank had exited: the study below finished in seconds and the job took as
    long as the program (measured: 102 s for a 100-s program). Now a sandboxed trial's
    process group goes with its worker, and a rank ends what its in-process trials left.
    And a trial's terminate() of its own program works: the program no longer inherits
    the SIGTERM its rank or worker ignores (the trial waited until its deadline)."""
    mark = f"{300 + random.random():.6f}"          # sleep's argument: finds its processes
    monkeypatch.setenv("MPIOPT_TEST_MARK", mark)
    url = f"sqlite:///{tmp_path / 'p.db'}"
    spec = spec_file(tmp_path, "starts_a_program", trials=6, trial_timeout="2s",
                     objective={"isolate": isolate})
    try:
        proc, wall = run(tmp_path, url, spec)
        left = subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True, text=True)
    finally:
        subprocess.run(["pkill", "-f", f"sleep {mark}"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert wall < START_S, wall
    assert left.stdout == "", "a trial's program outlived the job"
    _, trials = assert_settled(url, 6)
    by_kind = {x > 0 for x in (t.params["x"] for t in trials)}
    assert by_kind == {True, False}, "both kinds of trial ran"
    for t in trials:
        if t.params["x"] > 0:
            assert t.status is TrialStatus.COMPLETE
        else:
            assert t.status is TrialStatus.FAILED and t.error.startswith("timed out after 2s")


@pytest.mark.parametrize("isolate", [True, False])
def test_a_trial_may_use_process_pools_and_their_workers_end_with_it(tmp_path, monkeypatch,
                                                                     isolate):
    """A sandboxed trial's multiprocessing.Pool or ProcessPoolExecutor failed every trial
    ("daemonic processes are not allowed to have children"); and a Pool's terminate() (its
    context manager's exit) waited for ever on workers that inherited the handlers of the
    process that forked them (the worker's or the rank's: do nothing on SIGTERM), so a
    trial in the rank's process held its group until the job was killed. A child forked
    by hand that ends with sys.exit came back into mpiopt's code as a copy of the worker
    or rank: its "sys.exit" was read as the trial's result (every trial FAILED), or sent
    over MPI (the job ended on a silent coordinator). Now all of these work, and a Pool
    still working at the trial's timeout goes with the trial."""
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("MPIOPT_TEST_PIDS", str(pids))
    url = f"sqlite:///{tmp_path / 'p.db'}"
    spec = spec_file(tmp_path, "uses_processes", trials=8, trial_timeout="3s",
                     objective={"isolate": isolate})
    proc, wall = run(tmp_path, url, spec)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert wall < START_S, wall
    _, trials = assert_settled(url, 8)
    kinds = {"late" if t.params["x"] > 7 else "pool" if t.params["x"] > 0 else "executor"
             for t in trials}
    assert kinds == {"late", "pool", "executor"}, kinds
    for t in trials:
        if t.params["x"] > 7:
            assert t.status is TrialStatus.FAILED and t.error.startswith("timed out after 3s")
        else:
            assert t.status is TrialStatus.COMPLETE, t.error
    alive = [p.name for p in pids.iterdir() if Path(f"/proc/{p.name}").exists()
             and "Z" not in Path(f"/proc/{p.name}/stat").read_text().split()[2]]
    assert len(list(pids.iterdir())) >= 4 and not alive, alive


SPAWNS = """
import multiprocessing
from dataclasses import dataclass


@dataclass
class Point:
    x: float


def square(point):
    return Point(point.x * point.x)


def f(params):
    with multiprocessing.get_context("{method}").Pool(2) as pool:
        return sum(p.x for p in pool.map(square, [Point(params["x"]), Point(1.0)]))
"""


@pytest.mark.parametrize("method, isolate", [("spawn", True), ("forkserver", False)])
def test_a_pool_that_spawns_its_workers_imports_the_objective_s_module(tmp_path, method,
                                                                       isolate):
    """A pool's workers started by spawn or forkserver (Python 3.14's default on Linux)
    import, by name, the module of each function and class they are sent: under a name
    only the rank knew, they died of ModuleNotFoundError and every trial waited for its
    timeout. The objective's module is imported under the name its folder gives it."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "pooled.py").write_text(SPAWNS.format(method=method))
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({
        "study": {"name": "c"},
        "objective": {"function": "code/pooled.py:f", "direction": "minimize",
                      "isolate": isolate},
        "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
        "search": {"algorithm": "random", "trials": 4, "trial_timeout": "20s"}}))
    url = f"sqlite:///{tmp_path / 's.db'}"
    proc, _ = run(tmp_path, url, spec)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = assert_settled(url, 4)
    assert all(t.status is TrialStatus.COMPLETE for t in trials), [t.error for t in trials]
    assert "ModuleNotFoundError" not in proc.stderr


@pytest.mark.parametrize("function, grace, line", [
    ("leaves_a_thread", "GRACE_S",
     r"mpiopt: rank 1 on .*: \d+ thread\(s\) the objective started \(left-running"),
    ("blocks_the_exit", "EXIT_GRACE_S",
     r"mpiopt: rank 1 on .*: the exit \(atexit functions .*\) still running after \d+s; "
     r"leaving without it$"),
])
def test_what_a_trial_left_behind_does_not_keep_the_job(tmp_path, function, grace, line,
                                                        monkeypatch):
    """Python's exit waits without a limit for every non-daemon thread, then for the atexit
    functions and MPI_Finalize: a trial in the rank's process that left a thread running,
    or registered an exit function that blocks (a tracker's last upload), kept its rank,
    and the job, alive after the study had ended COMPLETE (for the thread's 300 s; still
    running at 40 s). Now the rank waits GRACE_S for threads and EXIT_GRACE_S for the
    rest, says so in one line and ends with the study's status."""
    import mpiopt.run.leftover_threads as ending

    monkeypatch.setenv("MPIOPT_EXIT_GRACE", "11")   # (the shortest it takes; default 30)
    url = f"sqlite:///{tmp_path / 't.db'}"
    spec = spec_file(tmp_path, function, trials=4, objective={"isolate": False})
    proc, wall = run(tmp_path, url, spec, 2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert wall < START_S + (ending.exit_grace_s() if grace == "EXIT_GRACE_S"
                             else getattr(ending, grace)), wall
    assert_settled(url, 4)
    said = closing_line(proc)
    assert re.match(line, said), said
    assert "BAD TERMINATION" not in proc.stdout + proc.stderr


def test_a_finished_job_ends_cleanly_every_time(tmp_path):
    """Every rank ends through a bounded exit (mpiopt.run.leftover_threads). One that ended
    with os._exit after MPI_Finalize skipped MPICH's own exit handlers, and mpiexec took
    such a rank for a crash and killed the others: BAD TERMINATION, exit status 9, in 4 of
    20 jobs. Six jobs in a row must end with status 0 and nothing else said (every other
    job of the suite asserts its status too)."""
    spec = spec_file(tmp_path, "branin", trials=4)
    for attempt in range(6):
        url = f"sqlite:///{tmp_path / f't{attempt}.db'}"
        proc, _ = run(tmp_path, url, spec, 3)
        assert proc.returncode == 0, (attempt, proc.stdout[-2000:] + proc.stderr)
        assert "BAD TERMINATION" not in proc.stdout + proc.stderr, attempt
        assert not [ln for ln in proc.stderr.splitlines() if ln.startswith("mpiopt:")]


@pytest.mark.parametrize("np", [2, None], ids=["2-ranks", "single-process"])
@sqlite_only
def test_a_trial_deaf_to_its_timeout_ends_the_job_and_is_not_run_again(tmp_path, url, np):
    """In a single process too: there the loop itself is in the trial's code, and the trial
    ran on past its timeout for ever (or, had it returned, was recorded COMPLETE)."""
    spec = spec_file(tmp_path, "deaf", trials=6, objective={"isolate": False}, trial_timeout="1s")
    proc, wall = run(tmp_path, url, spec, np)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = closing_line(proc)
    assert "did not stop" in line and f"resume with: {resume_with(np)} c --storage" in line
    _, trials = assert_settled(url)
    deaf = [t for t in trials if t.status is TrialStatus.FAILED]
    assert len(deaf) == 1 and "timed out after 1s" in deaf[0].error
    assert wall < START_S + 1 + 5 + 10 + 10
    # the stuck group's BYE is not waited for (it would never come): the study ends at the
    # timeout + grace, not WIND_DOWN_S later (it took 16 s when it was waited for)
    from mpiopt.knobs import WIND_DOWN_S

    took = re.search(r"^study interrupted: .* in ([0-9.]+)s(, .*)?$", proc.stdout, re.M)
    assert took and float(took.group(1)) < 1 + 5 + WIND_DOWN_S, proc.stdout


def test_a_trial_holding_the_interpreter_lock_in_a_single_process_still_ends_the_job(tmp_path):
    """Where the watch thread cannot run (the trial holds Python's lock in a C call),
    faulthandler's thread ends the process BACKSTOP_S after the trial's limit, with every
    thread's stack; the trial stays RUNNING for the resume to settle."""
    from mpiopt.parallel.local import BACKSTOP_S

    url = f"sqlite:///{tmp_path / 'g.db'}"
    spec = spec_file(tmp_path, "holds_the_lock", trials=4, objective={"isolate": False},
                     trial_timeout="1s")
    proc, wall = run(tmp_path, url, spec, None)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Timeout (" in proc.stderr and "most recent call first" in proc.stderr
    assert wall < START_S + 1 + 5 + BACKSTOP_S + 10
    _, trials = study_state(url)
    assert [t.status for t in trials if t.params["x"] > 0] == [TrialStatus.RUNNING]


def test_a_trial_in_a_single_process_past_the_hard_edge_ends_the_job(tmp_path):
    """time_limit + grace with a trial in the one process that never returns: INTERRUPTED
    (it runs again on resume) and the closing line, where the job ran on for ever."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    spec = spec_file(tmp_path, "deaf", trials=6, objective={"isolate": False},
                     time_limit="1s", grace="2s")
    proc, wall = run(tmp_path, url, spec, None)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "time limit + grace reached" in closing_line(proc)
    assert wall < START_S + 1 + 2 + 10
    study, trials = assert_settled(url)
    assert study.status is StudyStatus.INTERRUPTED
    assert [t.status for t in trials if t.params["x"] > 0] == [TrialStatus.INTERRUPTED]


def test_a_trial_in_a_single_process_deaf_to_a_stop_signal_ends_the_job(tmp_path):
    """SIGTERM to a single-process study whose trial swallows the exception it raises: the
    job ran until the trial returned (never) or a SIGKILL; under mpiexec the coordinator's
    wind-down bounds it, and here the watch does (local.STOP_WAIT_S)."""
    from mpiopt.parallel.local import STOP_WAIT_S

    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = spec_file(tmp_path, "stubborn", trials=4, objective={"isolate": False})
    job = _start(tmp_path, url, spec, None)
    try:
        _wait_running(url)
        os.killpg(job.pid, signal.SIGTERM)
        started = time.monotonic()
        out, err = job.communicate(timeout=STOP_WAIT_S + 30)
        took = time.monotonic() - started
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 130, out + err
    line = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    assert len(line) == 1 and "interrupted by SIGTERM: the running trial did not stop" in line[0]
    assert "resume with: mpiopt resume c" in line[0]
    assert took < STOP_WAIT_S + 10
    study, trials = assert_settled(url)
    assert study.status is StudyStatus.INTERRUPTED
    assert [t.status for t in trials] == [TrialStatus.INTERRUPTED]


def test_a_single_process_study_whose_objective_replaced_the_stop_handlers_still_stops(
        tmp_path):
    """An objective in the process that installs its own SIGTERM handler (a training
    framework's, for Slurm's requeue) and ignores SIGINT: the study ran all its trials
    under SIGTERM and Ctrl-C (and a real job would be killed at Slurm's KillWait, its
    trial lost). mpiopt's handlers are put back after each trial, and a signal the
    objective's handler took ends the study after that trial, whose result is kept."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    spec = spec_file(tmp_path, "own_handlers", trials=200, objective={"isolate": False})
    job = _start(tmp_path, url, spec, None)
    try:
        _wait_progress(url, 2, job)
        os.kill(job.pid, signal.SIGTERM)
        out, err = job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 130, out + err
    assert "interrupted by SIGTERM" in closing_line(subprocess.CompletedProcess([], 0, out, err))
    study, trials = study_state(url)
    assert study.status is StudyStatus.INTERRUPTED
    done = [t for t in trials if t.status is TrialStatus.COMPLETE]
    assert 3 <= len(done) < 20, len(done)
    assert all(t.status in (TrialStatus.COMPLETE, TrialStatus.INTERRUPTED) for t in trials)


def test_a_single_process_study_whose_output_is_closed_stops_in_order(tmp_path):
    """`mpiopt search spec.yaml | head`: the progress line that met the closed pipe ended
    the study as a loop failure, its summary then raised again, and the job exited 0 with
    no line, its lease held. Now it stops as for a signal: exit 130, the closing line on
    stderr, the study INTERRUPTED with no trial left RUNNING, and the resume finishes it."""
    url = f"sqlite:///{tmp_path / 'p.db'}"
    spec = spec_file(tmp_path, "sleepy", trials=12)
    job = _start(tmp_path, url, spec, None)
    # (the reads below wait on the job: a job that never ends is killed after 60 s)
    watchdog = threading.Timer(60, lambda: os.killpg(job.pid, signal.SIGKILL))
    watchdog.start()
    try:
        for _ in range(3):
            job.stdout.readline()
        job.stdout.close()                               # the reader goes away (`| head -3`)
        _, err = job.communicate(timeout=60)
    finally:
        watchdog.cancel()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 130, err
    line = closing_line(subprocess.CompletedProcess([], 0, "", err))
    assert "the output was closed" in line and "resume with: mpiopt resume" in line, err
    study, trials = study_state(url)
    assert study.status is StudyStatus.INTERRUPTED and not study.lease.live
    assert not any(t.status is TrialStatus.RUNNING for t in trials)
    proc = mpiopt("resume", "c", "--storage", url, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_settled(url, 12)


def test_a_nohup_study_stays_deaf_to_sighup(tmp_path):
    """`nohup mpiopt search ...`, the README's advice for interactive studies: the PyPI
    MPICH's UCX replaced nohup's SIG_IGN for SIGHUP with a handler of its own at MPI's
    start, so when the terminal closed the study went on printing UCX's debug log into its
    output. Now nohup's choice stands: the study finishes as if nothing had happened."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    spec = spec_file(tmp_path, "sleepy", trials=8)
    job = subprocess.Popen(["nohup", str(BIN / "mpiopt"), "search", str(spec), "--storage", url],
                           cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_running(url)
        os.kill(job.pid, signal.SIGHUP)                  # (nohup exec'd mpiopt: same pid)
        out, err = job.communicate(timeout=START_S + 60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 0, out + err
    assert "UCX" not in out + err and "DEBUG" not in out + err, (out + err)[-2000:]
    assert_settled(url, 8)


@pytest.mark.parametrize("failing_rank", [1, 0])
def test_a_rank_whose_part_fails_ends_a_group_left_in_a_collective(tmp_path, monkeypatch,
                                                                   failing_rank):
    """One rank of a two-rank group fails between two collectives, as a GPU out of memory
    on one rank does; its partner waits in the second one for ever. The job hung (a member
    failing: for ever, nothing recorded; the leader failing: its partner's stale collective
    met the next trial's). Now the failed rank waits MPIOPT_GROUP_WAIT, records the trial
    FAILED and the job ends with the resume line; the resume does not run it again."""
    monkeypatch.setenv("MPIOPT_GROUP_WAIT", "3")
    monkeypatch.setenv("MPIOPT_TEST_FAILING_RANK", str(failing_rank))
    url = f"sqlite:///{tmp_path / 'g.db'}"
    spec = spec_file(tmp_path, "one_rank_fails", trials=6)
    spec.write_text(spec.read_text() + "resources: {group_size: 2}\n")
    proc, wall = run(tmp_path, url, spec, 5)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert wall < START_S + 3 + 10 + 10, wall
    line = closing_line(proc)
    assert "did not end their part within 3s" in line and f"resume with: {resume_with(5)} c" in line
    _, trials = assert_settled(url)
    broken = [t for t in trials if t.status is TrialStatus.FAILED]
    assert broken and all(t.params["x"] > 0 for t in broken)
    assert all("out of memory on this rank's device" in t.error and
               "left waiting in a collective" in t.error for t in broken), [t.error for t in broken]
    proc2, _ = run(tmp_path, url, spec, 5, "--resume")
    _, after = assert_settled(url)
    again = {t.number: t for t in after}
    assert all(again[t.number].status is TrialStatus.FAILED and again[t.number].error == t.error
               and again[t.number].attempt == t.attempt for t in broken)
    assert len(after) > len(trials), "the resume went on with the study"


def test_a_part_failing_after_the_last_collective_fails_the_trial_and_the_study_goes_on(tmp_path):
    """A rank's part fails but every rank comes back (after the last collective, or on
    every rank): the trial is FAILED with the failing rank's error, the group goes on."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    spec = spec_file(tmp_path, "fails_after_the_collectives", trials=12)
    spec.write_text(spec.read_text() + "resources: {group_size: 2}\n")
    proc, wall = run(tmp_path, url, spec, 5)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = assert_settled(url, 12)
    kinds = set()
    for t in trials:
        x = t.params["x"]
        kinds.add((x > 0) + (x > 5))
        if x > 5:
            assert t.status is TrialStatus.FAILED and "every rank" in t.error
        elif x > 0:
            assert t.status is TrialStatus.FAILED and "after the last collective" in t.error
            assert "world rank 2" in t.error or "world rank 4" in t.error, t.error
        else:
            assert t.status is TrialStatus.COMPLETE and t.metrics["ranks"] == 2
    assert kinds == {0, 1, 2}, "every kind of trial ran"


def test_a_deadline_heard_at_a_report_stops_every_rank_of_the_group(tmp_path):
    """A function taking `comm` and `report`: every rank's report() returns the leader's
    answer, so a trial past its deadline stops on every rank at the same step and the
    study goes on (the members had no report at all: their part failed at the first one
    while the leader waited in the next collective)."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    spec = spec_file(tmp_path, "reports_every_step", trials=8, trial_timeout="1s")
    spec.write_text(spec.read_text() + "resources: {group_size: 2}\n")
    proc, wall = run(tmp_path, url, spec, 5)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = assert_settled(url, 8)
    slow = [t for t in trials if t.params["x"] > 0]
    assert slow and len(slow) < 8, "both kinds of trial ran"
    for t in trials:
        if t.params["x"] > 0:
            assert t.status is TrialStatus.FAILED and t.error.startswith("timed out after 1s"), t.error
        else:
            assert t.status is TrialStatus.COMPLETE


def _fails_where_x_is_positive(tmp_path, function: str, error_start: str, **objective):
    """A study of 10 trials whose function fails for x > 0 with an error that starts with
    `error_start` (and completes otherwise): the job ends in order and the study goes on
    through the failures. Returns the trials."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    spec = spec_file(tmp_path, function, trials=10, max_initial_failures=10, objective=objective)
    proc, _ = run(tmp_path, url, spec, 3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = assert_settled(url, 10)
    assert {t.params["x"] > 0 for t in trials} == {True, False}, "both kinds of trial ran"
    for t in trials:
        if t.params["x"] > 0:
            assert t.status is TrialStatus.FAILED and t.error.startswith(error_start), t.error
        else:
            assert t.status is TrialStatus.COMPLETE
    return trials


@pytest.mark.parametrize("isolate", [True, False])
@pytest.mark.parametrize("function, error", [
    ("raises_keyboard_interrupt", "KeyboardInterrupt (world rank"),
    ("raises_cancelled", "CancelledError: the data server went away"),
    ("raises_unprintable", "Unprintable: <str() of the exception failed: RuntimeError>")])
def test_an_odd_exception_the_objective_raises_fails_its_trial(tmp_path, isolate, function,
                                                               error):
    """A KeyboardInterrupt or asyncio's CancelledError (BaseExceptions, not Exceptions), or
    an exception whose str() raises, went past the trial's error handling: in the rank's
    process the group rank ended (the job ended 60 s later with the heartbeat line, or at
    once with "rank 1 failed"); in the sandbox the trial was "killed its process: exit
    status 0". Now each fails its trial and the study goes on."""
    _fails_where_x_is_positive(tmp_path, function, error, isolate=isolate)


@pytest.mark.parametrize("isolate", [True, False])
def test_a_bad_report_fails_its_trial_and_the_study_goes_on(tmp_path, isolate):
    """report("warm-up", value) from a sandboxed function failed in its rank, not in the
    function, and ended the job (exit 9); now it raises in the function's own code, and
    the trial is FAILED saying what report() takes."""
    _fails_where_x_is_positive(tmp_path, "bad_report", "TypeError: report(epoch, value): epoch "
                               "must be an integer, got str 'warm-up'", isolate=isolate)


def test_a_trial_calling_the_world_communicator_fails_at_once_and_the_study_goes_on(tmp_path):
    """A function taking `comm` whose code calls MPI.COMM_WORLD.Barrier() (which the
    coordinator and the other groups never join) waited for ever with nothing printed;
    now that call raises at once, the trial is FAILED with what to use instead, and the
    study goes on. Asking COMM_WORLD for its rank and size still works."""
    trials = _fails_where_x_is_positive(tmp_path, "uses_the_world", "MPIInTrialError: "
                                        "MPI.COMM_WORLD.Barrier called inside a trial")
    for t in trials:
        if t.params["x"] > 0:
            assert "`comm` argument" in t.error, t.error
        else:
            assert t.metrics["world_size"] == 3 and t.metrics["world_rank"] in (1, 2)


def test_a_sandboxed_trial_using_mpi_fails_at_once_and_the_job_goes_on(tmp_path, monkeypatch):
    """A function without `comm` runs in a worker forked from its rank, which must not use
    MPI: an all-reduce on the `MPI.COMM_WORLD` its module kept in a global ran on the
    rank's copied MPI state, the rank stopped hearing its coordinator and the job ended
    after the silence limit blaming the coordinator, the trials left RUNNING; now the call
    raises at once, the trial is FAILED saying to take `comm`, and the study completes."""
    monkeypatch.setenv("MPIOPT_TEST_KEEP_WORLD", "1")
    monkeypatch.setenv("MPIOPT_SILENCE_LIMIT", "10")
    _fails_where_x_is_positive(tmp_path, "uses_the_kept_world", "MPIInTrialError: "
                               "KEPT_WORLD.allreduce called inside a trial: a function without "
                               "a `comm` argument")


@sqlite_only
def test_time_limit_has_a_hard_edge(tmp_path, url):
    spec = spec_file(tmp_path, "never_returns", trials=50, time_limit="3s", grace="2s")
    proc, wall = run(tmp_path, url, spec)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    line = closing_line(proc)
    assert "time limit + grace" in line and "resume with:" in line
    assert "MPI_Abort" not in proc.stderr
    study, trials = assert_settled(url)
    assert study.status is StudyStatus.INTERRUPTED
    assert any(t.status is TrialStatus.INTERRUPTED for t in trials)


# ---- signals ------------------------------------------------------------------------------
def _start(tmp_path, url, spec, np, *extra):
    cmd = [str(BIN / "mpiopt"), "search", str(spec), "--storage", url, *extra]
    if np:
        cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
    return subprocess.Popen(cmd, cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_running(url, deadline_s=START_S):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            _, trials = study_state(url)
            if any(t.status is TrialStatus.RUNNING for t in trials):
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError("the study never started a trial")


@pytest.mark.parametrize("np,sig", [(None, signal.SIGINT), (3, signal.SIGINT), (None, signal.SIGTERM),
                                    (3, signal.SIGTERM), (None, signal.SIGUSR1), (3, signal.SIGUSR1)])
def test_signals_end_cleanly_with_130_and_one_line(tmp_path, url, np, sig):
    spec = spec_file(tmp_path, "never_returns", trials=20)
    job = _start(tmp_path, url, spec, np)
    _wait_running(url)
    sent = time.monotonic()
    os.killpg(job.pid, sig)
    try:
        out, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:     # say what the processes were doing, then end them
        state = _signal_state(job.pid)
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate(timeout=30)
        raise AssertionError(f"still running 60 s after {sig.name}: {state}") from None
    assert time.monotonic() - sent < 15
    assert job.returncode == 130, out + err
    lines = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    assert len(lines) == 1 and f"resume with: {resume_with(np)} c" in lines[0], err
    assert "MPI_Abort" not in out + err and "Traceback" not in err
    study, trials = assert_settled(url)
    assert study.status is StudyStatus.INTERRUPTED


@pytest.mark.parametrize("np", [None, 3])
def test_ctrl_c_through_a_trials_own_handler_interrupts_the_trial_not_fails_it(tmp_path, np):
    """A trial in the rank's process that puts Python's SIGINT handler back gets the Ctrl-C
    as a KeyboardInterrupt: recorded as the trial's failure, it would never run again. The
    rank notes which signals it handled (signal.set_wakeup_fd), whoever's handler ran, and
    such a trial is INTERRUPTED like the others, to run again on resume. Alone (no mpiexec)
    the Ctrl-C failed that trial and the study went on."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    spec = spec_file(tmp_path, "handles_sigint_itself", trials=6, objective={"isolate": False})
    job = _start(tmp_path, url, spec, np)
    _wait_running(url)
    time.sleep(1.0)                               # (every group inside its trial)
    os.killpg(job.pid, signal.SIGINT)
    out, err = job.communicate(timeout=60)
    assert job.returncode == 130, out + err
    study, trials = assert_settled(url)
    assert study.status is StudyStatus.INTERRUPTED
    assert not [t for t in trials if t.status is TrialStatus.FAILED], [t.error for t in trials]
    assert [t for t in trials if t.status is TrialStatus.INTERRUPTED]


@pytest.mark.parametrize("wait_s,sig", [(1.0, signal.SIGINT), (3.0, signal.SIGINT),
                                        (3.0, signal.SIGTERM)])
def test_ctrl_c_during_the_start_up_ends_the_job_in_order(tmp_path, wait_s, sig):
    """Ctrl-C while rank 2 still imports its objective (rank 1 is ready and waits for rank
    0's verdict): a group rank that ended on its own left rank 0 spinning in a collective
    for ever (seen with the digits example, Ctrl-C 4 s in: 10 min at 100% CPU). Group
    ranks now leave signals to rank 0, which sends its verdict to all and ends. SIGTERM
    (`scancel`) the same way: it used to kill every rank silently (exit status 15)."""
    spec = spec_with_module(tmp_path, "slow", "2", "    time.sleep(6)\n")
    db = tmp_path / "s.db"
    job = _start(tmp_path, f"sqlite:///{db}", spec, 3)
    time.sleep(wait_s)
    os.killpg(job.pid, sig)                      # as a terminal's Ctrl-C does
    out, err = _ended(job, START_S, "the job went on after a Ctrl-C during its start-up")
    assert job.returncode == 130, out + err
    assert [ln for ln in err.splitlines() if ln.startswith("mpiopt:")] == [STARTUP_LINE]


def test_ctrl_c_in_the_first_half_second_never_hangs_the_job(tmp_path):
    """Ctrl-C while the ranks were still inside MPI_Init: rank 0 ended at once, cleanly,
    and the other ranks waited for it there, with mpiexec, for ever (5 jobs of 10 at
    0.2-0.3 s). Now each job ends with the one line and 130; only a signal before mpiopt's
    `main` runs (the interpreter's first ~60 ms) kills a rank, and mpiexec ends the job."""
    spec = spec_with_module(tmp_path, "slow", "2", "    time.sleep(3)\n")
    for i, wait_s in enumerate((0.2, 0.25, 0.3, 0.4, 0.6)):
        job = _start(tmp_path, f"sqlite:///{tmp_path / f's{i}.db'}", spec, 3)
        time.sleep(wait_s)
        os.killpg(job.pid, signal.SIGINT)
        out, err = _ended(job, 30, f"the job hung after a Ctrl-C {wait_s} s into its start")
        lines = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
        if lines:                                   # (mpiopt's main ran on rank 0)
            assert (job.returncode, lines) == (130, [STARTUP_LINE]), out + err
        else:
            assert job.returncode != 0, out + err


# The `mpiopt` program with one rank's main interrupted at its first line (as a Ctrl-C
# lands before main can hold the stop signals); the other ranks run the real one.
_INTERRUPTED_BEFORE_THE_HOLD = """
import os, sys
import mpiopt.cli.main as cli
if os.environ.get("PMI_RANK") == "1":
    def main():
        raise KeyboardInterrupt
    cli.main = main
sys.argv[0] = "mpiopt"
cli.run()
"""


def test_a_ctrl_c_before_main_holds_the_signals_ends_the_job(tmp_path):
    """A Ctrl-C that reached a rank inside main before its hold (importing
    mpiopt.run.startup_signals) ended that rank with status 1, an ordinary exit, which mpiexec
    takes as the rank's end and not the job's: the other ranks waited in MPI_Init for it
    for ever (CI, and 2 jobs of 77 with a Ctrl-C 0.2-0.3 s in on a loaded machine). Now
    the rank dies of SIGINT as Python's own uncaught Ctrl-C does, and mpiexec ends the job."""
    spec = spec_file(tmp_path, "branin", trials=2)
    cmd = [str(BIN / "mpiexec"), "-n", "3", str(BIN / "python"), "-c",
           _INTERRUPTED_BEFORE_THE_HOLD, "search", str(spec), "--storage",
           f"sqlite:///{tmp_path / 's.db'}"]
    job = subprocess.Popen(cmd, cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    out, err = _ended(job, START_S, "the job hung after a rank's Ctrl-C before its hold")
    assert job.returncode != 0, out + err
    assert "KeyboardInterrupt" in err


@pytest.mark.parametrize("np", [None, 3])
def test_a_signal_while_the_study_is_opened_ends_in_order_with_the_resume_line(tmp_path, np):
    """SIGTERM while rank 0 opens the study (here: waiting for a lock another process holds
    on the database): the job said `mpiopt: interrupted` alone, whether or not the study had
    been written. Now the signal waits for the study to be open, and the run ends in order:
    the resume line, the study INTERRUPTED, and no trial started only to be stopped."""
    import sqlite3

    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    spec = spec_file(tmp_path, "branin", trials=2)
    assert run(tmp_path, url, spec, None)[0].returncode == 0
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        job = _start(tmp_path, url, spec, np, "--resume", "--trials", "6")
        _wait_for_a_process_to_open(job, db)
        time.sleep(0.5)                          # (in SQLite's wait for the lock by now)
        os.killpg(job.pid, signal.SIGTERM)
        time.sleep(0.5)
    finally:
        lock.execute("COMMIT")
        lock.close()
    out, err = _ended(job, START_S, "the job went on after a SIGTERM while opening the study")
    lines = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    assert job.returncode == 130 and len(lines) == 1, out + err
    assert lines[0].startswith("mpiopt: interrupted") and f"resume with: {resume_with(np)} c " \
        f"--storage sqlite:///{db}" in lines[0], lines
    study, trials = assert_settled(url)
    assert study.status is StudyStatus.INTERRUPTED and len(trials) == 2


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_a_completed_study_exits_leaves_its_status_zero(tmp_path, sig):
    """Ctrl-C at the summary, or the batch system's SIGTERM as the job ends: the study is
    COMPLETE, and the job exited 2 or 15 with no line (every time, the signal sent as the
    summary's last line came): the group ranks died in MPI_Finalize, where the interpreter's
    exit had put the default handlers back."""
    spec = spec_file(tmp_path, "branin", trials=4)
    url = f"sqlite:///{tmp_path / 's.db'}"
    job = _start(tmp_path, url, spec, 3)
    for line in job.stdout:
        if line.startswith("best value"):
            os.killpg(job.pid, sig)
            break
    out, err = _ended(job, START_S, "the job went on after its study completed")
    assert job.returncode == 0, err
    assert_settled(url, 4)


def _wait_for_a_process_to_open(job, path: Path) -> None:
    """Until one of the job's processes has the file open (its start-up is done)."""
    end = time.monotonic() + START_S
    while time.monotonic() < end:
        for pid in descendants(job.pid) | {job.pid}:
            try:
                if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path)
                       for fd in os.listdir(f"/proc/{pid}/fd")):
                    return
            except OSError:
                continue
        assert job.poll() is None, job.communicate()
        time.sleep(0.05)
    raise AssertionError("no process of the job opened the database")


def _signal_state(pgid: int) -> str:
    """Each process of the group: its command and its signal masks (/proc), for a hang's
    failure message (a signal blocked or ignored by inheritance is the usual suspect)."""
    lines = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if os.getpgid(int(pid)) != pgid:
                continue
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:80]
            masks = [ln.strip() for ln in open(f"/proc/{pid}/status")
                     if ln.startswith(("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))]
        except (OSError, ProcessLookupError):
            continue
        lines.append(f"[{pid} {cmd}: {'; '.join(masks)}]")
    return " ".join(lines) or "no process left in the group"


# ---- start-up -----------------------------------------------------------------------------
def spec_with_module(tmp_path, name: str, on_rank: str, action: str):
    """A spec whose objective module does `action` at import time on one rank only."""
    module = tmp_path / f"{name}.py"
    module.write_text(f"import os, time\nif os.environ.get('PMI_RANK') == '{on_rank}':\n"
                      f"{action}def f(params):\n    return params['x'] ** 2\n")
    spec = spec_file(tmp_path, "branin")
    data = yaml.safe_load(spec.read_text())
    data["objective"]["function"] = f"{module}:f"
    spec.write_text(yaml.safe_dump(data))
    return spec


def test_an_import_error_on_one_rank_is_one_line_status_2_nothing_written(tmp_path):
    spec = spec_with_module(tmp_path, "picky", "2",
                            "    raise ImportError('no module named physics on this node')\n")
    db = tmp_path / "none.db"
    proc, wall = run(tmp_path, f"sqlite:///{db}", spec, 3)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = closing_line(proc)
    assert "rank 2 on" in line and "no module named physics" in line
    assert "Traceback" not in proc.stderr and not db.exists()


@pytest.mark.parametrize("bad_url,names", [
    ("postgresql+pg8000://u:secret@localhost/db", "pg8000"),
    ("mysql://u:secret@localhost/db", "MySQL"),
])
def test_a_database_url_that_cannot_work_is_one_line_under_mpiexec(tmp_path, bad_url, names):
    spec = spec_file(tmp_path, "branin")
    proc, wall = run(tmp_path, bad_url, spec, 3)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = closing_line(proc)
    assert names in line and "secret" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


# ---- kill -9 campaigns --------------------------------------------------------------------
def _kill(job, target: str) -> None:
    """kill -9 rank 0, one group rank, or every process of the job (as a node's loss)."""
    tree = descendants(job.pid)
    ranks = sorted(p for p in tree if _parent(p) in tree and b"hydra_pmi_proxy" in _cmdline(_parent(p)))
    if target == "job":
        victims = [job.pid, *tree]
    else:
        victims = ranks[:1] if target == "rank0" else ranks[-1:]
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _stop_rank0_until_the_job_ends(job, timeout_s: float) -> tuple[list[str], str]:
    """SIGSTOP rank 0 and wait for the rest of the job to end it (a failure with one line
    from mpiopt); returns the closing lines and all of stderr."""
    ranks = sorted(p for p in descendants(job.pid) if b"hydra_pmi_proxy" in _cmdline(_parent(p)))
    os.kill(ranks[0], signal.SIGSTOP)
    _, err = _ended(job, timeout_s, "the job went on with its coordinator stopped")
    assert job.returncode != 0
    return [ln for ln in err.splitlines() if ln.startswith("mpiopt:")], err


def _ended(job, timeout_s: float, hang: str) -> tuple[str, str]:
    """The job's (stdout, stderr) once it ended; killed and failed with `hang` if it did
    not within timeout_s."""
    try:
        return job.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        from mpiopt.objective.processes import descendants

        for pid in descendants(job.pid) | {job.pid}:   # (the launcher's proxy and ranks
            try:                                        # have process groups of their own)
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        job.communicate()
        raise AssertionError(hang) from None


@pytest.mark.parametrize("db_url, algorithm", [("sqlite", "bayesian"), ("postgresql", "bayesian"),
                                               ("sqlite", "evolutionary")], indirect=["db_url"])
def test_kill_campaigns_lose_nothing_and_repeat_nothing(tmp_path, url, algorithm, monkeypatch):
    # Trials of 0.3 s: a round (a job's start, one more trial seen, up to 0.6 s, the kill)
    # takes a handful of the budget's 60 on two groups, so six rounds fit however late a
    # loaded machine lets this test see the progress.
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "0.3")
    budget = 60
    spec = spec_file(tmp_path, "steady", trials=budget, algorithm=algorithm)
    rng = random.Random(algorithm)
    finished: dict[int, tuple] = {}
    for round_ in range(6):                        # each of the three kills twice
        job = _start(tmp_path, url, spec, 3) if round_ == 0 else _resume(tmp_path, url, spec)
        if not _wait_progress(url, len(finished), job):
            break                                  # the budget was done before the kill
        time.sleep(rng.uniform(0.05, 0.6))
        _kill(job, ("rank0", "group", "job")[round_ % 3])
        try:
            job.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
            raise AssertionError("a job went on after one of its ranks was killed")
        _, trials = study_state(url)
        for t in trials:
            if t.status.is_finished():
                assert finished.setdefault(t.number, (t.params, t.value, t.status)) == \
                    (t.params, t.value, t.status), f"finished trial {t.number} changed"
    assert round_ >= 4, "too few kills landed"
    proc, _ = run(tmp_path, url, spec, 3, "--resume")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, trials = assert_settled(url, budget)
    for t in trials:
        if t.number in finished:
            assert (t.params, t.value, t.status) == finished[t.number]
    keys = [tuple(round(v, 9) for v in t.params.values()) for t in trials]
    assert len(set(keys)) == len(keys), "a parameter set was evaluated twice"


def _wait_progress(url, before: int, job) -> bool:
    """Wait until the job finished one more trial; False when it ended by itself."""
    end = time.monotonic() + START_S
    while time.monotonic() < end:
        if job.poll() is not None:
            job.communicate()
            assert job.returncode == 0
            return False
        try:
            _, trials = study_state(url)
            if sum(t.status.is_finished() for t in trials) > before:
                return True
        except Exception:
            pass
        time.sleep(0.1)
    raise AssertionError("the job made no progress")


def _resume(tmp_path, url, spec):
    return _start(tmp_path, url, spec, 3, "--resume")


def test_a_rank_stuck_in_its_import_ends_the_job_at_the_start_up_limit(tmp_path):
    spec = spec_with_module(tmp_path, "stuck", "1", "    while True:\n        time.sleep(1)\n")
    db = tmp_path / "none.db"
    start = time.monotonic()
    proc = mpiopt("search", spec, "--storage", f"sqlite:///{db}", np=3, cwd=tmp_path,
                  timeout=START_S + 60, env={**subprocess_env(), "MPIOPT_STARTUP_TIMEOUT": "8"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = closing_line(proc)
    assert "rank(s) 1 did not finish setting up" in line and "MPIOPT_STARTUP_TIMEOUT" in line
    assert not db.exists() and time.monotonic() - start < START_S + 8
