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

DIRECTIONS = ("minimize", "maximize")
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
        out.append(-float(value) if direction == "maximize" else float(value))
    return tuple(out)
