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

from mpiopt.errors import TrialCancelled, TrialTimeout
from mpiopt.objective import format_duration
from mpiopt.parallel.protocol import Fatal, Report, Result, Tag, Trial, Verdict
from mpiopt.trial import TrialStatus
from mpiopt.backoff import Backoff
from mpiopt.parallel.waiting import probe, wait_message

FATAL_WAIT_S = 10.0
REPLY_DUE_S = 0.05


def run_group(world, comm, objective, before_bye=None) -> int:
    """Serve trials until STOP. Returns the exit status of this rank (0, or 1 after FATAL).
    `before_bye()` runs as the rank leaves (its heartbeat stops: no beat after BYE)."""
    try:
        _serve(world, comm, objective)
        status = 0
    except Exception as exc:
        status = _fatal(world, comm, exc)
    finally:
        objective.close()
    if before_bye:
        before_bye()
    world.send(None, dest=0, tag=Tag.BYE)
    return status


def _serve(world, comm, objective) -> None:
    leader = comm.Get_rank() == 0
    cancelled: set[int] = set()      # trial ids the coordinator called back (CANCEL)
    while True:
        trial = (_next_trial(world, comm, objective, cancelled) if leader
                 else wait_message(comm, 0, Tag.TRIAL, _reply_due())[0])
        if trial is None:
            return
        if not leader:
            if objective.uses_group:
                objective.evaluate(trial, comm)
            continue
        reporter = Reporter(world, trial, cancelled)
        result = objective.evaluate(trial, comm, reporter, should_cancel=reporter.cancelled)
        if result.status.value == "PRUNED" and result.value is None:
            from dataclasses import replace

            result = replace(result, value=reporter.last)
        world.send(result, dest=0, tag=Tag.RESULT)


def _next_trial(world, comm, objective, cancelled: set[int]) -> Trial | None:
    """The next trial to run, or None at STOP. A trial the coordinator sent ahead and then
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
    if trial is None or objective.uses_group:
        for member in range(1, comm.Get_size()):
            comm.send(trial, dest=member, tag=Tag.TRIAL)
    return trial


class Reporter:
    """report(epoch, value) -> True to go on, False to prune, or a TrialStopped to raise
    on every rank of the group (a cancel from the coordinator, or the trial's deadline)."""

    def __init__(self, world, trial: Trial, cancelled: set[int] | None = None):
        self.world, self.trial = world, trial
        self.called_back = cancelled if cancelled is not None else set()
        self.last: float | None = None
        self.deadline = None if not trial.timeout else time.monotonic() + trial.timeout
        self._cancel = False

    def __call__(self, epoch: int, value: float):
        self.last = float(value)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return TrialTimeout(f"timed out after {format_duration(self.trial.timeout)}")
        self.world.send(Report(self.trial.trial_id, int(epoch), self.last), dest=0, tag=Tag.REPORT)
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
    try:
        world.send(Fatal(rank, socket.gethostname(), cause), dest=0, tag=Tag.FATAL)
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
