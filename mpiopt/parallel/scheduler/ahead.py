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

This part holds what is ahead and answers from its own state and the arguments it is
given; the Dispatcher weighs it with the budget and gives the instructions (dispatch.py).
"""
from __future__ import annotations

from mpiopt.parallel.scheduler import instructions as ins


class AskAhead:
    def __init__(self, enabled: bool, searcher_allows: bool):
        self.enabled = enabled               # the MPI shell's choice (parallel/coordinator)
        self.searcher_allows = searcher_allows   # not pbt: a round's plan must see the result
        self.trials: dict = {}               # group -> its next trial (a Running), not begun
        # groups that may want a trial sent ahead (an ordered set, filtered when read): a
        # result then costs O(its batch), not a scan of every running group
        self.wanting: dict[int, None] = {}
        self.withdrawn: set[int] = set()     # trial ids of trials sent ahead, called back
        self.prefetched: tuple[dict, float] | None = None   # (params, seconds to ask)

    def may_plan(self, reruns, any_idle: bool) -> bool:
        """Trials go ahead only while no re-run waits and no group is idle."""
        return self.enabled and not reruns and not any_idle and self.searcher_allows

    def room(self, left: int, groups: int) -> bool:
        """Whether `left` trials left in the budget leave room for one more sent ahead
        with `groups` groups not stopped: more than one per group (module docstring)."""
        return left > groups

    def wanted(self, running: dict) -> list[int]:
        """The busy groups that hold no next trial (the others leave the wanting set)."""
        groups = [g for g in self.wanting if (run := running.get(g)) is not None
                  and g not in self.trials and not run.refit]
        self.wanting = dict.fromkeys(groups)
        return groups

    def promote(self, group: int):
        """The group's trial sent ahead, which it runs now (None: none was)."""
        nxt = self.trials.pop(group, None)
        if nxt is not None:
            self.wanting[group] = None
        return nxt

    def take_prefetched(self):
        """The suggestion asked ahead, (params, seconds), once; None where there is none."""
        got, self.prefetched = self.prefetched, None
        return got

    def prefetched_now(self, done) -> None:
        """The suggestion a Prefetch asked (events.Suggested)."""
        self.prefetched = (done.params, done.took)

    def drop_prefetched(self) -> dict | None:
        """The prefetched parameters, for the searcher to forget (the study is done)."""
        got = self.take_prefetched()
        return None if got is None else got[0]

    def withdraw(self, stop_reason: str | None) -> list:
        """Once the study takes no new trials: call back the trials sent ahead (once
        each); not where the space is used up (those are the last untried sets: they run)."""
        if stop_reason in (None, "exhausted") or not self.trials:
            return []
        out = []
        for g, run in list(self.trials.items()):
            if run.trial_id not in self.withdrawn:
                self.withdrawn.add(run.trial_id)
                out.append(ins.Withdraw(g, run.trial_id))
        return out

    def at_wind_down(self, running: dict) -> list:
        """The job ends: each busy group's trial is cancelled with the one sent ahead to
        it, in one message (the leader knows both); the one ahead is on record as never
        begun."""
        out = []
        for group, run in list(running.items()):
            nxt = self.trials.get(group)
            ids = (run.trial_id,) if nxt is None else (run.trial_id, nxt.trial_id)
            self.withdrawn.update(ids[1:])
            out.append(ins.Cancel(group, ids))
        return out
