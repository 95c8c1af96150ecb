"""The coordinator's decisions without MPI: events in, actions out, with a fake storage."""
from __future__ import annotations

import itertools

import pytest

from mpiopt.parallel.protocol import Decision, Report, Result
from mpiopt.parallel.scheduler import Answer, Dispatch, Scheduler, StopGroup, trial_seed
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus


class FakeStorage:
    """Implements the slice of the storage API the scheduler uses, and logs every write."""

    def __init__(self):
        self.trials: dict[int, dict] = {}
        self.log: list[tuple] = []
        self.status = None
        self.intermediate = []

    def create_trial(self, study_id, params, seed, group, host=None):
        tid = len(self.trials) + 1
        self.trials[tid] = dict(number=tid - 1, params=params, seed=seed, status="RUNNING", attempt=0)
        self.log.append(("create", tid))
        return self._frozen(tid)

    def restart_trial(self, trial_id, group, host=None):
        self.trials[trial_id].update(status="RUNNING", attempt=self.trials[trial_id]["attempt"] + 1)
        self.log.append(("restart", trial_id))
        return self._frozen(trial_id)

    def finish_trial(self, trial_id, status, **kw):
        self.trials[trial_id].update(status=TrialStatus(status).value, **kw)
        self.log.append(("finish", trial_id))

    def add_intermediate(self, trial_id, epoch, value):
        self.intermediate.append((trial_id, epoch, value))

    def interrupt_running(self, study_id):
        n = 0
        for t in self.trials.values():
            if t["status"] == "RUNNING":
                t["status"], n = "INTERRUPTED", n + 1
        return n

    def set_study_status(self, study_id, status):
        self.status = status

    def _frozen(self, tid):
        t = self.trials[tid]
        return FrozenTrial(id=tid, study_id=1, number=t["number"], status=TrialStatus(t["status"]),
                           params=t["params"], seed=t["seed"], attempt=t["attempt"])


class CountingSearcher:
    """Suggests x = 0, 1, 2, ...; remembers what it was told, in order."""

    def __init__(self):
        self.counter = itertools.count()
        self.told, self.forgotten, self.replayed, self.pending = [], [], [], []
        self.calls, self.numbers, self.rerun, self.next_number = [], [], [], None

    def ask(self, number=None):
        self.calls.append("ask")
        self.numbers.append(number)
        p = {"x": next(self.counter)}
        self.pending.append(p)
        return p

    def tell(self, params, value):
        self.calls.append("tell")
        self.told.append((params["x"], value))

    def forget(self, params):
        self.forgotten.append(params["x"])

    def replay(self, trials, pending=(), next_number=None):
        self.replayed.extend(trials)
        self.rerun.extend(pending)
        self.next_number = next_number


def make(n_groups=2, budget=4, **kw):
    storage, searcher = FakeStorage(), CountingSearcher()
    sched = Scheduler(storage=storage, study_id=1, searcher=searcher, direction=kw.pop("direction", "minimize"),
                      budget=budget, n_groups=n_groups, **kw)
    return sched, storage, searcher


def done(trial_id, value=1.0, status="COMPLETE", error=None):
    return Result(trial_id=trial_id, status=status, value=value, error=error)


def test_start_dispatches_every_idle_group_and_commits_running_first():
    sched, storage, _ = make(n_groups=3, budget=10)
    actions = sched.start()
    assert [a.group for a in actions] == [0, 1, 2]
    assert all(isinstance(a, Dispatch) for a in actions)
    assert [storage.trials[a.trial.trial_id]["status"] for a in actions] == ["RUNNING"] * 3
    assert [a.trial.number for a in actions] == [0, 1, 2]
    assert actions[1].trial.seed == trial_seed(0, 1) != trial_seed(0, 2)


def test_finished_group_gets_prefetched_work_before_searcher_is_told():
    sched, storage, searcher = make(n_groups=2, budget=5)
    first = sched.start()
    assert sched.prefetch() is True and sched.prefetch() is False  # one suggestion ahead
    actions = sched.on_result(0, done(first[0].trial.trial_id, 3.0))
    assert isinstance(actions[0], Dispatch) and actions[0].trial.params == {"x": 2}
    assert storage.log.index(("finish", 1)) < storage.log.index(("create", 3))
    assert searcher.told == [(0, 3.0)]


def test_without_a_prefetched_suggestion_the_result_is_told_before_the_next_ask():
    sched, _, searcher = make(n_groups=1, budget=3)    # single-process mode never prefetches
    a = sched.start()
    sched.on_result(0, done(a[0].trial.trial_id, 3.0))
    assert searcher.calls == ["ask", "tell", "ask"]     # sequential search stays sequential


def test_budget_counts_finished_and_running_then_stops_groups():
    sched, storage, searcher = make(n_groups=2, budget=3)
    a = sched.start()
    b = sched.on_result(0, done(a[0].trial.trial_id))
    assert isinstance(b[0], Dispatch)
    c = sched.on_result(1, done(a[1].trial.trial_id))
    assert c == [StopGroup(1)]                      # budget of 3: nothing left to start
    assert not sched.done
    d = sched.on_result(0, done(b[0].trial.trial_id))
    assert d == [StopGroup(0)] and sched.done
    assert sched.finish() is StudyStatus.COMPLETE and storage.status is StudyStatus.COMPLETE


def test_failed_and_nonfinite_results_are_recorded_but_never_told():
    sched, storage, searcher = make(n_groups=1, budget=3)
    a = sched.start()
    b = sched.on_result(0, done(a[0].trial.trial_id, None, "FAILED", "ValueError: boom"))
    assert storage.trials[1]["status"] == "FAILED" and storage.trials[1]["error"] == "ValueError: boom"
    assert searcher.told == [] and searcher.forgotten == [0]
    sched.on_result(0, done(b[0].trial.trial_id, 2.0))
    assert searcher.told == [(1, 2.0)]


def test_maximize_tells_negated_values_and_tracks_best():
    sched, _, searcher = make(n_groups=1, budget=2, direction="maximize")
    a = sched.start()
    b = sched.on_result(0, done(a[0].trial.trial_id, 0.9))
    sched.on_result(0, done(b[0].trial.trial_id, 0.5))
    assert searcher.told == [(0, -0.9), (1, -0.5)]
    assert sched.best.value == 0.9


def test_target_stops_dispatch_but_running_trials_finish():
    sched, _, _ = make(n_groups=2, budget=10, target=0.5)
    a = sched.start()
    assert sched.on_result(0, done(a[0].trial.trial_id, 0.4)) == [StopGroup(0)]
    assert sched.stop_reason == "target" and not sched.done
    assert sched.on_result(1, done(a[1].trial.trial_id, 0.3)) == [StopGroup(1)]
    assert sched.done


def test_initial_failures_stop_the_study():
    sched, storage, _ = make(n_groups=1, budget=50, max_initial_failures=3)
    actions = sched.start()
    for _ in range(3):
        actions = sched.on_result(0, done(actions[0].trial.trial_id, None, "FAILED", "ImportError: x"))
    assert actions == [StopGroup(0)] and sched.done
    assert sched.finish() is StudyStatus.FAILED
    assert "first 3 trials all failed" in sched.message and "ImportError" in sched.message


def test_time_limit_stops_new_dispatch():
    now = [0.0]
    sched, _, _ = make(n_groups=1, budget=10, time_limit=5.0, clock=lambda: now[0])
    a = sched.start()
    now[0] = 6.0
    assert sched.on_result(0, done(a[0].trial.trial_id)) == [StopGroup(0)]
    assert sched.stop_reason == "time_limit"


def test_reports_are_stored_and_answered_by_the_pruner():
    class PruneAfterTwo:
        def should_prune(self, number, epoch, value, history):
            return epoch >= 2

    sched, storage, _ = make(n_groups=1, budget=2, pruner=PruneAfterTwo())
    a = sched.start()
    tid = a[0].trial.trial_id
    assert sched.on_report(0, Report(tid, 1, 0.5)) == [Answer(0, Decision(tid))]
    assert sched.on_report(0, Report(tid, 2, 0.4))[0].decision.prune is True
    assert (tid, 2, 0.4) in storage.intermediate
    sched.on_result(0, done(tid, 0.4, "PRUNED"))
    assert storage.trials[tid]["status"] == "PRUNED"


def test_resume_replays_finished_and_reruns_unfinished_first():
    existing = [
        FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.COMPLETE, params={"x": 10}, value=2.0),
        FrozenTrial(id=2, study_id=1, number=1, status=TrialStatus.RUNNING, params={"x": 11}),
        FrozenTrial(id=3, study_id=1, number=2, status=TrialStatus.FAILED, params={"x": 12}, error="e"),
    ]
    storage, searcher = FakeStorage(), CountingSearcher()
    storage.trials = {1: dict(number=0, params={"x": 10}, seed=1, status="COMPLETE", attempt=0),
                      2: dict(number=1, params={"x": 11}, seed=2, status="RUNNING", attempt=0),
                      3: dict(number=2, params={"x": 12}, seed=3, status="FAILED", attempt=0)}
    sched = Scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=4, n_groups=2, existing=existing)
    assert searcher.replayed == [({"x": 10}, 2.0), ({"x": 12}, None)]
    assert searcher.rerun == [{"x": 11}] and searcher.next_number == 3  # pending from the start
    assert sched.finished == 2 and sched.best.number == 0
    actions = sched.start()
    assert actions[0].trial.trial_id == 2 and actions[0].trial.attempt == 1   # same trial, new attempt
    assert actions[1].trial.number == 3                                       # then new numbers
    assert searcher.numbers == [3]                          # asked for trial 3 by number
    assert len(actions) == 2


def test_interrupt_marks_running_and_study():
    sched, storage, searcher = make(n_groups=2, budget=10)
    sched.start()
    sched.interrupt()
    assert {t["status"] for t in storage.trials.values()} == {"INTERRUPTED"}
    assert storage.status is StudyStatus.INTERRUPTED and sched.done
    assert sorted(searcher.forgotten) == [0, 1]
