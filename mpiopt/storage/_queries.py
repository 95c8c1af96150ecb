"""Read queries of Storage (storage/_rdb.py) that summarise many rows: the study list
with counts and best values, and each group's activity. Each takes an open Session (the
caller's one transaction)."""
from __future__ import annotations

from collections import Counter
from datetime import timezone
from typing import Sequence

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from mpiopt.storage._convert import Changes, StudyRecord, decode_value, to_record, trial_record
from mpiopt.storage._jobs import leases
from mpiopt.storage._writes import CHILDREN_OF, EPOCH, PARAM
from mpiopt.storage.models import StudyModel, TrialModel
from mpiopt.trial import FrozenTrial, Step, TrialStatus


def list_studies(s: Session) -> list[StudyRecord]:
    """Every study with its trial counts per status and best COMPLETE value."""
    rows = s.scalars(select(StudyModel).order_by(StudyModel.id)).all()
    counts = s.execute(select(TrialModel.study_id, TrialModel.status, func.count())
                       .group_by(TrialModel.study_id, TrialModel.status)).all()
    extremes = s.execute(
        select(TrialModel.study_id, func.min(TrialModel.value), func.max(TrialModel.value))
        .where(TrialModel.status == TrialStatus.COMPLETE)
        .group_by(TrialModel.study_id)).all()
    per_study = {r.id: zero_counts() for r in rows}
    for study_id, status, n in counts:
        per_study[study_id][TrialStatus(status)] = n
    best = {sid: (lo, hi) for sid, lo, hi in extremes}
    held = leases(s.connection(), per_study)
    return [to_record(r, per_study[r.id], _pick(best.get(r.id), r.direction), held.get(r.id))
            for r in rows]


FINISHED = (TrialStatus.COMPLETE, TrialStatus.PRUNED, TrialStatus.FAILED)
WAITING = (TrialStatus.RUNNING, TrialStatus.INTERRUPTED)
TRIALS = TrialModel.__table__
_SID, _SINCE = bindparam("sid"), bindparam("since")
# Built once (every job asks every second): trial rows, then their children in one UNION
_FINISHED_SINCE = (select(TRIALS).where(TRIALS.c.study_id == _SID,
                                        TRIALS.c.status.in_(FINISHED),
                                        TRIALS.c.finished_at >= _SINCE)
                   .order_by(TRIALS.c.number))
_FINISHED_ALL = (select(TRIALS).where(TRIALS.c.study_id == _SID, TRIALS.c.status.in_(FINISHED))
                 .order_by(TRIALS.c.number))
_WAITING = (select(TRIALS).where(TRIALS.c.study_id == _SID, TRIALS.c.status.in_(WAITING))
            .order_by(TRIALS.c.number))
_COUNTED = select(func.count()).where(
    TRIALS.c.study_id == _SID, TRIALS.c.status.not_in((TrialStatus.PENDING, TrialStatus.RETRIED)))


def changes(s: Session, study_id: int, since, now) -> Changes:
    """See Storage.changes. Two SELECTs of trial rows (the finished ones since `since`;
    the RUNNING and INTERRUPTED ones), both ranges of ix_trials_queue's (study_id,
    status), one of all their params, folds and per-epoch values, and one count, as Core
    statements built once: the cost follows what changed and what runs, and grows only
    slowly with the study (3 ms at 10,000 trials: benchmarks/results/storage.md)."""
    conn = s.connection()
    done = list(conn.execute(_FINISHED_ALL if since is None else _FINISHED_SINCE,
                             {"sid": study_id, "since": since}))
    waiting = list(conn.execute(_WAITING, {"sid": study_id}))
    children = _children(conn, [r.id for r in done + waiting])
    counted = conn.execute(_COUNTED, {"sid": study_id}).scalar()
    frozen = [_frozen(r, children.get(r.id)) for r in waiting]
    return Changes(finished=tuple(_frozen(r, children.get(r.id)) for r in done),
                   running=tuple(t for t in frozen if t.status is TrialStatus.RUNNING),
                   interrupted=tuple(t for t in frozen if t.status is TrialStatus.INTERRUPTED),
                   counted=counted, at=now)


def group_activity(s: Session, study_id: int) -> list[dict]:
    """See Storage.group_activity. A group is (job, group): every job of a shared study
    has a group 0 of its own."""
    key = (TrialModel.job_id, TrialModel.group)
    last = func.max(func.coalesce(TrialModel.finished_at, TrialModel.started_at))
    rows = s.execute(select(*key, last, func.max(TrialModel.started_at))
                     .where(TrialModel.study_id == study_id, TrialModel.group.is_not(None))
                     .group_by(*key).order_by(*key)).all()
    unfinished = s.execute(select(*key, TrialModel.number, TrialModel.started_at).where(
        TrialModel.study_id == study_id,
        TrialModel.status == TrialStatus.RUNNING)).all()
    hosts = {(j, g): h for j, g, h in s.execute(select(*key, TrialModel.host).where(
        TrialModel.study_id == study_id).order_by(TrialModel.started_at)).all()}
    # a RUNNING row without a start is a trial sent ahead: it waits for its group
    running = {(j, g): n for j, g, n, started in unfinished if started is not None}
    ahead = Counter((j, g) for j, g, _, started in unfinished if started is None)
    out = []
    for job, group, last_finish, last_start in rows:
        moments = [m for m in (last_finish, last_start) if m is not None]
        if not moments:
            continue
        at = max(m if m.tzinfo else m.replace(tzinfo=timezone.utc) for m in moments)
        out.append({"job": job, "group": group, "host": hosts.get((job, group)), "last_at": at,
                    "running": running.get((job, group)), "ahead": ahead.get((job, group), 0)})
    return out


def _children(conn, ids: list) -> dict:
    """{trial id: ({name: value}, {Step: value}, [fold values])} from one statement."""
    out: dict = {}
    if not ids:
        return out
    for tid, part, sub, order, name, kind, text, num in conn.execute(CHILDREN_OF, {"ids": ids}):
        params, epochs, folds = out.setdefault(tid, ({}, {}, []))
        if part == PARAM:
            params[name] = decode_value(kind, text)
        elif part == EPOCH:
            epochs[Step(sub, order)] = num
        else:
            folds.append(num)
    return out


def _frozen(r, children) -> FrozenTrial:
    """A trials row and its children as their record."""
    params, epochs, folds = children or ({}, {}, [])
    return trial_record(r._mapping, params, folds, epochs)


def zero_counts() -> dict[TrialStatus, int]:
    return {status: 0 for status in TrialStatus}


def _pick(extremes, direction: str) -> float | None:
    if not extremes:
        return None
    return extremes[1] if direction == "maximize" else extremes[0]


def unknown(name: str, known: Sequence[str], url: str) -> str:
    if not known:
        return f"unknown study '{name}': {url} holds no studies"
    return f"unknown study '{name}'; known studies: {', '.join(known)}"
