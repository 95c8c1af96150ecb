"""What the finished trials add up to: counts, the best trial (or the Pareto front),
per-epoch histories for pruning, and the stops they call for: the target reached, the
first trials all failed, or after a success too many in a row (what broke the objective
would fail the rest of the budget the same way). Pure bookkeeping: no searcher, no storage."""
from __future__ import annotations

import math

from mpiopt.objective.metrics import FrontTracker
from mpiopt.trial import Direction, FrozenTrial, Step, TrialStatus


class Outcomes:
    def __init__(self, direction: str, target: float | None, max_initial_failures: int,
                 objective=None, max_failures_in_a_row: int = 10):
        self.sign = Direction.parse(direction).sign
        self.target, self.max_initial_failures = target, max_initial_failures
        self.max_failures_in_a_row = max_failures_in_a_row
        self.failures_in_a_row = 0       # in the order results were written
        # several objectives or constraints: tells vectors, keeps the Pareto front
        self.front = (FrontTracker(objective) if objective is not None and objective.vector
                      else None)
        self.history: dict[int, dict[Step, float]] = {}  # number -> step -> signed value
        self.counts = {s: 0 for s in TrialStatus}
        self.finished = 0            # trials that count toward the budget
        self.best: FrozenTrial | None = None
        self.any_success = False
        self.initial_failures = 0
        self.last_error: str | None = None

    def count(self, status: TrialStatus) -> None:
        self.counts[status] += 1
        self.finished += status.counts()

    def restored(self, trial: FrozenTrial):
        """A finished trial on record (a resume): counted; returns what the searcher is
        told of it (None: forgotten)."""
        self.count(trial.status)
        self.curve(trial)
        if not usable(trial):
            return None
        self.consider_best(trial)
        return self.told_value(trial)

    def curve(self, trial: FrozenTrial) -> None:
        """The pruner's view of the trial's curve: the values it has on record (a new
        attempt of a trial starts afresh)."""
        if trial.intermediate:
            self.history[trial.number] = {s: self.sign * v for s, v in trial.intermediate.items()
                                          if v is not None}
        else:
            self.history.pop(trial.number, None)

    def after_restore(self) -> None:
        self.any_success = self.counts[TrialStatus.COMPLETE] + self.counts[TrialStatus.PRUNED] > 0
        if not self.any_success:
            self.initial_failures = self.counts[TrialStatus.FAILED]

    def told_value(self, trial: FrozenTrial):
        """The signed value, or with several objectives or constraints the vector of
        signed values and the violation (None when an objective is missing)."""
        if self.front is None:
            return self.sign * trial.value
        return self.front.outcome(trial)

    def consider_best(self, trial: FrozenTrial) -> None:
        if trial.status is not TrialStatus.COMPLETE:
            return
        if self.front is not None:
            self.front.add(trial)
            if len(self.front.objectives) == 1:
                self.best = self.front.best
            return
        if self.best is None or self.sign * trial.value < self.sign * self.best.value:
            self.best = trial

    def may_stop_the_study(self, trial: FrozenTrial) -> bool:
        """Whether this result may stop the study (a failure, the target reached): then it
        is written before the group gets its next trial."""
        if trial.status is TrialStatus.FAILED or not is_number(trial.value):
            return True
        return self.target is not None and self.sign * trial.value <= self.sign * self.target

    def account(self, trial: FrozenTrial, earlier_running) -> tuple[str, str] | None:
        """Count a written result; returns the stop it calls for, as (reason, message).
        `earlier_running(number)`: whether a trial numbered before it still runs."""
        if trial.status is not TrialStatus.FAILED:
            self.any_success = True
            self.failures_in_a_row = 0
        if trial.status is TrialStatus.COMPLETE:
            self.consider_best(trial)
            if (self.target is not None and self.sign * trial.value <= self.sign * self.target
                    and (self.front is None or self.front.feasible(trial))):
                return "target", f"target {self.target} reached by trial {trial.number}"
        elif trial.status is TrialStatus.FAILED:
            self.last_error = (trial.error or "").splitlines()[0] if trial.error else None
            self.failures_in_a_row += 1
            if self.any_success and self.failures_in_a_row >= self.max_failures_in_a_row:
                return "failures", (f"stopping: the last {self.failures_in_a_row} trials all "
                                    f"failed (search.max_failures_in_a_row); last error: "
                                    f"{self.last_error}")
            if not self.any_success:
                self.initial_failures += 1
                # a trial started earlier and still running may yet succeed (settings that
                # fail in seconds, as an out-of-memory batch size, report before those that
                # train): wait for it; a broken objective fails them all soon enough
                if (self.initial_failures >= self.max_initial_failures
                        and not earlier_running(trial.number)):
                    return "failures", (f"stopping: the first {self.initial_failures} trials "
                                        f"all failed (search.max_initial_failures); last error: "
                                        f"{self.last_error}")
        return None

    def all_failed(self) -> str | None:
        """At the end: every trial failed, in a budget smaller than the early stop's bound
        (the same ending as the early stop), else None."""
        if self.any_success or not self.initial_failures:
            return None
        last = f"; last error: {self.last_error}" if self.last_error else ""
        return f"all {self.initial_failures} trials failed{last}"


def usable(trial: FrozenTrial) -> bool:
    """A finished trial whose value the searcher is told."""
    return (trial.status.is_finished() and trial.status is not TrialStatus.FAILED
            and is_number(trial.value))


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
