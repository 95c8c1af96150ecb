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
from mpiopt.parallel.scheduler.dispatch import Round


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

    def plan(self, p) -> None:
        """A step: queued sets taken for busy groups without a next trial (their
        Dispatches given), then in `p` (a dispatch.Round) the groups still without one and
        the suggestions asked for them (not yet created)."""
        s = self.sched
        if not self.enabled or s.reruns or s.idle or not self._searcher_allows():
            return
        if not self.room():
            return
        groups = [g for g in self.wanting if (run := s.running.get(g)) is not None
                  and g not in self.trials and not run.refit]
        self.wanting = dict.fromkeys(groups)
        if groups:
            s._then((s._take_queued, p, groups), (self._plan_fresh, p, groups))

    def _plan_fresh(self, p, groups: list[int]) -> None:
        p.groups = [g for g in groups if g not in self.trials]
        self._ask(p)

    def _ask(self, p) -> None:
        s = self.sched
        if len(p.fresh) < len(p.groups) and self.room(extra=len(p.fresh)) and s._space_left():
            def got(params, took):
                if params is not None:
                    p.fresh.append((params, took))
                    s._then((self._ask, p))
                else:
                    p.groups = p.groups[:len(p.fresh)]
            s._suggest(s.next_number + len(p.fresh), got)
        else:
            p.groups = p.groups[:len(p.fresh)]

    def fill(self, r) -> None:
        """A step: a next trial for each busy group that has none; `r.sent` notes it."""
        p = Round(r.tick, before=len(self.trials))
        s = self.sched
        s._then((self.plan, p), (self._start_planned, p), (self._note_sent, p, r))

    def _start_planned(self, p) -> None:
        if p.fresh:
            self.sched._start(p, p.groups)

    def _note_sent(self, p, r) -> None:
        r.sent |= len(self.trials) > p.before

    def prefetch_due(self) -> bool:
        """Whether to ask the next suggestion now, while groups are busy."""
        s = self.sched
        if s.background or self.prefetched is not None or s.reruns or s.idle:
            return False
        if not self._searcher_allows() or not s.running or not s.limits.left(s._started()):
            return False
        return s.stop_reason is None and s._space_left()

    def prefetched_now(self, done) -> None:
        """The suggestion a Prefetch asked (events.Suggested)."""
        self.prefetched = (done.params, done.took)

    def drop_prefetched(self) -> None:
        if self.prefetched is not None:
            self.sched.searcher.forget(self.prefetched[0])
            self.prefetched = None

    def withdraw(self, emit) -> None:
        """Once the study takes no new trials: call back the trials sent ahead (once
        each); not where the space is used up (those are the last untried sets: they run)."""
        if self.sched.stop_reason in (None, "exhausted") or not self.trials:
            return
        for g, run in list(self.trials.items()):
            if run.trial_id not in self.withdrawn:
                self.withdrawn.add(run.trial_id)
                emit(ins.Withdraw(g, run.trial_id))
