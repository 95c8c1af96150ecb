"""The coordinator's decisions as a pure state machine: events in, instructions out.

No I/O here: no MPI, no database, no printing. The shells (parallel/coordinator.py under
MPI, parallel/local.py in one process) feed it events (the start, results, a per-epoch
report, a clock tick, a stop, lost groups) by calling its handlers, each a generator of
the instructions in parallel/scheduler/instructions.py, and carry those out in order
(parallel/scheduler/executor.py). That order makes a crash harmless: a trial's row is
created RUNNING before its Dispatch; a result is written before the searcher is told,
before the progress line and before the budget counts it, so a crash in between leaves
the trial RUNNING, to run again on resume.

A finished group gets its next trial before the result it brought is written
(`send_first`; not where trials run in the ranks' own processes, which one trial can
kill: parallel/coordinator.py): its wait is then one write, not two. A failure, or a value
that reaches the target, is written first, since it may stop the study.

Work for idle groups is dispatch.py, asking ahead ahead.py. A slow searcher comes wrapped
in mpiopt.search.background.BackgroundSearcher, so no event here waits for a model fit.
"""
from __future__ import annotations

import time

from mpiopt.parallel.forecast import Forecast
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.ahead import AskAhead
from mpiopt.parallel.scheduler.budget import Budget
from mpiopt.parallel.scheduler.dispatch import Dispatching, Running
from mpiopt.parallel.scheduler.outcomes import Outcomes, is_number, usable
from mpiopt.parallel.scheduler.refit import Refit
from mpiopt.parallel.scheduler.shared import SharingJobs
from mpiopt.parallel.scheduler.teaching import Teaching
from mpiopt.search.background import BackgroundSearcher
from mpiopt.search.untried import Untried
from mpiopt.trial import Decision, FrozenTrial, Report, Result, StudyStatus, TrialStatus, Verdict

class Scheduler(Dispatching, SharingJobs, Teaching):
    """Dispatch, record, tell, ask ahead. One instance per study run, on rank 0."""

    def __init__(self, *, study_id: int, searcher, direction: str, budget: int,
                 n_groups: int, seed: int = 0, pruner=None, target: float | None = None,
                 time_limit: float | None = None, max_initial_failures: int = 5,
                 max_failures_in_a_row: int = 10,
                 existing: list[FrozenTrial] = (), clock=time.monotonic,
                 hosts: list[str] | None = None, ranks: list[int] | None = None,
                 trial_timeout: float | None = None, grace: float = 300.0,
                 stuck_grace: float = 60.0, objective=None,
                 warm: list[tuple[dict, float]] = (), refit_wanted: bool = False,
                 checkpoints: bool = False, send_first: bool = False,
                 ask_ahead: bool = False, shared=None, folds: int = 1):
        self.study_id, self.searcher, self.seed, self.pruner = study_id, searcher, seed, pruner
        self.folds = folds           # a trial's folds: whether a prune's reason names them
        self.clock = clock
        self.limits = Budget(budget, clock, time_limit, grace)
        self.outcomes = Outcomes(direction, target, max_initial_failures, objective,
                                 max_failures_in_a_row)
        self.refit = Refit(wanted=refit_wanted)
        self.trial_timeout, self.stuck_grace = trial_timeout, stuck_grace
        self.checkpoints, self.send_first = checkpoints, send_first
        self.n_groups = n_groups
        self.hosts = hosts or [None] * n_groups
        self.ranks = ranks or [None] * n_groups
        self.idle: list[int] = list(range(n_groups))
        self.stopped: set[int] = set()
        self.running: dict[int, Running] = {}
        self.lost_ids: set[int] = set()         # trials whose group died under them (lose)
        self.blamed: set[int] = set()           # trials whose messages ended the run (blame)
        self.given_up: set[int] = set()         # groups stuck in a trial past its timeout
        self.forecast = Forecast()              # when the loop should poll finely
        self.warned_unread = False
        self.searcher_failures_said: set[str] = set()
        self.next_number = 0
        self.reruns: list[FrozenTrial] = []
        self.finishing = 0            # results being written while their group already runs
        self.background = isinstance(searcher, BackgroundSearcher)
        self.numbered = searcher.numbered
        self.ahead = AskAhead(self, enabled=ask_ahead)
        # a finite space: each parameter set once, then the end (mpiopt.search.untried)
        self.untried = None if self.numbered else Untried.of(searcher.space, seed)
        self.queued_taken = 0          # queued parameter sets started by this run
        self.shared = shared           # a Shared: other jobs run the study too (shared.py)
        if shared is not None:         # (their running trials are theirs, not reruns)
            existing = [t for t in existing if t.status is not TrialStatus.RUNNING]
            shared.seen.update(t.id for t in existing if t.status.is_finished())
        self._queue_read_at: float | None = None   # None: read it at the next dispatch
        self._restore(existing, warm)
        if self.background:
            searcher.start(self.next_number)

    # ---- what the shells and the progress line read ------------------------------------
    sign = property(lambda self: self.outcomes.sign)
    counts = property(lambda self: self.outcomes.counts)
    finished = property(lambda self: self.outcomes.finished)
    best = property(lambda self: self.outcomes.best)
    front = property(lambda self: self.outcomes.front)
    history = property(lambda self: self.outcomes.history)
    stop_reason = property(lambda self: self.limits.stop_reason)
    message = property(lambda self: self.limits.message)
    hard_deadline = property(lambda self: self.limits.hard_deadline)
    budget = property(lambda self: self.limits.trials)

    @property
    def done(self) -> bool:
        return (not self.running and not self.ahead.trials and not self._can_dispatch()
                and not self.refit.due(self) and not self._lingers())

    def waits_for_dispatch(self, group: int, trial_id: int) -> bool:
        """Whether the group runs this trial and, when it ends, waits for rank 0 (nothing
        was sent ahead to it)."""
        run = self.running.get(group)
        return run is not None and run.trial_id == trial_id and group not in self.ahead.trials

    def outcomes_due(self, batch: list[tuple[int, Result]]) -> list[dict]:
        """The records `on_results` will write for these results (not cancels, refits nor
        words on settled trials), without acting on them: kept during an outage."""
        due = []
        for group, result in batch:
            runs = {r.trial_id: r for r in (self.running.get(group), self.ahead.trials.get(group))
                    if r is not None and not r.refit}
            run = runs.get(result.trial_id)
            if run is not None and TrialStatus(result.status) is not TrialStatus.INTERRUPTED:
                due.append(_record(run, result))
        return due

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
                finished.append((t.params, self.outcomes.restored(t)))
            else:
                self.reruns.append(t)
        if self.numbered:
            self.searcher.replay_numbered(
                [(t.number, t.params, self.outcomes.told_value(t) if usable(t) else None,
                  {"member": t.member, "round": t.round, "parent": t.parent},
                  t.status.is_finished())
                 for t in sorted(existing, key=lambda t: t.number)
                 if t.status not in (TrialStatus.RETRIED, TrialStatus.PENDING)],
                self.next_number)
        elif finished or self.reruns:
            self.searcher.replay(finished, [t.params for t in self.reruns], self.next_number)
        self.outcomes.after_restore()

    def settled_on_resume(self, existing) -> ins.TrialsSettled:
        """What a job that died mid-way left in the artifact store, to tidy at the start."""
        return ins.TrialsSettled(tuple(t for t in existing if t.status.is_finished()),
                                 keep=self._needed())

    def _can_dispatch(self, extra: int = 0) -> bool:
        """Whether one more trial may start (`extra`: ones already promised this round)."""
        return self.limits.allows(self._started(extra))

    def _started(self, extra: int = 0) -> int:
        if self.shared is not None:
            return self._shared_started(extra)
        return (self.finished + len(self.running) + len(self.ahead.trials) + self.finishing
                + extra)

    # ---- events -------------------------------------------------------------------
    def start(self):
        """Dispatch to every idle group at once; stop the groups the budget leaves idle."""
        yield from self._read_others(force=True)
        yield from self._fill_idle()
        yield from self._say_searcher_failures()
        yield from self._stop_idle()

    def on_result(self, group: int, result: Result):
        yield from self.on_results([(group, result)])

    def on_results(self, batch: list[tuple[int, Result]]):
        """Results that arrived together: written in one transaction, and their groups'
        next trials created in one (see the module docstring for the order)."""
        yield from self._read_others()
        done, outcomes, begun, freed = yield from self._settle(batch)
        if not done:
            yield from self._refit_if_due()
            yield from self._stop_idle()
            return
        first = self.send_first and not any(self.outcomes.may_stop_the_study(t) for t in done)
        if first and self._all_busy(done, freed):
            yield from self._write_with_next(done, outcomes, begun)
        else:
            if first:                    # the groups' next trials leave before the write
                yield from self._fill_before_write(done, outcomes, freed)
            yield from self._write(done, outcomes, begun, freed, first)
            yield from self._account(done)
            if first:
                yield self._settled(done)
            else:                        # told once written; what pbt keeps follows the tell
                for t in done:
                    self._free(t.group, freed)
                yield from self._teach_and_fill(done, settle=done)
        yield from self._say_searcher_failures()
        yield from self._refit_if_due()
        yield from self._stop_idle()

    def _settle(self, batch):
        """Each result's trial leaves `running` (its group's next one, sent ahead, starts);
        returns the finished trials, their records, the starts to note and which groups
        are idle now. Cancels, refits and words on settled trials end here."""
        done: list[FrozenTrial] = []
        outcomes: list[dict] = []
        begun: list[int] = []        # trials sent ahead that their groups now run
        freed: dict[int, bool] = {}  # group -> whether it is idle now
        for group, result in batch:
            if group not in self.running or self.running[group].trial_id != result.trial_id:
                continue    # a second word on a trial already settled (parallel/together.py)
            yield from self._warn_unread(result.unread)
            run = self.running.pop(group)
            status = TrialStatus(result.status)
            if self.untried is not None and not run.refit:
                self.untried.settle(run.params)
            freed[group] = self._promote(group, begun if status is not TrialStatus.INTERRUPTED
                                         else None)
            if run.refit:
                self.refit.finished()
                self._free(group, freed)
                yield ins.RefitEnded(status, result.error)
                continue
            if status is TrialStatus.INTERRUPTED:      # cancelled: stays unfinished, runs again
                yield from self._cancelled(group, run, result, freed)
                continue
            self.forecast.ended(self.clock() - run.started)
            record = _record(run, result)
            done.append(FrozenTrial(
                id=run.trial_id, study_id=self.study_id, number=run.number, status=status,
                params=run.params, value=result.value, group=group, duration=result.duration,
                error=record["error"], metrics=dict(result.metrics), spans=list(result.spans)))
            outcomes.append(record)
        return done, outcomes, begun, freed

    def _cancelled(self, group: int, run: Running, result: Result, freed: dict):
        self._forget(run.number, run.params)
        self._free(group, freed)
        if run.trial_id in self.ahead.withdrawn:     # never begun: on record as such
            yield ins.WriteResults(({"trial_id": run.trial_id, "status": TrialStatus.INTERRUPTED,
                                     "error": "not started: the study stopped taking new trials"},),
                                   quiet=True)
        if result.halt:      # the job cannot go on (its artifact store failed)
            yield from self._halt(run, result.error or "stopped")

    def _fill_before_write(self, done, outcomes, freed):
        """The groups' next trials are made and sent while their results wait to be
        written; an outage past its limit here still leaves the results kept."""
        for t in done:
            self._free(t.group, freed)
        self.finishing += len(done)
        try:
            yield from self._holding(outcomes, self._teach_and_fill(done))
        except BaseException:        # the next trials could not start: the results are
            yield ins.WriteResults(tuple(outcomes), quiet=True)    # still written (or kept)
            raise
        finally:
            self.finishing -= len(done)

    def _write(self, done, outcomes, begun, freed, first):
        try:
            yield ins.WriteResults(tuple(outcomes), started=tuple(begun))
        except BaseException:
            if not first:               # so the wind-down stops them (the results are in
                for t in done:          # the recovery file)
                    self._free(t.group, freed)
            raise

    def _settled(self, done) -> ins.TrialsSettled:
        """Written and told: their checkpoints go (but those pbt may start a round from)
        and their models are ranked."""
        return ins.TrialsSettled(tuple(done), keep=self._needed())

    def _account(self, done):
        """Written: the budget counts the results, the progress line shows each."""
        for trial in done:
            self.outcomes.count(trial.status)
            stop = self.outcomes.account(trial, earlier_running=self._earlier_running)
            if stop is not None:
                self.limits.stop(*stop)
            yield ins.TrialDone(trial)

    def _earlier_running(self, number: int) -> bool:
        """Whether a trial numbered before `number` still runs (asked of first failures)."""
        return any(r.number < number for r in self.running.values() if not r.refit)

    def _all_busy(self, done: list[FrozenTrial], freed: dict[int, bool]) -> bool:
        """Whether every group of the batch already runs the trial sent ahead to it (results
        and new trials can then be written in one commit)."""
        return self.ahead.enabled and not any(freed.get(t.group, False) for t in done)

    def _holding(self, outcomes, steps):
        """Run `steps` with these results held unwritten (instructions.Hold)."""
        yield ins.Hold(tuple(outcomes))
        try:
            return (yield from steps)
        finally:
            yield ins.Release(tuple(outcomes))

    def _write_with_next(self, done, outcomes, begun):
        """No group waits, so nothing has to leave before the write: the searcher is told
        first, and one commit records the results, the starts of the trials their groups
        now run and the trials sent ahead next (half the commits of two writes)."""
        for trial in done:
            self._teach(trial)
        self.finishing += len(done)
        try:      # (the queue is read first: a kill during an outage there lost them)
            groups, fresh = yield from self._holding(outcomes, self.ahead.plan())
        finally:
            self.finishing -= len(done)
        try:
            records = yield ins.WriteResultsAndCreate(
                tuple(outcomes), self.study_id, tuple(self._requests(fresh, groups, ahead=True)),
                started=tuple(begun), **self._capped())
        except BaseException:
            for params, _ in fresh:
                self.searcher.forget(params)
            raise
        if records is None:      # the outage wrapper found the results already written
            for params, _ in fresh:   # by a try that lost its answer: no ids for these
                self.searcher.forget(params)
        else:
            yield from self._began(groups, records, fresh, ahead=True)
        yield self._settled(done)
        yield from self._account(done)

    def _promote(self, group: int, begun: list | None) -> bool:
        """The group's trial sent ahead becomes its running one (the leader starts it as
        soon as it sends its result). Returns whether the group is idle. begun: where to
        note its start (None: the result was a cancel, so it will not start either)."""
        nxt = self.ahead.trials.pop(group, None)
        if nxt is None:
            return True
        nxt.started = self.clock()
        self.running[group] = nxt
        self.ahead.wanting[group] = None
        self.forecast.began(group, nxt.trial_id, nxt.started)
        if begun is not None and nxt.trial_id not in self.ahead.withdrawn:
            begun.append(nxt.trial_id)
        return False

    def _free(self, group: int, freed: dict[int, bool]) -> None:
        """The group joins the idle ones, once, unless its next trial was already there."""
        if freed.pop(group, False):
            self.idle.append(group)

    def _halt(self, run: Running, error: str):
        """A trial stopped by a failure that is not its own (mpiopt.artifacts: no space
        left): it is recorded INTERRUPTED, not as a lost attempt, and runs again on
        resume from its last checkpoint; no new trial starts, so the job ends in order."""
        self.limits.stop("error", error.splitlines()[0])
        yield ins.WriteResults(({"trial_id": run.trial_id, "status": TrialStatus.INTERRUPTED,
                                 "error": error},))

    def _teach_and_fill(self, trials: list[FrozenTrial], settle=()):
        """Tell the searcher and give idle groups work: work that is ready first, else the
        tells first (the next ask must know these results). `settle`: written results
        whose artifacts are tended once told."""
        ready = self.background or self.ahead.prefetched is not None or self.reruns
        if ready:
            yield from self._fill_idle()
        for trial in trials:
            self._teach(trial)
        if settle:
            yield self._settled(settle)
        if not ready:
            yield from self._fill_idle()

    def on_report(self, group: int, report: Report):
        run = self.running.get(group)
        if run is None or run.trial_id != report.trial_id:
            return
        if run.refit:
            verdict = Verdict.CANCEL if self.stop_reason == "interrupted" else Verdict.CONTINUE
            yield ins.Answer(group, Decision(report.trial_id, verdict))
            return
        yield ins.AddIntermediate(run.trial_id, report.epoch, report.value, run.number,
                                  report.fold)
        value = self.sign * report.value
        prune = False
        if self.pruner is not None and is_number(value):
            judgement = self.pruner.judge(run.number, report.step, value, self.history)
            prune = judgement.prune
            if prune:
                run.pruned = judgement.text(self.sign, self.folds)
        self.history.setdefault(run.number, {})[report.step] = value
        verdict = Verdict.PRUNE if prune else Verdict.CONTINUE
        if self.stop_reason == "interrupted":
            verdict = Verdict.CANCEL
        yield ins.Answer(group, Decision(report.trial_id, verdict))

    def tick(self):
        """While waiting: notices the time limit; idle groups take suggestions the
        background searcher made meanwhile; a shared study's other jobs are read."""
        yield from self._read_others()
        yield from self._fill_idle(tick=True)
        yield from self._say_searcher_failures()
        yield from self._stop_idle()

    def stop(self, reason: str, message: str) -> None:
        """No new trial starts; the first reason given is the one reported."""
        self.limits.stop(reason, message)

    def overdue(self):
        """Why the job must end now, or None (the handler's return value): the time
        limit's hard edge with trials still running, or a trial that did not stop at its
        timeout (its group is given up; the trial is recorded FAILED, so it is not run
        again on resume)."""
        if self.running and self.limits.past_hard_edge():
            self.limits.stop("interrupted", "time limit + grace reached: running trials are "
                                            "recorded INTERRUPTED and run again on resume")
            return self.message
        if self.trial_timeout is None:
            return None
        now = self.clock()
        for group, run in list(self.running.items()):
            if now - run.started >= self.trial_timeout + self.stuck_grace:
                return (yield from self._give_up_on(group, run))
        return None

    def _give_up_on(self, group: int, run: Running):
        from mpiopt.durations import format_duration

        limit = format_duration(self.trial_timeout)
        error = (f"timed out after {limit}; it did not stop within {format_duration(self.stuck_grace)}, "
                 f"so the job ended (group {group}, host {self.hosts[group]})")
        nxt = self.ahead.trials.pop(group, None)     # sent ahead to the stuck leader: never begun
        if nxt is not None:
            self.searcher.forget(nxt.params)
            yield ins.WriteResults(({"trial_id": nxt.trial_id, "status": TrialStatus.INTERRUPTED,
                                     "error": "not started: its group was stuck in the trial before"},),
                                   quiet=True)
        self.given_up.add(group)
        self.limits.stop("error", f"trial {run.number} {error}")     # first: nothing new starts
        yield from self.on_result(group, Result(run.trial_id, TrialStatus.FAILED, error=error,
                                                duration=self.clock() - run.started))
        return self.message

    def lose(self, groups) -> None:
        """These groups' ranks went silent (dead): their running trials stay RUNNING when
        the rest is interrupted, so the resume counts each a lost attempt."""
        self.lost_ids.update(self.running[g].trial_id for g in groups
                             if g in self.running and not self.running[g].refit)

    def blame(self, trial_ids) -> None:
        """The coordinator failed on what these trials sent (a report, a result): like a
        trial that kills its process, each stays RUNNING when the rest is interrupted,
        and the run's end counts it a lost attempt (mpiopt.run.study_run), so that after
        search.max_attempts it is FAILED instead of ending every resume the same way."""
        self.blamed.update(trial_ids)
        self.lost_ids.update(trial_ids)

    def interrupt(self):
        """SIGINT/SIGTERM: running trials become INTERRUPTED; they run again on resume."""
        self.limits.stop("interrupted", "interrupted: running trials are marked INTERRUPTED")
        yield ins.InterruptRunning(self.study_id, frozenset(self.lost_ids))
        for run in [*self.running.values(), *self.ahead.trials.values()]:
            if not run.refit:
                self._forget(run.number, run.params)
        self.running.clear()
        self.ahead.trials.clear()
        yield ins.SetStudyStatus(self.study_id, StudyStatus.INTERRUPTED)
        yield from self._stop_idle()

    def prefetch(self) -> bool:
        """Ask ahead while groups are busy, so a finishing group need not wait for a fit."""
        return self.ahead.prefetch()

    def finish(self):
        """Close the study record once done; returns its final status."""
        self.ahead.drop_prefetched()
        self.close_searcher()
        if self.stop_reason is None:
            # a budget smaller than search.max_initial_failures, all of it failed: the same
            # ending as the early stop
            message = self.outcomes.all_failed()
            if message:
                self.limits.stop("failures", message)
        status = {"interrupted": StudyStatus.INTERRUPTED, "error": StudyStatus.INTERRUPTED,
                  "failures": StudyStatus.FAILED}.get(self.stop_reason, StudyStatus.COMPLETE)
        yield ins.SetStudyStatus(self.study_id, status)
        return status

    def close_searcher(self) -> None:
        """Stop a background searcher's thread (bounded; see there)."""
        if self.background:
            self.searcher.close()

    def stop_all(self):
        """STOP for every group not yet stopped (the end of the study)."""
        fresh = [g for g in self.idle if g not in self.stopped]
        self.stopped.update(fresh)
        for g in fresh:
            yield ins.StopGroup(g)

    def withdraw_ahead(self):
        yield from self.ahead.withdraw()


def _record(run: Running, result: Result) -> dict:
    """The result's record; a trial the pruner stopped keeps why (where, and against what)
    as its error text, as an INTERRUPTED one keeps what stopped it."""
    record = result.record()
    if TrialStatus(result.status) is TrialStatus.PRUNED and run.pruned and not record["error"]:
        record["error"] = run.pruned
    return record
