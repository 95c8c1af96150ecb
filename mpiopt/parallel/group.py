"""A group: its leader takes trials from the coordinator, its members train alongside.

The leader forwards each trial to its members point to point (members sleep between
probes, never spin), every rank runs the objective on the group communicator, and the
leader sends the one result back. Per-epoch values go to the coordinator as REPORTs; its
DECISION says go on, prune, or cancel (the job is ending).

A failure outside user code (a bug, a message that cannot be sent) is sent to the
coordinator as FATAL, which ends the whole job; this rank then waits a bounded time for
the coordinator's STOP, so it never waits on a coordinator that is gone.
"""
from __future__ import annotations

import socket
import time
from dataclasses import replace

from mpiopt.errors import TrialCancelled, TrialTimeout, answer_from_word, answer_word
from mpiopt.durations import format_duration
from mpiopt.parallel.protocol import Fatal, Report, Result, Tag, Trial, Verdict
from mpiopt.parallel.together import GroupBroken, finish_together
from mpiopt.trial import TrialStatus
from mpiopt.backoff import Backoff
from mpiopt.parallel.waiting import probe, wait_message

from mpiopt.knobs import FATAL_WAIT_S, STAY_S
REPLY_DUE_S = 0.05


def run_group(world, comm, objective, before_bye=None, keeper=None) -> int:
    """Serve trials until STOP. Returns the exit status of this rank (0, or 1 after FATAL).
    `before_bye()` runs as the rank leaves (its heartbeat stops: no beat after BYE);
    `keeper` (a leader's mpiopt.kept.KeptResults) keeps each result before it
    leaves, so a job killed before rank 0 wrote it does not lose it."""
    try:
        _serve(world, comm, objective, keeper)
        status = 0
    except Exception as exc:
        status = _fatal(world, comm, exc)
    finally:
        objective.close()
    if before_bye:
        before_bye()
    world.send(None, dest=0, tag=Tag.BYE)
    return status


def _serve(world, comm, objective, keeper=None) -> None:
    leader = comm.Get_rank() == 0
    cancelled: set[int] = set()      # trial ids the coordinator called back (CANCEL)
    together = objective.uses_group and comm.Get_size() > 1
    work = comm.Dup() if together else comm     # the objective's collectives (together.py)
    hears = together and objective.reports_in_group
    while True:
        trial = (_next_trial(world, comm, objective, cancelled, keeper) if leader
                 else wait_message(comm, 0, Tag.TRIAL, _reply_due())[0])
        if trial is None:
            if together:
                work.Free()
            return
        if not leader:
            if objective.uses_group:
                answers = LeaderAnswers(comm, trial) if hears else None
                result = objective.evaluate(_deadline_at_reports(trial) if hears else trial,
                                            work, answers)
                if together:
                    finish_together(world, comm, trial, result)
                if answers:
                    answers.drain()
            continue
        reporter = Reporter(world, trial, cancelled, members=comm if hears else None)
        result = objective.evaluate(_deadline_at_reports(trial) if hears else trial, work,
                                    reporter, should_cancel=reporter.cancelled)
        if hears:
            reporter.tell_members(END)
        if together:
            result = finish_together(world, comm, trial, result)
        if result.status.value == "PRUNED" and result.value is None:
            result = replace(result, value=reporter.last)
        if keeper is not None:
            keeper.keep(result)
        world.send(result, dest=0, tag=Tag.RESULT)


def _next_trial(world, comm, objective, cancelled: set[int], keeper=None) -> Trial | None:
    """The next trial to run, or None at STOP (the kept results go where it says that
    every result reached the database). A trial the coordinator sent ahead and then
    called back is answered INTERRUPTED without running (each trial gets one RESULT)."""
    while True:
        msg, status = wait_message(world, source=0, backoff=_reply_due())
        if status.Get_tag() == Tag.CANCEL:
            cancelled.update(_ids(msg))
            continue
        if status.Get_tag() != Tag.TRIAL:
            break
        _take_cancels(world, cancelled)
        if msg.trial_id not in cancelled:
            break
        world.send(Result(msg.trial_id, TrialStatus.INTERRUPTED,
                          error="not started: called back by the coordinator"),
                   dest=0, tag=Tag.RESULT)
    trial = msg if status.Get_tag() == Tag.TRIAL else None
    if trial is None and msg is True and keeper is not None:
        keeper.discard()
    if trial is None or objective.uses_group:
        for member in range(1, comm.Get_size()):
            comm.send(trial, dest=member, tag=Tag.TRIAL)
    return trial


class Reporter:
    """report(epoch, value, fold=0) -> True to go on, False to prune, or a TrialStopped to raise
    on every rank of the group (a cancel from the coordinator, or the trial's deadline).
    With `members` (the group's communicator) each answer also goes to the other ranks,
    whose own report() returns it (LeaderAnswers)."""

    def __init__(self, world, trial: Trial, cancelled: set[int] | None = None, members=None):
        self.world, self.trial = world, trial
        self.called_back = cancelled if cancelled is not None else set()
        self.last: float | None = None
        self.deadline = None if not trial.timeout else time.monotonic() + trial.timeout
        self._cancel = False
        self.members = members

    def __call__(self, epoch: int, value: float, fold: int = 0):
        answer = self._answer(epoch, value, fold)
        if self.members is not None:
            self.tell_members(answer)
        return answer

    def tell_members(self, answer) -> None:
        """Send this report's answer (or END, the trial is over) to every other rank."""
        word = END if answer is END else answer_word(answer)
        for member in range(1, self.members.Get_size()):
            self.members.send((self.trial.trial_id, word), dest=member, tag=Tag.DECISION)

    def _answer(self, epoch: int, value: float, fold: int):
        self.last = float(value)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return TrialTimeout(f"timed out after {format_duration(self.trial.timeout)}")
        self.world.send(Report(self.trial.trial_id, int(epoch), self.last, int(fold)), dest=0,
                        tag=Tag.REPORT)
        decision, _ = wait_message(self.world, source=0, tag=Tag.DECISION, backoff=_reply_due())
        if decision.verdict is Verdict.CANCEL or self.cancelled():
            return TrialCancelled("cancelled: the job is ending")
        return decision.verdict is not Verdict.PRUNE

    def cancelled(self) -> bool:
        """Whether the coordinator sent CANCEL for this trial (never blocks)."""
        if not self._cancel:
            _take_cancels(self.world, self.called_back)
            self._cancel = self.trial.trial_id in self.called_back
        return self._cancel


END = "end"     # the leader's last word on a trial to its members' report()


class LeaderAnswers:
    """A member's report(epoch, value) for a function taking `comm` and `report`: it
    returns the leader's answer to the leader's next report of the trial, so that every
    rank prunes, times out or is cancelled at the same step: were only the leader to hear
    it, the others would wait for it in their next collective. Waits without spinning;
    the leader's END (its part is over) answers True to any report left."""

    def __init__(self, comm, trial: Trial):
        self.comm, self.trial_id = comm, trial.trial_id
        self.ended = False

    def __call__(self, epoch: int, value: float):
        word = self._next()
        return True if word is END else answer_from_word(word)

    def _next(self):
        if self.ended:
            return END
        while True:
            (trial_id, word), _ = wait_message(self.comm, 0, Tag.DECISION, _reply_due())
            if trial_id == self.trial_id:
                if word == END:
                    self.ended = True
                    return END
                return word

    def drain(self) -> None:
        """Read the leader's answers this rank did not ask for, up to its END (sent before
        the leader's part ended, so it comes), so none is taken for the next trial's."""
        while self._next() is not END:
            pass


def _deadline_at_reports(trial: Trial) -> Trial:
    """The trial as a group that hears the leader's answers runs it: without the
    objective's own SIGALRM at the deadline, which the leader's Reporter applies at a
    report instead. A signal raises on each rank at its own moment (one rank in a sleep,
    another inside a collective that then waits for ever for it); an answer at a report
    stops every rank at the same step. A function that does not report within the
    coordinator's grace ends the job, as any trial that ignores its deadline."""
    return replace(trial, timeout=None)


def _take_cancels(world, cancelled: set[int]) -> None:
    """Every CANCEL already waiting, into `cancelled` (never blocks)."""
    while probe(world, 0, Tag.CANCEL) is not None:
        cancelled.update(_ids(world.recv(source=0, tag=Tag.CANCEL)))


def _ids(payload) -> tuple:
    """A CANCEL names one trial id or several (the running one and the one sent ahead)."""
    return tuple(payload) if isinstance(payload, (tuple, list)) else (payload,)


def _reply_due() -> Backoff:
    """The wait of a rank whose answer is due at once (its next trial after a result, a
    report's decision): polled finely for REPLY_DUE_S, then as any wait (mpiopt.backoff)."""
    return Backoff(eager_s=REPLY_DUE_S)


def _fatal(world, comm, exc: BaseException) -> int:
    """Tell the coordinator (and, from a leader, the members), then wait a bounded time
    for the coordinator's STOP so the job ends in order."""
    rank = world.Get_rank()
    cause = f"{type(exc).__name__}: {exc}".splitlines()[0]
    stuck = isinstance(exc, GroupBroken)
    try:
        world.send(Fatal(rank, socket.gethostname(), cause, group_stuck=stuck), dest=0, tag=Tag.FATAL)
        if stuck:
            return _stay()
        if comm.Get_rank() == 0:
            for member in range(1, comm.Get_size()):
                comm.send(None, dest=member, tag=Tag.TRIAL)
    except Exception:
        pass
    end = time.monotonic() + FATAL_WAIT_S
    backoff = Backoff()
    while time.monotonic() < end:
        if probe(world, 0, Tag.STOP) is not None:
            world.recv(source=0, tag=Tag.STOP)
            break
        backoff.sleep()
    return 1


def _stay() -> int:
    """A rank whose group is left in a collective stays until the coordinator's MPI_Abort
    ends the job (at most STAY_S): a rank of a stuck group that exits makes MPICH's
    launcher kill every rank at once, before rank 0 can say why or record the ending."""
    time.sleep(STAY_S)
    return 1
