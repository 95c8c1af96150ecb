"""Several objectives and constraints: what the spec declares, and what a trial's metrics mean.

A study has one objective (`objective.metric` + `direction`) or several
(`objective.metrics: {val_accuracy: maximize, n_params: minimize}`), and may carry
constraints (`objective.constraints: ["n_params <= 200000"]`). The first objective is the
primary one: it is the trial's `value`, pruning watches it, `trials --sort value` orders by
it. Searchers see every objective as lower-is-better (maximized ones negated) and an
infeasible trial's violation: the sum over broken constraints of how far the metric is
past its bound, relative to the bound (|bound| below 1 counts as 1), so that constraints
in different units add up.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from mpiopt.trial import Direction

DIRECTIONS = tuple(d.value for d in Direction)
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str
    bound: float

    def violation(self, metrics: dict) -> float:
        """0 when met; how far past the bound otherwise (relative, see the module doc).
        A metric the trial did not report counts as broken by 1."""
        value = metrics.get(self.metric)
        if value is None or not math.isfinite(float(value)):
            return 1.0
        over = float(value) - self.bound if self.op in ("<=", "<") else self.bound - float(value)
        met = over < 0 or (over == 0 and self.op in ("<=", ">="))
        return 0.0 if met else (max(over, 0.0) / max(abs(self.bound), 1.0) or 1e-12)

    def text(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


def parse_constraint(text: Any, fail: Callable[[str], None]) -> Constraint:
    match = _CONSTRAINT.match(text) if isinstance(text, str) else None
    if not match:
        fail(f"expected 'metric <= number' (or <, >=, >), got {text!r}")
    name, op, bound = match.groups()
    try:
        value = float(bound)
    except ValueError:
        fail(f"expected a number after '{op}', got {bound!r}")
    if not math.isfinite(value):
        fail(f"the bound must be finite, got {bound!r}")
    return Constraint(name, op, value)


def violation(constraints, metrics: dict) -> float:
    return float(sum(c.violation(metrics) for c in constraints))


def signed(objectives, metrics: dict) -> tuple[float, ...] | None:
    """The objectives as a lower-is-better vector, or None when one is missing or not finite."""
    out = []
    for name, direction in objectives:
        value = metrics.get(name)
        if value is None or not math.isfinite(float(value)):
            return None
        out.append(Direction.parse(direction).sign * float(value))
    return tuple(out)


class FrontTracker:
    """The coordinator's view of a study with several objectives or constraints: what to
    tell the searcher for a trial, and the Pareto front and hypervolume so far.

    The front holds feasible complete trials that no other one dominates; the hypervolume
    is measured up to objective.reference when given, else up to the worst value seen in
    each objective (so it only grows)."""

    def __init__(self, objective):
        self.objectives = tuple(objective.objectives)
        self.constraints = tuple(objective.constraints)
        self.primary = objective.metric
        ref = dict(objective.reference)
        self.reference = (tuple(Direction.parse(d).sign * ref[n] for n, d in self.objectives)
                          if ref else None)
        self.front: list[tuple[Any, tuple]] = []     # (trial, signed values)
        self.worst: list[float] | None = None

    def outcome(self, trial):
        """pareto.Objectives for the searcher, or None (a value is missing: learn nothing)."""
        from mpiopt.search.pareto import Objectives

        metrics = self.metrics_of(trial)
        values = signed(self.objectives, metrics)
        return None if values is None else Objectives(values, violation(self.constraints, metrics))

    def metrics_of(self, trial) -> dict:
        metrics = dict(trial.metrics or {})
        if trial.value is not None:
            metrics.setdefault(self.primary, trial.value)
        return metrics

    def feasible(self, trial) -> bool:
        return violation(self.constraints, self.metrics_of(trial)) <= 0

    def add(self, trial) -> bool:
        """A complete trial; True when it joined the front."""
        from mpiopt.search.pareto import dominates

        out = self.outcome(trial)
        if out is None:
            return False
        self.worst = list(out) if self.worst is None else [max(a, b) for a, b in zip(self.worst, out)]
        if out.violation > 0:
            return False
        if any(dominates(v, out) or tuple(v) == tuple(out) for _, v in self.front):
            return False
        self.front = [(t, v) for t, v in self.front if not dominates(out, v)] + [(trial, tuple(out))]
        return True

    def hypervolume(self) -> float:
        from mpiopt.search.pareto import hypervolume

        ref = self.reference or self.worst
        if not self.front or ref is None:
            return 0.0
        return hypervolume([v for _, v in self.front], ref)

    @property
    def best(self):
        """With one objective (and constraints): the best feasible trial."""
        return min(self.front, key=lambda tv: tv[1])[0] if self.front else None


def from_stored(obj: dict):
    """The objectives of a stored study from the objective section of its resolved spec
    (mpiopt.reporting.front.stored_objectives reads it), for the query commands; None
    when it has one objective and no constraint."""
    from types import SimpleNamespace

    metrics = tuple((obj.get("metrics") or {}).items())
    try:
        constraints = tuple(parse_constraint(c, _raise) for c in obj.get("constraints") or [])
    except ValueError:
        constraints = ()
    if len(metrics) < 2 and not constraints:
        return None
    first = metrics[0] if metrics else (obj.get("metric", "value"), obj.get("direction", "minimize"))
    return SimpleNamespace(metrics=metrics if len(metrics) > 1 else (), metric=first[0],
                           direction=first[1], objectives=metrics or (first,),
                           constraints=constraints,
                           reference=tuple((obj.get("reference") or {}).items()), vector=True)


def _raise(message: str):
    raise ValueError(message)
