"""What happens to the scheduler, declared once: the closed set of events its one entry
point, `Scheduler.handle(*events)`, takes.

Two kinds. What the shells see happen (the start, results, a per-epoch report, a clock
tick, a stop, lost groups) and, `Completion`s, what became of an instruction that goes to
the database or the searcher: the executor (parallel/scheduler/executor.py) carries out an
instruction and hands its outcome back as the next event, at once and in the same thread,
so the scheduler never waits inside a handler: the state change that needs the outcome
is made where its completion is handled. A failed instruction is `WriteFailed`: the
scheduler undoes what it did expecting it and the executor then raises the error on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpiopt.trial import Report, Result


# ---- what the shells see happen ---------------------------------------------------------
@dataclass(frozen=True)
class Start:
    """The run begins: every idle group gets work."""


@dataclass(frozen=True)
class Results:
    """Results that arrived together, as (group, Result) pairs: written in one commit."""
    batch: tuple[tuple[int, Result], ...]


@dataclass(frozen=True)
class Reported:
    """A per-epoch value from the group's running trial (answered CONTINUE, PRUNE or CANCEL)."""
    group: int
    report: Report


@dataclass(frozen=True)
class Tick:
    """Time passed with nothing received: the time limit, suggestions made meanwhile, a
    shared study's other jobs."""


@dataclass(frozen=True)
class Prefetch:
    """All groups busy and nothing received: ask the next suggestion now (see
    `Scheduler.prefetch_due`)."""


@dataclass(frozen=True)
class Overdue:
    """Check the time limit's hard edge and trials past their timeout; why the job must
    end is then `Scheduler.must_end`."""


@dataclass(frozen=True)
class WithdrawAhead:
    """Call back trials sent ahead once the study takes no new ones."""


@dataclass(frozen=True)
class Stop:
    """No new trial starts; the first reason given is the one reported."""
    reason: str
    message: str


@dataclass(frozen=True)
class Lose:
    """These groups' ranks went silent."""
    groups: tuple[int, ...]


@dataclass(frozen=True)
class Blame:
    """The coordinator failed on what these trials sent."""
    trial_ids: tuple[int, ...]


@dataclass(frozen=True)
class Interrupt:
    """SIGINT/SIGTERM or the job's end in disorder: running trials become INTERRUPTED."""


@dataclass(frozen=True)
class StopAll:
    """STOP every group not yet stopped (the end of the study)."""


@dataclass(frozen=True)
class WindDown:
    """The job ends: busy groups are cancelled (with the trial sent ahead to each) and
    idle ones stopped."""


@dataclass(frozen=True)
class Finish:
    """Close the study record; its status is then `Scheduler.final_status`."""


# ---- what became of an instruction (the executor's answer) ------------------------------
@dataclass(frozen=True)
class Completion:
    """The outcome of `instruction`, the one the scheduler waits for."""
    instruction: Any


@dataclass(frozen=True)
class TrialsCreated(Completion):
    """CreateTrials: records aligned with the requests (None: refused, a shared study)."""
    records: tuple = ()


@dataclass(frozen=True)
class QueueRead(Completion):
    """ReadQueue: the queued trials, oldest first."""
    trials: tuple = ()


@dataclass(frozen=True)
class QueueTaken(Completion):
    """TakeQueued: records aligned with the requests (None: another job took it)."""
    records: tuple = ()


@dataclass(frozen=True)
class ChangesRead(Completion):
    """ReadChanges: what every job of a shared study did (Storage.changes)."""
    changes: Any = None


@dataclass(frozen=True)
class TrialRestarted(Completion):
    """RestartTrial: the trial's new attempt."""
    record: Any = None


@dataclass(frozen=True)
class ClaimRefused(Completion):
    """RestartTrial of a shared study: another job restarted the trial first."""


@dataclass(frozen=True)
class Written(Completion):
    """A write with nothing to answer (results, a per-epoch value, a status) committed."""


@dataclass(frozen=True)
class WrittenAndCreated(Completion):
    """WriteResultsAndCreate: the created records, or None where the outage wrapper found
    the results written by a try that lost its answer (nothing was created)."""
    records: tuple | None = None


@dataclass(frozen=True)
class Suggested(Completion):
    """Ask: the searcher's suggestion (None: a background searcher has none ready) and the
    seconds it took."""
    params: dict | None = None
    took: float | None = None


@dataclass(frozen=True)
class WriteFailed(Completion):
    """The instruction (or one given before it in the same answer) raised `error`."""
    error: BaseException | None = None


STIMULI = (Start, Results, Reported, Tick, Prefetch, Overdue, WithdrawAhead, Stop, Lose, Blame,
           Interrupt, StopAll, WindDown, Finish)
COMPLETIONS = (TrialsCreated, QueueRead, QueueTaken, ChangesRead, TrialRestarted, ClaimRefused,
               Written, WrittenAndCreated, Suggested, WriteFailed)
