"""Which trials are "best", said once for every view: one objective, several, constraints.

A study with one objective and no constraint has one best trial: the COMPLETE one with
the best value. With constraints, the best *feasible* one (a trial that breaks a
constraint is never best, however good its value). With several objectives there is no
single best trial: the best trials are the Pareto front of the feasible complete trials
(none of them is beaten in every objective by another), and the hypervolume measures how
good the front is as a whole. The report's header, `mpiopt status`, `studies`, `best`,
the Python API's best_* and the plots all ask this module, so they never disagree.

The front and the hypervolume are mpiopt.objective.metrics.FrontTracker's, the tracker
the coordinator keeps while a study runs (trials added in number order); nothing here
computes them a second way.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Sequence

from mpiopt.objective.metrics import FrontTracker, from_stored
from mpiopt.trial import FrozenTrial, TrialStatus


def stored_objectives(spec_text: str | None):
    """The objectives and constraints of a study's stored spec (objective.metrics.
    from_stored); None when it has one objective and no constraint, or none to read."""
    from mpiopt.spec import stored

    return from_stored(stored(spec_text).section("objective"))


def objective_of(record) -> SimpleNamespace:
    """The study's objectives and constraints, read from its stored spec; a study with one
    objective and no constraint (or a spec that cannot be read) gets its metric and
    direction as its one objective."""
    stored = stored_objectives(getattr(record, "spec_text", None))
    if stored is not None:
        return stored
    return SimpleNamespace(metric=record.metric, direction=record.direction,
                           objectives=((record.metric, record.direction),), constraints=(),
                           reference=(), metrics=())


class Front:
    """The best trials of a study, by the rule in the module docstring."""

    def __init__(self, objective, trials: Sequence[FrozenTrial]):
        self.objective = objective
        self.names = [n for n, _ in objective.objectives]
        self.directions = [d for _, d in objective.objectives]
        self.constraints = tuple(objective.constraints)
        self._tracker = FrontTracker(objective)
        self.history: list[tuple[int, float]] = []    # (trial number, hypervolume after it)
        self.complete = sorted((t for t in trials if t.status == TrialStatus.COMPLETE),
                               key=lambda t: t.number)
        for t in self.complete:
            self._tracker.add(t)
            if self.multi:
                self.history.append((t.number, self._tracker.hypervolume()))
        # best first: by the signed (lower-is-better) objectives, the first one leading
        self.trials = [t for t, _ in sorted(self._tracker.front, key=lambda tv: (tv[1], tv[0].number))]

    @classmethod
    def of(cls, record, trials: Sequence[FrozenTrial]) -> "Front":
        return cls(objective_of(record), trials)

    @property
    def multi(self) -> bool:
        """Several objectives: no single best trial."""
        return len(self.names) > 1

    @property
    def constrained(self) -> bool:
        return bool(self.constraints)

    @property
    def hypervolume(self) -> float:
        return self._tracker.hypervolume()

    @property
    def best(self) -> FrozenTrial | None:
        """The one best trial (one objective); None with several objectives or none feasible."""
        return None if self.multi or not self.trials else self.trials[0]

    def top(self, k: int) -> list[FrozenTrial]:
        """The k best: the first k of the front (several objectives), else the k best
        feasible complete trials."""
        if self.multi:
            return self.trials[:k]
        ranked = [t for t in self.complete if self.feasible(t) and self._tracker.outcome(t) is not None]
        return sorted(ranked, key=lambda t: (tuple(self._tracker.outcome(t)), t.number))[:k]

    def metrics_of(self, trial: FrozenTrial) -> dict:
        return self._tracker.metrics_of(trial)

    def values(self, trial: FrozenTrial) -> list[float | None]:
        """The trial's objective values, in the objectives' order (None where missing)."""
        metrics = self.metrics_of(trial)
        return [metrics.get(n) for n in self.names]

    def feasible(self, trial: FrozenTrial) -> bool | None:
        """True/False for a COMPLETE trial of a constrained study; None when there is
        nothing to say (no constraint, or a trial that did not complete: a pruned trial's
        other metrics are unknown)."""
        if not self.constrained or trial.status != TrialStatus.COMPLETE:
            return None
        return self._tracker.feasible(trial)

    def broken(self, trial: FrozenTrial) -> list[str]:
        """The constraints the trial breaks, as written in the spec."""
        metrics = self.metrics_of(trial)
        return [c.text() for c in self.constraints if c.violation(metrics) > 0]

    def on_front(self, trial: FrozenTrial) -> bool:
        return any(t.number == trial.number for t in self.trials)

    def title(self) -> str:
        """One line: what "best" means here and how many trials it is."""
        what = ", ".join(f"{n} {d}" for n, d in zip(self.names, self.directions))
        if self.multi:
            return (f"Pareto front: {len(self.trials)} of {len(self.complete)} complete trials "
                    f"({what}), hypervolume {self.hypervolume:.6g}")
        return f"best feasible trial ({what}; {self.constraint_text()})"

    def constraint_text(self) -> str:
        return ", ".join(c.text() for c in self.constraints)


def feasibility_word(front: Front | None, trial: FrozenTrial) -> str | None:
    """"yes" / "no" for tables and exports of a constrained study; None otherwise."""
    ok = None if front is None else front.feasible(trial)
    return None if ok is None else ("yes" if ok else "no")
