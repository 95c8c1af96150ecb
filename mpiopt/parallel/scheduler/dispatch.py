"""How idle groups get work: re-runs of unfinished trials first, then queued parameter
sets, then the searcher's suggestions (distinct ones, in a finite space), each trial's
row created in the database before its Dispatch; and training.refit's last run.

A part of the Scheduler (parallel/scheduler/machine.py), written apart to keep each file
readable: its methods are generators of instructions like the Scheduler's own.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.trial import FrozenTrial, Trial

QUEUE_POLL_S = 0.2      # how often an idle tick reads an empty queue again


def trial_seed(study_seed: int, number: int) -> int:
    """A trial's seed derives from the study seed and its number only (replayable)."""
    return int(np.random.SeedSequence([study_seed, number]).generate_state(1)[0] % (2**31 - 1))


@dataclass
class Running:
    """A trial a group runs (or holds, sent ahead)."""
    trial_id: int
    number: int
    params: dict[str, Any]
    group: int
    started: float
    refit: bool = False          # training.refit's run: no trial row, no searcher
    pruned: str | None = None    # the pruner's reason, once it said stop


class Dispatching:
    def _fill_idle(self, tick: bool = False):
        """Work for every idle group the budget allows: re-runs first, then queued sets,
        then new trials, created in one transaction."""
        sent = False
        while self.idle and self.reruns and self._may_rerun():
            sent |= (yield from self._rerun(self.idle[0]))
        if self.idle and self._can_dispatch():
            sent |= (yield from self._take_queued(tick))
        fresh: list[tuple[dict, float | None]] = []
        while (len(fresh) < len(self.idle) and self._can_dispatch(extra=len(fresh))
               and self._space_left()):
            suggestion = self._suggestion(self.next_number + len(fresh),
                                          waiting=len(self.idle) - len(fresh))
            if suggestion[0] is None:
                break                   # the background searcher is still making one
            fresh.append(suggestion)
        if fresh:
            yield from self._start(fresh)
        sent |= bool(fresh) | (yield from self.ahead.fill(tick))
        if not sent:
            yield from self._refit_if_due()

    def _refit_if_due(self):
        """training.refit: after a search that ended well, one group trains the best
        parameters once more (a dispatch with no trial row)."""
        if not self.idle or not self.refit.due(self):
            return
        group, best = self.idle.pop(0), self.best
        self.refit.started()
        self.running[group] = Running(-1, best.number, dict(best.params), group, self.clock(),
                                      refit=True)
        yield ins.Say(f"refit: training trial {best.number}'s parameters once more on all the "
                      "data (training.refit)")
        yield ins.Dispatch(group, Trial(-1, best.number, dict(best.params),
                                        trial_seed(self.seed, best.number), refit=True))

    def _take_queued(self, tick: bool, ahead_of: list[int] | None = None):
        """Queued parameter sets for idle groups (or sent ahead to these busy ones), taken
        (PENDING -> RUNNING) in one transaction. A tick reads an empty queue again only
        after QUEUE_POLL_S. Returns whether any was taken."""
        now = self.clock()
        if tick and self._queue_read_at is not None and now - self._queue_read_at < QUEUE_POLL_S:
            return False
        slots = self.idle if ahead_of is None else ahead_of
        fits = self._can_dispatch if ahead_of is None else self.ahead.room
        room = 0
        while room < len(slots) and fits(extra=room):
            room += 1
        queued = (yield ins.ReadQueue(self.study_id, room)) if room else []
        self._queue_read_at = None if len(queued) == room and room else now
        if not queued:
            return False
        groups = slots[:len(queued)]
        later = {} if ahead_of is None else {"started": False}
        taken = yield ins.TakeQueued(tuple(
            dict(trial_id=t.id, seed=trial_seed(self.seed, t.number), group=g,
                 host=self.hosts[g], rank=self.ranks[g], **later)
            for t, g in zip(queued, groups)), **self._capped_queue())
        if self.shared is not None:
            if len([r for r in taken if r is not None]) < len(queued):
                self._refused()
            taken = [r for r in taken if r is not None]
            self.shared.made += len(taken)
        for rec in taken:
            if ahead_of is None:
                self.idle.remove(rec.group)
            yield self._running(rec.group, rec, rec.params, ahead=ahead_of is not None)
        self.queued_taken += len(taken)
        return bool(taken)

    def _suggestion(self, number: int, waiting: int = 1) -> tuple[dict | None, float | None]:
        """The suggestion for trial `number` (keyed searchers draw by it), or None, with
        the seconds the searcher took to make it (recorded with the trial); `waiting`: the
        groups without work now (a background searcher's filler rule weighs their wait)."""
        if self.ahead.prefetched is not None:
            (params, took), self.ahead.prefetched = self.ahead.prefetched, None
        elif self.background:
            params = self.searcher.take(waiting, training=len(self.running))
            took = self.searcher.last_ask_s
        else:
            params, took = self.timed_ask(number)
        return (params if params is None else self._distinct(params, number)), took

    def _space_left(self) -> bool:
        """Whether a finite space has an untried parameter set left; once it has none,
        no new trial starts (the running ones finish) and the study ends COMPLETE."""
        u = self.untried
        if u is None or u.left() > 0:
            return True
        self.limits.stop("exhausted", f"all {u.size} parameter sets of the search space have "
                                      f"been tried: no new trials (search.trials is {self.budget})")
        return False

    def _distinct(self, params: dict, number: int) -> dict:
        """The suggestion, or an untried set in its place where it repeats one the study
        tried, runs or queued (mpiopt.search.untried). The searcher forgets the repeat
        (unless it is a running trial's, pending there already) and holds the set."""
        u = self.untried
        if u is None:
            return params
        if u.repeats(params):
            other = u.instead(number)
            if other is not None:
                if not u.is_live(params):
                    self.searcher.forget(params)
                self.searcher.hold(other)
                u.replaced += 1
                params = other
        u.claim(params)
        return params

    def timed_ask(self, number: int) -> tuple[dict, float]:
        start = time.perf_counter()
        params = self.searcher.ask(number)
        return params, time.perf_counter() - start

    def _start(self, fresh: list[tuple[dict, float | None]], ahead_of: list[int] | None = None):
        """New trials for idle groups, or (ahead_of) sent ahead to these busy ones."""
        groups = self.idle[:len(fresh)] if ahead_of is None else ahead_of
        records = yield ins.CreateTrials(
            self.study_id, tuple(self._requests(fresh, groups, ahead=ahead_of is not None)),
            **self._capped())
        if ahead_of is None:
            for g, rec in zip(groups, records):
                if rec is not None:     # only once they run: a failed write leaves them idle
                    self.idle.remove(g)
        yield from self._began(groups, records, fresh, ahead=ahead_of is not None)

    def _requests(self, fresh, groups: list[int], ahead: bool) -> list[dict]:
        """create_trials requests for these suggestions on these groups."""
        later = {"started": False} if ahead else {}
        return [dict(params=params, seed=trial_seed(self.seed, self.next_number + i),
                     group=g, host=self.hosts[g], rank=self.ranks[g], suggest_seconds=took,
                     **later, **self._key(params),
                     # pbt: each trial's member, round and parent
                     **(self.searcher.lineage(self.next_number + i) if self.numbered else {}))
                for i, (g, (params, took)) in enumerate(zip(groups, fresh))]

    def _key(self, params: dict) -> dict:
        """A parameter set, named for the database (`distinct` creates in a shared study:
        mpiopt.parallel.scheduler.shared); floats at 12 significant digits, as searchers
        compare them (mpiopt.search._base.params_key)."""
        if self.shared is None:
            return {}
        canon = sorted((name, float(f"{value:.12g}") if isinstance(value, float) else value)
                       for name, value in params.items())
        return {"key": hashlib.sha1(repr(canon).encode()).hexdigest()}

    def _began(self, groups, records, fresh, ahead: bool):
        if self.numbered:        # the storage may have numbered them otherwise (a queued set)
            self.searcher.renumber({self.next_number + i: rec.number
                                    for i, rec in enumerate(records) if rec is not None})
        for g, rec, (params, _) in zip(groups, records, fresh):
            if rec is None:      # a shared study's database refused it (shared.py)
                self.searcher.forget(params)
                continue
            if self.shared is not None:
                self.shared.made += 1
            yield self._running(g, rec, params, ahead=ahead)
        if self.shared is not None and any(rec is None for rec in records):
            self._refused()

    def _rerun(self, group: int):
        """The first unfinished trial runs again on this group; False where another job
        of a shared study claimed it first."""
        old = self.reruns.pop(0)
        try:
            rec = yield from self._claim(ins.RestartTrial(
                old.id, group, self.hosts[group], self.ranks[group],
                keep_intermediate=self.checkpoints))
        except BaseException:
            self.reruns.insert(0, old)
            raise
        if rec is None:
            return False
        self.idle.remove(group)
        yield self._running(group, rec, old.params)
        return True

    def _running(self, group: int, rec: FrozenTrial, params: dict, ahead: bool = False) -> ins.Dispatch:
        self.next_number = max(self.next_number, rec.number + 1)
        if self.untried is not None:
            self.untried.claim(params)       # (a re-run or a queued set: not suggested here)
        run = Running(rec.id, rec.number, params, group, self.clock())
        (self.ahead.trials if ahead else self.running)[group] = run
        # its curve so far: what a trial continued from its checkpoint reported before
        # (a fold's best so far, the folds it finished); none for a new attempt
        self.outcomes.curve(rec)
        if not ahead:
            self.ahead.wanting[group] = None
            self.forecast.began(group, run.trial_id, run.started)
        seed = rec.seed if rec.seed is not None else trial_seed(self.seed, rec.number)
        return ins.Dispatch(group, Trial(rec.id, rec.number, params, seed, rec.attempt,
                                         self.trial_timeout, round=rec.round, parent=rec.parent))

    def _stop_idle(self):
        """Idle groups are stopped only at the study's end, once no trial runs: a rank
        that leaves earlier waits in MPI_Finalize for the ranks still training, and its
        exit's bound (MPIOPT_EXIT_GRACE) is for an exit, not for the longest trial left
        (a study's last long trial ended every such job, the idle rank killed by it)."""
        if self.running or self.ahead.trials or self._can_dispatch() or self._lingers():
            return
        yield from self.stop_all()

