"""A per-epoch value a running trial reports: stored, then judged by the pruner against
the other trials at the same step, and answered CONTINUE, PRUNE or CANCEL (the study was
interrupted). training.refit's run is never judged: it has no trial row.

A part the Scheduler holds (machine.py) over the shared State (state.py); its own state
is the pruner and how many folds a trial has (whether a prune's reason names them).
"""
from __future__ import annotations

from mpiopt.parallel.scheduler import events as ev
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.parallel.scheduler.outcomes import is_number
from mpiopt.parallel.scheduler.state import Running
from mpiopt.trial import Decision, Report, Verdict


class Judge:
    def __init__(self, state, loop, pruner=None, folds: int = 1):
        self.st, self.loop = state, loop
        self.pruner, self.folds = pruner, folds

    def reported(self, e: ev.Reported) -> None:
        """The value is stored first (AddIntermediate), then judged."""
        group, report = e.group, e.report
        run = self.st.groups.running.get(group)
        if run is None or run.trial_id != report.trial_id:
            return
        if run.refit:
            self.loop.emit(ins.Answer(group, Decision(report.trial_id, self._verdict(False))))
            return
        self.loop.awaits(ins.AddIntermediate(run.trial_id, report.epoch, report.value,
                                             run.number, report.fold),
                         lambda done: self._judged(group, run, report))

    def _judged(self, group: int, run: Running, report: Report) -> None:
        """The value is stored: the pruner judges it against the others at its step."""
        outcomes = self.st.outcomes
        value = outcomes.sign * report.value
        prune = False
        if self.pruner is not None and is_number(value):
            judgement = self.pruner.judge(run.number, report.step, value, outcomes.history)
            prune = judgement.prune
            if prune:
                run.pruned = judgement.text(outcomes.sign, self.folds)
        outcomes.history.setdefault(run.number, {})[report.step] = value
        self.loop.emit(ins.Answer(group, Decision(report.trial_id, self._verdict(prune))))

    def _verdict(self, prune: bool) -> Verdict:
        """CANCEL once the study is interrupted, else what the pruner said."""
        if self.st.limits.stop_reason == "interrupted":
            return Verdict.CANCEL
        return Verdict.PRUNE if prune else Verdict.CONTINUE
