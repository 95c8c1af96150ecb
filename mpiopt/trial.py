"""A trial's life, shared by every layer (no SQL, no MPI here)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class TrialStatus(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAILED = "FAILED"
    INTERRUPTED = "INTERRUPTED"
    # A FAILED trial whose parameter set `search --retry-failed` queued again as a new
    # trial: kept for the record, no longer counted toward the budget or told.
    RETRIED = "RETRIED"

    def is_finished(self) -> bool:
        """Finished trials are kept on resume; the others run again."""
        return self in (TrialStatus.COMPLETE, TrialStatus.PRUNED, TrialStatus.FAILED,
                        TrialStatus.RETRIED)

    def counts(self) -> bool:
        """Whether the trial counts toward the study's budget."""
        return self in (TrialStatus.COMPLETE, TrialStatus.PRUNED, TrialStatus.FAILED)


class StudyStatus(str, enum.Enum):
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    INTERRUPTED = "INTERRUPTED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class FrozenTrial:
    """A trial as read from storage. Records never change after they are returned."""

    id: int
    study_id: int
    number: int
    status: TrialStatus
    params: dict[str, Any]
    value: float | None = None
    value_std: float | None = None
    seed: int | None = None
    attempt: int = 0
    group: int | None = None
    host: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration: float | None = None
    error: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    fold_values: list[float] = field(default_factory=list)
    intermediate: dict[int, float] = field(default_factory=dict)
    rank: int | None = None           # world rank of the group leader it last ran on
    lost_attempts: int = 0            # jobs that died while it ran (mpiopt.study_run)
    device: str | None = None         # what the group leader trained on ("cpu: ...", "gpu: ...")
    suggest_seconds: float | None = None   # the searcher's time to suggest these params
    # {"kind": "fold"|"epoch", "fold": int, "epoch": int|None, "start": s, "end": s}, seconds
    # since the group began the trial (mpiopt.training records them)
    spans: list[dict] = field(default_factory=list)
    # search.algorithm pbt: the population member, its round, and the trial number whose
    # checkpoint this round started from (None in round 0); None for other algorithms
    member: int | None = None
    round: int | None = None
    parent: int | None = None
