"""A shared study's scheduler (parallel/scheduler/shared.py) without MPI or a database:
another job's trials come in through ReadChanges answers the test writes, and the
database's budget through CreateTrials answers that create only what fits."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime, timezone

from mpiopt.errors import TrialTaken
from mpiopt.parallel.protocol import Result
from mpiopt.parallel.scheduler import StopGroup
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.shared import Shared
from mpiopt.trial import FrozenTrial, TrialStatus
from scheduling import Records, scheduler
from test_scheduler import CountingSearcher

OTHER = 99          # the other job's id


@dataclass
class Changes:
    finished: list = field(default_factory=list)
    running: list = field(default_factory=list)
    interrupted: list = field(default_factory=list)
    counted: int = 0
    at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


class SharedRecords(Records):
    """Records that create only what the budget (the study's, counting the other job's
    trials too) leaves, and answer ReadChanges with `self.changes`."""

    def __init__(self):
        super().__init__()
        self.changes = Changes()
        self.theirs = 0                 # the other job's counted trials
        self.taken: set[int] = set()    # trial ids another job restarted first
        self._table[ins.ReadChanges] = self._read
        self.reads = 0
        self.seen_theirs: int | None = None     # what a read sees of theirs, if behind

    def _read(self, i):
        self.reads += 1
        seen = self.theirs if self.seen_theirs is None else self.seen_theirs
        self.changes.counted = seen + len(self.trials)
        return self.changes

    def _create(self, i: ins.CreateTrials):
        if i.limit is None:
            return super()._create(i)
        room = max(0, i.limit - self.theirs - len(self.trials))
        made = super()._create(ins.CreateTrials(i.study_id, i.requests[:room]))
        return made + [None] * (len(i.requests) - room)

    def _restart(self, i: ins.RestartTrial):
        if i.trial_id in self.taken:
            raise TrialTaken("taken")
        self.trials.setdefault(i.trial_id, dict(number=i.trial_id, params={"x": -i.trial_id},
                                                seed=1, status="INTERRUPTED", attempt=1))
        return super()._restart(i)


def other(tid: int, number: int, x: float, status=TrialStatus.COMPLETE, value=None):
    return FrozenTrial(id=tid, study_id=1, number=number, status=status, params={"x": x},
                       value=value, job=OTHER)


def make(budget=6, n_groups=2, clock=None, **kw):
    storage, searcher = SharedRecords(), HoldingSearcher()
    t = itertools.count(0, 10) if clock is None else clock
    sched = scheduler(storage=storage, study_id=1, searcher=searcher, direction="minimize",
                      budget=budget, n_groups=n_groups, shared=Shared(job_id=1),
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
    storage.changes = Changes(finished=[other(50, 0, 7.0, value=3.0)],
                              running=[other(51, 1, 8.0, TrialStatus.RUNNING)])
    storage.theirs = 2
    sched.start()
    assert searcher.told == [(7.0, 3.0)] and searcher.held == [8.0]
    assert searcher.calls[0] == "tell" and "ask" in searcher.calls
    assert sched.finished == 1 and sched.best.value == 3.0


def test_the_budget_counts_every_job_and_a_refused_create_asks_nothing_more():
    sched, storage, searcher = make(budget=3)
    storage.theirs = 1
    sent = sched.start()                        # 1 of 3 theirs: both groups get one
    assert [type(m) for m in sent].count(ins.Dispatch) == 2
    sched, storage, searcher = make(budget=3)
    storage.seen_theirs, storage.theirs = 0, 2  # the read is behind: they made one more
    sent = sched.start()
    assert [type(m) for m in sent].count(ins.Dispatch) == 1 and searcher.forgotten == [1]
    storage.seen_theirs = None                  # the next read sees them
    asks = searcher.calls.count("ask")
    sched.on_result(0, Result(trial_id=1, status="COMPLETE", value=1.0))
    assert searcher.calls.count("ask") == asks      # (nothing left: no suggestion asked)


def test_idle_groups_wait_while_another_jobs_trials_run_and_stop_once_none_do():
    sched, storage, searcher = make(budget=2)
    storage.theirs = 1
    storage.changes = Changes(running=[other(51, 0, 8.0, TrialStatus.RUNNING)])
    sched.start()                               # one trial here, one there: budget spent
    sent = sched.on_result(0, Result(trial_id=1, status="COMPLETE", value=1.0))
    assert not [m for m in sent if isinstance(m, StopGroup)] and not sched.done
    storage.changes = Changes(finished=[other(51, 0, 8.0, value=2.0)])
    sent = sched.tick()
    assert len([m for m in sent if isinstance(m, StopGroup)]) == 2 and sched.done


def test_a_lost_jobs_trial_is_claimed_and_one_another_job_took_is_left_to_it():
    sched, storage, searcher = make(budget=4, n_groups=1)
    storage.theirs = 2
    storage.taken = {60}
    storage.changes = Changes(interrupted=[other(60, 0, 1.0, TrialStatus.INTERRUPTED),
                                           other(61, 1, 2.0, TrialStatus.INTERRUPTED)])
    sched.start()
    assert ("restart", 61) in storage.log and ("restart", 60) not in storage.log
    assert not sched.reruns


def test_another_jobs_result_at_the_target_stops_this_job():
    sched, storage, searcher = make(budget=10, target=0.5)
    sched.start()
    storage.changes = Changes(finished=[other(70, 5, 1.0, value=0.1)])
    sched.tick()
    assert sched.stop_reason == "target" and "another job" in sched.message


def test_every_create_names_its_set_so_two_jobs_never_run_one():
    """Two jobs' model-based searchers may pick the same point (a corner of the space)
    within one read: the database creates each set once (distinct keys, the same key for
    the same set read back at 12 digits)."""
    sched, storage, searcher = make()
    seen = []
    create = storage._create
    storage._table[ins.CreateTrials] = lambda i: seen.append(i) or create(i)
    sched.start()
    assert seen and all(i.distinct and i.limit == 6 for i in seen)
    keys = [r["key"] for i in seen for r in i.requests]
    assert len(set(keys)) == len(keys) == 2
    assert sched.sched._key({"x": 0.1 + 0.2}) == sched.sched._key({"x": 0.3})
