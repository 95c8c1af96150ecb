"""A shared study's scheduler (parallel/scheduler/shared.py) without MPI: another job of
the study writes its trials into the same in-memory storage (tests/scheduling.py) under
its own fence, and the database's budget and claims decide as they do for real jobs."""
from __future__ import annotations

import itertools

from mpiopt.parallel.protocol import Result
from mpiopt.parallel.scheduler import Dispatch, StopGroup
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.shared import Shared, set_key
from mpiopt.trial import TrialStatus
from scheduling import Records, scheduler
from test_scheduler import CountingSearcher


class SharedRecords(Records):
    """Records of a study two jobs run: this job (the fence, job id `mine`) and `other`.
    `before[kind]` runs just before an instruction of that kind is carried out: another
    job's write that lands between this job's read and its own write."""

    def __init__(self):
        super().__init__()
        self.mine = self.storage.join_study(self.study_id, "h", 1, 30.0, shared=True)
        self.other = self.storage.join_study(self.study_id, "h", 2, 30.0, shared=True)
        self.before: dict[type, object] = {}
        self._as(self.mine)

    def do(self, instruction, executor=None):
        hook = self.before.get(type(instruction))
        if hook is not None:
            hook(instruction)
        return super().do(instruction, executor)

    def _as(self, job) -> None:
        self.storage.fence = (job.id, job.token)

    def theirs(self, x: float, status=TrialStatus.COMPLETE, value=None, job=None) -> int:
        """A trial of the other job (or `job`): finished, RUNNING, or INTERRUPTED (left
        to be claimed); returns its id."""
        self._as(job or self.other)
        try:
            trial = self.storage.create_trial(self.study_id, {"x": x}, seed=1, group=0)
            if status is TrialStatus.INTERRUPTED:
                self.storage.interrupt_running(self.study_id)
            elif status is not TrialStatus.RUNNING:
                self.storage.finish_trial(trial.id, status, value=value)
            return trial.id
        finally:
            self._as(self.mine)

    def finish_theirs(self, trial_id: int, value: float) -> None:
        self._as(self.other)
        try:
            self.storage.finish_trial(trial_id, TrialStatus.COMPLETE, value=value)
        finally:
            self._as(self.mine)

    def claimed_by_another(self, trial_id: int) -> None:
        """A third job restarts the trial first."""
        third = self.storage.join_study(self.study_id, "h", 3, 30.0, shared=True)
        self._as(third)
        try:
            self.storage.restart_trial(trial_id, group=0)
        finally:
            self._as(self.mine)


def make(budget=6, n_groups=2, clock=None, **kw):
    storage, searcher = SharedRecords(), HoldingSearcher()
    t = itertools.count(0, 10) if clock is None else clock
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=budget, n_groups=n_groups, shared=Shared(job_id=storage.mine.id),
                      clock=lambda: next(t), **kw)
    return sched, storage, searcher


class HoldingSearcher(CountingSearcher):
    def __init__(self):
        super().__init__()
        self.held = []

    def hold(self, params):
        self.held.append(params["x"])


def test_other_jobs_results_are_told_and_their_running_trials_held_before_the_first_ask():
    sched, storage, searcher = make()
    storage.theirs(7.0, value=3.0)
    storage.theirs(8.0, TrialStatus.RUNNING)
    sched.start()
    assert searcher.told == [(7.0, 3.0)] and searcher.held == [8.0]
    assert searcher.calls[0] == "tell" and "ask" in searcher.calls
    assert sched.finished == 1 and sched.best.value == 3.0


def test_the_budget_counts_every_job_and_a_refused_create_asks_nothing_more():
    sched, storage, searcher = make(budget=3)
    storage.theirs(5.0, value=1.0)
    sent = sched.start()                        # 1 of 3 theirs: both groups get one
    assert [type(m) for m in sent].count(ins.Dispatch) == 2
    sched, storage, searcher = make(budget=3)
    storage.before[ins.CreateTrials] = lambda i: (   # after the read, before the create:
        storage.before.clear(), storage.theirs(5.0, value=1.0), storage.theirs(6.0, value=1.0))
    sent = sched.start()
    assert [type(m) for m in sent].count(ins.Dispatch) == 1 and searcher.forgotten == [1]
    asks = searcher.calls.count("ask")          # (the next read sees them)
    mine = [m for m in sent if isinstance(m, Dispatch)][0].trial.trial_id
    sched.on_result(0, Result(trial_id=mine, status="COMPLETE", value=1.0))
    assert searcher.calls.count("ask") == asks      # (nothing left: no suggestion asked)


def test_idle_groups_wait_while_another_jobs_trials_run_and_stop_once_none_do():
    sched, storage, searcher = make(budget=2)
    running = storage.theirs(8.0, TrialStatus.RUNNING)
    sent = sched.start()                        # one trial here, one there: budget spent
    mine = [m for m in sent if isinstance(m, Dispatch)][0].trial.trial_id
    sent = sched.on_result(0, Result(trial_id=mine, status="COMPLETE", value=1.0))
    assert not [m for m in sent if isinstance(m, StopGroup)] and not sched.done
    storage.finish_theirs(running, 2.0)
    sent = sched.tick()
    assert len([m for m in sent if isinstance(m, StopGroup)]) == 2 and sched.done


def test_a_lost_jobs_trial_is_claimed_and_one_another_job_took_is_left_to_it():
    sched, storage, searcher = make(budget=4, n_groups=1)
    first = storage.theirs(1.0, TrialStatus.INTERRUPTED)
    second = storage.theirs(2.0, TrialStatus.INTERRUPTED)
    storage.before[ins.RestartTrial] = lambda i: (       # between the read and the claim
        storage.before.clear(), storage.claimed_by_another(first))
    sched.start()
    assert ("restart", second) in storage.log and ("restart", first) not in storage.log
    assert not sched.reruns


def test_another_jobs_result_at_the_target_stops_this_job():
    sched, storage, searcher = make(budget=10, target=0.5)
    sched.start()
    storage.theirs(1.0, value=0.1)
    sched.tick()
    assert sched.stop_reason == "target" and "another job" in sched.message


def test_every_create_names_its_set_so_two_jobs_never_run_one():
    """Two jobs' model-based searchers may pick the same point (a corner of the space)
    within one read: the database creates each set once (distinct keys, the same key for
    the same set read back at 12 digits)."""
    sched, storage, searcher = make()
    seen = []
    storage.before[ins.CreateTrials] = seen.append
    sched.start()
    assert seen and all(i.distinct and i.limit == 6 for i in seen)
    keys = [r["key"] for i in seen for r in i.requests]
    assert len(set(keys)) == len(keys) == 2
    assert set_key({"x": 0.1 + 0.2}) == set_key({"x": 0.3})
