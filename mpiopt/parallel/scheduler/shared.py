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
        return self.counted + self.made + extra


class SharingJobs:
    """The Scheduler's part for a shared study (self.shared is a Shared, else None)."""

    @property
    def waits_for_other_jobs(self) -> bool:
        """Nothing to run here now, but the job may not end yet (see _lingers)."""
        return self.shared is not None and not self.done

    def _shared_started(self, extra: int) -> int:
        """The study's trials as the database counts them (results being written were
        counted when their trials were made)."""
        return self.shared.started(extra)

    def _lingers(self) -> bool:
        """Idle groups wait (not stopped): trials of other jobs still run, or wait to be
        claimed, and the study has not been stopped."""
        s = self.shared
        return (s is not None and self.stop_reason is None
                and bool(s.others or self.reruns))

    def _may_rerun(self) -> bool:
        """Reruns take no budget (their rows are counted already); only a stop ends them."""
        if self.shared is None:
            return self._can_dispatch()
        return self.stop_reason is None

    def _read_others(self, force: bool = False) -> None:
        """A step: every poll_s (or now), take in what the other jobs did."""
        s = self.shared
        if s is None:
            return
        now = self.clock()
        if not force and s.read_at is not None and now - s.read_at < s.poll_s:
            return
        s.read_at = now
        self._await(ins.ReadChanges(self.study_id, s.since), self._changes_read)

    def _changes_read(self, done) -> None:
        s, changes = self.shared, done.changes
        s.since = changes.at - MARGIN
        s.counted, s.made = changes.counted, 0
        self._take_in(changes)

    def _take_in(self, changes) -> None:
        s, own = self.shared, self._own_ids()
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
        waiting = {t.id for t in self.reruns}
        for t in sorted(changes.interrupted, key=lambda t: t.number):
            if t.id not in waiting and t.id not in own:
                self.reruns.append(t)
                if t.id not in s.others:
                    self._hold_other(t)

    def _own_ids(self) -> set:
        return {r.trial_id for r in (*self.running.values(), *self.ahead.trials.values())}

    def _hold_other(self, t) -> None:
        if self.untried is not None:
            self.untried.note(t.params)
        if not self.numbered:
            self.searcher.hold(t.params)

    def _learn_finished(self, t) -> None:
        """Another job's result, as this job's own would be told and counted."""
        if self.untried is not None:
            self.untried.note(t.params)
        value = self.outcomes.restored(t)
        if not self.numbered:
            if value is None:
                self.searcher.forget(t.params)
            else:
                self.searcher.tell(t.params, value)
        target = self.outcomes.target
        if (value is not None and target is not None and t.status is TrialStatus.COMPLETE
                and self.sign * t.value <= self.sign * target
                and (self.front is None or self.front.feasible(t))):
            self.limits.stop("target", f"target {target} reached by trial {t.number} (another job)")
        self._emit(ins.TrialDone(t, other=True))

    def _capped(self) -> dict:
        """What a create names so the database keeps the budget (see the module docstring)."""
        if self.shared is None:
            return {}
        return {"limit": self.budget, "distinct": True}

    def _refused(self) -> None:
        """The database created fewer than asked: the budget is spent (or the set was
        another job's); until the next read says otherwise, nothing more is asked."""
        self.shared.counted = self.budget
        self.shared.read_at = None          # the next tick reads again

    def _capped_queue(self) -> dict:
        return {} if self.shared is None else {"limit": self.budget}
