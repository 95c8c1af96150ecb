"""Asking ahead: each busy group also holds its next trial, sent while the current one
runs, so a group that finishes starts again without a round trip to rank 0.

Such a trial is created RUNNING with no start time; its start is noted with the result
that frees its group (one commit), so a job killed before it began counts no lost
attempt for it. Only fresh suggestions and queued sets go ahead (re-runs go to idle
groups), only while more than one trial per group is left in the budget (so the last
wave is not queued behind busy groups), only once a trial has succeeded (a study whose
first trials all fail stops with nothing else on record), and never for a searcher that
must see each result before its next plan (pbt). Once the study stops taking trials,
those not yet begun are withdrawn (CANCEL): the leader answers INTERRUPTED without
running them, and they run on resume.

Prefetching is the other half: while every group is busy and nothing is sent ahead, the
next suggestion is asked now, so a group that finishes need not wait for a model fit.
"""
from __future__ import annotations

from mpiopt.parallel.scheduler import instructions as ins


class AskAhead:
    def __init__(self, sched, enabled: bool):
        self.sched = sched
        self.enabled = enabled               # the MPI shell's choice (parallel/coordinator)
        self.trials: dict = {}               # group -> its next trial (a Running), not begun
        # groups that may want a trial sent ahead (an ordered set, filtered when read): a
        # result then costs O(its batch), not a scan of every running group
        self.wanting: dict[int, None] = {}
        self.withdrawn: set[int] = set()     # trial ids of trials sent ahead, called back
        self.prefetched: tuple[dict, float] | None = None   # (params, seconds to ask)

    def _searcher_allows(self) -> bool:
        """pbt: a round's plan must see the result before it."""
        return self.sched.searcher.asks_ahead

    def room(self, extra: int = 0) -> bool:
        """Whether one more trial may be sent ahead (see the module docstring)."""
        s = self.sched
        groups = s.n_groups - len(s.stopped)
        return (self.enabled and s.outcomes.any_success and s._can_dispatch(extra)
                and s.limits.left(s._started(extra)) > groups)

    def plan(self, tick: bool = False):
        """Queued sets taken for busy groups without a next trial (their Dispatches
        yielded), then returns the groups still without one and the suggestions for them
        (not yet created)."""
        s = self.sched
        if not self.enabled or s.reruns or s.idle or not self._searcher_allows():
            return [], []
        if not self.room():
            return [], []
        groups = [g for g in self.wanting if (run := s.running.get(g)) is not None
                  and g not in self.trials and not run.refit]
        self.wanting = dict.fromkeys(groups)
        if not groups:
            return [], []
        yield from s._take_queued(tick, ahead_of=groups)
        groups = [g for g in groups if g not in self.trials]
        fresh: list[tuple[dict, float | None]] = []
        while len(fresh) < len(groups) and self.room(extra=len(fresh)) and s._space_left():
            suggestion = s._suggestion(s.next_number + len(fresh))
            if suggestion[0] is None:
                break
            fresh.append(suggestion)
        return groups[:len(fresh)], fresh

    def fill(self, tick: bool = False):
        """A next trial for each busy group that has none; returns whether any was sent."""
        before = len(self.trials)
        groups, fresh = yield from self.plan(tick)
        if fresh:
            yield from self.sched._start(fresh, groups)
        return len(self.trials) > before

    def prefetch(self) -> bool:
        """Ask the next suggestion now, while groups are busy; whether one was asked."""
        s = self.sched
        if s.background or self.prefetched is not None or s.reruns or s.idle:
            return False
        if not self._searcher_allows() or not s.running or not s.limits.left(s._started()):
            return False
        if s.stop_reason is not None or not s._space_left():
            return False
        self.prefetched = s.timed_ask(s.next_number)
        return True

    def drop_prefetched(self) -> None:
        if self.prefetched is not None:
            self.sched.searcher.forget(self.prefetched[0])
            self.prefetched = None

    def withdraw(self):
        """Once the study takes no new trials: call back the trials sent ahead (once
        each); not where the space is used up (those are the last untried sets: they run)."""
        if self.sched.stop_reason in (None, "exhausted") or not self.trials:
            return
        for g, run in list(self.trials.items()):
            if run.trial_id not in self.withdrawn:
                self.withdrawn.add(run.trial_id)
                yield ins.Withdraw(g, run.trial_id)
