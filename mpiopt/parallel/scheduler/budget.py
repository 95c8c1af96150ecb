"""How much may still start, and why the study stops: the trial budget, the time limit
(soft: no new trials; hard, time_limit + grace: running trials are interrupted) and the
first reason given for stopping."""
from __future__ import annotations

# Ending the job now outranks a soft stop (time limit, target, failures, exhausted).
HARD_STOPS = ("interrupted", "error")


class Budget:
    def __init__(self, trials: int, clock, time_limit: float | None = None,
                 grace: float = 300.0):
        self.trials, self.clock = trials, clock
        self.deadline = None if time_limit is None else clock() + time_limit
        self.hard_deadline = None if time_limit is None else self.deadline + grace
        self.stop_reason: str | None = None
        self.message: str | None = None

    def left(self, started: int) -> int:
        """How many trials the study has left when `started` count against its budget:
        search.trials less every trial that started (finished, running, sent ahead, being
        written, promised this round; of a shared study, every job's, as the database
        counts them). The rule of the whole scheduler; the database keeps the same one
        under its lock for a shared study's creates (storage: create_trials' limit)."""
        return max(0, self.trials - started)

    def allows(self, started: int) -> bool:
        """Whether a trial may start when `started` count against the budget (see left);
        notices the time limit."""
        if self.stop_reason is None and self.deadline is not None and self.clock() >= self.deadline:
            self.stop("time_limit", "time limit reached: running trials finish, no new ones start")
        return self.stop_reason is None and self.left(started) > 0

    def past_hard_edge(self) -> bool:
        return self.hard_deadline is not None and self.clock() >= self.hard_deadline

    def stop(self, reason: str, message: str) -> None:
        """The first reason is kept, except that a hard stop outranks a soft one."""
        if self.stop_reason is None or (reason in HARD_STOPS and self.stop_reason not in HARD_STOPS):
            self.stop_reason, self.message = reason, message

    @property
    def ending_now(self) -> bool:
        return self.stop_reason in HARD_STOPS
