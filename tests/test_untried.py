"""Finite spaces: each parameter set once, then the end (mpiopt.search.untried), in the
bookkeeping, in the scheduler with real searchers, and in a real study under mpiexec."""
from __future__ import annotations

import time

import pytest
import yaml

from conftest import ROOT, mpiopt
from mpiopt.space.conditions import Condition
from mpiopt.parallel.scheduler import Dispatch
from mpiopt.search import make_searcher
from mpiopt.search.background import BackgroundSearcher
from mpiopt.search.untried import LIST_MAX, Untried, space_size
from mpiopt.space import Categorical, Integer, Real, Space
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus
from scheduling import Records, scheduler
from test_scheduler import done
from test_search_mpi import db_url, search, trials_of

GRID = Space([Categorical("opt", ["adam", "sgd"]), Integer("layers", 1, 3)])


def value(params):
    return {"adam": 0.1, "sgd": 0.3}[params["opt"]] + 0.01 * params["layers"]


def test_the_size_of_a_space():
    assert space_size(GRID) == 6
    assert space_size(Space([Integer("a", 1, 100), Integer("b", 0, 10, )])) == 1100
    assert space_size(Space([Integer("a", 1, 3), Real("x", 0.0, 1.0)])) is None
    # a conditional space counts its distinct sets: momentum only with sgd
    cond = Space([Categorical("opt", ["adam", "sgd"]), Integer("momentum", 1, 3)],
                 {"momentum": (Condition("opt", values=("sgd",)),)})
    assert space_size(cond) == 1 + 3
    big = Space([Integer("a", 0, LIST_MAX), Integer("b", 0, 1)],
                {"b": (Condition("a", op=">", number=5.0),)})
    assert space_size(big) is None          # too many combinations to count: left alone


def test_an_untried_set_is_new_and_the_same_for_the_same_trial_number():
    u = Untried.of(GRID, seed=1)
    for params in ({"opt": "adam", "layers": 1}, {"opt": "sgd", "layers": 2}):
        u.claim(params)
    picks = [u.instead(7) for _ in range(3)]
    assert picks[0] == picks[1] == picks[2] and not u.repeats(picks[0])
    while u.left():
        u.claim(u.instead(u.left()))
    assert u.instead(99) is None and len(u.seen) == 6


def drive(sched, evaluate=value, max_steps=200):
    """Run the scheduler to its end: every dispatch evaluated at once, in order."""
    queue = list(sched.start())
    for _ in range(max_steps):
        dispatches = [a for a in queue if isinstance(a, Dispatch)]
        if not dispatches:
            break
        a = dispatches[0]
        queue.remove(a)
        res = done(a.trial.trial_id, evaluate(a.trial.params))
        queue += sched.on_result(a.group, res)
        sched.prefetch()
    assert sched.done
    return sched.finish()


@pytest.mark.parametrize("algorithm", ["random", "tpe", "evolutionary", "auto", "bayesian",
                                       "cmaes"])
@pytest.mark.parametrize("ahead", [False, True])
def test_each_set_runs_once_and_the_study_ends_complete(algorithm, ahead):
    storage = Records()
    searcher = make_searcher(algorithm, GRID, {}, 0, budget=20, parallel=2)
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=20, n_groups=2, ask_ahead=ahead, send_first=ahead)
    assert drive(sched) is StudyStatus.COMPLETE
    keys = [(t["params"]["opt"], t["params"]["layers"]) for t in storage.trials.values()]
    assert sorted(keys) == sorted({(o, n) for o in ("adam", "sgd") for n in (1, 2, 3)})
    assert sched.stop_reason == "exhausted" and "all 6 parameter sets" in sched.message


@pytest.mark.parametrize("categorical", [False, True])
def test_auto_s_pair_holds_the_replacements_in_both_members(categorical):
    """Three numeric parameters: `auto` runs the GP with CMA-ES (with TPE beside a
    categorical one); a replacement is pending in both, and each set still runs once."""
    dims = [Integer(n, 0, 2) for n in "abc"] + ([Categorical("k", ["p", "q"])] if categorical else [])
    space = Space(dims)
    storage = Records()
    searcher = make_searcher("auto", space, {}, 0, budget=80, parallel=3)
    assert searcher.algorithm == "portfolio"
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=80, n_groups=3)
    assert drive(sched, evaluate=lambda p: (p["a"] - 1) ** 2 + p["b"] + (p.get("k") == "q")) \
        is StudyStatus.COMPLETE
    keys = [tuple(sorted(t["params"].items())) for t in storage.trials.values()]
    assert len(keys) == len(set(keys)) == space_size(space)
    for member in searcher.members:          # nothing left pending in either member
        assert not member.pending


def test_a_background_searcher_gets_the_replacement_too():
    """The GP asked beside the loop (its stock may repeat a told set): still each set once."""
    storage = Records()
    searcher = BackgroundSearcher(make_searcher("bayesian", GRID, {}, 0), max_stock=2)
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=20, n_groups=2)
    try:
        queue = list(sched.start())
        for _ in range(400):
            if sched.done:
                break
            dispatches = [a for a in queue if isinstance(a, Dispatch)]
            if dispatches:
                a = dispatches[0]
                queue.remove(a)
                queue += sched.on_result(a.group, done(a.trial.trial_id, value(a.trial.params)))
            else:
                time.sleep(0.01)
                queue += sched.tick()
        assert sched.finish() is StudyStatus.COMPLETE
    finally:
        sched.close_searcher()
    keys = [(t["params"]["opt"], t["params"]["layers"]) for t in storage.trials.values()]
    assert len(keys) == len(set(keys)) == 6


def test_a_resumed_study_runs_only_the_sets_it_has_not_tried():
    """Finished (a failed one too) and queued sets count as tried; a trial that was running
    runs again under its own number, not as a new one."""
    sets = [{"opt": "adam", "layers": 1}, {"opt": "sgd", "layers": 3},
            {"opt": "adam", "layers": 2}, {"opt": "sgd", "layers": 1}]
    statuses = [TrialStatus.COMPLETE, TrialStatus.FAILED, TrialStatus.RUNNING, TrialStatus.PENDING]
    existing = [FrozenTrial(id=i + 1, study_id=1, number=i, status=s, params=p,
                            value=value(p) if s is TrialStatus.COMPLETE else None)
                for i, (p, s) in enumerate(zip(sets, statuses))]
    storage = Records()
    for t in existing:
        storage.put(t.params, t.status, seed=0, value=t.value)
    searcher = make_searcher("random", GRID, {}, 0)
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=20, n_groups=1, existing=existing)
    assert sched.untried.left() == 2
    assert drive(sched) is StudyStatus.COMPLETE
    new = [t["params"] for t in storage.trials.values() if t["number"] >= 4]
    assert sorted((p["opt"], p["layers"]) for p in new) == [("adam", 3), ("sgd", 2)]


def test_an_infinite_space_is_left_alone():
    space = Space([Categorical("opt", ["adam", "sgd"]), Real("x", 0.0, 1.0)])
    sched = scheduler(storage=Records(), study_id=1, direction="minimize", budget=5,
                      searcher=make_searcher("random", space, {}, 0), n_groups=1)
    assert sched.untried is None


def test_a_finite_study_under_mpiexec_runs_each_set_once_and_says_so(tmp_path):
    spec = {
        "study": {"name": "grid"},
        "objective": {"function": f"{ROOT / 'tests' / 'objectives' / 'functions.py'}:grid"},
        "search_space": {"opt": {"type": "categorical", "choices": ["adam", "sgd"]},
                         "layers": {"type": "integer", "low": 1, "high": 3}},
        "search": {"algorithm": "random", "trials": 20},
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = search(tmp_path, path, 3)
    assert proc.returncode == 0, proc.stderr
    assert "the search space has 6 parameter sets, fewer than search.trials (20)" in proc.stdout
    assert "all 6 parameter sets of the search space have been tried" in proc.stdout
    assert "study complete: 6 trials" in proc.stdout
    # resumed with more trials: nothing is left to try, nothing runs again
    again = search(tmp_path, path, 3, "--resume", "--trials", "30")
    assert again.returncode == 0, again.stderr
    study, trials = trials_of(tmp_path, "grid")
    assert study.status is StudyStatus.COMPLETE
    status = mpiopt("status", "grid", "--storage", db_url(tmp_path), cwd=tmp_path).stdout
    assert "6/30 done" in status and "the space has 6 parameter sets, each run once" in status
    assert sorted((t.params["opt"], t.params["layers"]) for t in trials) == \
        sorted({(o, n) for o in ("adam", "sgd") for n in (1, 2, 3)})


def test_a_set_held_by_the_pair_is_pending_in_both_members_until_told():
    space = Space([Integer(n, 0, 2) for n in "abc"])
    pair = make_searcher("auto", space, {}, 0, budget=30, parallel=2)
    params = {"a": 1, "b": 0, "c": 2}
    pair.hold(params)
    assert all(m.key(params) in m.pending for m in pair.members)
    pair.tell(params, 1.0)
    assert not any(m.pending for m in pair.members)
    assert all(m.told[-1] == (params, 1.0) for m in pair.members)
