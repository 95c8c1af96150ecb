"""Whole-study writes and the queue of parameter sets waiting to run, as Core statements.

Why a module of its own: these are the operations a person runs on a study (delete,
rename, copy to another database) and the PENDING queue that `mpiopt enqueue`,
`search.initial_trials` and `--retry-failed` fill. Storage (_rdb) calls them inside its
own transactions; every function here runs in the caller's transaction and never commits.

The queue: an enqueued parameter set is a trial row with status PENDING, a number, its
params and no seed or group. Only the coordinator turns it RUNNING (`take`), with an
UPDATE guarded by `status = 'PENDING'` inside its transaction, so a queued set is taken
exactly once; a job killed after the take leaves it RUNNING (it runs again on resume, as
any running trial), one killed before leaves it PENDING (it is taken by the next job).

A copy is made column by column from the models' tables, so a column a later migration
adds travels with it without a change here.
"""
from __future__ import annotations

from datetime import datetime
from typing import Sequence

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.engine import Connection

from mpiopt.storage._convert import decode_value
from mpiopt.storage._writes import EPOCHS, FOLDS, PARAMS, STUDIES, TRIALS, insert_trial
from mpiopt.storage.models import JobModel

JOBS = JobModel.__table__
from mpiopt.trial import TrialStatus

CHILDREN = (PARAMS, FOLDS, EPOCHS)      # the tables whose rows hang off a trial


def delete_study(conn: Connection, study_id: int) -> int:
    """The study, its trials and their children; returns how many trials went."""
    trial_ids = select(TRIALS.c.id).where(TRIALS.c.study_id == study_id).scalar_subquery()
    for table in CHILDREN:          # explicit, not only ON DELETE CASCADE: any engine
        conn.execute(delete(table).where(table.c.trial_id.in_(trial_ids)))
    gone = conn.execute(delete(TRIALS).where(TRIALS.c.study_id == study_id)).rowcount
    conn.execute(delete(JOBS).where(JOBS.c.study_id == study_id))
    conn.execute(delete(STUDIES).where(STUDIES.c.id == study_id))
    return gone


def dump_study(conn: Connection, study_id: int) -> dict:
    """Every row of a study as plain dicts (database ids included, to be remapped)."""
    study = dict(conn.execute(select(STUDIES).where(STUDIES.c.id == study_id)).mappings().one())
    trials = [dict(r) for r in conn.execute(
        select(TRIALS).where(TRIALS.c.study_id == study_id).order_by(TRIALS.c.number)).mappings()]
    ids = select(TRIALS.c.id).where(TRIALS.c.study_id == study_id).scalar_subquery()
    children = {t.name: [dict(r) for r in conn.execute(
        select(t).where(t.c.trial_id.in_(ids)).order_by(t.c.id)).mappings()] for t in CHILDREN}
    return {"study": study, "trials": trials, "children": children}


def load_study(conn: Connection, dump: dict, name: str, spec_text: str) -> int:
    """Insert a dump_study() as study `name` (no job runs the copy, and its trials name
    none: job ids are the original database's); its new id. The original's recovery files
    stay the original's: their lines name its trial ids, which are other trials here."""
    study = {k: v for k, v in dump["study"].items() if k in STUDIES.c and k != "id"}
    study.update({k: None for k in ("recovery",) if k in STUDIES.c}, name=name,
                 spec_text=spec_text)
    study_id = conn.execute(insert(STUDIES).values(**study)).inserted_primary_key[0]
    new_ids = {}
    for row in dump["trials"]:
        values = {k: v for k, v in row.items() if k in TRIALS.c and k != "id"}
        values["study_id"] = study_id
        values.pop("job_id", None)
        new_ids[row["id"]] = conn.execute(insert(TRIALS).values(**values)).inserted_primary_key[0]
    for table in CHILDREN:
        rows = [{**{k: v for k, v in r.items() if k in table.c and k != "id"},
                 "trial_id": new_ids[r["trial_id"]]} for r in dump["children"][table.name]]
        if rows:
            conn.execute(insert(table), rows)
    return study_id


def enqueue(conn: Connection, study_id: int, params_list: Sequence[dict], now: datetime,
            where: str) -> list[int]:
    """PENDING trials (numbered like any trial) for these parameter sets; their ids."""
    ids = []
    for params in params_list:
        trial = insert_trial(conn, study_id, params, None, None, None, now, where)
        conn.execute(update(TRIALS).where(TRIALS.c.id == trial.id)
                     .values(status=TrialStatus.PENDING, started_at=None))
        ids.append(trial.id)
    return ids


# Built once (the coordinator runs it on every dispatch): the queue, oldest first.
# Read on every dispatch, so it must cost the same at 10 and at 10,000 trials: the index
# ix_trials_queue (study_id, status, number; migration 0007) answers it in one range scan.
# Without it SQLite (which keeps no statistics) walked the (study_id, number) index
# through every trial of the study.
_PENDING = (select(TRIALS.c.id).where(TRIALS.c.study_id == bindparam("sid"),
                                      TRIALS.c.status == TrialStatus.PENDING)
            .order_by(TRIALS.c.number).limit(bindparam("n")))


def pending_ids(conn: Connection, study_id: int, limit: int | None = None) -> list[int]:
    """The queue, oldest first."""
    return list(conn.execute(_PENDING, {"sid": study_id, "n": 1 << 30 if limit is None
                                        else int(limit)}).scalars())


def take(conn: Connection, trial_id: int, seed, group, host, rank, now: datetime,
         started: bool = True, job_id: int | None = None) -> bool:
    """PENDING -> RUNNING for job `job_id`; False if it was no longer PENDING.
    started=False: sent ahead to a busy group, its start noted later (see insert_trials)."""
    done = conn.execute(update(TRIALS).where(TRIALS.c.id == trial_id,
                                             TRIALS.c.status == TrialStatus.PENDING)
                        .values(status=TrialStatus.RUNNING, seed=seed, group_index=group,
                                host=host, rank=rank, started_at=now if started else None,
                                job_id=job_id))
    return done.rowcount == 1


def retry_failed(conn: Connection, study_id: int, now: datetime, where: str) -> list[int]:
    """Each FAILED trial becomes RETRIED (kept, no longer counted) and its parameter set
    is queued again as a new PENDING trial; the numbers of the trials marked."""
    failed = list(conn.execute(select(TRIALS.c.id, TRIALS.c.number).where(
        TRIALS.c.study_id == study_id, TRIALS.c.status == TrialStatus.FAILED)
        .order_by(TRIALS.c.number)))
    if not failed:
        return []
    rows = conn.execute(select(PARAMS).where(PARAMS.c.trial_id.in_([f.id for f in failed]))
                        .order_by(PARAMS.c.id)).mappings().all()
    params = {f.id: {} for f in failed}
    for r in rows:
        params[r["trial_id"]][r["name"]] = decode_value(r["kind"], r["value_text"])
    conn.execute(update(TRIALS).where(TRIALS.c.id.in_([f.id for f in failed]))
                 .values(status=TrialStatus.RETRIED))
    enqueue(conn, study_id, [params[f.id] for f in failed], now, where)
    return [f.number for f in failed]


__all__ = ["delete_study", "dump_study", "load_study", "enqueue", "pending_ids", "take",
           "retry_failed"]
