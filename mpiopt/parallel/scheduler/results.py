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

A part the Scheduler holds (machine.py), over the shared State (state.py): its steps run
as stepping.py's Loop runs them, and the machine places them among the other parts'
(telling the searcher, the next trials).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.groups import GroupState
from mpiopt.parallel.scheduler.state import Running
from mpiopt.trial import FrozenTrial, Result, TrialStatus


@dataclass
class Batch:
    """A batch of results on its way: the finished trials, their records, and the trials
    sent ahead that their groups now run."""
    done: list = field(default_factory=list)
    outcomes: list = field(default_factory=list)
    begun: list = field(default_factory=list)
    first: bool = False


ONE_COMMIT, FIRST, WRITTEN_FIRST = "one commit", "first", "written first"   # Recorder.order


class Recorder:
    """Results as they come (module docstring): each settled (`settle`), held while the
    groups' next trials leave (`hold`, `release`), written (`write_results`), counted
    (`account`). Which of the orders a batch takes (`order`) is its decision; the machine
    sequences its steps with the other parts' (machine.py)."""

    def __init__(self, state, loop, send_first: bool = False):
        self.st, self.loop = state, loop
        self.send_first = send_first

    def settle(self, b: Batch, group: int, result: Result) -> None:
        """The result's trial leaves `running` (its group's next one, sent ahead, starts).
        Cancels, refits and words on settled trials end here."""
        st = self.st
        run = st.groups.running.get(group)
        if run is None or run.trial_id != result.trial_id:
            return      # a second word on a trial already settled (parallel/together.py)
        self.loop.emit(*st.teacher.unread_warning(result.unread))
        run = st.groups.end(group)
        status = TrialStatus(result.status)
        if st.untried is not None and not run.refit:
            st.untried.settle(run.params)
        self._promote(group, b.begun if status is not TrialStatus.INTERRUPTED else None)
        if run.refit:
            st.refit.finished()
            st.groups.free(group)
            self.loop.emit(ins.RefitEnded(status, result.error))
            return
        if status is TrialStatus.INTERRUPTED:      # cancelled: stays unfinished, runs again
            self._cancelled(group, run, result)
            return
        st.forecast.ended(st.clock() - run.started)
        record = _record(run, result)
        b.done.append(FrozenTrial(
            id=run.trial_id, study_id=st.study_id, number=run.number, status=status,
            params=run.params, value=result.value, group=group, duration=result.duration,
            error=record["error"], metrics=dict(result.metrics), spans=list(result.spans)))
        b.outcomes.append(record)

    def _cancelled(self, group: int, run: Running, result: Result) -> None:
        st = self.st
        st.teacher.forget(run.number, run.params)
        st.groups.free(group)
        steps = []
        if run.trial_id in st.ahead.withdrawn:     # never begun: on record as such
            steps.append((self.loop.awaits, ins.WriteResults(
                ({"trial_id": run.trial_id, "status": TrialStatus.INTERRUPTED,
                  "error": "not started: the study stopped taking new trials"},), quiet=True)))
        if result.halt:      # the job cannot go on (its artifact store failed)
            steps.append((self._halt, run, result.error or "stopped"))
        self.loop.then(*steps)

    def _halt(self, run: Running, error: str) -> None:
        """A trial stopped by a failure that is not its own (mpiopt.artifacts: no space
        left): it is recorded INTERRUPTED, not as a lost attempt, and runs again on
        resume from its last checkpoint; no new trial starts, so the job ends in order."""
        self.st.limits.stop("error", error.splitlines()[0])
        self.loop.awaits(ins.WriteResults(({"trial_id": run.trial_id,
                                            "status": TrialStatus.INTERRUPTED, "error": error},)))

    def order(self, b: Batch) -> str:
        """How the settled batch is written: ONE_COMMIT (every group of it already runs
        the trial sent ahead to it: results and the next trials in one commit), FIRST
        (the groups' next trials leave before the write) or WRITTEN_FIRST (a failure, or
        a value that may stop the study, is written before anything else starts)."""
        st = self.st
        b.first = self.send_first and not any(st.outcomes.may_stop_the_study(t) for t in b.done)
        if not b.first:
            return WRITTEN_FIRST
        return ONE_COMMIT if self._all_busy(b) else FIRST

    def _all_busy(self, b: Batch) -> bool:
        """Whether every group of the batch already runs the trial sent ahead to it."""
        st = self.st
        return st.ahead.enabled and not any(st.groups.state[t.group] is GroupState.FINISHING
                                            for t in b.done)

    def free(self, b: Batch) -> None:
        """The batch's groups join the idle ones."""
        for t in b.done:
            self.st.groups.free(t.group)

    def hold(self, b: Batch) -> None:
        """The results are held unwritten (instructions.Hold) and counted as started."""
        self.st.finishing += len(b.done)
        self.loop.emit(ins.Hold(tuple(b.outcomes)))

    def release(self, b: Batch) -> None:
        self.loop.emit(ins.Release(tuple(b.outcomes)))
        self.st.finishing -= len(b.done)

    def write_quietly(self, b: Batch) -> None:
        """On the way out after a failure: the results written without a word (an
        outage keeps them in the recovery file)."""
        self.loop.awaits(ins.WriteResults(tuple(b.outcomes), quiet=True))

    def write_results(self, b: Batch) -> None:
        def undo():
            if not b.first:      # so the wind-down stops them (the results are in the
                self.free(b)     # recovery file)
        self.loop.awaits(ins.WriteResults(tuple(b.outcomes), started=tuple(b.begun)), undo=undo)

    def emit_settled(self, done) -> None:
        self.loop.emit(self.settled(done))

    def settled(self, done) -> ins.TrialsSettled:
        """Written and told: their checkpoints go (but those pbt may start a round from)
        and their models are ranked."""
        return ins.TrialsSettled(tuple(done), keep=self.st.teacher.needed())

    def account(self, done) -> None:
        """Written: the budget counts the results, the progress line shows each."""
        st = self.st
        for trial in done:
            st.outcomes.count(trial.status)
            stop = st.outcomes.account(trial, earlier_running=self._earlier_running)
            if stop is not None:
                st.limits.stop(*stop)
            self.loop.emit(ins.TrialDone(trial))

    def _earlier_running(self, number: int) -> bool:
        """Whether a trial numbered before `number` still runs (asked of first failures)."""
        return any(r.number < number for r in self.st.groups.running.values() if not r.refit)

    def _promote(self, group: int, begun: list | None) -> None:
        """The group's trial sent ahead becomes its running one (the leader starts it as
        soon as it sends its result); without one the group stays FINISHING (groups.py)
        until its result is written. begun: where to note its start (None: the result was
        a cancel, so it will not start either)."""
        st = self.st
        nxt = st.ahead.promote(group)
        if nxt is None:
            return
        nxt.started = st.clock()
        st.groups.promote(group, nxt)
        st.forecast.began(group, nxt.trial_id, nxt.started)
        if begun is not None and nxt.trial_id not in st.ahead.withdrawn:
            begun.append(nxt.trial_id)

    def outcomes_due(self, batch: list[tuple[int, Result]]) -> list[dict]:
        """The records the results will write (not cancels, refits nor words on settled
        trials), without acting on them: kept during an outage."""
        st = self.st
        due = []
        for group, result in batch:
            runs = {r.trial_id: r for r in (st.groups.running.get(group), st.ahead.trials.get(group))
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
