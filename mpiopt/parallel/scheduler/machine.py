"""The coordinator's decisions as a pure state machine: events in, instructions out.

No I/O here: no MPI, no database, no printing, no thread. The shells (parallel/
coordinator.py under MPI, parallel/local.py in one process) hand each event
(parallel/scheduler/events.py: the start, results, a per-epoch report, a clock tick, a
stop, lost groups) to the one entry point, `handle(*events)`, through the run's executor
(executor.py), which carries out the instructions it returns (instructions.py) in order
and hands back what became of each database write and each ask of the searcher as the
next event (stepping.py). That order makes a crash harmless: a trial's row is created
RUNNING before its Dispatch; a result is written before it counts (results.py).

The parts: the budget and stops (budget.py), what finished trials add up to
(outcomes.py), the results' order (results.py), work for idle groups (dispatch.py),
asking ahead (ahead.py), training.refit (refit.py), telling the searcher (teaching.py), a
study several jobs share (shared.py), each group's state (groups.py), the invariants and
the log (checks.py, stepping.py). A slow searcher is asked beside the loop by the
executor (mpiopt.search.background.BackgroundSearcher), so no event waits for a model fit.
"""
from __future__ import annotations

import time

from mpiopt.parallel.forecast import Forecast
from mpiopt.parallel.scheduler import events as ev
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.ahead import AskAhead
from mpiopt.parallel.scheduler.budget import Budget
from mpiopt.parallel.scheduler.checks import Checks
from mpiopt.parallel.scheduler.dispatch import Dispatching, Running
from mpiopt.parallel.scheduler.groups import Groups
from mpiopt.parallel.scheduler.outcomes import Outcomes, is_number, usable
from mpiopt.parallel.scheduler.refit import Refit
from mpiopt.parallel.scheduler.results import Recording
from mpiopt.parallel.scheduler.shared import SharingJobs
from mpiopt.parallel.scheduler.stepping import Stepping
from mpiopt.parallel.scheduler.teaching import Teacher
from mpiopt.search.background import BackgroundSearcher
from mpiopt.search.untried import Untried
from mpiopt.trial import Decision, FrozenTrial, Report, Result, StudyStatus, TrialStatus, Verdict


class Scheduler(Stepping, Recording, Dispatching, SharingJobs, Checks):
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
                 ask_ahead: bool = False, shared=None, folds: int = 1, validate: bool = False):
        self._init_stepping(validate)
        self.study_id, self.searcher, self.seed, self.pruner = study_id, searcher, seed, pruner
        self.folds = folds           # a trial's folds: whether a prune's reason names them
        self.clock = clock
        self.limits = Budget(budget, clock, time_limit, grace)
        self.outcomes = Outcomes(direction, target, max_initial_failures, objective,
                                 max_failures_in_a_row)
        self.refit = Refit(wanted=refit_wanted)
        self.teacher = Teacher(searcher, self.outcomes)     # tells the searcher (teaching.py)
        self.trial_timeout, self.stuck_grace = trial_timeout, stuck_grace
        self.checkpoints, self.send_first = checkpoints, send_first
        self.n_groups = n_groups
        self.hosts = hosts or [None] * n_groups
        self.ranks = ranks or [None] * n_groups
        self.groups = Groups(n_groups)          # each group's state (groups.py)
        self.lost_ids: set[int] = set()         # trials whose group died under them (lose)
        self.blamed: set[int] = set()           # trials whose messages ended the run (blame)
        # groups stuck in a trial past its timeout: a fact about their ranks (the wind-down
        # does not wait for them), not a state (groups.py)
        self.given_up: set[int] = set()
        self.forecast = Forecast()              # when the loop should poll finely
        self.next_number = 0
        self.reruns: list[FrozenTrial] = []
        self.finishing = 0            # results being written while their group already runs
        self.background = isinstance(searcher, BackgroundSearcher)
        self.numbered = searcher.numbered
        self.ahead = AskAhead(enabled=ask_ahead, searcher_allows=searcher.asks_ahead)
        # a finite space: each parameter set once, then the end (mpiopt.search.untried)
        self.untried = None if self.numbered else Untried.of(searcher.space, seed)
        self.queued_taken = 0          # queued parameter sets started by this run
        self.shared = shared           # a Shared: other jobs run the study too (shared.py)
        if shared is not None:         # (their running trials are theirs, not reruns)
            existing = [t for t in existing if t.status is not TrialStatus.RUNNING]
            shared.seen.update(t.id for t in existing if t.status.is_finished())
        self._queue_read_at: float | None = None   # None: read it at the next dispatch
        self.must_end: str | None = None      # why the job must end now (Overdue)
        self.final_status: StudyStatus | None = None     # the study's, once Finish ran
        self._restore(existing, warm)
        self._handlers = {
            ev.Start: self._on_start, ev.Results: self._on_results, ev.Reported: self._on_report,
            ev.Tick: self._on_tick, ev.Prefetch: self._on_prefetch, ev.Overdue: self._on_overdue,
            ev.WithdrawAhead: self._on_withdraw_ahead, ev.Stop: self._on_stop,
            ev.Lose: self._on_lose, ev.Blame: self._on_blame, ev.Interrupt: self._on_interrupt,
            ev.StopAll: self._on_stop_all, ev.Finish: self._on_finish,
            ev.WindDown: self._on_wind_down}

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
    running = property(lambda self: self.groups.running)    # group -> its Running
    idle = property(lambda self: self.groups.idle)          # waiting groups, in queue order
    stopped = property(lambda self: self.groups.stopped)

    @property
    def done(self) -> bool:
        return (not self.running and not self.ahead.trials and not self._can_dispatch()
                and not self._refit_due() and not self._lingers())

    @property
    def busy(self) -> bool:
        """Whether any group runs a trial or holds one sent ahead."""
        return bool(self.running or self.ahead.trials)

    @property
    def poll_s(self) -> float | None:
        """How often a job of a shared study reads the others (None: not shared)."""
        return None if self.shared is None else self.shared.poll_s

    def sleep_s(self, delay: float) -> float:
        """How long the loop may sleep now, at most `delay` (parallel/forecast.py: finely
        where a result that waits for a dispatch is due)."""
        return self.forecast.sleep_s(self.clock(), self.waits_for_dispatch, delay)

    def last_report(self, number: int) -> float | None:
        """The latest per-epoch value trial `number` reported, as the user reads it."""
        last = self.history.get(number, {})
        return self.sign * last[max(last)] if last else None

    def waits_for_dispatch(self, group: int, trial_id: int) -> bool:
        """Whether the group runs this trial and, when it ends, waits for rank 0 (nothing
        was sent ahead to it)."""
        run = self.running.get(group)
        return run is not None and run.trial_id == trial_id and group not in self.ahead.trials

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
                                 keep=self.teacher.needed())

    def _can_dispatch(self, extra: int = 0) -> bool:
        """Whether one more trial may start (`extra`: ones already promised this round)."""
        return self.limits.allows(self._started(extra))

    def _started(self, extra: int = 0) -> int:
        if self.shared is not None:
            return self._shared_started(extra)
        return (self.finished + len(self.running) + len(self.ahead.trials) + self.finishing
                + extra)

    # ---- events -------------------------------------------------------------------
    def _on_start(self, e: ev.Start) -> None:
        """Dispatch to every idle group at once; stop the groups the budget leaves idle."""
        self._then((self._read_others, True), (self._fill_idle,), (self._say_searcher_failures,),
                   (self._stop_idle,))

    def _on_report(self, e: ev.Reported) -> None:
        group, report = e.group, e.report
        run = self.running.get(group)
        if run is None or run.trial_id != report.trial_id:
            return
        if run.refit:
            verdict = Verdict.CANCEL if self.stop_reason == "interrupted" else Verdict.CONTINUE
            self._emit(ins.Answer(group, Decision(report.trial_id, verdict)))
            return
        self._await(ins.AddIntermediate(run.trial_id, report.epoch, report.value, run.number,
                                        report.fold), lambda done: self._judged(group, run, report))

    def _judged(self, group: int, run: Running, report: Report) -> None:
        """The value is stored: the pruner judges it against the others at its step."""
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
        self._emit(ins.Answer(group, Decision(report.trial_id, verdict)))

    def _on_tick(self, e: ev.Tick) -> None:
        """While waiting: notices the time limit; idle groups take suggestions the
        background searcher made meanwhile; a shared study's other jobs are read. With
        every group busy and none wanting a trial sent ahead (the loop's usual tick, as
        often as it polls), there is nothing to fill."""
        if self.shared is None and not self.groups.any_idle and not self._ahead_wanted():
            self._say_searcher_failures()
            self._stop_idle()
            return
        self._then((self._read_others,), (self._fill_idle, True), (self._say_searcher_failures,),
                   (self._stop_idle,))

    def _on_stop(self, e: ev.Stop) -> None:
        self.limits.stop(e.reason, e.message)

    def _on_overdue(self, e: ev.Overdue) -> None:
        """Why the job must end now (`must_end`), or None: the time limit's hard edge with
        trials still running, or a trial that did not stop at its timeout (its group is
        given up; the trial is recorded FAILED, so it is not run again on resume)."""
        self.must_end = None
        if self.running and self.limits.past_hard_edge():
            self.limits.stop("interrupted", "time limit + grace reached: running trials are "
                                            "recorded INTERRUPTED and run again on resume")
            self.must_end = self.message
            return
        if self.trial_timeout is None:
            return
        now = self.clock()
        for group, run in list(self.running.items()):
            if now - run.started >= self.trial_timeout + self.stuck_grace:
                self._give_up_on(group, run)
                return

    def _give_up_on(self, group: int, run: Running) -> None:
        from mpiopt.durations import format_duration

        limit = format_duration(self.trial_timeout)
        error = (f"timed out after {limit}; it did not stop within {format_duration(self.stuck_grace)}, "
                 f"so the job ended (group {group}, host {self.hosts[group]})")
        nxt = self.ahead.trials.pop(group, None)     # sent ahead to the stuck leader: never begun
        steps = []
        if nxt is not None:
            self.searcher.forget(nxt.params)
            steps.append((self._write, ins.WriteResults(
                ({"trial_id": nxt.trial_id, "status": TrialStatus.INTERRUPTED,
                  "error": "not started: its group was stuck in the trial before"},), quiet=True)))
        self.given_up.add(group)
        self.limits.stop("error", f"trial {run.number} {error}")     # first: nothing new starts
        result = Result(run.trial_id, TrialStatus.FAILED, error=error,
                        duration=self.clock() - run.started)
        self._then(*steps, (self._on_results, ev.Results(((group, result),))),
                   (setattr, self, "must_end", self.message))

    def _on_lose(self, e: ev.Lose) -> None:
        """These groups' ranks went silent (dead): their running trials stay RUNNING when
        the rest is interrupted, so the resume counts each a lost attempt."""
        self.lost_ids.update(self.running[g].trial_id for g in e.groups
                             if g in self.running and not self.running[g].refit)

    def _on_blame(self, e: ev.Blame) -> None:
        """The coordinator failed on what these trials sent (a report, a result): like a
        trial that kills its process, each stays RUNNING when the rest is interrupted,
        and the run's end counts it a lost attempt (mpiopt.run.study_run), so that after
        search.max_attempts it is FAILED instead of ending every resume the same way."""
        self.blamed.update(e.trial_ids)
        self.lost_ids.update(e.trial_ids)

    def _on_interrupt(self, e: ev.Interrupt) -> None:
        """SIGINT/SIGTERM: running trials become INTERRUPTED; they run again on resume."""
        self.limits.stop("interrupted", "interrupted: running trials are marked INTERRUPTED")
        self._await(ins.InterruptRunning(self.study_id, frozenset(self.lost_ids)),
                    lambda done: self._interrupted())

    def _interrupted(self) -> None:
        for run in [*self.groups.let_go(), *self.ahead.trials.values()]:
            if not run.refit:
                self.teacher.forget(run.number, run.params)
        self.ahead.trials.clear()
        self._then((self._write, ins.SetStudyStatus(self.study_id, StudyStatus.INTERRUPTED)),
                   (self._stop_idle,))

    def prefetch_due(self) -> bool:
        """Whether a Prefetch would ask a suggestion now: every group busy, none waiting
        for a re-run, a suggestion not yet asked, budget left (ahead.py)."""
        a = self.ahead
        if self.background or a.prefetched is not None or self.reruns or self.groups.any_idle:
            return False
        if not a.searcher_allows or not self.running or not self.limits.left(self._started()):
            return False
        return self.stop_reason is None and self._space_left()

    def _on_prefetch(self, e: ev.Prefetch) -> None:
        """Ask ahead while groups are busy, so a finishing group need not wait for a fit."""
        if self.prefetch_due():
            self._await(ins.Ask(self.next_number), self.ahead.prefetched_now)

    def _on_finish(self, e: ev.Finish) -> None:
        """Close the study record once done; its status is `final_status`."""
        dropped = self.ahead.drop_prefetched()
        if dropped is not None:
            self.searcher.forget(dropped)
        self._emit(ins.CloseSearcher())
        if self.stop_reason is None:
            # a budget smaller than search.max_initial_failures, all of it failed: the same
            # ending as the early stop
            message = self.outcomes.all_failed()
            if message:
                self.limits.stop("failures", message)
        status = {"interrupted": StudyStatus.INTERRUPTED, "error": StudyStatus.INTERRUPTED,
                  "failures": StudyStatus.FAILED}.get(self.stop_reason, StudyStatus.COMPLETE)
        self._await(ins.SetStudyStatus(self.study_id, status),
                    lambda done: setattr(self, "final_status", status))

    def _on_stop_all(self, e=None) -> None:
        """STOP for every group not yet stopped (the end of the study)."""
        self._emit(*(ins.StopGroup(g) for g in self.groups.stop_idle()))

    def _on_withdraw_ahead(self, e: ev.WithdrawAhead) -> None:
        self._emit(*self.ahead.withdraw(self.stop_reason))

    def _on_wind_down(self, e: ev.WindDown) -> None:
        """The job ends: busy groups' trials are cancelled (ahead.py), idle groups stopped."""
        self._emit(*self.ahead.at_wind_down(self.running))
        self._on_stop_all()

    def _say_searcher_failures(self) -> None:
        self._emit(*self.teacher.failures_to_say())

    def _write(self, instruction) -> None:
        """A write whose outcome changes nothing here: the steps after it wait for it."""
        self._await(instruction)
