"""Many jobs, one study: the jobs table (migration 0009) and what a job asks of it.

Storage (storage/_rdb.py) takes these methods from `JobMethods`; the rules they keep are
BaseStorage's (storage/_base.py). Why a module of its own: the lease of one job per study
became a row per job, and the trials a lost job leaves, the study's budget and the fence
all turn on it.

Locks on PostgreSQL (SQLite's write lock serialises every write transaction anyway): a
job's write first locks its own job row (the fence), then the study's row (numbering,
the budget); join_study locks the study's live job rows, then the study's row, so it
waits for any job's transaction in flight and then sees every committed job. The one
circle left is a join_study and a take_orphans that both mark the same stale job lost
while each waits for the other's row: PostgreSQL ends one of the two (a deadlock is
StorageUnavailable, and nothing of it was written), and the retry finds the job lost.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Sequence

from sqlalchemy import bindparam, func, insert, select, true, update

from mpiopt.errors import StorageError, StudyBusyError
from mpiopt.storage._convert import Job, to_frozen, to_job, with_children
from mpiopt.storage.models import JobModel, StudyModel, TrialModel
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus

JOBS = JobModel.__table__
TRIALS = TrialModel.__table__
STUDIES = StudyModel.__table__
ENDS = ("ended", "interrupted", "failed", "lost")
NOT_COUNTED = (TrialStatus.PENDING, TrialStatus.RETRIED)     # outside the budget

# Built once: the fence's check, first in every write transaction of a fenced job.
# FOR NO KEY UPDATE: the job's own heartbeat, in another transaction, waits for it
# (share locks taken by both and then an update by each would deadlock).
_FENCE = (select(JOBS.c.token).where(JOBS.c.id == bindparam("jid"), JOBS.c.end.is_(None))
          .with_for_update(key_share=True))
_LIVE = select(JOBS).where(JOBS.c.study_id == bindparam("sid"), JOBS.c.end.is_(None))
_LOCK_LIVE = _LIVE.with_only_columns(JOBS.c.id).order_by(JOBS.c.id).with_for_update()
_LOCK_STUDY = select(STUDIES.c.name).where(STUDIES.c.id == bindparam("sid")).with_for_update()
_COUNTED = select(func.count()).where(TRIALS.c.study_id == bindparam("sid"),
                                      TRIALS.c.status.not_in(NOT_COUNTED))


def _now() -> datetime:
    return datetime.now(timezone.utc)


class JobMethods:
    """join_study, job_heartbeat, end_job, list_jobs, take_orphans and the fence, for
    Storage (which provides _writing, _writing_core, _reading, shown_url and fence)."""

    fence: tuple[int, str] | None
    lost: str | None

    def join_study(self, study_id: int, host: str, pid: int, period_s: float, *,
                   shared: bool = False, takeover: bool = False, groups: int | None = None,
                   launcher: str | None = None, launch: str | None = None) -> Job:
        """See BaseStorage.join_study. One write transaction: the check and the insert.
        Not fenced: a job joins afresh, whatever became of one it was before."""
        now, token = _now(), uuid.uuid4().hex
        with self._writing_core(fenced=False) as conn:
            conn.execute(_LOCK_LIVE, {"sid": study_id}).all()
            name = conn.execute(_LOCK_STUDY, {"sid": study_id}).scalar()
            if name is None:
                raise StorageError(f"no study with id {study_id} in {self.shown_url}")
            live = [to_job(r) for r in conn.execute(_LIVE.order_by(JOBS.c.id),
                                                    {"sid": study_id})]
            new_id = conn.execute(insert(JOBS).values(
                study_id=study_id, token=token, shared=bool(shared), host=host[:255],
                pid=int(pid), launcher=None if launcher is None else str(launcher)[:255],
                launch=None if launch is None else str(launch)[:255], groups=groups,
                started_at=now, beat_at=now, period=float(period_s))
            ).inserted_primary_key[0]
            stale = [j for j in live if j.is_stale(now)]
            revived = {j.id for j in stale} - set(mark_lost(conn, stale, now, new_id))
            live = [j for j in live if not j.is_stale(now) or j.id in revived]
            if not shared and live and not takeover:
                raise StudyBusyError(_busy(name, live, now), live[-1])   # (all rolled back)
            if shared:
                self._may_share(name, live, host, now)
            elif live:
                mark_lost(conn, live, now, new_id, beaten=False)
        return Job(id=new_id, study_id=study_id, host=host[:255], pid=int(pid),
                   launcher=launcher, groups=groups, shared=bool(shared), started_at=now,
                   beat_at=now, period_s=float(period_s), token=token, launch=launch)

    def _may_share(self, name: str, live: list[Job], host: str, now: datetime) -> None:
        """A --join job works beside other --join jobs only; on SQLite, on one host."""
        alone = [j for j in live if not j.shared]
        if alone:
            raise StudyBusyError(
                f"study '{name}' is run by a job that did not --join (host {alone[-1].host}, "
                f"pid {alone[-1].pid}, last heartbeat {alone[-1].age_s(now):.0f}s ago): it "
                "runs the study alone; wait for it to end, or start every job with --join",
                alone[-1])
        if self.location.backend != "sqlite":
            return
        elsewhere = [j for j in live if j.host != host[:255]]
        if elsewhere:
            raise StorageError(
                f"{self.shown_url}: SQLite serves jobs on one host (a live job of study "
                f"'{name}' runs on {elsewhere[-1].host}); jobs on several hosts need "
                "PostgreSQL (storage: postgresql://...)")

    def job_heartbeat(self, job_id: int, token: str) -> None:
        """See BaseStorage.job_heartbeat."""
        with self._writing_core() as conn:
            done = conn.execute(update(JOBS).where(JOBS.c.id == job_id, JOBS.c.token == token,
                                                   JOBS.c.end.is_(None))
                                .values(beat_at=_now()))
            if done.rowcount != 1:
                self._lose_lease()

    def end_job(self, job_id: int, token: str, end: str = "ended",
                study_status=None) -> int:
        """See BaseStorage.end_job. Not fenced: its own WHERE is the guard, and a job
        taken over ends with nothing written."""
        if end not in ENDS:
            raise StorageError(f"a job ends as one of {', '.join(ENDS)}, not {end!r}")
        now = _now()
        with self._writing_core(fenced=False) as conn:
            ended = conn.execute(update(JOBS).where(JOBS.c.id == job_id, JOBS.c.token == token,
                                                    JOBS.c.end.is_(None))
                                 .values(end=end, ended_at=now)).rowcount == 1
            study_id = conn.execute(select(JOBS.c.study_id).where(JOBS.c.id == job_id)).scalar()
            if study_id is None:
                return 0
            # jobs ending at once take turns here, so the last one sees the others ended
            # (and records the study's end): each count waits for the other's commit
            conn.execute(_LOCK_STUDY, {"sid": study_id})
            others = [to_job(r) for r in conn.execute(_LIVE, {"sid": study_id})]
            left = sum(1 for j in others if j.id != job_id and not j.is_stale(now))
            if ended and not left and study_status is not None:
                conn.execute(update(STUDIES).where(STUDIES.c.id == study_id).values(
                    status=StudyStatus(study_status), updated_at=now))
        return left

    def list_jobs(self, study_id: int) -> list[Job]:
        """See BaseStorage.list_jobs."""
        with self._reading() as s:
            rows = s.scalars(select(JobModel).where(JobModel.study_id == study_id)
                             .order_by(JobModel.id)).all()
            running = dict(s.execute(select(TrialModel.job_id, func.count()).where(
                TrialModel.study_id == study_id, TrialModel.status == TrialStatus.RUNNING)
                .group_by(TrialModel.job_id)).all())
            return [to_job(r, running=running.get(r.id, 0)) for r in rows]

    def take_orphans(self, study_id: int, count_lost_attempts: bool) -> list[FrozenTrial]:
        """See BaseStorage.take_orphans."""
        now = _now()
        with self._writing() as s:
            live = [to_job(r) for r in s.execute(_LIVE, {"sid": study_id})]
            gone = mark_lost(s.connection(), [j for j in live if j.is_stale(now)], now,
                             self.fenced_job)
            alive = [j.id for j in live if j.id not in gone]
            orphan = (TrialModel.job_id.is_(None) | TrialModel.job_id.not_in(alive)
                      if alive else true())
            rows = s.scalars(with_children(select(TrialModel).where(
                TrialModel.study_id == study_id, TrialModel.status == TrialStatus.RUNNING,
                orphan))).all()
            counted = []
            for row in sorted(rows, key=lambda r: r.number):
                if count_lost_attempts and row.started_at is not None:
                    row.lost_attempts = (row.lost_attempts or 0) + 1
                    counted.append(row)
                row.status, row.finished_at = TrialStatus.INTERRUPTED, now
            s.flush()
            return [to_frozen(row) for row in counted]

    def _check_fence(self, conn) -> None:
        """A fencing token (as for any lease: Kleppmann 2016): a job that was silent past
        its lease (Ctrl-Z, a suspended or frozen node) while another job took its trials
        over writes nothing more, not a result of a trial the other job runs again, not
        INTERRUPTED over the other job's running trials. The check is in the same
        transaction as the write: SQLite's write lock, PostgreSQL's lock on the job's row
        (_FENCE), keep a takeover from coming between the two."""
        if self.fence is None:
            return
        job_id, token = self.fence
        if conn.execute(_FENCE, {"jid": job_id}).scalar() != token:
            self._lose_lease()

    def _lose_lease(self):
        from mpiopt.errors import LeaseLost

        self.lost = (f"this job lost its lease on the study in {self.shown_url}: another job "
                     "took it over while this one was silent (stopped or suspended) past the "
                     "lease's period; this job writes nothing more, the other goes on")
        raise LeaseLost(self.lost)

    @property
    def fenced_job(self) -> int | None:
        """The job whose trials this storage writes (the fence's), or None."""
        return self.fence[0] if self.fence is not None else None


def mark_lost(conn, jobs: Sequence[Job], now: datetime, taken_by: int | None,
              beaten: bool = True) -> list[int]:
    """The jobs marked end="lost" (found by `taken_by`); their ids. `beaten`: only where
    the beat is still the one read (a job that beat since, however late, lives on: the
    UPDATE's own WHERE decides, so a beat committed meanwhile is seen on PostgreSQL
    too)."""
    lost = []
    for job in jobs:
        where = [JOBS.c.id == job.id, JOBS.c.end.is_(None)]
        if beaten:
            where.append(JOBS.c.beat_at == job.beat_at)
        done = conn.execute(update(JOBS).where(*where)
                            .values(end="lost", ended_at=now, taken_by=taken_by))
        if done.rowcount == 1:
            lost.append(job.id)
    return lost


def _busy(name: str, live: list[Job], now: datetime) -> str:
    held = live[-1]
    return (f"study '{name}' is being run by another job (host {held.host}, pid {held.pid}, "
            f"since {held.started_at:%Y-%m-%d %H:%M:%S} UTC, last heartbeat "
            f"{held.age_s(now):.0f}s ago): wait for it to end or stop it; a job that died is "
            f"taken over once its lease is {3 * held.period_s:.0f}s old")


def budgeted(conn, study_id: int, requests: Sequence[dict], limit: int | None,
             distinct: bool) -> list[int]:
    """The indexes of the requests to create, in order (see BaseStorage.create_trials):
    with `distinct`, none whose "key" a non-RETRIED trial of the study or an earlier
    request holds; then, with `limit`, only as many as the budget has left. The caller
    holds the study's row lock (PostgreSQL) or the write lock (SQLite)."""
    chosen = list(range(len(requests)))
    if distinct:
        keys = {r.get("key") for r in requests} - {None}
        seen = set()
        if keys:
            seen = set(conn.execute(select(TRIALS.c.params_key).where(
                TRIALS.c.study_id == study_id, TRIALS.c.params_key.in_(sorted(keys)),
                TRIALS.c.status != TrialStatus.RETRIED)).scalars())
        kept = []
        for i in chosen:
            key = requests[i].get("key")
            if key is not None and key in seen:
                continue
            seen.add(key) if key is not None else None
            kept.append(i)
        chosen = kept
    if limit is not None:
        left = max(0, int(limit) - conn.execute(_COUNTED, {"sid": study_id}).scalar())
        chosen = chosen[:left]
    return chosen


def lock_study(conn, study_id: int, where: str) -> None:
    """The study's row, locked for the rest of the transaction (PostgreSQL; SQLite's
    dialect leaves FOR UPDATE out: its write lock is held already)."""
    if conn.execute(_LOCK_STUDY, {"sid": study_id}).first() is None:
        raise StorageError(f"no study with id {study_id} in {where}")


def aligned(requests: Sequence, chosen: list[int], made: list) -> list:
    """made[k] belongs to requests[chosen[k]]: a list as long as requests, None elsewhere."""
    out: list = [None] * len(requests)
    for i, trial in zip(chosen, made):
        out[i] = trial
    return out


def leases(conn, study_ids) -> dict[int, Job]:
    """StudyRecord.lease per study: its live job with the newest beat, else its most
    recently ended one."""
    ids = list(study_ids)
    if not ids:
        return {}
    out: dict[int, Job] = {}
    rows = conn.execute(select(JOBS).where(JOBS.c.study_id.in_(ids)).order_by(JOBS.c.id))
    for r in rows:
        job, held = to_job(r), out.get(r.study_id)
        if held is None or _newer(job, held):
            out[r.study_id] = job
    return out


def _newer(job: Job, held: Job) -> bool:
    if job.live != held.live:
        return job.live
    if job.live:
        return job.beat_at >= held.beat_at
    return (job.ended_at or job.beat_at) >= (held.ended_at or held.beat_at)
