"""How idle groups get work: re-runs of unfinished trials first, then queued parameter
sets, then the searcher's suggestions (distinct ones, in a finite space), each trial's
row created in the database before its Dispatch; and training.refit's last run.

A part the Scheduler holds (parallel/scheduler/machine.py), over the shared State
(state.py): a pass is a `Round` of steps (stepping.py's Loop), each database write and
each ask the last instruction of its step, the state change it waits for made where its
outcome comes back. Its own state is when it last found the queue empty.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mpiopt.parallel.scheduler import events as ev
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.shared import set_key
from mpiopt.parallel.scheduler.state import Running
from mpiopt.trial import FrozenTrial, Trial

QUEUE_POLL_S = 0.2      # how often an idle tick reads an empty queue again


def trial_seed(study_seed: int, number: int) -> int:
    """A trial's seed derives from the study seed and its number only (replayable)."""
    return int(np.random.SeedSequence([study_seed, number]).generate_state(1)[0] % (2**31 - 1))


@dataclass
class Round:
    """One pass that gives groups work: whether it sent any, and the suggestions asked
    so far with the groups they are for."""
    tick: bool = False
    sent: bool = False
    fresh: list = field(default_factory=list)     # (params, seconds to ask) each
    groups: list = field(default_factory=list)
    before: int = 0


class Dispatcher:
    """Work for idle groups and trials sent ahead (module docstring); `fill_idle` is a
    pass, `plan_ahead`, `requests` and `began` the parts of one that the machine
    sequences with a write of results (results.py's one commit)."""

    def __init__(self, state, loop):
        self.st, self.loop = state, loop
        self._queue_read_at: float | None = None   # None: read it at the next dispatch

    def fill_idle(self, tick: bool = False) -> None:
        """Work for every idle group the budget allows: re-runs first, then queued sets,
        then new trials, created in one transaction; then trials sent ahead to busy ones;
        training.refit's run where nothing else was sent."""
        r = Round(tick)
        self.loop.then((self._fill_reruns, r), (self._fill_queued, r), (self._ask_fresh, r),
                       (self._fill_ahead, r), (self._fill_end, r))

    def _fill_end(self, r: Round) -> None:
        if not r.sent:
            self.refit_if_due()

    def _fill_queued(self, r: Round) -> None:
        st = self.st
        if st.groups.any_idle and st.can_dispatch():
            self._take_queued(r)

    def _fill_reruns(self, r: Round) -> None:
        """The first unfinished trial runs again on the first idle group; a shared study's
        other job may have claimed it first (events.ClaimRefused). Then the next one."""
        st = self.st
        if not (st.groups.any_idle and st.reruns and st.may_rerun()):
            return
        old, group = st.reruns.pop(0), st.groups.first_idle()

        def restarted(done):
            if isinstance(done, ev.TrialRestarted):
                self.loop.emit(self._running(group, done.record, old.params))
                r.sent = True
            self.loop.then((self._fill_reruns, r))
        self.loop.awaits(ins.RestartTrial(old.id, group, st.hosts[group], st.ranks[group],
                                          keep_intermediate=st.checkpoints,
                                          contested=st.shared is not None),
                         restarted, undo=lambda: st.reruns.insert(0, old))

    def refit_if_due(self) -> None:
        """training.refit: after a search that ended well, one group trains the best
        parameters once more (a dispatch with no trial row)."""
        st = self.st
        if not self.refit_due():
            return
        group, best = st.groups.first_idle(), st.outcomes.best
        st.refit.started()
        st.groups.begin(group, Running(-1, best.number, dict(best.params), group, st.clock(),
                                       refit=True))
        self.loop.emit(ins.Say(f"refit: training trial {best.number}'s parameters once more on all "
                               "the data (training.refit)"),
                       ins.Dispatch(group, Trial(-1, best.number, dict(best.params),
                                                 trial_seed(st.seed, best.number), refit=True)))

    def _take_queued(self, r: Round, ahead_of: list[int] | None = None) -> None:
        """Queued parameter sets for idle groups (or sent ahead to these busy ones), taken
        (PENDING -> RUNNING) in one transaction. A tick reads an empty queue again only
        after QUEUE_POLL_S."""
        st = self.st
        now = st.clock()
        if r.tick and self._queue_read_at is not None and now - self._queue_read_at < QUEUE_POLL_S:
            return
        slots = list(st.groups.idle if ahead_of is None else ahead_of)
        fits = st.can_dispatch if ahead_of is None else self._ahead_room
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
        self.loop.awaits(ins.ReadQueue(st.study_id, room), read)

    def _take_from_queue(self, r: Round, queued, groups: list[int], ahead_of) -> None:
        st = self.st
        later = {} if ahead_of is None else {"started": False}

        def taken(done: ev.QueueTaken):
            records = list(done.records)
            if st.shared is not None:
                if len([rec for rec in records if rec is not None]) < len(queued):
                    st.shared.refused(st.limits.trials)
                records = [rec for rec in records if rec is not None]
                st.shared.made += len(records)
            for rec in records:
                self.loop.emit(self._running(rec.group, rec, rec.params, ahead=ahead_of is not None))
            st.queued_taken += len(records)
            r.sent |= bool(records)
        self.loop.awaits(ins.TakeQueued(tuple(
            dict(trial_id=t.id, seed=trial_seed(st.seed, t.number), group=g,
                 host=st.hosts[g], rank=st.ranks[g], **later)
            for t, g in zip(queued, groups)), **st.capped_queue()), taken)

    def _ask_fresh(self, r: Round) -> None:
        """Suggestions for the idle groups left, one ask at a time, until one is not ready
        (a background searcher still fitting), then their trials created at once."""
        st = self.st
        if (len(r.fresh) < st.groups.n_idle() and st.can_dispatch(extra=len(r.fresh))
                and self.space_left()):
            def got(params, took):
                if params is None:
                    self._start(r)
                else:
                    r.fresh.append((params, took))
                    self.loop.then((self._ask_fresh, r))
            self._suggest(st.next_number + len(r.fresh), got,
                          waiting=st.groups.n_idle() - len(r.fresh))
        else:
            self._start(r)

    def _suggest(self, number: int, got, waiting: int = 1) -> None:
        """The suggestion for trial `number` (keyed searchers draw by it), or None, with
        the seconds the searcher took to make it (recorded with the trial), to `got`;
        `waiting`: the groups without work now (a background searcher's filler rule
        weighs their wait)."""
        st = self.st
        prefetched = st.ahead.take_prefetched()
        if prefetched is not None:
            params, took = prefetched
            got(self._distinct(params, number), took)
            return
        self.loop.awaits(ins.Ask(number, waiting, len(st.groups.running)),
                         lambda done: got(None if done.params is None
                                          else self._distinct(done.params, number), done.took))

    def refit_due(self) -> bool:
        """training.refit's run is due: wanted, nothing runs, a group idle, no trial left."""
        st = self.st
        return (st.groups.any_idle and st.refit.wanted_now(st.limits.stop_reason, st.outcomes.best)
                and not st.groups.running and not st.finishing and not st.can_dispatch())

    # ---- trials sent ahead to busy groups (ahead.py) --------------------------------------
    def _ahead_room(self, extra: int = 0) -> bool:
        """Whether one more trial may be sent ahead (ahead.py's rule, within the budget)."""
        st = self.st
        return (st.ahead.enabled and st.outcomes.any_success and st.can_dispatch(extra)
                and st.ahead.room(st.limits.left(st.started(extra)),
                                  st.n_groups - st.groups.n_stopped()))

    def ahead_wanted(self) -> bool:
        """Whether a busy group may want a trial sent ahead now (plan_ahead's test, in its
        order: the room's check notices the time limit)."""
        st = self.st
        return (st.ahead.may_plan(st.reruns, st.groups.any_idle) and self._ahead_room()
                and bool(st.ahead.wanting))

    def _fill_ahead(self, r: Round) -> None:
        """A next trial for each busy group that has none; `r.sent` notes it."""
        st = self.st
        p = Round(r.tick, before=len(st.ahead.trials))
        self.loop.then((self.plan_ahead, p), (self._start_planned, p), (self._note_sent, p, r))

    def plan_ahead(self, p: Round) -> None:
        """Queued sets taken for busy groups without a next trial (their Dispatches
        given), then in `p` the groups still without one and the suggestions asked for
        them (not yet created)."""
        st = self.st
        if not st.ahead.may_plan(st.reruns, st.groups.any_idle) or not self._ahead_room():
            return
        groups = st.ahead.wanted(st.groups.running)
        if groups:
            self.loop.then((self._take_queued, p, groups), (self._plan_fresh, p, groups))

    def _plan_fresh(self, p: Round, groups: list[int]) -> None:
        st = self.st
        p.groups = [g for g in groups if g not in st.ahead.trials]
        self._ask_ahead(p)

    def _ask_ahead(self, p: Round) -> None:
        st = self.st
        if (len(p.fresh) < len(p.groups) and self._ahead_room(extra=len(p.fresh))
                and self.space_left()):
            def got(params, took):
                if params is not None:
                    p.fresh.append((params, took))
                    self.loop.then((self._ask_ahead, p))
                else:
                    p.groups = p.groups[:len(p.fresh)]
            self._suggest(st.next_number + len(p.fresh), got)
        else:
            p.groups = p.groups[:len(p.fresh)]

    def _start_planned(self, p: Round) -> None:
        if p.fresh:
            self._start(p, p.groups)

    def _note_sent(self, p: Round, r: Round) -> None:
        st = self.st
        r.sent |= len(st.ahead.trials) > p.before

    def space_left(self) -> bool:
        """Whether a finite space has an untried parameter set left; once it has none,
        no new trial starts (the running ones finish) and the study ends COMPLETE."""
        st = self.st
        u = st.untried
        if u is None or u.left() > 0:
            return True
        st.limits.stop("exhausted", f"all {u.size} parameter sets of the search space have "
                                    f"been tried: no new trials (search.trials is {st.limits.trials})")
        return False

    def _distinct(self, params: dict, number: int) -> dict:
        """The suggestion, or an untried set in its place where it repeats one the study
        tried, runs or queued (mpiopt.search.untried). The searcher forgets the repeat
        (unless it is a running trial's, pending there already) and holds the set."""
        st = self.st
        u = st.untried
        if u is None:
            return params
        if u.repeats(params):
            other = u.instead(number)
            if other is not None:
                if not u.is_live(params):
                    st.searcher.forget(params)
                st.searcher.hold(other)
                u.replaced += 1
                params = other
        u.claim(params)
        return params

    def _start(self, r: Round, ahead_of: list[int] | None = None) -> None:
        """New trials for idle groups, or (ahead_of) sent ahead to these busy ones."""
        st = self.st
        fresh = r.fresh
        if not fresh:
            return
        r.sent = True
        groups = st.groups.idle[:len(fresh)] if ahead_of is None else ahead_of

        def created(done: ev.TrialsCreated):    # (a failed write leaves the groups idle)
            self.began(groups, done.records, fresh, ahead=ahead_of is not None)
        self.loop.awaits(ins.CreateTrials(
            st.study_id, tuple(self.requests(fresh, groups, ahead=ahead_of is not None)),
            **st.capped()), created)

    def requests(self, fresh, groups: list[int], ahead: bool) -> list[dict]:
        """create_trials requests for these suggestions on these groups."""
        st = self.st
        later = {"started": False} if ahead else {}
        return [dict(params=params, seed=trial_seed(st.seed, st.next_number + i),
                     group=g, host=st.hosts[g], rank=st.ranks[g], suggest_seconds=took,
                     **later, **self._key(params),
                     # pbt: each trial's member, round and parent
                     **(st.searcher.lineage(st.next_number + i) if st.numbered else {}))
                for i, (g, (params, took)) in enumerate(zip(groups, fresh))]

    def _key(self, params: dict) -> dict:
        """A parameter set, named for the database where jobs share the study (shared.py)."""
        return {} if self.st.shared is None else {"key": set_key(params)}

    def began(self, groups, records, fresh, ahead: bool) -> None:
        st = self.st
        if st.numbered:        # the storage may have numbered them otherwise (a queued set)
            st.searcher.renumber({st.next_number + i: rec.number
                                  for i, rec in enumerate(records) if rec is not None})
        for g, rec, (params, _) in zip(groups, records, fresh):
            if rec is None:      # a shared study's database refused it (shared.py)
                st.searcher.forget(params)
                continue
            if st.shared is not None:
                st.shared.made += 1
            self.loop.emit(self._running(g, rec, params, ahead=ahead))
        if st.shared is not None and any(rec is None for rec in records):
            st.shared.refused(st.limits.trials)

    def _running(self, group: int, rec: FrozenTrial, params: dict, ahead: bool = False) -> ins.Dispatch:
        st = self.st
        st.next_number = max(st.next_number, rec.number + 1)
        if st.untried is not None:
            st.untried.claim(params)       # (a re-run or a queued set: not suggested here)
        run = Running(rec.id, rec.number, params, group, st.clock())
        if ahead:
            st.ahead.trials[group] = run
        else:
            st.groups.begin(group, run)
        # its curve so far: what a trial continued from its checkpoint reported before
        # (a fold's best so far, the folds it finished); none for a new attempt
        st.outcomes.curve(rec)
        if not ahead:
            st.ahead.wanting[group] = None
            st.forecast.began(group, run.trial_id, run.started)
        seed = rec.seed if rec.seed is not None else trial_seed(st.seed, rec.number)
        return ins.Dispatch(group, Trial(rec.id, rec.number, params, seed, rec.attempt,
                                         st.trial_timeout, round=rec.round, parent=rec.parent))
