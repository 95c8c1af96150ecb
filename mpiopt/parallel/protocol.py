"""The message protocol between the coordinator and the groups, declared once.

Start-up (every rank, see parallel/launch.py):
  rank 0 -> all      : SETUP   {"spec": ..., "url": ...} or {"error": ...}
  all -> rank 0      : READY   None, or the one-line error of that rank's own set-up
  rank 0 -> all      : SETUP   {"go": True, "keep": {"places": [...], "db_key": ...}} or
                               {"error": ...} (keep: where leaders keep their results,
                               mpiopt.kept_results)
Running:
  coordinator -> leader : TRIAL (a Trial; a busy leader may already hold its next one,
                          sent ahead), CANCEL (a tuple of trial ids that must not go on:
                          the running one and the one sent ahead, which the leader then
                          answers INTERRUPTED without running it), STOP (leave the loop;
                          True where every result reached the database: the leader's
                          kept results can go)
  leader -> its members : TRIAL or STOP, point to point (members wait without spinning)
  leader -> coordinator : REPORT (per-epoch value) -> coordinator answers DECISION
  leader -> coordinator : RESULT (the trial's one record, kept on file first:
                          mpiopt.kept_results; from a member instead when its part
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
from dataclasses import dataclass, field
from typing import Any

from mpiopt.trial import TrialStatus


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
class Trial:
    trial_id: int
    number: int
    params: dict[str, Any]
    seed: int
    attempt: int = 0
    timeout: float | None = None  # search.trial_timeout in seconds
    refit: bool = False           # training.refit: the best params on all the data, no row
    round: int | None = None      # search.algorithm pbt: the round (epochs round*interval on)
    parent: int | None = None     # ... and the trial whose checkpoint it starts from


@dataclass(frozen=True)
class Report:
    trial_id: int
    epoch: int
    value: float


class Verdict(str, enum.Enum):
    """The coordinator's answer to a REPORT."""

    CONTINUE = "continue"
    PRUNE = "prune"
    CANCEL = "cancel"      # the job is ending: stop at once, the trial runs again on resume


@dataclass(frozen=True)
class Decision:
    trial_id: int
    verdict: Verdict = Verdict.CONTINUE

    @property
    def prune(self) -> bool:
        return self.verdict is Verdict.PRUNE


@dataclass(frozen=True)
class Result:
    """A trial's one record, from the objective to the coordinator.

    status is COMPLETE, FAILED, PRUNED, or INTERRUPTED (the trial was cancelled because the
    job is ending). error names the failing rank and host."""

    trial_id: int
    status: TrialStatus
    value: float | None = None
    value_std: float | None = None
    fold_values: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    duration: float = 0.0
    error: str | None = None
    device: str | None = None      # what the leader trained on (mpiopt.device)
    spans: list[dict] = field(default_factory=list)  # fold/epoch spans (mpiopt.training)
    unread: list[str] = field(default_factory=list)  # params build_model never read
    halt: bool = False   # INTERRUPTED by what is not the trial's fault (the artifact store
                         # failed): the study stops in order, the trial runs again on resume

    def record(self) -> dict:
        """Its record for Storage.finish_trial(s) (the coordinator's write, and the line a
        leader keeps until then: mpiopt.kept_results)."""
        return dict(trial_id=self.trial_id, status=TrialStatus(self.status), value=self.value,
                    value_std=self.value_std, fold_values=self.fold_values,
                    metrics=self.metrics, error=self.error, duration=self.duration,
                    device=self.device, spans=self.spans)


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
