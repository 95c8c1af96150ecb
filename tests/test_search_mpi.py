"""Real studies under the venv's mpiexec: budgets, layouts, failures, refusals, resume."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import BIN, ROOT, mpiopt, resume_with, subprocess_env
from mpiopt.trial import StudyStatus, TrialStatus

FUNCTIONS = ROOT / "tests" / "objectives" / "functions.py"


def write_spec(tmp_path: Path, name="t", function="sleepy", algorithm="random", trials=8,
               group_size=1, **search) -> Path:
    spec = {
        "study": {"name": name},
        "objective": {"function": f"{FUNCTIONS}:{function}", "direction": "minimize"},
        "search_space": {"x": {"type": "real", "low": -5.0, "high": 10.0},
                         "y": {"type": "real", "low": 0.0, "high": 15.0}},
        "search": {"algorithm": algorithm, "trials": trials, "seed": 3, **search},
        "resources": {"group_size": group_size},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


def trials_of(tmp_path: Path, name="t"):
    from mpiopt.storage import open_storage

    storage = open_storage(db_url(tmp_path))
    try:
        study = storage.get_study(name)
        return study, storage.get_trials(study.id)
    finally:
        storage.close()


def search(tmp_path, spec, np=None, *extra, timeout=240):
    return mpiopt("search", spec, "--storage", db_url(tmp_path), *extra, np=np, cwd=tmp_path,
                  timeout=timeout)


def test_the_run_leaves_its_start_up_heap_out_of_garbage_collections(tmp_path):
    """Rank 0 freezes what its start-up built (mpiopt.run.coordinating.freeze_start_up_heap),
    so no full collection at the first results scans it while the groups wait. Run in one
    process, where the trials run in rank 0's."""
    spec = write_spec(tmp_path, function="heap_frozen", trials=2)
    proc = search(tmp_path, spec)
    assert proc.returncode == 0, proc.stderr
    _, trials = trials_of(tmp_path)
    assert [t.value for t in trials] == [1.0, 1.0]


@pytest.mark.parametrize("np,group_size,algorithm", [
    (1, 1, "bayesian"), (3, 1, "evolutionary"), (5, 1, "bayesian"), (5, 2, "random"),
    (3, 2, "evolutionary"),
])
def test_every_layout_and_algorithm_completes_its_budget(tmp_path, np, group_size, algorithm, monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "0.05")
    spec = write_spec(tmp_path, algorithm=algorithm, trials=10, group_size=group_size)
    proc = search(tmp_path, spec, np)
    assert proc.returncode == 0, proc.stderr
    study, trials = trials_of(tmp_path)
    assert study.status == StudyStatus.COMPLETE
    assert sorted(t.number for t in trials) == list(range(10))
    assert {t.status for t in trials} == {TrialStatus.COMPLETE}
    n_groups = 1 if np == 1 else (np - 1) // group_size
    assert {t.group for t in trials} == set(range(n_groups))     # every group worked
    assert all(t.host for t in trials) and all(t.seed is not None for t in trials)
    assert all(t.device.startswith(("cpu: ", "gpu: ")) for t in trials)
    assert all(t.suggest_seconds is not None and t.suggest_seconds >= 0 for t in trials)
    assert "[10/10]" in proc.stdout and "best value" in proc.stdout


def test_objective_with_comm_gets_the_whole_group(tmp_path):
    """...and the ranks that train never import the database layer (only rank 0 opens the
    database; SQLAlchemy's import was most of a training rank's start-up after numpy's)."""
    spec = write_spec(tmp_path, function="group_sum", trials=4, group_size=2)
    proc = search(tmp_path, spec, 5)
    assert proc.returncode == 0, proc.stderr
    _, trials = trials_of(tmp_path)
    assert {t.metrics["group_ranks"] for t in trials} == {2.0}
    assert {t.metrics["rank_sum"] for t in trials} == {3.0}
    assert {t.metrics["database_imported"] for t in trials} == {0.0}


def test_failing_nan_and_wrong_type_trials_are_isolated(tmp_path):
    spec = write_spec(tmp_path, function="flaky", trials=30, max_initial_failures=30)
    proc = search(tmp_path, spec, 3)
    assert proc.returncode == 0, proc.stderr
    study, trials = trials_of(tmp_path)
    assert len(trials) == 30 and study.status == StudyStatus.COMPLETE
    failed = {t.number: t for t in trials if t.status == TrialStatus.FAILED}
    for t in trials:
        x = t.params["x"]
        assert (t.status == TrialStatus.FAILED) == (x < -2 or x > 6), (x, t.status, t.error)
    errors = " ".join(t.error for t in failed.values())
    assert "deliberate failure" in errors and "non-finite" in errors and "expected a number" in errors
    assert "world rank" in errors
    assert all(t.value is None for t in failed.values())


def test_study_whose_first_trials_all_fail_stops(tmp_path):
    spec = write_spec(tmp_path, function="always_fails", trials=40, max_initial_failures=4)
    proc = search(tmp_path, spec, 3)
    assert proc.returncode == 1
    # 4 or more: the stop waits for a trial started earlier that still runs (it may yet
    # succeed), and the other group meanwhile fails more (CI once saw neither 4 nor 5)
    said = re.search(r"first (\d+) trials all failed", proc.stdout)
    assert said and int(said.group(1)) >= 4 and "physics" in proc.stdout, proc.stdout
    closing = [ln for ln in proc.stderr.splitlines() if ln.startswith("mpiopt:")]
    assert len(closing) == 1 and said.group(0) in closing[0], proc.stderr
    assert closing[0].endswith(f"run them again with: {resume_with(3)} t --storage "
                               f"{db_url(tmp_path)} --retry-failed")
    status = mpiopt("status", "t", "--storage", db_url(tmp_path), "--format", "json")
    assert json.loads(status.stdout)["state"].endswith(    # (as the closing line says it)
        f"run them again with: {resume_with(3)} t --storage {db_url(tmp_path)} --retry-failed")
    study, trials = trials_of(tmp_path)
    assert study.status == StudyStatus.FAILED
    failed = int(said.group(1))          # (the other group may have had one running)
    assert failed <= len(trials) <= failed + 1 and all(t.status == TrialStatus.FAILED for t in trials)


@pytest.mark.parametrize("np", [None, 3])
def test_failures_in_a_row_after_a_success_stop_the_study(tmp_path, np):
    """One trial succeeds, then the objective breaks for good: the study stops once
    search.max_failures_in_a_row have failed in a row (it burned the whole budget, exit 0,
    without a word), with the line that says how to run them again."""
    spec = write_spec(tmp_path, function="breaks_after_one", trials=40, max_failures_in_a_row=4)
    env = dict(subprocess_env(), MPIOPT_TEST_BROKEN=str(tmp_path / "broken"))
    proc = mpiopt("search", spec, "--storage", db_url(tmp_path), np=np, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    closing = [ln for ln in proc.stderr.splitlines() if ln.startswith("mpiopt:")]
    assert len(closing) == 1 and "trials all failed (search.max_failures_in_a_row)" in closing[0]
    assert "events.h5" in closing[0] and closing[0].endswith("--retry-failed"), closing
    study, trials = trials_of(tmp_path)
    statuses = [t.status for t in sorted(trials, key=lambda t: t.number)]
    assert statuses.count(TrialStatus.COMPLETE) == 1 and study.status == StudyStatus.FAILED
    # four in a row; with two groups, a trial that failed before the success, and the
    # three still out when the fourth failure came (the stopping group's trial sent
    # ahead, the other group's running one and the one sent ahead to it): those finish
    # FAILED where their results beat the CANCEL, else INTERRUPTED (run on resume)
    finished = [s for s in statuses if s is not TrialStatus.INTERRUPTED]
    assert 5 <= len(finished) <= (5 if np is None else 9), statuses


def test_uneven_rank_count_is_refused_with_counts_that_work(tmp_path):
    spec = write_spec(tmp_path, group_size=2)
    proc = search(tmp_path, spec, 4)
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "-n 3, 5, 7" in lines[0], proc.stderr
    assert not (tmp_path / "study.db").exists()


@pytest.mark.parametrize("launcher", [{"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "{r}"},
                                      {"PMI_SIZE": "4", "PMI_RANK": "{r}"}])
def test_a_launcher_of_another_mpi_is_one_line_not_four_studies(tmp_path, launcher):
    """The system's mpirun with mpi4py built for another MPI (the PyPI wheel's MPICH)
    starts processes that each see a world of one: each would run a study of its own.
    Here four such processes as the launcher would start them (its variables set, MPI
    initialised alone): one line from its rank 0, exit status 2 from all, nothing written."""
    spec = write_spec(tmp_path)
    procs = []
    for rank in range(4):
        env = {**subprocess_env(), **{k: v.format(r=rank) for k, v in launcher.items()}}
        procs.append(mpiopt("search", spec, "--storage", db_url(tmp_path), cwd=tmp_path,
                            env=env, timeout=120))
    assert [p.returncode for p in procs] == [2] * 4
    said = [l for p in procs for l in p.stderr.splitlines() if l.startswith("mpiopt:")]
    assert len(said) == 1 and "started as one of 4 processes" in said[0], said
    assert "built for another MPI than the launcher's" in said[0]
    assert not (tmp_path / "study.db").exists()


def test_existing_study_without_resume_is_refused(tmp_path):
    spec = write_spec(tmp_path, trials=3)
    assert search(tmp_path, spec).returncode == 0
    proc = search(tmp_path, spec, 3)
    assert proc.returncode == 2 and "--resume" in proc.stderr and "Traceback" not in proc.stderr
    assert len(trials_of(tmp_path)[1]) == 3


def test_resume_refuses_a_changed_search_space_and_shows_it(tmp_path):
    spec = write_spec(tmp_path, trials=3)
    assert search(tmp_path, spec).returncode == 0
    data = yaml.safe_load(spec.read_text())
    data["search_space"]["x"]["high"] = 12.0
    data["search"]["trials"] = 5                      # allowed alone, not with the space change
    spec.write_text(yaml.safe_dump(data))
    proc = search(tmp_path, spec, None, "--resume")
    assert proc.returncode == 2 and "changed x" in proc.stderr and "12.0" in proc.stderr


def test_resume_extends_budget_and_replays(tmp_path):
    spec = write_spec(tmp_path, algorithm="bayesian", trials=4, function="branin")
    assert search(tmp_path, spec).returncode == 0
    before = {t.number: (t.params, t.value) for t in trials_of(tmp_path)[1]}
    proc = search(tmp_path, spec, 3, "--resume", "--trials", "7")
    assert proc.returncode == 0, proc.stderr
    assert "4 finished trials kept" in proc.stdout
    trials = trials_of(tmp_path)[1]
    assert sorted(t.number for t in trials) == list(range(7))
    assert {t.number: (t.params, t.value) for t in trials if t.number < 4} == before


def _job(tmp_path, spec, np, *extra):
    cmd = [str(BIN / "mpiexec"), "-n", str(np), str(BIN / "mpiopt"), "search", str(spec),
           "--storage", db_url(tmp_path), *extra]
    return subprocess.Popen(cmd, cwd=tmp_path, env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_finished(tmp_path, n, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (tmp_path / "study.db").exists():
            try:
                trials = trials_of(tmp_path)[1]
            except Exception:
                trials = []
            done = [t for t in trials if t.status.is_finished()]
            running = [t for t in trials if t.status == TrialStatus.RUNNING]
            if len(done) >= n and running:
                return
        time.sleep(0.1)
    raise AssertionError("study did not reach the wanted state")


def test_kill_minus_nine_then_resume_loses_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "0.4")
    spec = write_spec(tmp_path, algorithm="evolutionary", trials=14)
    job = _job(tmp_path, spec, 5)
    _wait_for_finished(tmp_path, 5)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)
    _, trials = trials_of(tmp_path)
    finished_before = {t.number: (t.params, t.value) for t in trials if t.status.is_finished()}
    assert any(t.status == TrialStatus.RUNNING for t in trials)     # killed mid-trial
    proc = mpiopt("resume", "t", "--storage", db_url(tmp_path), np=3, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    study, trials = trials_of(tmp_path)
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers)) == 14 and study.status == StudyStatus.COMPLETE
    assert all(t.status == TrialStatus.COMPLETE for t in trials)
    assert {n: v for n, v in ((t.number, (t.params, t.value)) for t in trials)
            if n in finished_before} == finished_before
    assert any(t.attempt == 1 for t in trials)                      # the killed ones ran again


def test_sigint_marks_interrupted_and_exits_nonzero(tmp_path, monkeypatch):
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "1.5")
    spec = write_spec(tmp_path, trials=20)
    job = _job(tmp_path, spec, 3)
    _wait_for_finished(tmp_path, 1)
    os.killpg(job.pid, signal.SIGINT)
    out, err = job.communicate(timeout=60)
    assert job.returncode == 130, out + err
    assert f"resume with: {resume_with(3)} t" in err, out + err
    assert "MPI_Abort" not in out + err           # the groups answered: nothing to abort
    study, trials = trials_of(tmp_path)
    assert study.status == StudyStatus.INTERRUPTED
    assert {t.status for t in trials} <= {TrialStatus.COMPLETE, TrialStatus.INTERRUPTED}
    assert any(t.status == TrialStatus.INTERRUPTED for t in trials)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _cmdline(pid) -> bytes:
    """A process's command line; empty for one that ended since /proc was listed (CI once
    saw another job's process go in between: FileNotFoundError)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_waiting_ranks_do_not_spin_and_status_reads_during_the_run(tmp_path, monkeypatch):
    """Coordinator and idle group members sleep between probes, measured over 4 s of a run.

    A rank that blocks in MPICH busy-polls a whole core (about 1.0). The coordinator wakes
    up to 200 times a second (POLL_LIMIT_S) for two probes and its bookkeeping: 3-4% of a
    core here, 5.0% once on the 2-core CI machine with five ranks and two trial workers
    on it, so it is held under 8% (a twelfth of a spin); every other rank under 5%."""
    monkeypatch.setenv("MPIOPT_TEST_SLEEP", "2.0")
    spec = write_spec(tmp_path, trials=10, group_size=2)   # plain objective: member ranks idle
    job = _job(tmp_path, spec, 5)
    _wait_for_finished(tmp_path, 0)
    status = mpiopt("status", "t", "--storage", db_url(tmp_path), "--format", "json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["running"] >= 1
    marker = str(spec)
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()
            and marker in (line := _cmdline(p)).decode(errors="replace") and b"mpiexec" not in line]
    pids = [p for p in pids if _parent(p) not in pids]    # ranks, not their trial workers
    assert len(pids) == 5
    coordinator, = [p for p in pids                       # MPICH's hydra names each rank
                    if b"PMI_RANK=0" in Path(f"/proc/{p}/environ").read_bytes().split(b"\0")]
    time.sleep(0.5)
    first = {p: _cpu_seconds(p) for p in pids}
    time.sleep(4.0)                 # 1/100 s clock ticks: 0.25% of a core per tick over 4 s
    used = {p: (_cpu_seconds(p) - first[p]) / 4.0 for p in pids}
    job.communicate(timeout=60)
    assert job.returncode == 0
    print("CPU share per rank:", sorted(round(v, 4) for v in used.values()))
    assert used[coordinator] < 0.08, used
    assert max(v for p, v in used.items() if p != coordinator) < 0.05, used


# Tolerances from repeated runs (the minimum is 0.397887): 12 seeds x 40 sequential trials
# gave worst best values of bayesian 0.3988, evolutionary 1.51, random 3.28 (medians
# 0.3981, 0.487, 1.43); bayesian on 2 groups under mpiexec -n 3 (a suggestion asked while
# the other group's point is pending) gave 0.40-0.68 over seeds 0-5. The bounds leave
# margin for the asynchronous order, which depends on which group finishes first. The
# evolutionary searcher on 2 groups runs 80 trials: at 40 its best ranged 0.40-3.70 over
# 24 jobs of seed 3 (the order alone differing; CI failed once at 3.56 against a bound of
# 2.5), at 80 0.398-0.69 over 24 jobs (2026-11-26).
@pytest.mark.parametrize("algorithm,np,bound,budget", [
    ("bayesian", 3, 1.5, 40), ("evolutionary", 3, 1.5, 80), ("random", 1, 5.0, 40),
])
def test_each_searcher_finds_the_branin_minimum(tmp_path, algorithm, np, bound, budget):
    spec = write_spec(tmp_path, function="branin", algorithm=algorithm, trials=budget)
    proc = search(tmp_path, spec, np)
    assert proc.returncode == 0, proc.stderr
    _, trials = trials_of(tmp_path)
    assert len(trials) == budget
    assert 0.397887 - 1e-6 <= min(t.value for t in trials) <= bound


def test_entries_of_a_returned_dict_that_are_not_numbers_are_left_out_with_one_note(tmp_path):
    """A path or a list among the returned metrics failed every trial (`objective returned
    str for 'model_path'`) and so the study, its values thrown away; now the trial is
    COMPLETE, the numbers are stored, each rank says once what it left out. A metric
    mpiopt reads (here a constraint's) must still be a number."""
    spec = write_spec(tmp_path, function="returns_extras", trials=12)
    data = yaml.safe_load(spec.read_text())
    data["objective"]["constraints"] = ["n_leaves <= 10"]
    spec.write_text(yaml.safe_dump(data))
    proc = search(tmp_path, spec, 3)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [ln for ln in proc.stderr.splitlines() if ln.startswith("mpiopt: note: the objective returned")]
    assert 1 <= len(notes) <= 2 and "'model_path', 'history', 'converged'" in notes[0], proc.stderr
    _, trials = trials_of(tmp_path)
    assert {t.params["x"] > 5 for t in trials} == {True, False}, "both kinds of trial ran"
    for t in trials:
        if t.params["x"] > 5:
            assert t.status is TrialStatus.FAILED
            assert t.error.startswith("TypeError: objective returned str for 'n_leaves'"), t.error
        else:
            assert t.status is TrialStatus.COMPLETE, t.error
            assert t.metrics == {"value": t.value, "n_params": 1234.0, "n_leaves": 3.0}


def test_a_mistyped_option_under_mpirun_is_one_line_not_one_per_rank(tmp_path):
    """Every rank parses the command line and reads the spec; argparse's usage and error,
    and a spec's error outside `search` (`mpiopt train`, `validate`), came from each (3
    ranks, 3 errors); now from rank 0 alone, and every rank exits 2."""
    proc = mpiopt("resume", "s", "--trials", "abc", np=3, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert errors == ["mpiopt resume: error: argument --trials: invalid int value: 'abc'"], proc.stderr
    assert not list(tmp_path.iterdir()), "nothing written"
    bad = tmp_path / "bad.yaml"     # a spec's error is the same on every rank: said once
    bad.write_text("study: {name: b}\nobjective: {function: f.py:f}\n"
                   "search_space: {x: {type: real, low: 1, high: 0}}\nsearch: {trials: 3}\n")
    proc = mpiopt("validate", bad, np=3, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert [ln for ln in proc.stderr.splitlines() if "error:" in ln] == [
        f"mpiopt: error: {bad}: search_space.x.low: low (1) must be less than high (0)"], proc.stderr
