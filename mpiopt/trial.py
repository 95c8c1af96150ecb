"""A trial's life, shared by every layer (no SQL, no MPI here): its states, its record as
read from storage, and the messages about it (an assignment, a per-epoch report, the
coordinator's decision, the result) that mpiopt.parallel.protocol sends."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from mpiopt.errors import cut
from mpiopt.storable import storable_text


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


class Direction(str, enum.Enum):
    """Whether smaller or larger values of the objective are better. Searchers, pruners,
    the Pareto tools and the kept models all work lower-is-better, so they are given
    `sign * value`; the database and the spec keep the words."""

    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"

    @property
    def sign(self) -> float:
        """+1 for minimize, -1 for maximize: sign * value is lower-is-better."""
        return -1.0 if self is Direction.MAXIMIZE else 1.0

    @classmethod
    def parse(cls, text: "str | Direction") -> "Direction":
        """The direction a spec or a study record names; ValueError naming the choices."""
        try:
            return cls(text)
        except ValueError:
            raise ValueError(f"direction: expected minimize or maximize, got {text!r}") from None


class StudyDirection(str, enum.Enum):
    """Optuna's StudyDirection, for the Python API's study.direction and directions: its
    class name, its members (NOT_SET included) and its repr, so an Optuna user's prints
    and comparisons read as they did. Each member equals mpiopt's word ("minimize") and
    the Direction member of that word (both are strings), so either side compares."""

    NOT_SET = "not_set"
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class Step(NamedTuple):
    """Where a per-epoch value was reported: the fold and the epoch within it.

    Kept as two numbers, never one encoded step: with folds one after another a fold's
    first epoch is a freshly built model, and with `training.epochs` searched, trials
    have different epochs per fold, so only (fold, epoch) means the same point in every
    trial. A trial of one fold, and a function objective's report(epoch, value), report
    fold 0. Ordered fold first, then epoch: the order folds run one after another."""

    fold: int
    epoch: int


def as_step(key) -> Step:
    """A Step from a Step, a (fold, epoch) pair, or a bare epoch (fold 0): what callers
    of finish_trial(intermediate=...) and old records hold."""
    if isinstance(key, tuple):
        return Step(int(key[0]), int(key[1]))
    return Step(0, int(key))


def steps(values: dict | None) -> dict[Step, float]:
    """{Step: value} in (fold, epoch) order, from any keys as_step reads, or from the
    {fold: {epoch: value}} that by_fold writes (JSON's text keys too)."""
    flat = []
    for key, value in (values or {}).items():
        if isinstance(value, dict):
            flat += [(Step(int(key), int(e)), v) for e, v in value.items()]
        else:
            flat.append((as_step(key), value))
    return dict(sorted(flat))


def by_fold(values: dict) -> dict[int, dict[int, float]]:
    """{fold: {epoch: value}}: the per-epoch values as JSON writes them (its keys are
    text, so a (fold, epoch) pair becomes two levels)."""
    out: dict[int, dict[int, float]] = {}
    for key, value in steps(values).items():
        out.setdefault(key.fold, {})[key.epoch] = value
    return out


def step_text(step: Step, folds: int = 1) -> str:
    """'epoch 3', or with several folds 'fold 1 epoch 3' (folds counted from 0, as
    `mpiopt show` lists a trial's fold values)."""
    return f"epoch {step.epoch}" if folds <= 1 else f"fold {step.fold} epoch {step.epoch}"


class TrialState(enum.Enum):
    """Optuna's TrialState names over mpiopt's statuses (the value), for the Python API's
    trial.state: FAIL is FAILED, WAITING is PENDING (queued). INTERRUPTED (its job ended;
    it runs again on resume) and RETRIED (a failed trial queued again) are mpiopt's own."""

    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAILED"
    WAITING = "PENDING"
    INTERRUPTED = "INTERRUPTED"
    RETRIED = "RETRIED"

    def is_finished(self) -> bool:
        return TrialStatus(self.value).is_finished()

    @classmethod
    def of(cls, status: TrialStatus) -> "TrialState":
        return cls(TrialStatus(status).value)


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
    # the per-epoch values, {Step(fold, epoch): value} in (fold, epoch) order
    intermediate: dict[Step, float] = field(default_factory=dict)
    rank: int | None = None           # world rank of the group leader it last ran on
    lost_attempts: int = 0            # jobs that died while it ran (mpiopt.run.study_run)
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
    job: int | None = None            # the job that runs or ran it (mpiopt search --join)

    def __post_init__(self):
        # bare epochs (a record built by hand, an old file's) are fold 0's
        if not all(type(k) is Step for k in self.intermediate):
            object.__setattr__(self, "intermediate", steps(self.intermediate))


def resume_note(spans) -> str | None:
    """Where a trial that ran again went on from its checkpoints, in words, from the
    "resume" marks the trainer leaves in its spans: "resumed from its checkpoint at
    epoch 4 of fold 1" (the training went on with epoch 5); None for a trial that
    started afresh. A fold is named only where the trial has several, counted from 0 as
    `mpiopt show` lists the fold values."""
    marks = sorted((s for s in spans or () if s.get("kind") == "resume"),
                   key=lambda s: (s.get("fold") or 0, s.get("epoch") or 0))
    if not marks:
        return None
    folds = {s.get("fold") for s in spans if s.get("kind") in ("fold", "resume")}
    where = [f"epoch {s.get('epoch')}" + (f" of fold {s.get('fold')}" if len(folds) > 1 else "")
             for s in marks]
    return f"resumed from its checkpoint{'s' if len(marks) > 1 else ''} at {', '.join(where)}"


# ---- what travels with a trial between the coordinator, the groups and the objective ----
@dataclass(frozen=True)
class Trial:
    trial_id: int
    number: int
    params: dict[str, Any]
    seed: int
    attempt: int = 0
    timeout: float | None = None  # search.trial_timeout in seconds
    refit: bool = False           # training.refit: the best params on all the data, no row
    round: int | None = None      # search.algorithm pbt: the round (epochs round*interval on)
    parent: int | None = None     # ... and the trial whose checkpoint it starts from


@dataclass(frozen=True)
class Report:
    """One fold's value after one of its epochs (fold 0 for a trial of one fold and for
    a function objective's report)."""

    trial_id: int
    epoch: int
    value: float
    fold: int = 0

    @property
    def step(self) -> Step:
        return Step(self.fold, self.epoch)


class Verdict(str, enum.Enum):
    """The coordinator's answer to a REPORT."""

    CONTINUE = "continue"
    PRUNE = "prune"
    CANCEL = "cancel"      # the job is ending: stop at once, the trial runs again on resume


@dataclass(frozen=True)
class Decision:
    trial_id: int
    verdict: Verdict = Verdict.CONTINUE

    @property
    def prune(self) -> bool:
        return self.verdict is Verdict.PRUNE


@dataclass(frozen=True)
class Result:
    """A trial's one record, from the objective to the coordinator.

    status is COMPLETE, FAILED, PRUNED, or INTERRUPTED (the trial was cancelled because the
    job is ending). error names the failing rank and host."""

    trial_id: int
    status: TrialStatus
    value: float | None = None
    value_std: float | None = None
    fold_values: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    duration: float = 0.0
    error: str | None = None
    device: str | None = None      # what the leader trained on (mpiopt.objective.device)
    spans: list[dict] = field(default_factory=list)  # fold/epoch spans (mpiopt.training)
    unread: list[str] = field(default_factory=list)  # params build_model never read
    halt: bool = False   # INTERRUPTED by what is not the trial's fault (the artifact store
                         # failed): the study stops in order, the trial runs again on resume

    def __post_init__(self):
        # cut and made storable where it is made: it travels to rank 0, into the kept and
        # recovery files, the database, the log and the report (mpiopt.errors.cut,
        # mpiopt.storable)
        if self.error is not None:
            object.__setattr__(self, "error", cut(storable_text(self.error)))

    def record(self) -> dict:
        """Its record for Storage.finish_trial(s) (the coordinator's write, and the line a
        leader keeps until then: mpiopt.kept)."""
        return dict(trial_id=self.trial_id, status=TrialStatus(self.status), value=self.value,
                    value_std=self.value_std, fold_values=self.fold_values,
                    metrics=self.metrics, error=self.error, duration=self.duration,
                    device=self.device, spans=self.spans)
