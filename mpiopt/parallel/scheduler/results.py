"""What a batch of results does, in the order that makes a crash harmless: a result is
written before the searcher is told, before the progress line and before the budget
counts it, so a crash in between leaves the trial RUNNING, to run again on resume.

A finished group gets its next trial before the result it brought is written
(`send_first`; not where trials run in the ranks' own processes, which one trial can
kill: parallel/coordinator.py): its wait is then one write, not two. Meanwhile the
results are held (instructions.Hold), so an outage then still keeps them. A failure, or a
value that reaches the target, is written first, since it may stop the study. Where
every group of the batch already runs the trial sent ahead to it, one commit writes the
results, the starts and the next trials sent ahead.

A part of the Scheduler (machine.py): its steps run as stepping.py runs them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mpiopt.parallel.scheduler import events as ev
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.dispatch import Round, Running
from mpiopt.parallel.scheduler.groups import GroupState
from mpiopt.parallel.scheduler.stepping import ALWAYS, ON_FAILURE, Step
from mpiopt.trial import FrozenTrial, Result, TrialStatus


@dataclass
class Batch:
    """A batch of results on its way: the finished trials, their records, and the trials
    sent ahead that their groups now run."""
    done: list = field(default_factory=list)
    outcomes: list = field(default_factory=list)
    begun: list = field(default_factory=list)
    first: bool = False


class Recording:
    def _on_results(self, e: ev.Results) -> None:
        """Results that arrived together: written in one transaction, and their groups'
        next trials created in one (see the module docstring for the order)."""
        b = Batch()
        self._then((self._read_others,), *((self._settle, b, g, r) for g, r in e.batch),
                   (self._after_settle, b))

    def _settle(self, b: Batch, group: int, result: Result) -> None:
        """The result's trial leaves `running` (its group's next one, sent ahead, starts).
        Cancels, refits and words on settled trials end here."""
        if group not in self.running or self.running[group].trial_id != result.trial_id:
            return      # a second word on a trial already settled (parallel/together.py)
        self._emit(*self.teacher.unread_warning(result.unread))
        run = self.groups.end(group)
        status = TrialStatus(result.status)
        if self.untried is not None and not run.refit:
            self.untried.settle(run.params)
        self._promote(group, b.begun if status is not TrialStatus.INTERRUPTED else None)
        if run.refit:
            self.refit.finished()
            self.groups.free(group)
            self._emit(ins.RefitEnded(status, result.error))
            return
        if status is TrialStatus.INTERRUPTED:      # cancelled: stays unfinished, runs again
            self._cancelled(group, run, result)
            return
        self.forecast.ended(self.clock() - run.started)
        record = _record(run, result)
        b.done.append(FrozenTrial(
            id=run.trial_id, study_id=self.study_id, number=run.number, status=status,
            params=run.params, value=result.value, group=group, duration=result.duration,
            error=record["error"], metrics=dict(result.metrics), spans=list(result.spans)))
        b.outcomes.append(record)

    def _cancelled(self, group: int, run: Running, result: Result) -> None:
        self.teacher.forget(run.number, run.params)
        self.groups.free(group)
        steps = []
        if run.trial_id in self.ahead.withdrawn:     # never begun: on record as such
            steps.append((self._write, ins.WriteResults(
                ({"trial_id": run.trial_id, "status": TrialStatus.INTERRUPTED,
                  "error": "not started: the study stopped taking new trials"},), quiet=True)))
        if result.halt:      # the job cannot go on (its artifact store failed)
            steps.append((self._halt, run, result.error or "stopped"))
        self._then(*steps)

    def _halt(self, run: Running, error: str) -> None:
        """A trial stopped by a failure that is not its own (mpiopt.artifacts: no space
        left): it is recorded INTERRUPTED, not as a lost attempt, and runs again on
        resume from its last checkpoint; no new trial starts, so the job ends in order."""
        self.limits.stop("error", error.splitlines()[0])
        self._write(ins.WriteResults(({"trial_id": run.trial_id, "status": TrialStatus.INTERRUPTED,
                                       "error": error},)))

    def _after_settle(self, b: Batch) -> None:
        tail = [(self._say_searcher_failures,), (self._refit_if_due,), (self._stop_idle,)]
        if not b.done:
            self._then(*tail[1:])
            return
        b.first = self.send_first and not any(self.outcomes.may_stop_the_study(t) for t in b.done)
        if b.first and self._all_busy(b):
            self._then((self._write_with_next, b), *tail)
            return
        steps = []
        if b.first:                    # the groups' next trials leave before the write
            steps.append((self._fill_before_write, b))
        steps += [(self._write_results, b), (self._account, b.done)]
        if b.first:
            steps.append((self._emit_settled, b.done))
        else:                          # told once written; what pbt keeps follows the tell
            steps.append((self._free_and_teach, b))
        self._then(*steps, *tail)

    def _fill_before_write(self, b: Batch) -> None:
        """The groups' next trials are made and sent while their results wait to be
        written; an outage past its limit here still leaves the results kept (written
        quietly on the way out, or in the recovery file)."""
        for t in b.done:
            self.groups.free(t.group)
        self._hold(b)
        self._then((self._teach_and_fill, b.done), Step(self._release, (b,), ALWAYS),
                   Step(self._write, (ins.WriteResults(tuple(b.outcomes), quiet=True),), ON_FAILURE))

    def _hold(self, b: Batch) -> None:
        """The results are held unwritten (instructions.Hold) and counted as started."""
        self.finishing += len(b.done)
        self._emit(ins.Hold(tuple(b.outcomes)))

    def _release(self, b: Batch) -> None:
        self._emit(ins.Release(tuple(b.outcomes)))
        self.finishing -= len(b.done)

    def _write_results(self, b: Batch) -> None:
        def undo():
            if not b.first:      # so the wind-down stops them (the results are in the
                for t in b.done:    # recovery file)
                    self.groups.free(t.group)
        self._await(ins.WriteResults(tuple(b.outcomes), started=tuple(b.begun)), undo=undo)

    def _free_and_teach(self, b: Batch) -> None:
        for t in b.done:
            self.groups.free(t.group)
        self._teach_and_fill(b.done, settle=b.done)

    def _emit_settled(self, done) -> None:
        self._emit(self._settled(done))

    def _settled(self, done) -> ins.TrialsSettled:
        """Written and told: their checkpoints go (but those pbt may start a round from)
        and their models are ranked."""
        return ins.TrialsSettled(tuple(done), keep=self.teacher.needed())

    def _account(self, done) -> None:
        """Written: the budget counts the results, the progress line shows each."""
        for trial in done:
            self.outcomes.count(trial.status)
            stop = self.outcomes.account(trial, earlier_running=self._earlier_running)
            if stop is not None:
                self.limits.stop(*stop)
            self._emit(ins.TrialDone(trial))

    def _earlier_running(self, number: int) -> bool:
        """Whether a trial numbered before `number` still runs (asked of first failures)."""
        return any(r.number < number for r in self.running.values() if not r.refit)

    def _all_busy(self, b: Batch) -> bool:
        """Whether every group of the batch already runs the trial sent ahead to it (results
        and new trials can then be written in one commit)."""
        return self.ahead.enabled and not any(self.groups.state[t.group] is GroupState.FINISHING
                                              for t in b.done)

    def _write_with_next(self, b: Batch) -> None:
        """No group waits, so nothing has to leave before the write: the searcher is told
        first, and one commit records the results, the starts of the trials their groups
        now run and the trials sent ahead next (half the commits of two writes). The queue
        is read first, with the results held: a kill during an outage there lost them."""
        for trial in b.done:
            self.teacher.teach(trial)
        self._hold(b)
        plan = Round()
        self._then((self._plan_ahead, plan), Step(self._release, (b,), ALWAYS),
                   (self._write_and_create, b, plan))

    def _write_and_create(self, b: Batch, plan: Round) -> None:
        fresh, groups = plan.fresh, plan.groups

        def undo():
            for params, _ in fresh:
                self.searcher.forget(params)

        def written(done: ev.WrittenAndCreated):
            if done.records is None:   # the outage wrapper found the results already written
                undo()                 # by a try that lost its answer: no ids for these
            else:
                self._began(groups, done.records, fresh, ahead=True)
            self._emit(self._settled(b.done))
            self._account(b.done)
        self._await(ins.WriteResultsAndCreate(
            tuple(b.outcomes), self.study_id, tuple(self._requests(fresh, groups, ahead=True)),
            started=tuple(b.begun), **self._capped()), written, undo)

    def _promote(self, group: int, begun: list | None) -> None:
        """The group's trial sent ahead becomes its running one (the leader starts it as
        soon as it sends its result); without one the group stays FINISHING (groups.py)
        until its result is written. begun: where to note its start (None: the result was
        a cancel, so it will not start either)."""
        nxt = self.ahead.promote(group)
        if nxt is None:
            return
        nxt.started = self.clock()
        self.groups.promote(group, nxt)
        self.forecast.began(group, nxt.trial_id, nxt.started)
        if begun is not None and nxt.trial_id not in self.ahead.withdrawn:
            begun.append(nxt.trial_id)

    def _teach_and_fill(self, trials: list[FrozenTrial], settle=()) -> None:
        """Tell the searcher and give idle groups work: work that is ready first, else the
        tells first (the next ask must know these results). `settle`: written results
        whose artifacts are tended once told."""
        ready = self.background or self.ahead.prefetched is not None or self.reruns
        told = [(self._teach_all, trials, settle)]
        if ready:
            self._then((self._fill_idle,), *told)
        else:
            self._then(*told, (self._fill_idle,))

    def _teach_all(self, trials, settle=()) -> None:
        for trial in trials:
            self.teacher.teach(trial)
        if settle:
            self._emit(self._settled(settle))

    def outcomes_due(self, batch: list[tuple[int, Result]]) -> list[dict]:
        """The records the results will write (not cancels, refits nor words on settled
        trials), without acting on them: kept during an outage."""
        due = []
        for group, result in batch:
            runs = {r.trial_id: r for r in (self.running.get(group), self.ahead.trials.get(group))
                    if r is not None and not r.refit}
            run = runs.get(result.trial_id)
            if run is not None and TrialStatus(result.status) is not TrialStatus.INTERRUPTED:
                due.append(_record(run, result))
        return due


def _record(run: Running, result: Result) -> dict:
    """The result's record; a trial the pruner stopped keeps why (where, and against what)
    as its error text, as an INTERRUPTED one keeps what stopped it."""
    record = result.record()
    if TrialStatus(result.status) is TrialStatus.PRUNED and run.pruned and not record["error"]:
        record["error"] = run.pruned
    return record
