"""What the scheduler's parts share, in one plain object: the study's groups, results,
limits, trials sent ahead, re-runs waiting, numbering, the searcher and its space.

The Scheduler (machine.py) builds one `State` and hands it to each part (dispatch.py,
results.py, shared.py, checks.py) at construction; a part keeps only its own state
beside it. So what one part changes the others read here, never through each other.
The few questions every part asks of this state alike (how many trials count against
the budget, whether one more may start) are answered here, once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from mpiopt.parallel.forecast import Forecast
from mpiopt.parallel.scheduler.ahead import AskAhead
from mpiopt.parallel.scheduler.budget import Budget
from mpiopt.parallel.scheduler.groups import Groups
from mpiopt.parallel.scheduler.outcomes import Outcomes, usable
from mpiopt.parallel.scheduler.refit import Refit
from mpiopt.parallel.scheduler.teaching import Teacher
from mpiopt.trial import TrialStatus


@dataclass
class Running:
    """A trial a group runs (or holds, sent ahead)."""
    trial_id: int
    number: int
    params: dict[str, Any]
    group: int
    started: float
    refit: bool = False          # training.refit's run: no trial row, no searcher
    pruned: str | None = None    # the pruner's reason, once it said stop


@dataclass(eq=False)
class State:
    study_id: int
    searcher: Any
    seed: int
    clock: Callable[[], float]
    limits: Budget
    outcomes: Outcomes
    groups: Groups
    ahead: AskAhead
    teacher: Teacher
    refit: Refit
    hosts: list
    ranks: list
    trial_timeout: float | None = None
    checkpoints: bool = False        # a re-run keeps its per-epoch values (its checkpoint)
    untried: Any = None              # a finite space's sets (mpiopt.search.untried), or None
    shared: Any = None               # a Shared (shared.py): other jobs run the study too
    forecast: Forecast = field(default_factory=Forecast)   # when the loop should poll finely
    next_number: int = 0
    reruns: list = field(default_factory=list)     # unfinished trials to run again
    finishing: int = 0       # results being written while their group already runs
    queued_taken: int = 0    # queued parameter sets started by this run

    def __post_init__(self):
        self.numbered = self.searcher.numbered     # pbt: told by trial number, with lineage
        self.n_groups = len(self.groups.state)

    def started(self, extra: int = 0) -> int:
        """The trials that count against the budget (budget.py's rule), with `extra`
        already promised this round; of a shared study, as the database counts them
        (results being written were counted when their trials were made)."""
        if self.shared is not None:
            return self.shared.started(extra)
        return (self.outcomes.finished + len(self.groups.running) + len(self.ahead.trials)
                + self.finishing + extra)

    def can_dispatch(self, extra: int = 0) -> bool:
        """Whether one more trial may start (`extra`: ones already promised this round)."""
        return self.limits.allows(self.started(extra))

    def may_rerun(self) -> bool:
        """Re-runs of a shared study take no budget (their rows are counted already);
        only a stop ends them."""
        if self.shared is None:
            return self.can_dispatch()
        return self.limits.stop_reason is None

    def lingers(self) -> bool:
        """A shared study's idle groups wait (not stopped): trials of other jobs still
        run, or wait to be claimed, and the study has not been stopped (shared.py)."""
        s = self.shared
        return (s is not None and self.limits.stop_reason is None
                and bool(s.others or self.reruns))

    def capped(self) -> dict:
        """What a create names so the database keeps a shared study's budget (shared.py)."""
        if self.shared is None:
            return {}
        return {"limit": self.limits.trials, "distinct": True}

    def capped_queue(self) -> dict:
        return {} if self.shared is None else {"limit": self.limits.trials}

    def restore(self, existing, warm=()) -> None:
        """Replay finished trials into the searcher (after `warm`: another study's results,
        search.warm_start); queue unfinished ones to run again. RETRIED trials are only
        on record; PENDING ones wait in the database's queue."""
        sign, outcomes = self.outcomes.sign, self.outcomes
        finished = [(params, sign * value) for params, value in warm]
        for t in sorted(existing, key=lambda t: t.number):
            self.next_number = max(self.next_number, t.number + 1)
            if self.untried is not None and t.status is not TrialStatus.RETRIED:
                self.untried.note(t.params)
            if t.status in (TrialStatus.RETRIED, TrialStatus.PENDING):
                continue
            if t.status.is_finished():
                finished.append((t.params, outcomes.restored(t)))
            else:
                self.reruns.append(t)
        if self.numbered:
            self.searcher.replay_numbered(
                [(t.number, t.params, outcomes.told_value(t) if usable(t) else None,
                  {"member": t.member, "round": t.round, "parent": t.parent},
                  t.status.is_finished())
                 for t in sorted(existing, key=lambda t: t.number)
                 if t.status not in (TrialStatus.RETRIED, TrialStatus.PENDING)],
                self.next_number)
        elif finished or self.reruns:
            self.searcher.replay(finished, [t.params for t in self.reruns], self.next_number)
        outcomes.after_restore()
