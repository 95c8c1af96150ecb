"""Rows <-> records: parameter encoding, JSON columns, FrozenTrial and StudyRecord."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import selectinload

from mpiopt import jsontext
from mpiopt.errors import StorageError, cut
from mpiopt.storable import storable_text
from mpiopt.storage.models import NAME_LEN, JobModel, StudyModel, TrialModel
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus, steps


@dataclass(frozen=True)
class StudyRecord:
    """A study as read from storage; `counts` and `best_value` are filled by list_studies."""

    id: int
    name: str
    direction: str
    metric: str
    spec_text: str
    fingerprint: str
    space_json: str
    status: StudyStatus
    created_at: datetime
    updated_at: datetime
    counts: dict[TrialStatus, int] = field(default_factory=dict)
    best_value: float | None = None
    lease: "Job | None" = None     # the live job with the newest beat, else the last ended
    artifacts: str | None = None      # the artifact store's folder (mpiopt.artifacts)
    recovery: tuple[str, ...] = ()    # the last job's recovery files (mpiopt.run.study_run)


@dataclass(frozen=True)
class Job:
    """One job running a study, or that ran it (storage/_jobs.py): its lease and its end.

    `end` is None while it lives; then "ended", "interrupted", "failed" (it said so) or
    "lost" (another job, `taken_by`, found its beat stale). `token` is set only in
    join_study's answer (the job's own); `running` only by list_jobs."""

    id: int
    study_id: int
    host: str
    pid: int
    launcher: str | None
    groups: int | None
    shared: bool
    started_at: datetime
    beat_at: datetime
    period_s: float
    ended_at: datetime | None = None
    end: str | None = None
    taken_by: int | None = None
    token: str | None = None
    running: int = 0
    launch: str | None = None       # "mpiexec -n 9 " ("" alone; None: not recorded)

    @property
    def live(self) -> bool:
        return self.end is None

    def age_s(self, now: datetime) -> float:
        return (now - self.beat_at).total_seconds()

    def is_stale(self, now: datetime) -> bool:
        """No beat for three periods: the job is gone. An ended job is gone too (so a
        study whose last job ended reads as not running, as its lease did)."""
        return not self.live or self.age_s(now) > 3 * self.period_s


@dataclass(frozen=True)
class Changes:
    """What a job reads of its study every second or so (Storage.changes): the trials
    finished since `since`, every RUNNING and INTERRUPTED trial, how many count against
    the budget, and `at`, the moment of the read (the next call's `since`, less a margin
    for writes that were committed after their finish time was taken)."""

    finished: tuple[FrozenTrial, ...]
    running: tuple[FrozenTrial, ...]
    interrupted: tuple[FrozenTrial, ...]
    counted: int
    at: datetime


def to_job(row: JobModel, token: str | None = None, running: int = 0) -> Job:
    return Job(id=row.id, study_id=row.study_id, host=row.host, pid=row.pid,
               launcher=row.launcher, groups=row.groups, shared=bool(row.shared),
               started_at=row.started_at, beat_at=row.beat_at, period_s=float(row.period),
               ended_at=row.ended_at, end=row.end, taken_by=row.taken_by, token=token,
               running=running, launch=row.launch)


def encode_param_row(trial_id: int, name: str, value: Any) -> dict:
    """A trial_params row: exact text for reading back, a float (where one exists) for SQL
    filters and sorts. A plain dict for a Core executemany insert (no ORM instance)."""
    kind, number, text = _encode(value)
    return {"trial_id": trial_id, "name": name, "kind": kind, "value_float": number,
            "value_text": text}


def _encode(value: Any) -> tuple[str, float | None, str]:
    if isinstance(value, bool):
        return "bool", float(value), "true" if value else "false"
    if isinstance(value, int):
        return "int", float(value), str(int(value))
    if isinstance(value, float):
        return "float", finite_or_none(value), repr(float(value))
    if isinstance(value, str):
        return "str", None, value
    return "json", None, jsontext.exact(value)


_DECODERS = {"bool": lambda t: t == "true", "int": int, "float": float, "str": str,
             "json": json.loads}


def decode_param(row) -> Any:
    """A param row (ORM or Core) back to the python value that was written."""
    return decode_value(row.kind, row.value_text)


def decode_value(kind: str, text: str) -> Any:
    return _DECODERS[kind](text)


def finite_or_none(value: float | None) -> float | None:
    """NaN cannot be stored portably (SQLite turns it into NULL anyway): store NULL."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def dump_json(value: dict | None) -> str | None:
    return None if not value else jsontext.exact(value, default=float)


def load_json(text: str | None) -> dict:
    return json.loads(text) if text else {}


def dump_spans(spans) -> str | None:
    return jsontext.exact(list(spans), default=float) if spans else None


def load_spans(text: str | None) -> list[dict]:
    return json.loads(text) if text else []


def with_children(stmt):
    """A SELECT of TrialModel rows that loads their params, folds and per-epoch values."""
    return stmt.options(selectinload(TrialModel.params), selectinload(TrialModel.folds),
                        selectinload(TrialModel.intermediate))


def trial_record(columns: Mapping, params: dict, fold_values: Sequence = (),
                 intermediate: dict | None = None) -> FrozenTrial:
    """The one way a FrozenTrial is made: from the values of a trials row by column name
    (a Core row's mapping, an ORM row's through to_frozen, or what a write just put in
    the row) and its children, already decoded. Every write returns and every read gives
    the record of this one function, so they cannot drift apart field by field; a column
    left out (a write that has not set it) reads as the column's default."""
    get = columns.get
    return FrozenTrial(
        id=columns["id"], study_id=columns["study_id"], number=columns["number"],
        status=TrialStatus(columns["status"]), params=params,
        value=get("value"), value_std=get("value_std"), seed=get("seed"),
        attempt=get("attempt") or 0, group=get("group_index"), host=get("host"),
        started_at=get("started_at"), finished_at=get("finished_at"),
        duration=get("duration"), error=get("error"), metrics=load_json(get("metrics_json")),
        fold_values=list(fold_values), intermediate=steps(intermediate or {}),
        rank=get("rank"), lost_attempts=get("lost_attempts") or 0, device=get("device"),
        suggest_seconds=get("suggest_seconds"), spans=load_spans(get("spans_json")),
        member=get("member"), round=get("round"), parent=get("parent"), job=get("job_id"))


def to_frozen(row: TrialModel) -> FrozenTrial:
    """An ORM row (loaded with_children) as its record."""
    return trial_record(
        {name: getattr(row, key) for key, name in _TRIAL_ATTRIBUTES},
        {p.name: decode_param(p) for p in row.params},
        [f.value for f in sorted(row.folds, key=lambda f: f.fold)],
        {(i.fold, i.epoch): i.value for i in row.intermediate})


# (ORM attribute, column name) of every column of the trials table
_TRIAL_ATTRIBUTES = tuple((attr.key, attr.columns[0].name)
                          for attr in sa_inspect(TrialModel).column_attrs)


def to_record(row: StudyModel, counts=None, best_value=None, lease: Job | None = None
              ) -> StudyRecord:
    return StudyRecord(
        id=row.id, name=row.name, direction=row.direction, metric=row.metric,
        spec_text=row.spec_text, fingerprint=row.fingerprint, space_json=row.space_json,
        status=StudyStatus(row.status), created_at=row.created_at, updated_at=row.updated_at,
        counts=dict(counts or {}), best_value=best_value, lease=lease,
        artifacts=row.artifacts, recovery=tuple(json.loads(row.recovery or "[]")),
    )


def _short(text: str | None) -> str | None:
    """A device name fits its column (255 characters) whatever a driver reports."""
    return None if text is None else str(text)[:NAME_LEN]


def prepared_outcomes(outcomes: Sequence[dict]) -> list[tuple]:
    """finish_trial keyword dicts as rows for _writes.finish_many (checked, encoded)."""
    prepared = []
    for o in outcomes:
        status = TrialStatus(o["status"])
        if status in (TrialStatus.RUNNING, TrialStatus.PENDING):
            raise StorageError(f"finish_trial needs a final status, not {status.value}")
        prepared.append((o["trial_id"], status, {
            "value": finite_or_none(o.get("value")),
            "value_std": finite_or_none(o.get("value_std")),
            "error": cut(storable_text(o.get("error"))),
            "metrics_json": dump_json(o.get("metrics")), "duration": o.get("duration"),
            "device": _short(o.get("device")), "spans_json": dump_spans(o.get("spans"))},
            o.get("fold_values") or (), o.get("fold_metrics") or (), steps(o.get("intermediate"))))
    return prepared
