"""mpiopt.objective.settings: what a trial changes in the process it shares with mpiopt's
own code is put back as it ends, and mpiopt's code called during it runs with mpiopt's;
what it breaks there that is no setting costs the searcher a guided suggestion, not the
study (mpiopt.search._base)."""
from __future__ import annotations

import io
import json
import os
import random
import sys
import warnings

import numpy as np
import yaml

from conftest import mpiopt, study_state
from mpiopt.objective.settings import kept, ours
from mpiopt.trial import StudyStatus, TrialStatus


def _look() -> dict:
    """The settings a trial may change, as plain values."""
    from threadpoolctl import threadpool_info

    return {"numpy": np.geterr(), "handler": np.geterrcall(),
            "filters": list(warnings.filters), "show": warnings.showwarning,
            "cwd": os.getcwd(), "env": dict(os.environ),
            "random": (random.random(), np.random.random()),
            "threads": [p["num_threads"] for p in threadpool_info()],
            "affinity": os.sched_getaffinity(0), "streams": (sys.stdout, sys.stderr)}


def _change_everything(tmp_path) -> None:
    from threadpoolctl import threadpool_info, threadpool_limits

    np.seterr(all="raise")
    np.seterrcall(print)
    warnings.simplefilter("error")
    warnings.showwarning = print
    os.chdir(tmp_path)
    os.environ["MPIOPT_TEST_SET_BY_A_TRIAL"] = "1"
    os.environ.pop("HOME", None)
    random.seed(5)
    np.random.seed(5)
    threadpool_limits(limits={p["filepath"]: p["num_threads"] + 1 for p in threadpool_info()})
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    sys.stdout = sys.stderr = io.StringIO()


def _same(a: dict, b: dict) -> bool:
    """Equal, the random draws aside (each look draws: compared apart)."""
    return {k: v for k, v in a.items() if k != "random"} == \
        {k: v for k, v in b.items() if k != "random"}


def test_every_setting_a_trial_changes_is_put_back(tmp_path):
    state = random.getstate(), np.random.get_state()
    before = _look()
    random.setstate(state[0])
    np.random.set_state(state[1])
    try:
        with kept():
            _change_everything(tmp_path)
            assert not _same(_look(), before)
        after = _look()
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    assert _same(after, before), {k for k in after if after[k] != before[k]}
    assert after["random"] == before["random"]       # the generators' streams go on as before


def test_code_called_from_a_trial_runs_with_the_settings_from_before_it(tmp_path):
    before = _look()
    seen = {}
    try:
        with kept() as noted:
            _change_everything(tmp_path)
            during = _look()
            ours(noted, lambda: seen.update(_look()))()
            assert _same(_look(), during)             # the trial's own, back after the call
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    assert _same(seen, before)


CHANGES = """
import io, json, os, random, sys, warnings

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

SEEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seen.jsonl")


def f(params, report):
    seen = {"under": np.geterr()["under"], "cwd": os.getcwd(),
            "filters": [w[0] for w in warnings.filters][:3],
            "env": (os.environ.get("MPIOPT_TEST_SET_BY_A_TRIAL"), "HOME" in os.environ),
            "threads": [p["num_threads"] for p in threadpool_info()],
            "cpus": len(os.sched_getaffinity(0)), "stdout": sys.stdout.closed}
    with open(SEEN, "a") as out:
        out.write(json.dumps(seen) + "\\n")
    np.seterr(all="raise")
    warnings.simplefilter("error")
    os.makedirs("elsewhere", exist_ok=True)
    os.chdir("elsewhere")
    os.environ["MPIOPT_TEST_SET_BY_A_TRIAL"] = "1"
    os.environ.pop("HOME", None)
    threadpool_limits(limits=2)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    value = (params["x"] - 0.3) ** 2 + params["y"] ** 2
    report(0, value)                    # recorded with mpiopt's settings
    sys.stdout = io.StringIO()
    sys.stdout.close()
    return value
"""


def test_a_study_whose_objective_changes_the_process_s_settings_ends(tmp_path):
    """One process, `isolate: false`: the objective shares the coordinator's process.
    After `np.seterr(all="raise")` in a trial, the Gaussian process's next ask failed
    (FloatingPointError: underflow encountered in exp), exit 1, on every resume again;
    a closed sys.stdout took the progress lines, a warning filter "error" the searcher's
    warnings. Every trial sees the settings the first one saw."""
    (tmp_path / "changes.py").write_text(CHANGES)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "study": {"name": "settings"},
        "objective": {"function": "changes.py:f", "direction": "minimize", "isolate": False},
        "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0},
                         "y": {"type": "real", "low": -2.0, "high": 2.0}},
        "search": {"algorithm": "bayesian", "trials": 7, "seed": 3,
                   "bayesian": {"initial_points": 3}}}))
    url = f"sqlite:///{tmp_path / 's.db'}"
    proc = mpiopt("search", "s.yaml", "--storage", "sqlite:///s.db", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "study complete: 7 trials (7 complete)" in proc.stdout
    study, trials = study_state(url, "settings")
    assert study.status is StudyStatus.COMPLETE
    assert [t.status for t in trials] == [TrialStatus.COMPLETE] * 7
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert len(seen) == 7 and all(s == seen[0] for s in seen), seen


BREAKS = """
from sklearn.gaussian_process import kernels


def broken(*args, **kwargs):
    raise RuntimeError("broken by the objective")


def f(params):
    kernels.Kernel.clone_with_theta = broken    # what the GP's kernel fit makes its kernel with
    return (params["x"] - 0.3) ** 2 + params["y"] ** 2
"""


def test_a_searcher_broken_in_the_coordinator_s_process_draws_at_random_and_the_study_ends(
        tmp_path):
    """No setting: a function of a library the searcher uses, replaced by the objective
    in the process they share. The study's loop ended on the searcher's first model-guided
    ask, and every resume, which starts afresh, ran one more trial and ended the same way:
    a study that could never finish. Now such a suggestion is drawn at random, the
    failure said once, and the study ends."""
    (tmp_path / "breaks.py").write_text(BREAKS)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "study": {"name": "broken"},
        "objective": {"function": "breaks.py:f", "direction": "minimize", "isolate": False},
        "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0},
                         "y": {"type": "real", "low": -2.0, "high": 2.0}},
        "search": {"algorithm": "bayesian", "trials": 6, "seed": 3,
                   "bayesian": {"initial_points": 3}}}))
    url = f"sqlite:///{tmp_path / 's.db'}"
    proc = mpiopt("search", "s.yaml", "--storage", url, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    study, trials = study_state(url, "broken")
    assert study.status is StudyStatus.COMPLETE
    assert [t.status for t in trials] == [TrialStatus.COMPLETE] * 6
    said = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "could not" in ln]
    assert said == ["warning: bayesian could not make a suggestion (RuntimeError: broken by "
                    "the objective): such a trial's parameters are drawn at random (said "
                    "once)"], proc.stdout + proc.stderr
