"""Carry out the scheduler's instructions: the one way a shell runs an event.

`drive(steps, do)` runs one of the scheduler's event handlers (a generator of
instructions) to its end, handing each instruction to `do` and its answer back; an
exception from `do` is thrown back into the handler at that instruction, so the
scheduler puts its state right, and then goes on up. `Executor` is the `do` both shells
share: database writes through the storage, lines through the progress printer, the
artifact store's bookkeeping; messages to groups go to the shell's own `send`.
"""
from __future__ import annotations

from contextlib import nullcontext

from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.trial import TrialStatus


def drive(steps, do):
    """Run `steps` to its end; returns what it returns."""
    answer, error = None, None
    while True:
        try:
            instruction = steps.throw(error) if error is not None else steps.send(answer)
        except StopIteration as stop:
            return stop.value
        answer, error = None, None
        try:
            answer = do(instruction)
        except BaseException as exc:      # (KeyboardInterrupt too: the handler cleans up)
            error = exc


class Executor:
    """`send(instruction)`: the shell's way to a group (Dispatch, Answer, StopGroup,
    Withdraw). `holding(outcomes)`: a context manager of the outage wrapper (storage/
    resilient.py) that writes results ahead to the recovery file should a call made
    meanwhile meet an outage; `view`: what the progress line reads (the scheduler);
    `others_live()`: whether other jobs run this (shared) study, which then goes on: its
    status is theirs to record."""

    def __init__(self, storage, send, progress=None, artifacts=None, view=None,
                 holding=None, others_live=None):
        self.storage, self.send = storage, send
        self.others_live = others_live
        self.progress, self.artifacts, self.view = progress, artifacts, view
        self.holding = holding
        self._holds: list = []
        self._table = {
            **{kind: self._message for kind in ins.MESSAGES},
            ins.CreateTrials: self._create, ins.ReadQueue: self._read_queue,
            ins.TakeQueued: self._take_queued, ins.ReadChanges: self._changes,
            ins.RestartTrial: self._restart, ins.WriteResults: self._write,
            ins.WriteResultsAndCreate: self._write_and_create,
            ins.AddIntermediate: self._intermediate,
            ins.InterruptRunning: lambda i: storage.interrupt_running(i.study_id, keep=set(i.keep)),
            ins.SetStudyStatus: self._set_status,
            ins.Say: self._say, ins.TrialDone: self._trial_done,
            ins.TrialsSettled: self._settled, ins.RefitEnded: self._refit_ended,
            ins.Hold: self._hold, ins.Release: self._release,
        }

    def run(self, steps):
        return drive(steps, self.do)

    def collect(self, steps) -> list:
        """Run `steps`, keeping its messages for the groups instead of sending them: for a
        driver that delivers them itself (a simulation, a benchmark)."""
        sent = []
        drive(steps, lambda i: sent.append(i) if isinstance(i, ins.MESSAGES) else self.do(i))
        return sent

    def do(self, instruction):
        return self._table[type(instruction)](instruction)

    def _message(self, i):
        """To the group; the status line learns what each group runs."""
        self.send(i)
        if isinstance(i, ins.Dispatch) and self.progress is not None and not i.trial.refit:
            self.progress.trial_started(i.trial.number, i.group)

    def _intermediate(self, i: ins.AddIntermediate):
        self.storage.add_intermediate(i.trial_id, i.epoch, i.value, fold=i.fold)
        if self.progress is not None:
            self.progress.epoch(i.number, i.epoch, i.value, fold=i.fold)

    def _hold(self, i: ins.Hold):
        held = self.holding(list(i.outcomes)) if self.holding else nullcontext()
        held.__enter__()
        self._holds.append(held)

    def _release(self, i: ins.Release):
        self._holds.pop().__exit__(None, None, None)

    def _create(self, i: ins.CreateTrials):
        return self.storage.create_trials(i.study_id, list(i.requests), **_capped(i))

    def _take_queued(self, i: ins.TakeQueued):
        capped = {} if i.limit is None else {"limit": i.limit}
        return self.storage.take_pending(list(i.requests), **capped)

    def _changes(self, i: ins.ReadChanges):
        return self.storage.changes(i.study_id, i.since)

    def _set_status(self, i: ins.SetStudyStatus):
        if self.others_live is None or not self.others_live():
            self.storage.set_study_status(i.study_id, i.status)

    def _read_queue(self, i: ins.ReadQueue):
        return self.storage.pending_trials(i.study_id, limit=i.limit)

    def _restart(self, i: ins.RestartTrial):
        keep = {"keep_intermediate": True} if i.keep_intermediate else {}
        return self.storage.restart_trial(i.trial_id, group=i.group, host=i.host, rank=i.rank,
                                          **keep)

    def _write(self, i: ins.WriteResults):
        started = {"started": list(i.started)} if i.started else {}
        try:
            return self.storage.finish_trials(list(i.outcomes), **started)
        except Exception:
            if not i.quiet:
                raise
            return None

    def _write_and_create(self, i: ins.WriteResultsAndCreate):
        written = self.storage.finish_and_create(list(i.outcomes), i.study_id,
                                                 list(i.requests), started=list(i.started),
                                                 **_capped(i))
        return None if written is None else written[1]

    def _say(self, i: ins.Say):
        if self.progress is not None:
            self.progress.say(i.line)

    def _trial_done(self, i: ins.TrialDone):
        if self.progress is not None:
            self.progress.trial_finished(i.trial, self.view, other=i.other)

    def _settled(self, i: ins.TrialsSettled):
        if self.artifacts is not None:
            self.artifacts.finished(list(i.trials), keep=i.keep)

    def _refit_ended(self, i: ins.RefitEnded):
        if i.status is TrialStatus.COMPLETE:
            self.artifacts.refit_done()
            line = f"refit: model kept in {self.artifacts.refit_path()}"
        else:
            first = i.error.splitlines()[0] if i.error else ""
            line = f"refit: {i.status.value.lower()}: {first}"
        self._say(ins.Say(line))


def _capped(i) -> dict:
    """A shared study's create names its budget (and a finite space's distinct sets);
    an exclusive job's create is the plain call."""
    out = {} if i.limit is None else {"limit": i.limit}
    return {**out, "distinct": True} if i.distinct else out
