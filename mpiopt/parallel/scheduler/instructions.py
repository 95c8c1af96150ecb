"""What the scheduler asks of its shell, declared once.

The scheduler does no I/O: `Scheduler.handle(*events)` returns these instructions, and a
shell (parallel/coordinator.py under MPI, parallel/local.py in one process) carries them
out in the order given, through the run's executor (parallel/scheduler/executor.py). So
the order of the instructions is the order of the effects: a trial's row is created
before the Dispatch that sends it, and a group's next trial leaves before the write of
the result it brought where the scheduler gives them in that order. A database call and
an ask of the searcher come last in their answer: what became of it is the next event
(parallel/scheduler/events.py), a failure included (WriteFailed).

Messages to groups: Dispatch, Answer, StopGroup, Withdraw, Cancel. Database calls (one storage
call each, one transaction): CreateTrials, ReadQueue, ReadChanges, TakeQueued, RestartTrial,
WriteResults, WriteResultsAndCreate, AddIntermediate, InterruptRunning, SetStudyStatus;
Hold and Release bracket calls made while finished results wait to be written.
The searcher: Ask, CloseSearcher. What the user sees and what is kept on disk: Say,
TrialDone, TrialsSettled, RefitEnded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpiopt.trial import Decision, FrozenTrial, StudyStatus, Trial, TrialStatus


# ---- to the groups ------------------------------------------------------------------
@dataclass(frozen=True)
class Dispatch:
    """Send this trial to the group's leader (a busy leader holds it as its next one)."""
    group: int
    trial: Trial


@dataclass(frozen=True)
class Answer:
    """The answer to a per-epoch report."""
    group: int
    decision: Decision


@dataclass(frozen=True)
class StopGroup:
    group: int


@dataclass(frozen=True)
class Cancel:
    """The job ends: the group's trial must stop, and the one sent ahead not start."""
    group: int
    trial_ids: tuple[int, ...]


@dataclass(frozen=True)
class Withdraw:
    """A trial sent ahead must not start (the study stopped taking new trials)."""
    group: int
    trial_id: int


# ---- to the database (answered with what the storage call returns) --------------------
@dataclass(frozen=True)
class CreateTrials:
    """New RUNNING trials (Storage.create_trials), numbered by the database. With a
    `limit` (a shared study's budget) or `distinct`, answered aligned with the requests:
    None where the database created none (parallel/scheduler/shared.py)."""
    study_id: int
    requests: tuple[dict, ...]
    limit: int | None = None
    distinct: bool = False


@dataclass(frozen=True)
class ReadQueue:
    """Up to `limit` queued parameter sets (PENDING trials), oldest first."""
    study_id: int
    limit: int


@dataclass(frozen=True)
class TakeQueued:
    """Queued trials become RUNNING for these groups (Storage.take_pending); with a
    `limit`, aligned as CreateTrials."""
    requests: tuple[dict, ...]
    limit: int | None = None


@dataclass(frozen=True)
class ReadChanges:
    """What every job of a shared study did since `since` (Storage.changes)."""
    study_id: int
    since: Any = None


@dataclass(frozen=True)
class RestartTrial:
    """An unfinished trial runs again (a resume, or one a lost job left): a new attempt;
    TrialTaken where another job of a shared study restarted it first."""
    trial_id: int
    group: int
    host: str | None
    rank: int | None
    keep_intermediate: bool = False
    contested: bool = False      # a shared study: TrialTaken is a refusal, not a failure


@dataclass(frozen=True)
class WriteResults:
    """Finished trials' records, and the starts of trials sent ahead that now run, in one
    commit. `quiet`: written while another error is on its way up: a failure is dropped
    (the outage wrapper has the records in its recovery file by then)."""
    outcomes: tuple[dict, ...]
    started: tuple[int, ...] = ()
    quiet: bool = False


@dataclass(frozen=True)
class WriteResultsAndCreate:
    """WriteResults and CreateTrials in one commit (no group waits on either). Answered
    with the created records, or None where the outage wrapper found the results written
    by a try that lost its answer (then nothing was created)."""
    outcomes: tuple[dict, ...]
    study_id: int
    requests: tuple[dict, ...]
    started: tuple[int, ...] = ()
    limit: int | None = None
    distinct: bool = False


@dataclass(frozen=True)
class AddIntermediate:
    """A fold's value after an epoch (trial `number`, for the status line)."""
    trial_id: int
    epoch: int
    value: float
    number: int
    fold: int = 0


@dataclass(frozen=True)
class InterruptRunning:
    """Every RUNNING trial of the study becomes INTERRUPTED, but `keep` (their groups died
    under them: the resume counts each a lost attempt)."""
    study_id: int
    keep: frozenset[int] = frozenset()


@dataclass(frozen=True)
class SetStudyStatus:
    study_id: int
    status: StudyStatus


@dataclass(frozen=True)
class Hold:
    """Until the matching Release, these results are finished but not yet written (the
    groups' next trials are made first): a shell whose database write meets an outage
    meanwhile writes them ahead to the recovery file, so a kill then does not lose them."""
    outcomes: tuple[dict, ...]


@dataclass(frozen=True)
class Release:
    outcomes: tuple[dict, ...]


# ---- the searcher ----------------------------------------------------------------------
@dataclass(frozen=True)
class Ask:
    """The searcher's suggestion for trial `number`, answered as events.Suggested. A
    background searcher answers at once, from its stock (None: none ready; `waiting`
    groups without work and `training` ones weigh a random filler instead: mpiopt.search.
    background)."""
    number: int
    waiting: int = 1
    training: int | None = None


@dataclass(frozen=True)
class CloseSearcher:
    """The study is done: a background searcher's thread ends."""


# ---- what the user sees, what is kept on disk --------------------------------------------
@dataclass(frozen=True)
class Say:
    line: str


@dataclass(frozen=True)
class TrialDone:
    """A trial's result is written: its progress line (`other`: another job's, of a
    shared study)."""
    trial: FrozenTrial
    other: bool = False


@dataclass(frozen=True)
class TrialsSettled:
    """Results are written: the artifact store drops their checkpoints and ranks their
    models; `keep`: trial numbers whose checkpoints must stay (pbt), or None."""
    trials: tuple[FrozenTrial, ...]
    keep: Any = None


@dataclass(frozen=True)
class RefitEnded:
    """training.refit's run ended: its model is kept (COMPLETE) and the user told."""
    status: TrialStatus
    error: str | None


MESSAGES = (Dispatch, Answer, StopGroup, Withdraw, Cancel)
