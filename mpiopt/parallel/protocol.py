"""The message protocol between the coordinator and the groups, declared once.

Start-up (every rank, see mpiopt/run/launch.py):
  rank 0 -> all      : SETUP   {"spec": ..., "url": ...} or {"error": ...}
  all -> rank 0      : READY   None, or the one-line error of that rank's own set-up
  rank 0 -> all      : SETUP   {"go": True, "keep": {"places": [...], "db_key": ...}} or
                               {"error": ...} (keep: where leaders keep their results,
                               mpiopt.kept)
Running:
  coordinator -> leader : TRIAL (a Trial; a busy leader may already hold its next one,
                          sent ahead), CANCEL (a tuple of trial ids that must not go on:
                          the running one and the one sent ahead, which the leader then
                          answers INTERRUPTED without running it), STOP (leave the loop;
                          True where every result reached the database: the leader's
                          kept results can go)
  leader -> its members : TRIAL or STOP, point to point (members wait without spinning)
  leader -> coordinator : REPORT (a fold's value after an epoch: fold, epoch within the
                          fold, value) -> coordinator answers DECISION
  leader -> coordinator : RESULT (the trial's one record, kept on file first:
                          mpiopt.kept; from a member instead when its part
                          failed and the leader is stuck in a collective, together.py)
  any rank -> rank 0    : FATAL (a failure outside user code: rank, host, cause; or its
                          group left in a collective: group_stuck); the coordinator then
                          ends the whole job
  any rank -> rank 0    : BYE, as it leaves its loop after STOP: the coordinator knows
                          every rank is done, or after a bounded wait calls MPI_Abort
Beside it all, on a duplicate of the world communicator (parallel/liveness.py):
  every rank -> rank 0, rank 0 -> leaders : ALIVE, every few seconds from a thread

Messages are small frozen dataclasses sent pickled; none carries a DEAP or Keras object.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from mpiopt.trial import Decision, Report, Result, Trial, Verdict  # noqa: F401  (on the wire)


class Tag(enum.IntEnum):
    TRIAL = 11
    STOP = 12
    REPORT = 13
    DECISION = 14
    RESULT = 15
    SETUP = 16
    READY = 17
    CANCEL = 18
    FATAL = 19
    BYE = 20
    ALIVE = 21       # heartbeats, on a communicator of their own (parallel/liveness.py)


@dataclass(frozen=True)
class Fatal:
    """A rank failed outside user code; the job ends."""

    rank: int
    host: str
    cause: str
    group_stuck: bool = False   # its group's ranks are left in a collective (together.py):
                                # none of them can answer, so none is waited for

    def line(self) -> str:
        return f"rank {self.rank} on {self.host} failed: {self.cause}"
