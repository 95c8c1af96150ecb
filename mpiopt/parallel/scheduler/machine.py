"""The coordinator's decisions as a pure state machine: events in, instructions out.

No I/O here: no MPI, no database, no printing, no thread. The shells (parallel/
coordinator.py under MPI, parallel/local.py in one process) hand each event
(parallel/scheduler/events.py: the start, results, a per-epoch report, a clock tick, a
stop, lost groups) to the one entry point, `handle(*events)`, through the run's executor
(executor.py), which carries out the instructions it returns (instructions.py) in order
and hands back what became of each database write and each ask of the searcher as the
next event (stepping.py). That order makes a crash harmless: a trial's row is created
RUNNING before its Dispatch; a result is written before it counts (results.py).

The machine is built of parts that stand alone, by composition: what they share is one
plain `State` (state.py: the groups, the outcomes, the limits, the trials sent ahead, the
re-runs, the numbering), handed to each at construction, and each keeps its own state
beside it. The parts: the budget and stops (budget.py), what finished trials add up to
(outcomes.py), each group's state (groups.py), asking ahead (ahead.py), training.refit
(refit.py), telling the searcher (teaching.py), judging per-epoch values (judging.py:
`Judge`), work for idle groups (dispatch.py:
`Dispatcher`), the results (results.py: `Recorder`), the other jobs of a shared study
(shared.py: `Sharing`), the invariants (checks.py: `Checks`), and the event loop, its
steps and its log (stepping.py: `Loop`). No part calls another: a part decides from the
State and gives its instructions and steps; where one part's work follows another's
(a batch of results, then the groups' next trials; a tell, then an ask), the machine
plans the steps in order, here. A slow searcher is asked beside the loop by the executor
(mpiopt.search.background.BackgroundSearcher), so no event waits for a model fit.
"""
from __future__ import annotations

import time

from mpiopt.parallel.scheduler import events as ev
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.ahead import AskAhead
from mpiopt.parallel.scheduler.budget import Budget
from mpiopt.parallel.scheduler.checks import Checks
from mpiopt.parallel.scheduler.dispatch import Dispatcher, Round
from mpiopt.parallel.scheduler.groups import Groups
from mpiopt.parallel.scheduler.judging import Judge
from mpiopt.parallel.scheduler.outcomes import Outcomes
from mpiopt.parallel.scheduler.refit import Refit
from mpiopt.parallel.scheduler.results import FIRST, ONE_COMMIT, Batch, Recorder
from mpiopt.parallel.scheduler.shared import Sharing
from mpiopt.parallel.scheduler.state import Running, State
from mpiopt.parallel.scheduler.stepping import ALWAYS, ON_FAILURE, Loop, Step
from mpiopt.parallel.scheduler.teaching import Teacher
from mpiopt.search.background import BackgroundSearcher
from mpiopt.search.untried import Untried
from mpiopt.trial import FrozenTrial, Result, StudyStatus, TrialStatus


def _shared_state(*, study_id, searcher, direction, budget, n_groups, seed, target,
                  time_limit, max_initial_failures, max_failures_in_a_row, clock, hosts,
                  ranks, trial_timeout, grace, objective, refit_wanted, checkpoints,
                  ask_ahead, shared) -> State:
    """The State the parts share, from the Scheduler's arguments."""
    outcomes = Outcomes(direction, target, max_initial_failures, objective,
                        max_failures_in_a_row)
    return State(
        study_id=study_id, searcher=searcher, seed=seed, clock=clock,
        limits=Budget(budget, clock, time_limit, grace), outcomes=outcomes,
        groups=Groups(n_groups),
        ahead=AskAhead(enabled=ask_ahead, searcher_allows=searcher.asks_ahead),
        teacher=Teacher(searcher, outcomes), refit=Refit(wanted=refit_wanted),
        hosts=hosts or [None] * n_groups, ranks=ranks or [None] * n_groups,
        trial_timeout=trial_timeout, checkpoints=checkpoints,
        # a finite space: each parameter set once, then the end (mpiopt.search.untried)
        untried=None if searcher.numbered else Untried.of(searcher.space, seed),
        shared=shared)


class Scheduler:
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
        self._st = st = _shared_state(
            study_id=study_id, searcher=searcher, direction=direction, budget=budget,
            n_groups=n_groups, seed=seed, target=target, time_limit=time_limit,
            max_initial_failures=max_initial_failures,
            max_failures_in_a_row=max_failures_in_a_row, clock=clock, hosts=hosts,
            ranks=ranks, trial_timeout=trial_timeout, grace=grace, objective=objective,
            refit_wanted=refit_wanted, checkpoints=checkpoints, ask_ahead=ask_ahead,
            shared=shared)
        self._loop = Loop({})
        self._checks = Checks(st, self._loop)
        if validate:
            self._loop.check = self._checks.validate_state
        self._dispatcher = Dispatcher(st, self._loop)
        self._recorder = Recorder(st, self._loop, send_first)
        self._sharing = Sharing(st, self._loop)
        self._judge = Judge(st, self._loop, pruner, folds)
        self.stuck_grace = stuck_grace
        self.background = isinstance(searcher, BackgroundSearcher)
        self.lost_ids: set[int] = set()         # trials whose group died under them (lose)
        self.blamed: set[int] = set()           # trials whose messages ended the run (blame)
        # groups stuck in a trial past its timeout: a fact about their ranks (the wind-down
        # does not wait for them), not a state (groups.py)
        self.given_up: set[int] = set()
        self.must_end: str | None = None      # why the job must end now (Overdue)
        self.final_status: StudyStatus | None = None     # the study's, once Finish ran
        if shared is not None:         # (their running trials are theirs, not reruns)
            existing = [t for t in existing if t.status is not TrialStatus.RUNNING]
            shared.seen.update(t.id for t in existing if t.status.is_finished())
        st.restore(existing, warm)
        self._loop.handlers = self._handlers()

    def _handlers(self) -> dict:
        return {
            ev.Start: self._on_start, ev.Results: self._on_results,
            ev.Reported: self._judge.reported,
            ev.Tick: self._on_tick, ev.Prefetch: self._on_prefetch, ev.Overdue: self._on_overdue,
            ev.WithdrawAhead: self._on_withdraw_ahead, ev.Stop: self._on_stop,
            ev.Lose: self._on_lose, ev.Blame: self._on_blame, ev.Interrupt: self._on_interrupt,
            ev.StopAll: self._on_stop_all, ev.Finish: self._on_finish,
            ev.WindDown: self._on_wind_down}

    def handle(self, *events) -> list:
        """The one entry point: these events in order in, the instructions to carry out
        out (stepping.py's Loop)."""
        return self._loop.handle(*events)

    # ---- what the shells, the progress line and the tests read -------------------------
    searcher = property(lambda self: self._st.searcher)
    study_id = property(lambda self: self._st.study_id)
    seed = property(lambda self: self._st.seed)
    clock = property(lambda self: self._st.clock)
    hosts = property(lambda self: self._st.hosts)
    ranks = property(lambda self: self._st.ranks)
    trial_timeout = property(lambda self: self._st.trial_timeout)
    checkpoints = property(lambda self: self._st.checkpoints)
    n_groups = property(lambda self: self._st.n_groups)
    numbered = property(lambda self: self._st.numbered)
    untried = property(lambda self: self._st.untried)
    shared = property(lambda self: self._st.shared)
    limits = property(lambda self: self._st.limits)
    outcomes = property(lambda self: self._st.outcomes)
    groups = property(lambda self: self._st.groups)
    ahead = property(lambda self: self._st.ahead)
    reruns = property(lambda self: self._st.reruns)
    next_number = property(lambda self: self._st.next_number)
    sign = property(lambda self: self._st.outcomes.sign)
    counts = property(lambda self: self._st.outcomes.counts)
    finished = property(lambda self: self._st.outcomes.finished)
    best = property(lambda self: self._st.outcomes.best)
    front = property(lambda self: self._st.outcomes.front)
    history = property(lambda self: self._st.outcomes.history)
    stop_reason = property(lambda self: self._st.limits.stop_reason)
    message = property(lambda self: self._st.limits.message)
    hard_deadline = property(lambda self: self._st.limits.hard_deadline)
    budget = property(lambda self: self._st.limits.trials)
    running = property(lambda self: self._st.groups.running)    # group -> its Running
    idle = property(lambda self: self._st.groups.idle)          # waiting groups, in queue order
    stopped = property(lambda self: self._st.groups.stopped)
    stimulus_log = property(lambda self: self._loop.stimulus_log)
    waiting_for = property(lambda self: self._loop.waiting_for)

    def validate_state(self) -> None:
        """Raise AssertionError where an invariant does not hold (checks.py)."""
        self._checks.validate_state()

    def story(self, last: int | None = None) -> str:
        """The newest events handled, each with the instructions it gave (checks.py)."""
        return self._checks.story() if last is None else self._checks.story(last)

    def outcomes_due(self, batch: list[tuple[int, Result]]) -> list[dict]:
        """The records these results will write, without acting on them (results.py)."""
        return self._recorder.outcomes_due(batch)

    @property
    def done(self) -> bool:
        st, d = self._st, self._dispatcher
        return (not st.groups.running and not st.ahead.trials and not st.can_dispatch()
                and not d.refit_due() and not st.lingers())

    @property
    def busy(self) -> bool:
        """Whether any group runs a trial or holds one sent ahead."""
        return bool(self._st.groups.running or self._st.ahead.trials)

    @property
    def waits_for_other_jobs(self) -> bool:
        """Nothing to run here now, but the job may not end yet (State.lingers)."""
        return self._st.shared is not None and not self.done

    @property
    def poll_s(self) -> float | None:
        """How often a job of a shared study reads the others (None: not shared)."""
        return None if self._st.shared is None else self._st.shared.poll_s

    def sleep_s(self, delay: float) -> float:
        """How long the loop may sleep now, at most `delay` (parallel/forecast.py: finely
        where a result that waits for a dispatch is due)."""
        return self._st.forecast.sleep_s(self._st.clock(), self.waits_for_dispatch, delay)

    def last_report(self, number: int) -> float | None:
        """The latest per-epoch value trial `number` reported, as the user reads it."""
        last = self.history.get(number, {})
        return self.sign * last[max(last)] if last else None

    def waits_for_dispatch(self, group: int, trial_id: int) -> bool:
        """Whether the group runs this trial and, when it ends, waits for rank 0 (nothing
        was sent ahead to it)."""
        run = self._st.groups.running.get(group)
        return run is not None and run.trial_id == trial_id and group not in self._st.ahead.trials

    def settled_on_resume(self, existing) -> ins.TrialsSettled:
        """What a job that died mid-way left in the artifact store, to tidy at the start."""
        return ins.TrialsSettled(tuple(t for t in existing if t.status.is_finished()),
                                 keep=self._st.teacher.needed())

    # ---- results: the Recorder's steps among the other parts' ---------------------------
    def _on_results(self, e: ev.Results) -> None:
        """Results that arrived together: written in one transaction, and their groups'
        next trials created in one (results.py: the order)."""
        b, rec = Batch(), self._recorder
        self._loop.then((self._sharing.read_others,),
                       *((rec.settle, b, g, r) for g, r in e.batch), (self._after_settle, b))

    def _after_settle(self, b: Batch) -> None:
        rec, d = self._recorder, self._dispatcher
        tail = [(self._say_searcher_failures,), (d.refit_if_due,), (self._stop_idle,)]
        if not b.done:
            self._loop.then(*tail[1:])
            return
        order = rec.order(b)
        if order == ONE_COMMIT:
            self._loop.then((self._write_with_next, b), *tail)
        elif order == FIRST:               # the groups' next trials leave before the write
            self._loop.then((self._fill_before_write, b), (rec.write_results, b),
                           (rec.account, b.done), (rec.emit_settled, b.done), *tail)
        else:                              # told once written; what pbt keeps follows the tell
            self._loop.then((rec.write_results, b), (rec.account, b.done),
                           (self._free_and_teach, b), *tail)

    def _fill_before_write(self, b: Batch) -> None:
        """The groups' next trials are made and sent while their results wait to be
        written; an outage past its limit here still leaves the results kept (written
        quietly on the way out, or in the recovery file)."""
        rec = self._recorder
        rec.free(b)
        rec.hold(b)
        self._loop.then((self._teach_and_fill, b.done), Step(rec.release, (b,), ALWAYS),
                       Step(rec.write_quietly, (b,), ON_FAILURE))

    def _free_and_teach(self, b: Batch) -> None:
        self._recorder.free(b)
        self._teach_and_fill(b.done, settle=b.done)

    def _teach_and_fill(self, trials: list[FrozenTrial], settle=()) -> None:
        """Tell the searcher and give idle groups work: work that is ready first, else the
        tells first (the next ask must know these results). `settle`: written results
        whose artifacts are tended once told."""
        st = self._st
        ready = self.background or st.ahead.prefetched is not None or st.reruns
        told = [(self._teach_all, trials, settle)]
        if ready:
            self._loop.then((self._dispatcher.fill_idle,), *told)
        else:
            self._loop.then(*told, (self._dispatcher.fill_idle,))

    def _teach_all(self, trials, settle=()) -> None:
        for trial in trials:
            self._st.teacher.teach(trial)
        if settle:
            self._loop.emit(self._recorder.settled(settle))

    def _write_with_next(self, b: Batch) -> None:
        """No group waits, so nothing has to leave before the write: the searcher is told
        first, and one commit records the results, the starts of the trials their groups
        now run and the trials sent ahead next (half the commits of two writes). The queue
        is read first, with the results held: a kill during an outage there lost them."""
        rec = self._recorder
        for trial in b.done:
            self._st.teacher.teach(trial)
        rec.hold(b)
        plan = Round()
        self._loop.then((self._dispatcher.plan_ahead, plan), Step(rec.release, (b,), ALWAYS),
                       (self._write_and_create, b, plan))

    def _write_and_create(self, b: Batch, plan: Round) -> None:
        st, rec, d = self._st, self._recorder, self._dispatcher
        fresh, groups = plan.fresh, plan.groups

        def undo():
            for params, _ in fresh:
                st.searcher.forget(params)

        def written(done: ev.WrittenAndCreated):
            if done.records is None:   # the outage wrapper found the results already written
                undo()                 # by a try that lost its answer: no ids for these
            else:
                d.began(groups, done.records, fresh, ahead=True)
            self._loop.emit(rec.settled(b.done))
            rec.account(b.done)
        self._loop.awaits(ins.WriteResultsAndCreate(
            tuple(b.outcomes), st.study_id, tuple(d.requests(fresh, groups, ahead=True)),
            started=tuple(b.begun), **st.capped()), written, undo)

    # ---- what ends the study ------------------------------------------------------------
    def _stop_idle(self) -> None:
        """Idle groups are stopped only at the study's end, once no trial runs: a rank
        that leaves earlier waits in MPI_Finalize for the ranks still training, and its
        exit's bound (MPIOPT_EXIT_GRACE) is for an exit, not for the longest trial left
        (a study's last long trial ended every such job, the idle rank killed by it)."""
        st = self._st
        if st.groups.running or st.ahead.trials or st.can_dispatch() or st.lingers():
            return
        self._on_stop_all()

    def _say_searcher_failures(self) -> None:
        self._loop.emit(*self._st.teacher.failures_to_say())

    # ---- events -------------------------------------------------------------------
    def _on_start(self, e: ev.Start) -> None:
        """Dispatch to every idle group at once; stop the groups the budget leaves idle."""
        self._loop.then((self._sharing.read_others, True), (self._dispatcher.fill_idle,),
                       (self._say_searcher_failures,), (self._stop_idle,))

    def _on_tick(self, e: ev.Tick) -> None:
        """While waiting: notices the time limit; idle groups take suggestions the
        background searcher made meanwhile; a shared study's other jobs are read. With
        every group busy and none wanting a trial sent ahead (the loop's usual tick, as
        often as it polls), there is nothing to fill."""
        if self.shared is None and not self.groups.any_idle and not self._dispatcher.ahead_wanted():
            self._say_searcher_failures()
            self._stop_idle()
            return
        self._loop.then((self._sharing.read_others,), (self._dispatcher.fill_idle, True),
                       (self._say_searcher_failures,), (self._stop_idle,))

    def _on_stop(self, e: ev.Stop) -> None:
        self._st.limits.stop(e.reason, e.message)

    def _on_overdue(self, e: ev.Overdue) -> None:
        """Why the job must end now (`must_end`), or None: the time limit's hard edge with
        trials still running, or a trial that did not stop at its timeout (its group is
        given up; the trial is recorded FAILED, so it is not run again on resume)."""
        st = self._st
        self.must_end = None
        if st.groups.running and st.limits.past_hard_edge():
            st.limits.stop("interrupted", "time limit + grace reached: running trials are "
                                          "recorded INTERRUPTED and run again on resume")
            self.must_end = self.message
            return
        if st.trial_timeout is None:
            return
        now = st.clock()
        for group, run in list(st.groups.running.items()):
            if now - run.started >= st.trial_timeout + self.stuck_grace:
                self._give_up_on(group, run)
                return

    def _give_up_on(self, group: int, run: Running) -> None:
        from mpiopt.durations import format_duration

        st = self._st
        limit = format_duration(st.trial_timeout)
        error = (f"timed out after {limit}; it did not stop within {format_duration(self.stuck_grace)}, "
                 f"so the job ended (group {group}, host {st.hosts[group]})")
        nxt = st.ahead.trials.pop(group, None)     # sent ahead to the stuck leader: never begun
        steps = []
        if nxt is not None:
            st.searcher.forget(nxt.params)
            steps.append((self._loop.awaits, ins.WriteResults(
                ({"trial_id": nxt.trial_id, "status": TrialStatus.INTERRUPTED,
                  "error": "not started: its group was stuck in the trial before"},), quiet=True)))
        self.given_up.add(group)
        st.limits.stop("error", f"trial {run.number} {error}")     # first: nothing new starts
        result = Result(run.trial_id, TrialStatus.FAILED, error=error,
                        duration=st.clock() - run.started)
        self._loop.then(*steps, (self._on_results, ev.Results(((group, result),))),
                       (setattr, self, "must_end", self.message))

    def _on_lose(self, e: ev.Lose) -> None:
        """These groups' ranks went silent (dead): their running trials stay RUNNING when
        the rest is interrupted, so the resume counts each a lost attempt."""
        running = self._st.groups.running
        self.lost_ids.update(running[g].trial_id for g in e.groups
                             if g in running and not running[g].refit)

    def _on_blame(self, e: ev.Blame) -> None:
        """The coordinator failed on what these trials sent (a report, a result): like a
        trial that kills its process, each stays RUNNING when the rest is interrupted,
        and the run's end counts it a lost attempt (mpiopt.run.study_run), so that after
        search.max_attempts it is FAILED instead of ending every resume the same way."""
        self.blamed.update(e.trial_ids)
        self.lost_ids.update(e.trial_ids)

    def _on_interrupt(self, e: ev.Interrupt) -> None:
        """SIGINT/SIGTERM: running trials become INTERRUPTED; they run again on resume."""
        self._st.limits.stop("interrupted", "interrupted: running trials are marked INTERRUPTED")
        self._loop.awaits(ins.InterruptRunning(self._st.study_id, frozenset(self.lost_ids)),
                         lambda done: self._interrupted())

    def _interrupted(self) -> None:
        st = self._st
        for run in [*st.groups.let_go(), *st.ahead.trials.values()]:
            if not run.refit:
                st.teacher.forget(run.number, run.params)
        st.ahead.trials.clear()
        status = ins.SetStudyStatus(st.study_id, StudyStatus.INTERRUPTED)
        self._loop.then((self._loop.awaits, status), (self._stop_idle,))

    def prefetch_due(self) -> bool:
        """Whether a Prefetch would ask a suggestion now: every group busy, none waiting
        for a re-run, a suggestion not yet asked, budget left (ahead.py)."""
        st, a = self._st, self._st.ahead
        if self.background or a.prefetched is not None or st.reruns or st.groups.any_idle:
            return False
        if not a.searcher_allows or not st.groups.running or not st.limits.left(st.started()):
            return False
        return st.limits.stop_reason is None and self._dispatcher.space_left()

    def _on_prefetch(self, e: ev.Prefetch) -> None:
        """Ask ahead while groups are busy, so a finishing group need not wait for a fit."""
        if self.prefetch_due():
            self._loop.awaits(ins.Ask(self._st.next_number), self._st.ahead.prefetched_now)

    def _on_finish(self, e: ev.Finish) -> None:
        """Close the study record once done; its status is `final_status`."""
        st = self._st
        dropped = st.ahead.drop_prefetched()
        if dropped is not None:
            st.searcher.forget(dropped)
        self._loop.emit(ins.CloseSearcher())
        if st.limits.stop_reason is None:
            # a budget smaller than search.max_initial_failures, all of it failed: the same
            # ending as the early stop
            message = st.outcomes.all_failed()
            if message:
                st.limits.stop("failures", message)
        status = {"interrupted": StudyStatus.INTERRUPTED, "error": StudyStatus.INTERRUPTED,
                  "failures": StudyStatus.FAILED}.get(st.limits.stop_reason, StudyStatus.COMPLETE)
        self._loop.awaits(ins.SetStudyStatus(st.study_id, status),
                         lambda done: setattr(self, "final_status", status))

    def _on_stop_all(self, e=None) -> None:
        """STOP for every group not yet stopped (the end of the study)."""
        self._loop.emit(*(ins.StopGroup(g) for g in self._st.groups.stop_idle()))

    def _on_withdraw_ahead(self, e: ev.WithdrawAhead) -> None:
        self._loop.emit(*self._st.ahead.withdraw(self._st.limits.stop_reason))

    def _on_wind_down(self, e: ev.WindDown) -> None:
        """The job ends: busy groups' trials are cancelled (ahead.py), idle groups stopped."""
        self._loop.emit(*self._st.ahead.at_wind_down(self._st.groups.running))
        self._on_stop_all()
