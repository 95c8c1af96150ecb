"""Many jobs, one study (`mpiopt search --join`): real jobs, real processes killed, a real
PostgreSQL server (and SQLite for jobs on one host).

Each case checks what the issue promises: the study's budget holds exactly across jobs,
no parameter set runs twice (but the reruns of a lost job's trials, which reuse their
rows), a job killed without a word costs only its running trials, which the others take
over once its lease is stale, and every job ends on its own once nothing is left.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from conftest import BIN, ROOT, subprocess_env
from mpiopt.trial import StudyStatus, TrialStatus

FUNCTIONS = ROOT / "tests" / "objectives" / "functions.py"
END_S = 240          # a whole case on a loaded 2-core machine, at most: catches a hang


def spec_file(tmp_path: Path, trials: int, algorithm: str = "random", space=None,
              **search) -> Path:
    spec = {
        "study": {"name": "shared"},
        "objective": {"function": f"{FUNCTIONS}:steady", "direction": "minimize"},
        "search_space": space or {"x": {"type": "real", "low": -5.0, "high": 10.0},
                                  "y": {"type": "real", "low": 0.0, "high": 15.0}},
        "search": {"algorithm": algorithm, "trials": trials, "seed": 3, **search},
    }
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def env(sleep: float = 0.2) -> dict:
    """Short trials; a lease beat every second, so a job silent for 3 s is taken over."""
    return {**subprocess_env(), "MPIOPT_TEST_SLEEP": str(sleep), "MPIOPT_LEASE_PERIOD": "1"}


def start_job(tmp_path: Path, url: str, spec: Path, np: int | None = 3, *extra,
              sleep: float = 0.2) -> subprocess.Popen:
    """`[mpiexec -n NP] mpiopt search SPEC --join` in a session of its own (so a kill -9
    reaches mpiexec and every rank at once, as a lost node does)."""
    cmd = [str(BIN / "mpiopt"), "search", str(spec), "--join", "--storage", url, *extra]
    if np:
        cmd = [str(BIN / "mpiexec"), "-n", str(np), *cmd]
    return subprocess.Popen(cmd, cwd=tmp_path, env=env(sleep), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(procs, timeout: float = END_S) -> list[tuple[int, str]]:
    """Each job's (exit status, stderr); a job still there at the end is a hang."""
    out, deadline = [], time.monotonic() + timeout
    for p in procs:
        try:
            said, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            said, err = p.communicate()
            pytest.fail(f"a job hung past {timeout:.0f}s:\n{said[-3000:]}\n{err[-3000:]}")
        out.append((p.returncode, said[-2000:] + err))
    return out


def state(url: str):
    from mpiopt.storage import open_storage

    storage = open_storage(url)
    try:
        study = storage.get_study("shared")
        return study, storage.get_trials(study.id), storage.list_jobs(study.id)
    finally:
        storage.close()


def wait_for_finished(url: str, n: int, procs, timeout: float = END_S, jobs: int = 1) -> list:
    """Polls the database until `n` trials are finished, by at least `jobs` jobs (or a
    job ended early). A process started is not a job of the study yet: only a trial it
    finished shows that it joined (its start-up under mpiexec can outlast many trials of
    the jobs already there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, trials, _ = state(url)
            done = [t for t in trials if t.status.is_finished()]
            if len(done) >= n and len({t.job for t in done}) >= jobs:
                return trials
        except Exception:
            pass               # (the study may not exist yet)
        assert all(p.poll() is None for p in procs), "a job ended before the study was half done"
        time.sleep(0.3)
    pytest.fail(f"{n} trials did not finish within {timeout:.0f}s")


def assert_exactly_the_budget(url: str, budget: int):
    """Exactly `budget` finished trials, numbered 0..budget-1, none RUNNING, each
    parameter set once, the study COMPLETE, every job ended."""
    study, trials, jobs = state(url)
    assert sorted(t.number for t in trials) == list(range(budget))
    assert all(t.status is TrialStatus.COMPLETE for t in trials), Counter(t.status for t in trials)
    keys = Counter(tuple(sorted(t.params.items())) for t in trials)
    assert max(keys.values()) == 1, "a parameter set ran twice"
    assert study.status is StudyStatus.COMPLETE
    assert jobs and not [j for j in jobs if j.live]
    return trials, jobs


def test_three_jobs_started_together_finish_exactly_the_budget(tmp_path, pg_server):
    url = pg_server.new_database()
    spec = spec_file(tmp_path, trials=60, algorithm="bayesian")
    procs = [start_job(tmp_path, url, spec, np) for np in (3, 3, None)]
    for code, err in finish(procs):
        assert code == 0, err[-3000:]
    trials, jobs = assert_exactly_the_budget(url, 60)
    assert len(jobs) == 3
    by_job = Counter(t.job for t in trials)
    assert len(by_job) == 3, f"every job ran trials: {by_job}"


def test_a_job_killed_without_a_word_costs_only_its_running_trials(tmp_path, pg_server):
    url = pg_server.new_database()
    spec = spec_file(tmp_path, trials=60)
    procs = [start_job(tmp_path, url, spec, 3, sleep=0.4) for _ in range(3)]
    victim = procs[0]
    before = wait_for_finished(url, 15, procs)
    _, now, jobs = state(url)
    os.killpg(victim.pid, signal.SIGKILL)                 # mpiexec and every rank, at once
    finished = {t.id: t.value for t in before if t.status.is_finished()}
    for code, err in finish(procs[1:]):
        assert code == 0, err[-3000:]
    victim.communicate()
    trials, jobs = assert_exactly_the_budget(url, 60)
    after = {t.id: t.value for t in trials}
    assert all(after[i] == v for i, v in finished.items()), "a finished trial was lost"
    lost = [j for j in jobs if j.end == "lost"]
    assert len(lost) == 1 and lost[0].taken_by in {j.id for j in jobs if j.end == "ended"}
    rerun = [t for t in trials if t.attempt > 1]
    assert all(t.job != lost[0].id for t in rerun)


def test_a_job_joining_late_and_one_leaving_early(tmp_path, pg_server):
    url = pg_server.new_database()
    spec = spec_file(tmp_path, trials=100)   # (the late one starts while trials are left)
    first = start_job(tmp_path, url, spec, 3, sleep=0.3)
    wait_for_finished(url, 8, [first])
    late = start_job(tmp_path, url, spec, 3, sleep=0.3)
    wait_for_finished(url, 16, [first, late], jobs=2)     # the late one joined and works
    os.killpg(first.pid, signal.SIGTERM)                  # leaves cleanly; the other goes on
    ((code_first, err_first),) = finish([first])
    # the study is the other job's still: neither INTERRUPTED nor told to resume
    study_while, _, _ = state(url)
    late_ran_on = late.poll() is None
    ((code_late, err_late),) = finish([late])
    assert code_first != 0 and "interrupted" in err_first, err_first[-2000:]
    assert code_late == 0, err_late[-3000:]
    assert late_ran_on and study_while.status == StudyStatus.RUNNING, study_while.status
    trials, jobs = assert_exactly_the_budget(url, 100)
    ends = sorted(j.end for j in jobs)
    assert ends == ["ended", "interrupted"]


def test_a_job_that_joins_while_another_ends_keeps_the_study_running(tmp_path):
    """The study's end is written where the count of live jobs is taken, in one
    transaction (end_job): a job that joins while another winds down (after it looked for
    live jobs, before it wrote the study's status) is left a RUNNING study, not one
    recorded INTERRUPTED under it. The executor of a shared run writes no status."""
    from mpiopt.parallel.scheduler import Executor
    from mpiopt.parallel.scheduler import instructions as ins
    from mpiopt.storage import open_storage

    storage = open_storage(f"sqlite:///{tmp_path / 'results.db'}", create=True)
    try:
        sid = storage.create_study("shared", "minimize", "value", "{}", "ab" * 32, "{}")
        first = storage.join_study(sid, "h", 1, 1.0, shared=True)
        executor = Executor(storage, send=lambda i: None, shared=True)
        assert [j.id for j in storage.list_jobs(sid) if j.id != first.id] == []
        late = storage.join_study(sid, "h", 2, 1.0, shared=True)     # joins now
        executor.do(ins.SetStudyStatus(sid, StudyStatus.INTERRUPTED))
        assert storage.end_job(first.id, first.token, "interrupted",
                               study_status=StudyStatus.INTERRUPTED) == 1
        assert storage.get_study("shared").status is StudyStatus.RUNNING
        assert storage.end_job(late.id, late.token, study_status=StudyStatus.COMPLETE) == 0
        assert storage.get_study("shared").status is StudyStatus.COMPLETE
    finally:
        storage.close()


def test_jobs_on_one_host_share_a_sqlite_file(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    spec = spec_file(tmp_path, trials=30)
    procs = [start_job(tmp_path, url, spec, np) for np in (3, None)]
    for code, err in finish(procs):
        assert code == 0, err[-3000:]
    assert_exactly_the_budget(url, 30)


def test_a_finite_space_is_split_between_jobs_without_repeats(tmp_path, pg_server):
    url = pg_server.new_database()
    space = {"x": {"type": "integer", "low": 0, "high": 5}, "y": {"type": "categorical",
                                                           "choices": [1.0, 2.0, 3.0]}}
    spec = spec_file(tmp_path, trials=50, space=space)        # 18 sets: the space ends it
    procs = [start_job(tmp_path, url, spec, 3, sleep=0.05) for _ in range(2)]
    for code, err in finish(procs):
        assert code == 0, err[-3000:]
    _, trials, jobs = state(url)
    keys = Counter(tuple(sorted(t.params.items())) for t in trials)
    assert len(keys) == 18 and max(keys.values()) == 1, keys


def test_sqlite_refuses_jobs_on_several_hosts(tmp_path):
    """A live job on another host (a row as that job would have written it): the join is
    refused with one line, and nothing is written."""
    from mpiopt.storage import open_storage

    url = f"sqlite:///{tmp_path / 'results.db'}"
    spec = spec_file(tmp_path, trials=10)
    first = start_job(tmp_path, url, spec, None)
    finish([first])
    storage = open_storage(url)
    try:
        study_id = storage.get_study("shared").id
        storage.join_study(study_id, "elsewhere", 4242, 30.0, shared=True)
        before = len(storage.get_trials(study_id))
    finally:
        storage.close()
    proc = subprocess.run([str(BIN / "mpiopt"), "search", str(spec), "--join", "--storage", url,
                           "--trials", "20"], cwd=tmp_path, env=env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "SQLite" in lines[0] and "elsewhere" in lines[0], proc.stderr
    _, trials, _ = state(url)
    assert len(trials) == before


def test_pbt_refuses_join_before_anything_is_written(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    proc = subprocess.run([str(BIN / "mpiopt"), "search", str(ROOT / "examples" / "jets" / "pbt.yaml"),
                           "--join", "--storage", url],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--join" in proc.stderr, proc.stderr
    assert not (tmp_path / "results.db").exists()
