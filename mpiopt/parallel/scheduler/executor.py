"""Carry out the scheduler's instructions: the one way a shell runs an event.

`Executor.run(*events)` hands the events to the machine (`Scheduler.handle`) and carries
out the instructions it returns, in order, one table row each: database calls through
the storage, asks through the searcher, lines through the progress printer, the artifact
store's bookkeeping; messages to groups go to the shell's own `send`. What a database
call or an ask gave back is handed to the machine as the next event at once
(events.Completion), and the instructions that answers go on the list: so one run carries
out one event's effects whole, in the order the machine gave them. An instruction that
raises is the event WriteFailed: the instructions after it are dropped, the machine
undoes what it did expecting it and gives its cleanups, and once those are carried out
the error goes on up to the shell.

The searcher's own thread (mpiopt.search.background.BackgroundSearcher) is started here,
with the first ask, and closed here: the machine only gives Ask and CloseSearcher.
"""
from __future__ import annotations

import time
from collections import deque
from contextlib import nullcontext

from mpiopt.errors import TrialTaken
from mpiopt.parallel.scheduler import events as ev
from mpiopt.parallel.scheduler import instructions as ins
from mpiopt.search.background import BackgroundSearcher
from mpiopt.trial import TrialStatus


class Executor:
    """`machine`: the Scheduler; `searcher`: the one it was given (asked here);
    `send(instruction)`: the shell's way to a group (Dispatch, Answer, StopGroup,
    Withdraw). `holding(outcomes)`: a context manager of the outage wrapper (storage/
    resilient.py) that writes results ahead to the recovery file should a call made
    meanwhile meet an outage; `view`: what the progress line reads (the machine);
    `shared`: several jobs run this study (`--join`), so its status is written by the
    job's end (storage.end_job, as the last live job), not here: whether another job
    lives and the write must be one transaction, or a job joining between the two is
    left running a study recorded as ended."""

    def __init__(self, storage, send, progress=None, artifacts=None, view=None,
                 holding=None, shared=False, machine=None, searcher=None):
        self.storage, self.send = storage, send
        self.machine, self.searcher = machine, searcher
        self.shared = shared
        self.progress, self.artifacts = progress, artifacts
        self.view = view if view is not None else machine
        self.holding = holding
        self._holds: list = []
        self._searcher_started = False
        self._table = {
            **{kind: self._message for kind in ins.MESSAGES},
            ins.CreateTrials: self._create, ins.ReadQueue: self._read_queue,
            ins.TakeQueued: self._take_queued, ins.ReadChanges: self._changes,
            ins.RestartTrial: self._restart, ins.WriteResults: self._write,
            ins.WriteResultsAndCreate: self._write_and_create,
            ins.AddIntermediate: self._intermediate,
            ins.InterruptRunning: self._interrupt_running,
            ins.SetStudyStatus: self._set_status, ins.Ask: self._ask,
            ins.CloseSearcher: lambda i: self.close_searcher(),
            ins.Say: self._say, ins.TrialDone: self._trial_done,
            ins.TrialsSettled: self._settled, ins.RefitEnded: self._refit_ended,
            ins.Hold: self._hold, ins.Release: self._release,
        }

    def run(self, *events) -> None:
        """Hand `events` to the machine and carry out everything they lead to."""
        self._carry_out(self.machine.handle(*events))

    def collect(self, *events) -> list:
        """As run, keeping the messages for the groups instead of sending them: for a
        driver that delivers them itself (a simulation, a benchmark, a test)."""
        sent: list = []
        self._carry_out(self.machine.handle(*events), keep=sent)
        return sent

    def _carry_out(self, instructions, keep: list | None = None) -> None:
        todo, error = deque(instructions), None
        while todo:
            instruction = todo.popleft()
            if keep is not None and isinstance(instruction, ins.MESSAGES):
                keep.append(instruction)
                continue
            try:
                answer = self.do(instruction)
            except TrialTaken as exc:
                if not getattr(instruction, "contested", False):
                    todo, error = self._failed(instruction, exc), exc
                    continue
                answer = ev.ClaimRefused(instruction)
            except BaseException as exc:      # (KeyboardInterrupt too: the machine cleans up)
                todo, error = self._failed(instruction, exc), exc
                continue
            if answer is not None:
                todo.extend(self.machine.handle(answer))
        if error is not None:
            raise error

    def _failed(self, instruction, exc) -> deque:
        """The machine's cleanups after `instruction` failed (what followed it is dropped)."""
        return deque(self.machine.handle(ev.WriteFailed(instruction, exc)))

    def do(self, instruction):
        """One instruction alone (no machine): for what a shell gives itself."""
        return self._table[type(instruction)](instruction)

    def close_searcher(self) -> None:
        """Stop a background searcher's thread (bounded; see there)."""
        if isinstance(self.searcher, BackgroundSearcher):
            self.searcher.close()

    def _message(self, i):
        """To the group; the status line learns what each group runs."""
        self.send(i)
        if isinstance(i, ins.Dispatch) and self.progress is not None and not i.trial.refit:
            self.progress.trial_started(i.trial.number, i.group)

    def _ask(self, i: ins.Ask) -> ev.Suggested:
        """A background searcher takes from its stock (its thread starts with the first
        ask); any other is asked here, timed."""
        s = self.searcher
        if isinstance(s, BackgroundSearcher):
            if not self._searcher_started:
                s.start(i.number)
                self._searcher_started = True
            return ev.Suggested(i, s.take(i.waiting, training=i.training), s.last_ask_s)
        start = time.perf_counter()
        params = s.ask(i.number)
        return ev.Suggested(i, params, time.perf_counter() - start)

    def _intermediate(self, i: ins.AddIntermediate):
        self.storage.add_intermediate(i.trial_id, i.epoch, i.value, fold=i.fold)
        if self.progress is not None:
            self.progress.epoch(i.number, i.epoch, i.value, fold=i.fold)
        return ev.Written(i)

    def _hold(self, i: ins.Hold):
        held = self.holding(list(i.outcomes)) if self.holding else nullcontext()
        held.__enter__()
        self._holds.append(held)

    def _release(self, i: ins.Release):
        self._holds.pop().__exit__(None, None, None)

    def _create(self, i: ins.CreateTrials):
        return ev.TrialsCreated(i, tuple(self.storage.create_trials(
            i.study_id, list(i.requests), **_capped(i))))

    def _take_queued(self, i: ins.TakeQueued):
        capped = {} if i.limit is None else {"limit": i.limit}
        return ev.QueueTaken(i, tuple(self.storage.take_pending(list(i.requests), **capped)))

    def _changes(self, i: ins.ReadChanges):
        return ev.ChangesRead(i, self.storage.changes(i.study_id, i.since))

    def _interrupt_running(self, i: ins.InterruptRunning):
        self.storage.interrupt_running(i.study_id, keep=set(i.keep))
        return ev.Written(i)

    def _set_status(self, i: ins.SetStudyStatus):
        if not self.shared:
            self.storage.set_study_status(i.study_id, i.status)
        return ev.Written(i)

    def _read_queue(self, i: ins.ReadQueue):
        return ev.QueueRead(i, tuple(self.storage.pending_trials(i.study_id, limit=i.limit)))

    def _restart(self, i: ins.RestartTrial):
        keep = {"keep_intermediate": True} if i.keep_intermediate else {}
        return ev.TrialRestarted(i, self.storage.restart_trial(
            i.trial_id, group=i.group, host=i.host, rank=i.rank, **keep))

    def _write(self, i: ins.WriteResults):
        started = {"started": list(i.started)} if i.started else {}
        try:
            self.storage.finish_trials(list(i.outcomes), **started)
        except Exception:
            if not i.quiet:
                raise
        return ev.Written(i)

    def _write_and_create(self, i: ins.WriteResultsAndCreate):
        written = self.storage.finish_and_create(list(i.outcomes), i.study_id,
                                                 list(i.requests), started=list(i.started),
                                                 **_capped(i))
        return ev.WrittenAndCreated(i, None if written is None else tuple(written[1]))

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
