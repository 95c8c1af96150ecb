"""How idle groups get work: re-runs of unfinished trials first, then queued parameter
sets, then the searcher's suggestions (distinct ones, in a finite space), each trial's
row created in the database before its Dispatch; and training.refit's last run.

A part of the Scheduler (parallel/scheduler/machine.py): a pass is a `Round` of steps
(stepping.py), each database write and each ask the last instruction of its step, the
state change it waits for made where its outcome comes back.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mpiopt.parallel.scheduler import events as ev
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


@dataclass
class Round:
    """One pass that gives groups work: whether it sent any, and the suggestions asked
    so far with the groups they are for."""
    tick: bool = False
    sent: bool = False
    fresh: list = field(default_factory=list)     # (params, seconds to ask) each
    groups: list = field(default_factory=list)
    before: int = 0


class Dispatching:
    def _fill_idle(self, tick: bool = False) -> None:
        """Work for every idle group the budget allows: re-runs first, then queued sets,
        then new trials, created in one transaction; then trials sent ahead to busy ones;
        training.refit's run where nothing else was sent."""
        r = Round(tick)
        self._then((self._fill_reruns, r), (self._fill_queued, r), (self._ask_fresh, r),
                   (self._fill_ahead, r), (self._fill_end, r))

    def _fill_end(self, r: Round) -> None:
        if not r.sent:
            self._refit_if_due()

    def _fill_queued(self, r: Round) -> None:
        if self.groups.any_idle and self._can_dispatch():
            self._take_queued(r)

    def _fill_reruns(self, r: Round) -> None:
        """The first unfinished trial runs again on the first idle group; a shared study's
        other job may have claimed it first (events.ClaimRefused). Then the next one."""
        if not (self.groups.any_idle and self.reruns and self._may_rerun()):
            return
        old, group = self.reruns.pop(0), self.groups.first_idle()

        def restarted(done):
            if isinstance(done, ev.TrialRestarted):
                self._emit(self._running(group, done.record, old.params))
                r.sent = True
            self._then((self._fill_reruns, r))
        self._await(ins.RestartTrial(old.id, group, self.hosts[group], self.ranks[group],
                                     keep_intermediate=self.checkpoints,
                                     contested=self.shared is not None),
                    restarted, undo=lambda: self.reruns.insert(0, old))

    def _refit_if_due(self) -> None:
        """training.refit: after a search that ended well, one group trains the best
        parameters once more (a dispatch with no trial row)."""
        if not self._refit_due():
            return
        group, best = self.groups.first_idle(), self.best
        self.refit.started()
        self.groups.begin(group, Running(-1, best.number, dict(best.params), group, self.clock(),
                                         refit=True))
        self._emit(ins.Say(f"refit: training trial {best.number}'s parameters once more on all "
                           "the data (training.refit)"),
                   ins.Dispatch(group, Trial(-1, best.number, dict(best.params),
                                             trial_seed(self.seed, best.number), refit=True)))

    def _take_queued(self, r: Round, ahead_of: list[int] | None = None) -> None:
        """Queued parameter sets for idle groups (or sent ahead to these busy ones), taken
        (PENDING -> RUNNING) in one transaction. A tick reads an empty queue again only
        after QUEUE_POLL_S."""
        now = self.clock()
        if r.tick and self._queue_read_at is not None and now - self._queue_read_at < QUEUE_POLL_S:
            return
        slots = list(self.idle if ahead_of is None else ahead_of)
        fits = self._can_dispatch if ahead_of is None else self._ahead_room
        room = 0
        while room < len(slots) and fits(extra=room):
            room += 1
        if not room:
            self._queue_read_at = now
            return

        def read(done: ev.QueueRead):
            self._queue_read_at = None if len(done.trials) == room else now
            if done.trials:
                self._take_from_queue(r, done.trials, slots[:len(done.trials)], ahead_of)
        self._await(ins.ReadQueue(self.study_id, room), read)

    def _take_from_queue(self, r: Round, queued, groups: list[int], ahead_of) -> None:
        later = {} if ahead_of is None else {"started": False}

        def taken(done: ev.QueueTaken):
            records = list(done.records)
            if self.shared is not None:
                if len([rec for rec in records if rec is not None]) < len(queued):
                    self._refused()
                records = [rec for rec in records if rec is not None]
                self.shared.made += len(records)
            for rec in records:
                self._emit(self._running(rec.group, rec, rec.params, ahead=ahead_of is not None))
            self.queued_taken += len(records)
            r.sent |= bool(records)
        self._await(ins.TakeQueued(tuple(
            dict(trial_id=t.id, seed=trial_seed(self.seed, t.number), group=g,
                 host=self.hosts[g], rank=self.ranks[g], **later)
            for t, g in zip(queued, groups)), **self._capped_queue()), taken)

    def _ask_fresh(self, r: Round) -> None:
        """Suggestions for the idle groups left, one ask at a time, until one is not ready
        (a background searcher still fitting), then their trials created at once."""
        if (len(r.fresh) < self.groups.n_idle() and self._can_dispatch(extra=len(r.fresh))
                and self._space_left()):
            def got(params, took):
                if params is None:
                    self._start(r)
                else:
                    r.fresh.append((params, took))
                    self._then((self._ask_fresh, r))
            self._suggest(self.next_number + len(r.fresh), got,
                          waiting=self.groups.n_idle() - len(r.fresh))
        else:
            self._start(r)

    def _suggest(self, number: int, got, waiting: int = 1) -> None:
        """The suggestion for trial `number` (keyed searchers draw by it), or None, with
        the seconds the searcher took to make it (recorded with the trial), to `got`;
        `waiting`: the groups without work now (a background searcher's filler rule
        weighs their wait)."""
        prefetched = self.ahead.take_prefetched()
        if prefetched is not None:
            params, took = prefetched
            got(self._distinct(params, number), took)
            return
        self._await(ins.Ask(number, waiting, len(self.running)),
                    lambda done: got(None if done.params is None
                                     else self._distinct(done.params, number), done.took))

    def _refit_due(self) -> bool:
        """training.refit's run is due: wanted, nothing runs, a group idle, no trial left."""
        return (self.groups.any_idle and self.refit.wanted_now(self.stop_reason, self.best)
                and not self.running and not self.finishing and not self._can_dispatch())

    # ---- trials sent ahead to busy groups (ahead.py) --------------------------------------
    def _ahead_room(self, extra: int = 0) -> bool:
        """Whether one more trial may be sent ahead (ahead.py's rule, within the budget)."""
        return (self.ahead.enabled and self.outcomes.any_success and self._can_dispatch(extra)
                and self.ahead.room(self.limits.left(self._started(extra)),
                                    self.n_groups - self.groups.n_stopped()))

    def _ahead_wanted(self) -> bool:
        """Whether a busy group may want a trial sent ahead now (_plan_ahead's test, in its
        order: the room's check notices the time limit)."""
        return (self.ahead.may_plan(self.reruns, self.groups.any_idle) and self._ahead_room()
                and bool(self.ahead.wanting))

    def _fill_ahead(self, r: Round) -> None:
        """A next trial for each busy group that has none; `r.sent` notes it."""
        p = Round(r.tick, before=len(self.ahead.trials))
        self._then((self._plan_ahead, p), (self._start_planned, p), (self._note_sent, p, r))

    def _plan_ahead(self, p: Round) -> None:
        """Queued sets taken for busy groups without a next trial (their Dispatches
        given), then in `p` the groups still without one and the suggestions asked for
        them (not yet created)."""
        if not self.ahead.may_plan(self.reruns, self.groups.any_idle) or not self._ahead_room():
            return
        groups = self.ahead.wanted(self.running)
        if groups:
            self._then((self._take_queued, p, groups), (self._plan_fresh, p, groups))

    def _plan_fresh(self, p: Round, groups: list[int]) -> None:
        p.groups = [g for g in groups if g not in self.ahead.trials]
        self._ask_ahead(p)

    def _ask_ahead(self, p: Round) -> None:
        if (len(p.fresh) < len(p.groups) and self._ahead_room(extra=len(p.fresh))
                and self._space_left()):
            def got(params, took):
                if params is not None:
                    p.fresh.append((params, took))
                    self._then((self._ask_ahead, p))
                else:
                    p.groups = p.groups[:len(p.fresh)]
            self._suggest(self.next_number + len(p.fresh), got)
        else:
            p.groups = p.groups[:len(p.fresh)]

    def _start_planned(self, p: Round) -> None:
        if p.fresh:
            self._start(p, p.groups)

    def _note_sent(self, p: Round, r: Round) -> None:
        r.sent |= len(self.ahead.trials) > p.before

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

    def _start(self, r: Round, ahead_of: list[int] | None = None) -> None:
        """New trials for idle groups, or (ahead_of) sent ahead to these busy ones."""
        fresh = r.fresh
        if not fresh:
            return
        r.sent = True
        groups = self.idle[:len(fresh)] if ahead_of is None else ahead_of

        def created(done: ev.TrialsCreated):    # (a failed write leaves the groups idle)
            self._began(groups, done.records, fresh, ahead=ahead_of is not None)
        self._await(ins.CreateTrials(
            self.study_id, tuple(self._requests(fresh, groups, ahead=ahead_of is not None)),
            **self._capped()), created)

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

    def _began(self, groups, records, fresh, ahead: bool) -> None:
        if self.numbered:        # the storage may have numbered them otherwise (a queued set)
            self.searcher.renumber({self.next_number + i: rec.number
                                    for i, rec in enumerate(records) if rec is not None})
        for g, rec, (params, _) in zip(groups, records, fresh):
            if rec is None:      # a shared study's database refused it (shared.py)
                self.searcher.forget(params)
                continue
            if self.shared is not None:
                self.shared.made += 1
            self._emit(self._running(g, rec, params, ahead=ahead))
        if self.shared is not None and any(rec is None for rec in records):
            self._refused()

    def _running(self, group: int, rec: FrozenTrial, params: dict, ahead: bool = False) -> ins.Dispatch:
        self.next_number = max(self.next_number, rec.number + 1)
        if self.untried is not None:
            self.untried.claim(params)       # (a re-run or a queued set: not suggested here)
        run = Running(rec.id, rec.number, params, group, self.clock())
        if ahead:
            self.ahead.trials[group] = run
        else:
            self.groups.begin(group, run)
        # its curve so far: what a trial continued from its checkpoint reported before
        # (a fold's best so far, the folds it finished); none for a new attempt
        self.outcomes.curve(rec)
        if not ahead:
            self.ahead.wanting[group] = None
            self.forecast.began(group, run.trial_id, run.started)
        seed = rec.seed if rec.seed is not None else trial_seed(self.seed, rec.number)
        return ins.Dispatch(group, Trial(rec.id, rec.number, params, seed, rec.attempt,
                                         self.trial_timeout, round=rec.round, parent=rec.parent))

    def _stop_idle(self) -> None:
        """Idle groups are stopped only at the study's end, once no trial runs: a rank
        that leaves earlier waits in MPI_Finalize for the ranks still training, and its
        exit's bound (MPIOPT_EXIT_GRACE) is for an exit, not for the longest trial left
        (a study's last long trial ended every such job, the idle rank killed by it)."""
        if self.running or self.ahead.trials or self._can_dispatch() or self._lingers():
            return
        self._on_stop_all()

