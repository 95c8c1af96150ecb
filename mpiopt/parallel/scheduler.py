"""The coordinator's decisions as a pure state machine: events in, actions out.

No MPI here. The MPI loop (coordinator.py) and the single-process driver (local.py) feed
it events -- a result, a per-epoch report, a clock tick, a signal -- and carry out the
actions it returns: send a trial to a group, answer a report, stop a group. Its writes go
through the storage API in the order that makes a crash harmless: a trial is committed
RUNNING before its parameters leave.

A finished trial's group gets its next trial before the result is written (`send_now`,
set by the MPI loop, sends it at once): the group's wait is then one write, not two. The
result is durable before anything else depends on it (the progress line, the budget
count, the study's end); a crash in between leaves the trial RUNNING, to run again on
resume. A failure or a value that reaches the target is written first, since it may stop
the study.

Queued parameter sets (`mpiopt enqueue`, `search.initial_trials`, `--retry-failed`: PENDING
trials in the database) run after re-runs and before the searcher's own suggestions. The
queue is read on every dispatch (one indexed SELECT, about 0.1 ms on SQLite), so a set
enqueued into a running study is taken by the next dispatch; idle ticks read an empty
queue at most every QUEUE_POLL_S, not every 5 ms. Their results are told like any other.

A Keras study's artifact store is tended here too (`artifacts`, a Keeper): once a
result is written, the trial's checkpoints go and its model is kept among the best k or
deleted (only the coordinator knows the ranking); with training.refit, when the search
ended well and nothing runs, one group trains the best parameters once more (a dispatch
with no trial row). A trial INTERRUPTED with `halt` (the store could not be written)
stops the study in order; it runs again on resume from its last checkpoint.

Asking ahead (`ask_ahead`, set by the MPI loop for searchers that answer at once): each
busy group also holds its next trial, sent while the current one runs, so a group that
finishes starts again without a round trip to rank 0 (the dispatch gap becomes the
leader's own few hundred microseconds, with no rank polling faster). Such a trial is
committed RUNNING with no start time; its start is noted with the result that frees its
group (one commit), so a job killed before it began counts no lost attempt for it. Only
fresh suggestions go ahead (re-runs and queued sets go to idle groups), and only while
more than one trial per group is left in the budget, so the last wave is not queued behind
busy groups, and only once a trial has succeeded (a study whose first trials all fail
should stop with nothing else on record). Once the study stops taking trials, those not yet begun are withdrawn
(CANCEL): the leader answers INTERRUPTED without running them, and they run on resume.

A numbered searcher (mpiopt.search.pbt: population-based training) is told and forgets by
trial number, since its members often share parameters; each trial it plans carries a
lineage (member, round, parent) to the database and to the group, it is never asked ahead
(a round's plan must see the result before it), and the Keeper keeps the checkpoints of
finished trials it may still start a round from (`needed()`).

A slow searcher comes wrapped in mpiopt.search.background.BackgroundSearcher: suggestions
are taken from its stock (none ready: the group waits for the next tick), tells are
queued, and no event here ever waits for a model fit.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpiopt.objective.metrics import FrontTracker
from mpiopt.parallel.forecast import Forecast
from mpiopt.parallel.protocol import Decision, Report, Result, Trial, Verdict
from mpiopt.search.untried import Untried
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus

QUEUE_POLL_S = 0.2      # how often an empty queue is read again (see the module docstring)


@dataclass(frozen=True)
class Dispatch:
    group: int
    trial: Trial


@dataclass(frozen=True)
class Answer:
    group: int
    decision: Decision


@dataclass(frozen=True)
class StopGroup:
    group: int


@dataclass(frozen=True)
class Withdraw:
    """A trial sent ahead must not start (the study stopped taking new trials)."""
    group: int
    trial_id: int


def trial_seed(study_seed: int, number: int) -> int:
    """A trial's seed derives from the study seed and its number only (replayable)."""
    return int(np.random.SeedSequence([study_seed, number]).generate_state(1)[0] % (2**31 - 1))


@dataclass
class _Running:
    trial_id: int
    number: int
    params: dict[str, Any]
    group: int
    started: float
    refit: bool = False          # training.refit's run: no trial row, no searcher


class Scheduler:
    """Dispatch, record, tell, ask ahead. One instance per study run, on rank 0."""

    def __init__(self, *, storage, study_id: int, searcher, direction: str, budget: int,
                 n_groups: int, seed: int = 0, pruner=None, target: float | None = None,
                 time_limit: float | None = None, max_initial_failures: int = 5,
                 existing: list[FrozenTrial] = (), progress=None, clock=time.monotonic,
                 hosts: list[str] | None = None, ranks: list[int] | None = None,
                 trial_timeout: float | None = None, grace: float = 300.0,
                 stuck_grace: float = 60.0, objective=None,
                 warm: list[tuple[dict, float]] = (), artifacts=None):
        self.storage, self.study_id, self.searcher = storage, study_id, searcher
        self.sign = -1.0 if direction == "maximize" else 1.0
        self.budget, self.seed, self.pruner = budget, seed, pruner
        self.target, self.max_initial_failures = target, max_initial_failures
        self.clock = clock
        self.deadline = None if time_limit is None else clock() + time_limit
        self.hard_deadline = None if time_limit is None else self.deadline + grace
        self.trial_timeout, self.stuck_grace = trial_timeout, stuck_grace
        self.progress = progress
        self.artifacts = artifacts    # mpiopt.artifacts.keeper.Keeper, or None
        # training.refit: None (not yet), "running", "done"; a refit model on disk is done
        self.refit_state = None if artifacts is not None and artifacts.refit_wanted() else "done"
        self.hosts = hosts or [None] * n_groups
        self.ranks = ranks or [None] * n_groups
        self.idle: list[int] = list(range(n_groups))
        self.stopped: set[int] = set()
        self.running: dict[int, _Running] = {}
        self.ahead: dict[int, _Running] = {}    # group -> its next trial, sent, not begun
        self.lost_ids: set[int] = set()         # trials whose group died under them (lose)
        self.given_up: set[int] = set()         # groups stuck in a trial past its timeout
        # Groups that may want a trial sent ahead (an ordered set, filtered when read): a
        # result then costs O(its batch), not a scan of every running group.
        self._wanting: dict[int, None] = {}
        self.forecast = Forecast()              # when the loop should poll finely
        self.ask_ahead = False                  # set by the MPI loop (module docstring)
        self.withdrawn: set[int] = set()        # trial ids of ahead trials called back
        self.n_groups = n_groups
        self.prefetched: tuple[dict, float] | None = None   # (params, seconds to ask)
        self.warned_unread = False
        self.stop_reason: str | None = None
        self.message: str | None = None
        self.best: FrozenTrial | None = None
        # several objectives or constraints: tells vectors, keeps the Pareto front
        self.front = (FrontTracker(objective) if objective is not None and objective.vector
                      else None)
        self.history: dict[int, dict[int, float]] = {}
        self.counts = {s: 0 for s in TrialStatus}
        self._finished = 0
        self.initial_failures = 0
        self.last_error: str | None = None
        self.next_number = 0
        self.reruns: list[FrozenTrial] = []
        self.finishing = 0            # results being written while their group already runs
        self.send_now = None          # callable(actions): the MPI loop sends at once
        self.background = hasattr(searcher, "take")
        # told by trial number, with a lineage per trial (search.pbt: members share params)
        self.numbered = bool(getattr(searcher, "numbered", False))
        # a finite space: each parameter set once, then the end (mpiopt.search.untried)
        self.untried = None if self.numbered else Untried.of(
            getattr(getattr(searcher, "inner", searcher), "space", None), seed)
        self.queued_taken = 0          # queued parameter sets started by this run
        self._queue_read_at: float | None = None   # None: read it at the next dispatch
        self._restore(existing, warm)
        if self.artifacts is not None:      # what a job that died mid-way left behind
            self.artifacts.finished([t for t in existing if t.status.is_finished()],
                                    keep=self._needed())
        if self.background:
            searcher.start(self.next_number)

    # ---- resume -------------------------------------------------------------------
    def _restore(self, existing, warm=()) -> None:
        """Replay finished trials into the searcher (after `warm`: another study's results,
        search.warm_start); queue unfinished ones to run again. RETRIED trials are only
        on record; PENDING ones wait in the database's queue."""
        finished = [(params, self.sign * value) for params, value in warm]
        for t in sorted(existing, key=lambda t: t.number):
            self.next_number = max(self.next_number, t.number + 1)
            if self.untried is not None and t.status is not TrialStatus.RETRIED:
                self.untried.note(t.params)
            if t.status in (TrialStatus.RETRIED, TrialStatus.PENDING):
                continue
            if t.status.is_finished():
                self._count(t.status)
                usable = t.status is not TrialStatus.FAILED and _is_number(t.value)
                finished.append((t.params, self._told_value(t) if usable else None))
                if usable:
                    self._consider_best(t)
                if t.intermediate:
                    self.history[t.number] = {e: self.sign * v for e, v in t.intermediate.items()}
            else:
                self.reruns.append(t)
        if self.numbered:
            self.searcher.replay_numbered(
                [(t.number, t.params, self._told_value(t) if _usable(t) else None,
                  {"member": t.member, "round": t.round, "parent": t.parent},
                  t.status.is_finished())
                 for t in sorted(existing, key=lambda t: t.number)
                 if t.status not in (TrialStatus.RETRIED, TrialStatus.PENDING)],
                self.next_number)
        elif finished or self.reruns:
            self.searcher.replay(finished, [t.params for t in self.reruns], self.next_number)
        self.any_success = self.counts[TrialStatus.COMPLETE] + self.counts[TrialStatus.PRUNED] > 0
        if not self.any_success:
            self.initial_failures = self.counts[TrialStatus.FAILED]

    # ---- queries ------------------------------------------------------------------
    @property
    def finished(self) -> int:
        """Trials that count toward the budget (kept as a number: asked several times per
        result)."""
        return self._finished

    def _count(self, status: TrialStatus) -> None:
        self.counts[status] += 1
        self._finished += status.counts()

    @property
    def done(self) -> bool:
        return (not self.running and not self.ahead and not self._can_dispatch()
                and not self._refit_due())

    def waits_for_dispatch(self, group: int, trial_id: int) -> bool:
        """Whether the group runs this trial and, when it ends, waits for rank 0 (nothing
        was sent ahead to it)."""
        run = self.running.get(group)
        return run is not None and run.trial_id == trial_id and group not in self.ahead

    def _can_dispatch(self, extra: int = 0) -> bool:
        """Whether one more trial may start (`extra`: ones already promised this round)."""
        if self.stop_reason is None and self.deadline is not None and self.clock() >= self.deadline:
            self._stop("time_limit", "time limit reached: running trials finish, no new ones start")
        return self.stop_reason is None and self._started(extra) < self.budget

    def _started(self, extra: int = 0) -> int:
        return self.finished + len(self.running) + len(self.ahead) + self.finishing + extra

    def _ahead_room(self, extra: int = 0) -> bool:
        """Whether one more trial may be sent ahead: once a trial has succeeded (a study
        whose first trials all fail stops without trials that never ran), and while more
        than one per group is left."""
        groups = self.n_groups - len(self.stopped)
        return (self.ask_ahead and self.any_success and self._can_dispatch(extra)
                and self.budget - self._started(extra) > groups)

    # ---- events -------------------------------------------------------------------
    def start(self) -> list:
        """Dispatch to every idle group at once; stop the groups the budget leaves idle."""
        return self._fill_idle() + self._stop_idle()

    def on_result(self, group: int, result: Result) -> list:
        return self.on_results([(group, result)])

    def on_results(self, batch: list[tuple[int, Result]]) -> list:
        """Results that arrived together: written in one transaction, and their groups'
        next trials created in one (see the module docstring for the order)."""
        done: list[FrozenTrial] = []
        outcomes: list[dict] = []
        begun: list[int] = []        # trials sent ahead that their groups now run
        freed: dict[int, bool] = {}  # group -> whether it is idle now
        for group, result in batch:
            if group not in self.running or self.running[group].trial_id != result.trial_id:
                continue    # a second word on a trial already settled (parallel/together.py)
            self._warn_unread(result.unread)
            run = self.running.pop(group)
            status = TrialStatus(result.status)
            if self.untried is not None and not run.refit:
                self.untried.settle(run.params)
            freed[group] = self._promote(group, begun if status is not TrialStatus.INTERRUPTED
                                         else None)
            if run.refit:
                self._refit_finished(result)
                self._free(group, freed)
                continue
            if status is TrialStatus.INTERRUPTED:      # cancelled: stays unfinished, runs again
                self._forget(run.number, run.params)
                self._free(group, freed)
                if run.trial_id in self.withdrawn:     # never begun: on record as such
                    self._keep([dict(trial_id=run.trial_id, status=TrialStatus.INTERRUPTED,
                                     error="not started: the study stopped taking new trials")])
                if result.halt:      # the job cannot go on (its artifact store failed)
                    self._halt(run, result.error or "stopped")
                continue
            self.forecast.ended(self.clock() - run.started)
            done.append(FrozenTrial(
                id=run.trial_id, study_id=self.study_id, number=run.number, status=status,
                params=run.params, value=result.value, group=group, duration=result.duration,
                error=result.error, metrics=dict(result.metrics)))
            outcomes.append(result.record())
        if not done:
            return self._refit_if_due() + self._stop_idle()
        actions: list = []
        first = all(self._dispatch_first(t) for t in done)
        if first and self._all_busy(done, freed):
            actions = self._write_with_next(done, outcomes, begun)
            first = None                     # written, and the next trials made
        elif first:                          # the groups' next trials leave before the write
            for t in done:
                self._free(t.group, freed)
            self.finishing += len(done)
            try:
                with self._holding(outcomes):
                    actions = self._teach_and_fill(done)
            except BaseException:        # the next trials could not start (an outage past
                self._keep(outcomes)     # its limit): the results are still kept
                raise
            finally:
                self.finishing -= len(done)
            if self.send_now is not None and actions:
                self.send_now(actions)
                actions = []
        try:
            if first is not None:
                self.storage.finish_trials(outcomes, **({"started": begun} if begun else {}))
        except BaseException:
            if not first:               # so the wind-down stops them (the results are in
                for t in done:          # the recovery file)
                    self._free(t.group, freed)
            raise
        if self.artifacts is not None:      # written: its checkpoints go, its model is ranked
            self.artifacts.finished(done, keep=self._needed())
        for trial in done:
            self._count(trial.status)
            self._account(trial)
            if self.progress:
                self.progress.trial_finished(trial, self)
        if first is False:
            for t in done:
                self._free(t.group, freed)
            actions = self._teach_and_fill(done)
        return actions + self._refit_if_due() + self._stop_idle()

    def outcomes_due(self, batch: list[tuple[int, Result]]) -> list[dict]:
        """The records `on_results` will write for these results (results of the trials
        the groups run or were sent ahead; not cancels, refits, nor words on settled
        trials), without acting on them: the coordinator takes results in while a write
        waits out an outage, and these go to the recovery file meanwhile."""
        due = []
        for group, result in batch:
            ids = {r.trial_id for r in (self.running.get(group), self.ahead.get(group))
                   if r is not None and not r.refit}
            if result.trial_id in ids and TrialStatus(result.status) is not TrialStatus.INTERRUPTED:
                due.append(result.record())
        return due

    def _all_busy(self, done: list[FrozenTrial], freed: dict[int, bool]) -> bool:
        """Whether every group of the batch already runs the trial sent ahead to it (and
        the storage can write results and new trials in one commit)."""
        return (self.ask_ahead and hasattr(self.storage, "finish_and_create")
                and not any(freed.get(t.group, False) for t in done))

    def _write_with_next(self, done, outcomes, begun) -> list:
        """No group waits, so nothing has to leave before the write: the searcher is told
        first, and one commit records the results, the starts of the trials their groups
        now run and the trials sent ahead next (half the commits of two writes)."""
        for trial in done:
            self._teach(trial)
        self.finishing += len(done)
        try:
            with self._holding(outcomes):    # (the queue is read first: a kill during an
                queued, groups, fresh = self._plan_ahead()   # outage there lost them)
        finally:
            self.finishing -= len(done)
        try:
            written = self.storage.finish_and_create(
                outcomes, self.study_id, self._requests(fresh, groups, ahead=True), started=begun)
        except BaseException:
            for params, _ in fresh:
                self.searcher.forget(params)
            raise
        if written is None:      # the outage wrapper found the results already written
            for params, _ in fresh:   # by a try that lost its answer: no ids for these
                self.searcher.forget(params)
            return queued
        return queued + self._began(groups, written[1], fresh, ahead=True)

    def _holding(self, outcomes: list[dict]):
        """Results not yet written while other calls are made first: written ahead to the
        recovery file if one of those calls meets an outage, so a kill meanwhile does not
        lose them (storage/resilient.py)."""
        holding = getattr(self.storage, "holding", None)
        return holding(outcomes) if holding else nullcontext()

    def _promote(self, group: int, begun: list | None) -> bool:
        """The group's trial sent ahead becomes its running one (the leader starts it as
        soon as it sends its result). Returns whether the group is idle. begun: where to
        note its start (None: the result was a cancel, so it will not start either)."""
        nxt = self.ahead.pop(group, None)
        if nxt is None:
            return True
        nxt.started = self.clock()
        self.running[group] = nxt
        self._wanting[group] = None
        self.forecast.began(group, nxt.trial_id, nxt.started)
        if begun is not None and nxt.trial_id not in self.withdrawn:
            begun.append(nxt.trial_id)
        return False

    def _free(self, group: int, freed: dict[int, bool]) -> None:
        """The group joins the idle ones, once, unless its next trial was already there."""
        if freed.pop(group, False):
            self.idle.append(group)

    def _halt(self, run: _Running, error: str) -> None:
        """A trial stopped by a failure that is not its own (mpiopt.artifacts: no space
        left): it is recorded INTERRUPTED, not as a lost attempt, and runs again on
        resume from its last checkpoint; no new trial starts, so the job ends in order."""
        self.storage.finish_trials([dict(trial_id=run.trial_id, status=TrialStatus.INTERRUPTED,
                                         error=error)])
        self._stop("error", error.splitlines()[0])

    def _warn_unread(self, names: list[str]) -> None:
        """Once per run: search-space parameters the model never read change nothing."""
        if names and not self.warned_unread and self.progress:
            self.warned_unread = True
            listed = ", ".join(f"'{n}'" for n in names)
            self.progress.say(f"warning: build_model never read search_space parameter(s) "
                              f"{listed}: they change nothing (a misspelt name?)")

    def _keep(self, outcomes: list[dict]) -> None:
        """Write results while another error is on its way up: the database, or the
        recovery file once the outage wrapper gave up (storage/resilient.py)."""
        try:
            self.storage.finish_trials(outcomes)
        except Exception:
            pass

    def _dispatch_first(self, trial: FrozenTrial) -> bool:
        """Whether the group may get its next trial before this result is written: not
        when the result may stop the study (a failure; the target reached)."""
        if trial.status is TrialStatus.FAILED or not _is_number(trial.value):
            return False
        return self.target is None or self.sign * trial.value > self.sign * self.target

    def _teach_and_fill(self, trials: list[FrozenTrial]) -> list:
        if self.background or self.prefetched is not None or self.reruns:
            actions = self._fill_idle()      # work ready: the group gets it before the refit
            for trial in trials:
                self._teach(trial)
        else:
            for trial in trials:             # else the next ask must know these results
                self._teach(trial)
            actions = self._fill_idle()
        return actions

    def on_report(self, group: int, report: Report) -> list:
        run = self.running.get(group)
        if run is None or run.trial_id != report.trial_id:
            return []
        if run.refit:
            verdict = Verdict.CANCEL if self.stop_reason == "interrupted" else Verdict.CONTINUE
            return [Answer(group, Decision(report.trial_id, verdict))]
        self.storage.add_intermediate(run.trial_id, report.epoch, report.value)
        value = self.sign * report.value
        prune = False
        if self.pruner is not None and _is_number(value):
            others = {n: h for n, h in self.history.items() if n != run.number}
            prune = bool(self.pruner.should_prune(run.number, report.epoch, value, others))
        self.history.setdefault(run.number, {})[report.epoch] = value
        verdict = Verdict.PRUNE if prune else Verdict.CONTINUE
        if self.stop_reason == "interrupted":
            verdict = Verdict.CANCEL
        return [Answer(group, Decision(report.trial_id, verdict))]

    def tick(self) -> list:
        """Called while waiting: notices the time limit; idle groups take suggestions the
        background searcher made meanwhile."""
        return self._fill_idle(tick=True) + self._stop_idle()

    def stop(self, reason: str, message: str) -> None:
        """No new trial starts; the first reason given is the one reported."""
        self._stop(reason, message)

    def overdue(self) -> str | None:
        """Why the job must end now, or None: the time limit's hard edge (time_limit +
        grace) with trials still running, or a trial that did not stop at its timeout
        (user code that ignores signals or sits in a long C call). That trial is recorded
        FAILED, so it is not run again on resume."""
        now = self.clock()
        if self.hard_deadline is not None and self.running and now >= self.hard_deadline:
            self._stop("interrupted", "time limit + grace reached: running trials are recorded "
                                      "INTERRUPTED and run again on resume")
            return self.message
        if self.trial_timeout is None:
            return None
        for group, run in list(self.running.items()):
            if now - run.started >= self.trial_timeout + self.stuck_grace:
                return self._give_up_on(group, run)
        return None

    def _give_up_on(self, group: int, run) -> str:
        from mpiopt.durations import format_duration

        limit = format_duration(self.trial_timeout)
        error = (f"timed out after {limit}; it did not stop within {format_duration(self.stuck_grace)}, "
                 f"so the job ended (group {group}, host {self.hosts[group]})")
        nxt = self.ahead.pop(group, None)     # sent ahead to the stuck leader: never begun
        if nxt is not None:
            self.searcher.forget(nxt.params)
            self._keep([dict(trial_id=nxt.trial_id, status=TrialStatus.INTERRUPTED,
                             error="not started: its group was stuck in the trial before")])
        self.given_up.add(group)
        self._stop("error", f"trial {run.number} {error}")     # first: nothing new starts
        self.on_result(group, Result(run.trial_id, TrialStatus.FAILED, error=error,
                                     duration=self.clock() - run.started))
        return self.message

    def lose(self, groups) -> None:
        """These groups' ranks went silent (dead): their running trials stay RUNNING when
        the rest is interrupted, so the resume counts each a lost attempt."""
        self.lost_ids.update(self.running[g].trial_id for g in groups
                             if g in self.running and not self.running[g].refit)

    def interrupt(self) -> list:
        """SIGINT/SIGTERM: running trials become INTERRUPTED; they run again on resume."""
        self._stop("interrupted", "interrupted: running trials are marked INTERRUPTED")
        self.storage.interrupt_running(self.study_id, keep=self.lost_ids)
        for run in [*self.running.values(), *self.ahead.values()]:
            if not run.refit:
                self._forget(run.number, run.params)
        self.running.clear()
        self.ahead.clear()
        self.storage.set_study_status(self.study_id, StudyStatus.INTERRUPTED)
        return self._stop_idle()

    def prefetch(self) -> bool:
        """Ask ahead while groups are busy, so a finishing group need not wait for a fit."""
        if self.background or self.prefetched is not None or self.reruns or self.idle:
            return False
        if not getattr(self.searcher, "ask_ahead", True):   # pbt: plans on the latest results
            return False
        if not self.running or self._started() >= self.budget:
            return False
        if self.stop_reason is not None or not self._space_left():
            return False
        self.prefetched = self._timed_ask(self.next_number)
        return True

    def finish(self) -> StudyStatus:
        """Close the study record once done; returns its final status."""
        if self.prefetched is not None:
            self.searcher.forget(self.prefetched[0])
            self.prefetched = None
        self.close_searcher()
        if self.stop_reason is None and not self.any_success and self.initial_failures:
            # a budget smaller than search.max_initial_failures, all of it failed: the same
            # ending as the early stop (it said "study complete" with exit 0)
            last = f"; last error: {self.last_error}" if self.last_error else ""
            self._stop("failures", f"all {self.initial_failures} trials failed{last}")
        status = {"interrupted": StudyStatus.INTERRUPTED, "error": StudyStatus.INTERRUPTED,
                  "failures": StudyStatus.FAILED}.get(self.stop_reason, StudyStatus.COMPLETE)
        self.storage.set_study_status(self.study_id, status)
        return status

    def close_searcher(self) -> None:
        """Stop a background searcher's thread (bounded; see there)."""
        if self.background:
            self.searcher.close()

    def stop_all(self) -> list:
        """STOP for every group not yet stopped (the end of the study)."""
        fresh = [g for g in self.idle if g not in self.stopped]
        self.stopped.update(fresh)
        return [StopGroup(g) for g in fresh]

    def withdraw_ahead(self) -> list:
        """Once the study takes no new trials: call back the trials sent ahead (once each);
        not where the space is used up (those are the last untried sets: they run)."""
        if self.stop_reason in (None, "exhausted") or not self.ahead:
            return []
        fresh = [Withdraw(g, run.trial_id) for g, run in self.ahead.items()
                 if run.trial_id not in self.withdrawn]
        self.withdrawn.update(w.trial_id for w in fresh)
        return fresh

    # ---- internals ----------------------------------------------------------------
    def _fill_idle(self, tick: bool = False) -> list:
        """Work for every idle group the budget allows: re-runs first, then new trials,
        created in one transaction."""
        actions = []
        while self.idle and self.reruns and self._can_dispatch():
            actions.append(self._rerun(self.idle[0]))
        if self.idle and self._can_dispatch():
            actions += self._take_queued(tick)
        fresh: list[tuple[dict, float | None]] = []
        while (len(fresh) < len(self.idle) and self._can_dispatch(extra=len(fresh))
               and self._space_left()):
            suggestion = self._suggestion(self.next_number + len(fresh))
            if suggestion[0] is None:
                break                   # the background searcher is still making one
            fresh.append(suggestion)
        if fresh:
            actions += self._start(fresh)
        actions += self._fill_ahead(tick)
        return actions or self._refit_if_due()

    def _fill_ahead(self, tick: bool = False) -> list:
        """A next trial for each busy group that has none: queued sets, then suggestions
        (re-runs go to idle groups only)."""
        actions, groups, fresh = self._plan_ahead(tick)
        return actions + (self._start(fresh, groups) if fresh else [])

    def _plan_ahead(self, tick: bool = False) -> tuple[list, list[int], list]:
        """Queued sets taken for busy groups without a next trial (their Dispatches), then
        the groups still without one and the suggestions for them (not yet created)."""
        if not self.ask_ahead or self.reruns or self.idle:
            return [], [], []
        if not getattr(self.searcher, "ask_ahead", True):   # pbt: a round's plan must see
            return [], [], []                                # the result before it
        if not self._ahead_room():
            return [], [], []
        groups = [g for g in self._wanting if (run := self.running.get(g)) is not None
                  and g not in self.ahead and not run.refit]
        self._wanting = dict.fromkeys(groups)
        if not groups:
            return [], [], []
        actions = self._take_queued(tick, ahead_of=groups)
        groups = [g for g in groups if g not in self.ahead]
        fresh: list[tuple[dict, float | None]] = []
        while len(fresh) < len(groups) and self._ahead_room(extra=len(fresh)) and self._space_left():
            suggestion = self._suggestion(self.next_number + len(fresh))
            if suggestion[0] is None:
                break
            fresh.append(suggestion)
        return actions, groups[:len(fresh)], fresh

    # ---- training.refit: the best parameters once more, on all the data ----------------
    def _refit_due(self) -> bool:
        """After a search that ended well (budget or target), with nothing left running."""
        return (self.refit_state is None and self.stop_reason in (None, "target", "exhausted")
                and self.best is not None and bool(self.idle) and not self.running
                and not self.finishing and not self._can_dispatch())

    def _refit_if_due(self) -> list:
        if not self.idle or not self._refit_due():
            return []
        group = self.idle.pop(0)
        best = self.best
        self.refit_state = "running"
        self.running[group] = _Running(-1, best.number, dict(best.params), group, self.clock(),
                                       refit=True)
        if self.progress:
            self.progress.say(f"refit: training trial {best.number}'s parameters once more on "
                              "all the data (training.refit)")
        return [Dispatch(group, Trial(-1, best.number, dict(best.params),
                                      trial_seed(self.seed, best.number), refit=True))]

    def _refit_finished(self, result: Result) -> None:
        self.refit_state = "done"
        status = TrialStatus(result.status)
        line = (f"refit: model kept in {self.artifacts.refit_path()}" if status is TrialStatus.COMPLETE
                else f"refit: {status.value.lower()}: {(result.error or '').splitlines()[0] if result.error else ''}")
        if status is TrialStatus.COMPLETE:
            self.artifacts.refit_done()
        if self.progress:
            self.progress.say(line)

    def _take_queued(self, tick: bool, ahead_of: list[int] | None = None) -> list[Dispatch]:
        """Queued parameter sets for idle groups (or sent ahead to these busy ones), taken
        (PENDING -> RUNNING) in one transaction. A tick reads an empty queue again only
        after QUEUE_POLL_S."""
        now = self.clock()
        if tick and self._queue_read_at is not None and now - self._queue_read_at < QUEUE_POLL_S:
            return []
        if getattr(self.storage, "pending_trials", None) is None:
            return []             # a storage without a queue (a test's fake)
        slots = self.idle if ahead_of is None else ahead_of
        fits = self._can_dispatch if ahead_of is None else self._ahead_room
        room = 0
        while room < len(slots) and fits(extra=room):
            room += 1
        queued = self.storage.pending_trials(self.study_id, limit=room) if room else []
        self._queue_read_at = None if len(queued) == room and room else now
        if not queued:
            return []
        groups = slots[:len(queued)]
        later = {} if ahead_of is None else {"started": False}
        taken = self.storage.take_pending([
            dict(trial_id=t.id, seed=trial_seed(self.seed, t.number), group=g,
                 host=self.hosts[g], **later, **self._rank_of(g)) for t, g in zip(queued, groups)])
        actions = []
        for rec in taken:
            if ahead_of is None:
                self.idle.remove(rec.group)
            actions.append(self._running(rec.group, rec, rec.params, ahead=ahead_of is not None))
        self.queued_taken += len(taken)
        return actions

    def _suggestion(self, number: int) -> tuple[dict | None, float | None]:
        """The suggestion for trial `number` (keyed searchers draw by it), or None, with
        the seconds the searcher took to make it (recorded with the trial)."""
        if self.prefetched is not None:
            (params, took), self.prefetched = self.prefetched, None
        elif self.background:
            params, took = self.searcher.take(), self.searcher.last_ask_s
        else:
            params, took = self._timed_ask(number)
        return (params if params is None else self._distinct(params, number)), took

    def _space_left(self) -> bool:
        """Whether a finite space has an untried parameter set left; once it has none,
        no new trial starts (the running ones finish) and the study ends COMPLETE."""
        u = self.untried
        if u is None or u.left() > 0:
            return True
        self._stop("exhausted", f"all {u.size} parameter sets of the search space have "
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

    def _timed_ask(self, number: int) -> tuple[dict, float]:
        start = time.perf_counter()
        params = self.searcher.ask(number)
        return params, time.perf_counter() - start

    def _start(self, fresh: list[tuple[dict, float | None]],
               ahead_of: list[int] | None = None) -> list[Dispatch]:
        """New trials for idle groups, or (ahead_of) sent ahead to these busy ones."""
        groups = self.idle[:len(fresh)] if ahead_of is None else ahead_of
        records = self.storage.create_trials(
            self.study_id, self._requests(fresh, groups, ahead=ahead_of is not None))
        if ahead_of is None:
            for g in groups:
                self.idle.remove(g)     # only once they run: a failed write leaves them idle
        return self._began(groups, records, fresh, ahead=ahead_of is not None)

    def _requests(self, fresh, groups: list[int], ahead: bool) -> list[dict]:
        """create_trials requests for these suggestions on these groups."""
        later = {"started": False} if ahead else {}
        return [dict(params=params, seed=trial_seed(self.seed, self.next_number + i),
                     group=g, host=self.hosts[g], suggest_seconds=took, **later,
                     **self._rank_of(g),
                     # pbt: each trial's member, round and parent
                     **(self.searcher.lineage(self.next_number + i) if self.numbered else {}))
                for i, (g, (params, took)) in enumerate(zip(groups, fresh))]

    def _began(self, groups, records, fresh, ahead: bool) -> list[Dispatch]:
        if self.numbered:        # the storage may have numbered them otherwise (a queued set)
            self.searcher.renumber({self.next_number + i: rec.number
                                    for i, rec in enumerate(records)})
        return [self._running(g, rec, params, ahead=ahead)
                for g, rec, (params, _) in zip(groups, records, fresh)]

    def _rerun(self, group: int) -> Dispatch:
        old = self.reruns[0]
        keep = {"keep_intermediate": True} if getattr(self.artifacts, "checkpoints", False) else {}
        rec = self.storage.restart_trial(old.id, group=group, host=self.hosts[group],
                                         **self._rank_of(group), **keep)
        self.reruns.pop(0)
        self.idle.remove(group)
        return self._running(group, rec, old.params)

    def _running(self, group: int, rec: FrozenTrial, params: dict, ahead: bool = False) -> Dispatch:
        self.next_number = max(self.next_number, rec.number + 1)
        if self.untried is not None:
            self.untried.claim(params)       # (a re-run or a queued set: not suggested here)
        run = _Running(rec.id, rec.number, params, group, self.clock())
        (self.ahead if ahead else self.running)[group] = run
        if not ahead:
            self._wanting[group] = None
            self.forecast.began(group, run.trial_id, run.started)
        seed = rec.seed if rec.seed is not None else trial_seed(self.seed, rec.number)
        return Dispatch(group, Trial(rec.id, rec.number, params, seed, rec.attempt, self.trial_timeout,
                                     round=getattr(rec, "round", None),
                                     parent=getattr(rec, "parent", None)))

    def _rank_of(self, group: int) -> dict:
        """The leader's world rank, recorded with the trial once storage has the column."""
        rank = self.ranks[group]
        return {} if rank is None or not getattr(self.storage, "records_rank", False) else {"rank": rank}

    def _stop_idle(self) -> list:
        if self._can_dispatch():
            return []
        fresh = [g for g in self.idle if g not in self.stopped]
        self.stopped.update(fresh)
        return [StopGroup(g) for g in fresh]

    def _account(self, trial: FrozenTrial) -> None:
        if trial.status is not TrialStatus.FAILED:
            self.any_success = True
        if trial.status is TrialStatus.COMPLETE:
            self._consider_best(trial)
            if (self.target is not None and self.sign * trial.value <= self.sign * self.target
                    and (self.front is None or self.front.feasible(trial))):
                self._stop("target", f"target {self.target} reached by trial {trial.number}")
        elif trial.status is TrialStatus.FAILED:
            self.last_error = (trial.error or "").splitlines()[0] if trial.error else None
            if not self.any_success:
                self.initial_failures += 1
                # a trial started earlier and still running may yet succeed (settings that
                # fail in seconds, as an out-of-memory batch size, report before those that
                # train): wait for it; a broken objective fails them all soon enough
                earlier = any(r.number < trial.number for r in self.running.values()
                              if not r.refit)
                if self.initial_failures >= self.max_initial_failures and not earlier:
                    self._stop("failures", f"stopping: the first {self.initial_failures} trials "
                               f"all failed (search.max_initial_failures); last error: "
                               f"{self.last_error}")

    def _teach(self, trial: FrozenTrial) -> None:
        """Tell the searcher; it never sees a non-finite value or a failed trial's params."""
        usable = trial.status is not TrialStatus.FAILED and _is_number(trial.value)
        value = self._told_value(trial) if usable else None
        if value is not None and self.numbered:
            self.searcher.tell_trial(trial.number, trial.params, value)
        elif value is not None:
            self.searcher.tell(trial.params, value)
        else:
            self._forget(trial.number, trial.params)

    def _forget(self, number: int, params: dict) -> None:
        if self.numbered:
            self.searcher.forget_trial(number, params)
        else:
            self.searcher.forget(params)

    def _needed(self) -> set | None:
        """Finished trials whose checkpoints must stay (pbt: rounds may start from them)."""
        return self.searcher.needed() if self.numbered else None

    def _told_value(self, trial: FrozenTrial):
        """The signed value, or with several objectives or constraints the vector of
        signed values and the violation (None when an objective is missing)."""
        if self.front is None:
            return self.sign * trial.value
        return self.front.outcome(trial)

    def _consider_best(self, trial: FrozenTrial) -> None:
        if trial.status is not TrialStatus.COMPLETE:
            return
        if self.front is not None:
            self.front.add(trial)
            if len(self.front.objectives) == 1:
                self.best = self.front.best
            return
        if self.best is None or self.sign * trial.value < self.sign * self.best.value:
            self.best = trial

    def _stop(self, reason: str, message: str) -> None:
        """The first reason is kept, except that ending the job now ("interrupted",
        "error") outranks a soft stop (time limit, target, failures)."""
        hard = ("interrupted", "error")
        if self.stop_reason is None or (reason in hard and self.stop_reason not in hard):
            self.stop_reason, self.message = reason, message


def _usable(trial: FrozenTrial) -> bool:
    return (trial.status.is_finished() and trial.status is not TrialStatus.FAILED
            and _is_number(trial.value))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
