"""A study that several jobs run at once (`mpiopt search --join`): what this job's
scheduler knows of the others, and the rules that keep one budget and one search.

The database is where jobs meet; no job talks to another. So:

- **One budget.** The trial that would pass `search.trials` is never created: each
  create names the budget as its limit and the database counts the study's trials and
  creates only what fits, in the same transaction (Storage.create_trials). What this job
  believes is left (`counted`, read every POLL_S, plus its own creates since) only saves
  it asking for suggestions the database would refuse; a refusal makes it take the budget
  as spent until the next read says otherwise. Parameter sets are claimed by key
  (`distinct`), so two jobs never run the same one (model-based searchers of two jobs
  can both pick a corner of the space within one read).
- **One search.** Every POLL_S the job reads what changed (Storage.changes): finished
  trials of other jobs are told to its searcher (and their per-epoch values go to the
  pruner's history, so pruning compares with every job's trials at the same fold and
  epoch); their running trials are held pending (hold), so suggestions keep away from
  them; a result that reaches the target stops this job too. Jobs draw from different
  streams (the run seeds each job's searcher with its job id), so they do not suggest the
  same points.
- **A lost job costs its running trials.** Trials a lost or stopped job left INTERRUPTED
  are claimed by whichever live job restarts them first (RestartTrial answers TrialTaken
  to the others: events.ClaimRefused); stale jobs are found by the run's lease thread (Storage.take_orphans).
- **A job ends once nothing is left**: no trial to create and none running in another
  job. While other jobs' trials run, its idle groups wait (not stopped): should such a
  job die, this one takes its trials over; otherwise their results would wait for the
  next job to start.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta

from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.trial import TrialStatus

POLL_S = 1.0        # how stale this job's view of the others may be, at most (plus a read)
# `since` goes back this far: a result is stamped (by its writer's clock) in the
# transaction that commits it, so one stamped just before a read may commit just after it;
# a transaction takes milliseconds, and hosts of one cluster keep their clocks far closer
# than this. (Each read takes in again what finished within it: the cost of one read.)
MARGIN = timedelta(seconds=5)


@dataclass
class Shared:
    """This job's view of the study it shares: which job it is, what it has taken in."""
    job_id: int
    poll_s: float = POLL_S
    since: object = None                  # the next Storage.changes(since)
    read_at: float | None = None          # this job's clock at the last read
    counted: int = 0                      # trials counting against the budget, at the read
    made: int = 0                         # this job's creates since the read
    seen: set = field(default_factory=set)          # ids of finished trials taken in
    others: dict = field(default_factory=dict)      # id -> FrozenTrial other jobs run now

    def started(self, extra: int) -> int:
        """The study's trials as the database counts them, with this job's creates since
        the read and `extra` promised this round."""
        return self.counted + self.made + extra

    def refused(self, budget: int) -> None:
        """The database created fewer than asked: the budget is spent (or the set was
        another job's); until the next read says otherwise, nothing more is asked."""
        self.counted = budget
        self.read_at = None          # the next tick reads again


def set_key(params: dict) -> str:
    """A parameter set's name for the database (`distinct` creates: two jobs never run one
    set); floats at 12 significant digits, as searchers compare them
    (mpiopt.search._base.params_key)."""
    canon = sorted((name, float(f"{value:.12g}") if isinstance(value, float) else value)
                   for name, value in params.items())
    return hashlib.sha1(repr(canon).encode()).hexdigest()


class Sharing:
    """The Scheduler's part that reads the other jobs of a shared study (state.shared is
    a Shared, else None): a step, `read_others`, whose outcome is taken in here."""

    def __init__(self, state, loop):
        self.st, self.loop = state, loop

    def read_others(self, force: bool = False) -> None:
        """A step: every poll_s (or now), take in what the other jobs did."""
        st = self.st
        s = st.shared
        if s is None:
            return
        now = st.clock()
        if not force and s.read_at is not None and now - s.read_at < s.poll_s:
            return
        s.read_at = now
        self.loop.awaits(ins.ReadChanges(st.study_id, s.since), self._changes_read)

    def _changes_read(self, done) -> None:
        s, changes = self.st.shared, done.changes
        s.since = changes.at - MARGIN
        s.counted, s.made = changes.counted, 0
        self._take_in(changes)

    def _take_in(self, changes) -> None:
        st = self.st
        s, own = st.shared, self._own_ids()
        for t in changes.finished:
            if t.id in s.seen or t.id in own:
                continue
            s.seen.add(t.id)
            s.others.pop(t.id, None)
            if t.job == s.job_id or t.status is TrialStatus.RETRIED:
                continue          # (this job's own, told when it wrote them)
            self._learn_finished(t)
        running = {t.id: t for t in changes.running if t.job != s.job_id and t.id not in own}
        for t in running.values():
            if t.id not in s.others:
                self._hold_other(t)
        s.others = running
        waiting = {t.id for t in st.reruns}
        for t in sorted(changes.interrupted, key=lambda t: t.number):
            if t.id not in waiting and t.id not in own:
                st.reruns.append(t)
                if t.id not in s.others:
                    self._hold_other(t)

    def _own_ids(self) -> set:
        st = self.st
        return {r.trial_id for r in (*st.groups.running.values(), *st.ahead.trials.values())}

    def _hold_other(self, t) -> None:
        st = self.st
        if st.untried is not None:
            st.untried.note(t.params)
        if not st.numbered:
            st.searcher.hold(t.params)

    def _learn_finished(self, t) -> None:
        """Another job's result, as this job's own would be told and counted."""
        st = self.st
        if st.untried is not None:
            st.untried.note(t.params)
        outcomes = st.outcomes
        value = outcomes.restored(t)
        if not st.numbered:
            if value is None:
                st.searcher.forget(t.params)
            else:
                st.searcher.tell(t.params, value)
        target = outcomes.target
        if (value is not None and target is not None and t.status is TrialStatus.COMPLETE
                and outcomes.sign * t.value <= outcomes.sign * target
                and (outcomes.front is None or outcomes.front.feasible(t))):
            st.limits.stop("target", f"target {target} reached by trial {t.number} (another job)")
        self.loop.emit(ins.TrialDone(t, other=True))
