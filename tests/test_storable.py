"""What a trial sends that the database cannot hold (issue 65, item 7): the value is refused
in the trial's own process, the trial is FAILED with one line that names it, and the
study goes on; a trial whose message still ends the coordinator counts a lost attempt, so
that search.max_attempts ends the repeat on resume. Real jobs (mpiexec -n 3), real
databases; the checks themselves (mpiopt.storable) alone first."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import mpiopt, study_state, subprocess_env
from mpiopt.trial import StudyStatus, TrialStatus

# ---------------------------------------------------------------- the checks alone


@pytest.mark.parametrize("name, problem", [
    (5, "must be text, got int"), ((1, 2), "must be text, got tuple"), ("", "must not be empty"),
    ("k" * 256, "is 256 bytes long in UTF-8; at most 255"),
    ("é" * 128, "is 256 bytes long in UTF-8"), ("a\udc80", "lone surrogate"),
    ("a\x00b", "control character"), ("loss\n", "control character")])
def test_a_metric_name_the_database_cannot_keep_says_why(name, problem):
    from mpiopt.storable import metric_name_problem

    assert problem in metric_name_problem(name)


@pytest.mark.parametrize("name", ["loss", "val_accuracy", "µ/σ", "k" * 255, "n params"])
def test_a_plain_metric_name_is_kept(name):
    from mpiopt.storable import metric_name_problem

    assert metric_name_problem(name) is None


def test_an_epoch_is_what_the_integer_column_holds():
    from mpiopt.storable import EPOCH_MAX, epoch_problem

    assert epoch_problem(0) is None and epoch_problem(EPOCH_MAX) is None
    assert "at most 2147483647" in epoch_problem(EPOCH_MAX + 1)
    assert ">= 0" in epoch_problem(-1)


def test_an_error_text_is_made_storable_not_refused():
    from mpiopt.storable import storable_text

    assert storable_text("plain ünïcode") == "plain ünïcode"
    assert storable_text("a\x00b \udc80.h5") == "a\\x00b \\udc80.h5"
    storable_text("a\x00b \udc80.h5").encode("utf-8")       # (UTF-8 takes it now)


# ---------------------------------------------------------------- real jobs

# Each trial x = 1..8 sends one thing the database cannot hold; any other x is a healthy
# trial that reports and returns plain values.
SENDS = '''
import math

def sends(params, report):
    kind = params["x"]
    if kind == 1:
        report(10**30, 0.5)
    if kind == 2:
        report(2**40, 0.5)                # (past PostgreSQL's INTEGER, not SQLite's)
    if kind == 3:
        report(0, 10**400)
    if kind == 4:
        return {"value": 1.0, (1, 2): 3.0}
    if kind == 5:
        return {"value": 1.0, "k" * 300: 3.0}
    if kind == 6:
        return {"value": 1.0, "big": 10**400}
    if kind == 7:
        raise ValueError("no file b'\\\\xff' \\x00 \\udcff.h5")
    if kind == 8:
        return {"value": 1.0, "loss\\nval": 3.0}
    report(0, float("nan"))
    report(1, math.inf)
    return {"value": float(kind) ** 2, "n_params": 10**30, "converged": "yes"}
'''
ERRORS = {
    1: "ValueError: report(epoch, value): epoch must be at most 2147483647",
    2: "ValueError: report(epoch, value): epoch must be at most 2147483647",
    3: "ValueError: report(epoch, value): value 1000",
    4: "ValueError: objective returned a metric named (1, 2), which must be text, got tuple",
    5: "ValueError: objective returned a metric named 'kkk",
    6: "OverflowError: objective returned 1000",
    7: "ValueError: no file b'\\xff' \\x00 \\udcff.h5",
    8: "ValueError: objective returned a metric named 'loss\\nval', which holds a control",
}


def _spec(tmp_path: Path, source: str, function: str, initial: list, trials: int,
          space=None, **search) -> Path:
    (tmp_path / "obj.py").write_text(source)
    spec = {"study": {"name": "v"},
            "objective": {"function": f"{tmp_path / 'obj.py'}:{function}",
                          "direction": "minimize"},
            "search_space": space or {"x": {"type": "integer", "low": 0, "high": 20}},
            "search": {"algorithm": "random", "trials": trials, "seed": 5,
                       "initial_trials": [{"x": x} for x in initial],
                       "max_initial_failures": trials, "max_failures_in_a_row": trials,
                       **search}}
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_what_a_trial_sends_that_the_database_cannot_hold_fails_that_trial_alone(tmp_path,
                                                                                db_url):
    """report(10**30, 0.5) in one trial under -n 3 ended the job ("coordinator failed on
    rank 0: OverflowError: Python int too large to convert to SQLite INTEGER"), the other
    group's trial with it, and every resume the same way; so did an epoch past
    PostgreSQL's INTEGER, a metric keyed by a tuple (its group's rank ended) and an
    error text with a lone surrogate or a NUL. Now each fails its own trial, with one line
    that names the value, and the study completes."""
    spec = _spec(tmp_path, SENDS, "sends", [1, 9, 2, 3, 4, 5, 6, 7, 8, 10], trials=10)
    proc = mpiopt("search", spec, "--storage", db_url, np=3, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "study complete" in proc.stdout, proc.stdout
    study, trials = study_state(db_url, "v")
    assert study.status is StudyStatus.COMPLETE and len(trials) == 10
    for t in trials:
        kind = t.params["x"]
        if kind in ERRORS:
            assert t.status is TrialStatus.FAILED, (kind, t.status, t.error)
            assert t.error.startswith(ERRORS[kind]) and "(world rank " in t.error.splitlines()[0], \
                (kind, t.error)
        else:
            assert t.status is TrialStatus.COMPLETE, (kind, t.error)
            assert t.metrics == {"value": kind ** 2, "n_params": 1e30}
            assert list(t.intermediate) == [(0, 0), (0, 1)]   # (fold, epoch)


# On rank 0, a write of the per-epoch value 0.125 fails as no write of a checked value can:
# what a trial sends ends the coordinator, the case a check cannot foresee.
FAILING_WRITE = '''
import os
if os.environ.get("PMI_RANK") == "0":
    from mpiopt.storage import _writes

    _plain = _writes.add_epoch

    def add_epoch(conn, trial_id, epoch, value, where):
        if value == 0.125:
            raise RuntimeError("this value cannot be written")
        return _plain(conn, trial_id, epoch, value, where)

    _writes.add_epoch = add_epoch
'''
REPORTS = '''
import time

def reports(params, report):
    if params["x"] == 1.0:
        report(0, 0.125)
    time.sleep(0.5)
    return float(params["x"])
'''


def test_a_trial_whose_report_ends_the_coordinator_is_failed_after_max_attempts(tmp_path):
    """A trial whose report the coordinator could not handle ended the job, was
    INTERRUPTED with no attempt counted, ran again on every resume and ended each job the
    same way: the study could never finish. Now it counts a lost attempt per job it ends,
    as a trial that kills its process does, and after search.max_attempts it is FAILED
    with the coordinator's error; the study then completes, and the other group's trial,
    interrupted each time, runs to its end."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(FAILING_WRITE)
    env = {**subprocess_env(), "PYTHONPATH": f"{tmp_path / 'site'}:"
           f"{subprocess_env().get('PYTHONPATH', '')}".rstrip(":")}
    spec = _spec(tmp_path, REPORTS, "reports", [1.0, 2.0], trials=4, max_attempts=2,
                 space={"x": {"type": "real", "low": 0.0, "high": 10.0}})
    url = f"sqlite:///{tmp_path / 'v.db'}"
    runs = [mpiopt("search", spec, "--storage", url, np=3, cwd=tmp_path, env=env, timeout=240)]
    while runs[-1].returncode != 0 and len(runs) < 4:
        runs.append(mpiopt("resume", "v", "--storage", url, np=3, cwd=tmp_path, env=env,
                           timeout=240))
    said = [r.stderr for r in runs]
    assert [r.returncode for r in runs] == [1, 1, 0], said
    assert all("coordinator failed on rank 0" in s and "cannot be written" in s
               for s in said[:2]), said
    assert "attempt 1 of 2" in runs[0].stdout, runs[0].stdout
    study, trials = study_state(url, "v")
    assert study.status is StudyStatus.COMPLETE
    poison = [t for t in trials if t.params["x"] == 1]
    assert len(poison) == 1 and poison[0].status is TrialStatus.FAILED, poison
    assert poison[0].error.startswith("ended its job 2 times (last: coordinator failed on "
                                      "rank 0"), poison[0].error
    assert sorted(t.status.value for t in trials) == ["COMPLETE"] * 3 + ["FAILED"]
