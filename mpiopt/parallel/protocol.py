"""The message protocol between the coordinator and the group leaders, declared once.

coordinator -> leader : TRIAL (a Trial) or STOP (None)
leader -> its members : the same message, point to point (members wait without spinning)
leader -> coordinator : REPORT (per-epoch value) -> coordinator answers DECISION
leader -> coordinator : RESULT (the trial's outcome)

Messages are small frozen dataclasses sent pickled; none carries a DEAP or Keras object.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Tag(enum.IntEnum):
    TRIAL = 11
    STOP = 12
    REPORT = 13
    DECISION = 14
    RESULT = 15
    SETUP = 16  # start-up: the resolved spec, or the error that ends the job


@dataclass(frozen=True)
class Trial:
    trial_id: int
    number: int
    params: dict[str, Any]
    seed: int
    attempt: int = 0


@dataclass(frozen=True)
class Report:
    trial_id: int
    epoch: int
    value: float


@dataclass(frozen=True)
class Decision:
    trial_id: int
    prune: bool


@dataclass(frozen=True)
class Result:
    """A trial's outcome. status is COMPLETE, FAILED or PRUNED (TrialStatus values)."""

    trial_id: int
    status: str
    value: float | None = None
    value_std: float | None = None
    fold_values: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    duration: float = 0.0
    error: str | None = None  # names the failing rank and host (mpiopt.objective.describe_error)
