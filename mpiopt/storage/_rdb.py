"""Storage: the one repository every part of mpiopt reads and writes results through.

Contract: every public method is one short transaction (session_scope; the per-trial writes
use connection_scope with the Core statements of _writes) and is safe to call
from several threads; records returned (FrozenTrial, StudyRecord) never change afterwards.
Only the coordinator writes; any number of processes may read while it does.
"""
from __future__ import annotations

import json
import uuid
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterable, Sequence

from sqlalchemy import bindparam, func, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, selectinload, sessionmaker

from mpiopt.errors import (DuplicateStudyError, cut, LeaseLost, StorageError, StudyBusyError,
                           UnknownStudyError)
from mpiopt.storage import _studies, _writes
from mpiopt.storage._convert import (StudyRecord, dump_json, dump_spans, finite_or_none,
                                     to_frozen, to_record)
from mpiopt.storage._engine import writer
from mpiopt.storage._session import connection_scope, session_scope
from mpiopt.storage.models import NAME_LEN, StudyModel, TrialModel
from mpiopt.trial import FrozenTrial, StudyStatus, TrialStatus

DIRECTIONS = ("minimize", "maximize")
NUMBER_RETRIES = 5


# The lease a write checks (Storage._check_fence), built once. On PostgreSQL the study's
# row is locked FOR NO KEY UPDATE, first thing in the transaction: with a share lock two
# of the job's own transactions (the heartbeat and a status write) could both hold it and
# then both wait to update the row (a deadlock, by reasoning: not seen); this lock still
# lets other jobs insert trials that refer to the study (mpiopt enqueue: their foreign key
# takes a key-share lock)
_LEASE_OF = (select(StudyModel.lease_token).where(StudyModel.id == bindparam("sid"))
             .with_for_update(key_share=True))


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _with_children(stmt):
    return stmt.options(selectinload(TrialModel.params), selectinload(TrialModel.folds),
                        selectinload(TrialModel.intermediate))


class Storage:
    """Studies and trials in one SQL database (any SQLAlchemy URL; see open_storage)."""

    def __init__(self, engine: Engine, url: str):
        from mpiopt.storage._urls import mask_url

        self.engine, self.url = engine, url
        self.shown_url = mask_url(url)      # what every message names: no password
        self._read = sessionmaker(engine, expire_on_commit=False)
        self._writer = writer(engine)
        self._write = sessionmaker(self._writer, expire_on_commit=False)
        # (study id, lease token) once a job holds a study's lease (mpiopt.run.study_run): from
        # then on every write transaction first checks that the lease is still this job's
        self.fence: tuple[int, str] | None = None
        self.lost: str | None = None      # why, once a write or a heartbeat found it taken

    def __enter__(self) -> "Storage":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def _reading(self):
        return session_scope(self._read, self.shown_url)

    @contextmanager
    def _writing(self):
        with session_scope(self._write, self.shown_url) as session:
            self._check_fence(session.connection())
            yield session

    @contextmanager
    def _writing_core(self):
        """A write transaction for Core statements (the per-trial hot path, see _writes)."""
        with connection_scope(self._writer, self.shown_url) as conn:
            self._check_fence(conn)
            yield conn

    def _lose_lease(self):
        self.lost = (f"this job lost its lease on the study in {self.shown_url}: another job "
                     "took it over while this one was silent (stopped or suspended) past the "
                     "lease's period; this job writes nothing more, the other goes on")
        raise LeaseLost(self.lost)

    def _check_fence(self, conn) -> None:
        """A fencing token (as for any lease: Kleppmann 2016): a job that was silent past
        its lease (Ctrl-Z, a suspended or frozen node) while another job took the study
        over writes nothing more, not a result of a trial the other job runs again, not
        INTERRUPTED over the other job's running trials. The check is in the same
        transaction as the write: SQLite's write lock, PostgreSQL's lock on the study's
        row (_LEASE_OF), keep a takeover from coming between the two."""
        if self.fence is None:
            return
        study_id, token = self.fence
        if conn.execute(_LEASE_OF, {"sid": study_id}).scalar() != token:
            self._lose_lease()

    # ---- studies -----------------------------------------------------------------------
    def create_study(self, name: str, direction: str, metric: str, spec_text: str,
                     fingerprint: str, space_json, enqueued: Sequence[dict] = ()) -> int:
        """A new study; `enqueued` parameter sets (search.initial_trials) are queued in
        the same transaction, so a study never exists without them."""
        if direction not in DIRECTIONS:
            raise StorageError(f"direction must be one of {', '.join(DIRECTIONS)}, not {direction!r}")
        if not isinstance(space_json, str):
            space_json = dump_json(space_json) or "{}"
        now = _now()
        row = StudyModel(name=name, direction=direction, metric=metric, spec_text=spec_text,
                         fingerprint=fingerprint, space_json=space_json,
                         status=StudyStatus.RUNNING, created_at=now, updated_at=now)
        with self._writing() as s:
            if s.scalar(select(StudyModel.id).where(StudyModel.name == name)) is not None:
                raise DuplicateStudyError(f"study '{name}' already exists in {self.shown_url}")
            s.add(row)
            s.flush()
            if enqueued:
                _studies.enqueue(s.connection(), row.id, enqueued, now, self.shown_url)
            return row.id

    def get_study(self, name: str) -> StudyRecord:
        with self._reading() as s:
            row = s.scalar(select(StudyModel).where(StudyModel.name == name))
            if row is None:
                known = s.scalars(select(StudyModel.name).order_by(StudyModel.name)).all()
                raise UnknownStudyError(_unknown(name, known, self.shown_url))
            return to_record(row)

    def list_studies(self) -> list[StudyRecord]:
        """Every study with its trial counts per status and best COMPLETE value."""
        with self._reading() as s:
            rows = s.scalars(select(StudyModel).order_by(StudyModel.id)).all()
            counts = s.execute(select(TrialModel.study_id, TrialModel.status, func.count())
                               .group_by(TrialModel.study_id, TrialModel.status)).all()
            extremes = s.execute(
                select(TrialModel.study_id, func.min(TrialModel.value), func.max(TrialModel.value))
                .where(TrialModel.status == TrialStatus.COMPLETE)
                .group_by(TrialModel.study_id)).all()
        per_study = {r.id: _zero_counts() for r in rows}
        for study_id, status, n in counts:
            per_study[study_id][TrialStatus(status)] = n
        best = {sid: (lo, hi) for sid, lo, hi in extremes}
        return [to_record(r, per_study[r.id], _pick(best.get(r.id), r.direction)) for r in rows]

    def study_name(self, study_id: int) -> str | None:
        """The study's name now, or None if it was deleted (`mpiopt study delete --force`
        while a job ran it: the job's closing line must not offer a resume)."""
        with self._reading() as s:
            return s.scalar(select(StudyModel.name).where(StudyModel.id == study_id))

    def set_study_status(self, study_id: int, status: StudyStatus) -> None:
        self._update_study(study_id, status=StudyStatus(status))

    def update_study_spec(self, study_id: int, spec_text: str) -> None:
        self._update_study(study_id, spec_text=spec_text)

    def set_study_artifacts(self, study_id: int, folder: str) -> None:
        """Where the study's checkpoints and kept models are (mpiopt.artifacts)."""
        self._update_study(study_id, artifacts=folder)

    def set_study_recovery(self, study_id: int, places: Sequence[str]) -> None:
        """The recovery files this job would write to, so that a resume from any folder
        finds the one a killed job left (mpiopt.run.study_run)."""
        self._update_study(study_id, recovery=json.dumps([str(p) for p in places]))

    def _update_study(self, study_id: int, **values) -> None:
        with self._writing() as s:
            done = s.execute(update(StudyModel).where(StudyModel.id == study_id)
                             .values(updated_at=_now(), **values))
            if done.rowcount != 1:
                raise StorageError(f"no study with id {study_id} in {self.shown_url}")

    # ---- a person's commands on whole studies (the caller refuses a running one) ------
    def delete_study(self, study_id: int) -> int:
        """The study and everything of its trials; returns how many trials went."""
        with self._writing_core() as conn:
            return _studies.delete_study(conn, study_id)

    def rename_study(self, study_id: int, new_name: str, spec_text: str) -> None:
        """A new name (and the stored spec that carries it); an existing name is refused."""
        with self._writing() as s:
            if s.scalar(select(StudyModel.id).where(StudyModel.name == new_name)) is not None:
                raise DuplicateStudyError(f"study '{new_name}' already exists in {self.shown_url}")
            row = self._require_study(s, study_id)
            row.name, row.spec_text, row.updated_at = new_name, spec_text, _now()

    def dump_study(self, study_id: int) -> dict:
        """Every row of the study and its trials, for load_study_dump in another database."""
        with self._reading() as s:
            self._require_study(s, study_id)
            return _studies.dump_study(s.connection(), study_id)

    def load_study_dump(self, dump: dict, name: str, spec_text: str) -> int:
        """A dump_study() written whole, in one transaction, as study `name`."""
        with self._writing_core() as conn:
            if conn.execute(select(StudyModel.id).where(StudyModel.name == name)).first():
                raise DuplicateStudyError(f"study '{name}' already exists in {self.shown_url}")
            return _studies.load_study(conn, dump, name, spec_text)

    # ---- the queue of parameter sets that run before the searcher's own -------------
    def enqueue_trials(self, study_id: int, params_list: Sequence[dict]) -> list[FrozenTrial]:
        """PENDING trials for these parameter sets, in one transaction (see _studies)."""
        with self._writing_core() as conn:
            ids = _studies.enqueue(conn, study_id, params_list, _now(), self.shown_url)
        return [self.get_trial_by_id(i) for i in ids]

    def pending_trials(self, study_id: int, limit: int | None = None) -> list[FrozenTrial]:
        """The queue, oldest first. One indexed SELECT when it is empty: the coordinator
        asks on every dispatch."""
        with connection_scope(self.engine, self.shown_url) as conn:      # no Session: cheap
            ids = _studies.pending_ids(conn, study_id, limit)
        if not ids:
            return []
        with self._reading() as s:
            rows = s.scalars(_with_children(select(TrialModel).where(TrialModel.id.in_(ids)))
                             .order_by(TrialModel.number)).all()
            return [to_frozen(r) for r in rows]

    def take_pending(self, requests: Sequence[dict]) -> list[FrozenTrial]:
        """Queued trials become RUNNING for this job, in one transaction: dicts of
        trial_id, seed, group, host, rank (and started=False for one sent ahead). Returns those taken (a trial no longer
        PENDING, deleted or taken before, is left out)."""
        now, taken = _now(), []
        with self._writing_core() as conn:
            for r in requests:
                if _studies.take(conn, r["trial_id"], r.get("seed"), r.get("group"),
                                 r.get("host"), r.get("rank"), now, r.get("started", True)):
                    taken.append(r["trial_id"])
        return [self.get_trial_by_id(t) for t in taken]

    def retry_failed(self, study_id: int) -> list[int]:
        """FAILED trials become RETRIED and their parameter sets are queued again, in one
        transaction; returns the numbers of the trials marked."""
        with self._writing_core() as conn:
            return _studies.retry_failed(conn, study_id, _now(), self.shown_url)

    # ---- one coordinator per study ----------------------------------------------------
    def acquire_lease(self, study_id: int, host: str, pid: int, period_s: float,
                      takeover: bool = False) -> str:
        """Take the study for this job; returns the token its beats and release name.

        A fresh lease held by another job is a StudyBusyError naming the holder; a stale
        one (no beat for three periods: the job died) is taken over. The check and the
        take are one write transaction, so two jobs starting at once cannot both win.
        """
        now = _now()
        token = uuid.uuid4().hex
        with self._writing() as s:
            row = self._require_study(s, study_id)
            held = to_record(row).lease
            if held is not None and not held.is_stale(now) and not takeover:
                raise StudyBusyError(
                    f"study '{row.name}' is being run by another job (host {held.host}, pid "
                    f"{held.pid}, since {held.started_at:%Y-%m-%d %H:%M:%S} UTC, last heartbeat "
                    f"{held.age_s(now):.0f}s ago): wait for it to end or stop it; a job that "
                    f"died is taken over once its lease is {3 * held.period_s:.0f}s old", held)
            row.lease_token, row.lease_host, row.lease_pid = token, host[:255], int(pid)
            row.lease_started_at = row.lease_beat_at = now
            row.lease_period = float(period_s)
        return token

    def heartbeat(self, study_id: int, token: str) -> None:
        """Renew the lease; a StorageError if another job took it over meanwhile."""
        with self._writing_core() as conn:
            done = conn.execute(update(StudyModel).where(StudyModel.id == study_id,
                                                         StudyModel.lease_token == token)
                                .values(lease_beat_at=_now()))
            if done.rowcount != 1:
                self._lose_lease()

    def release_lease(self, study_id: int, token: str) -> None:
        with self._writing_core() as conn:
            conn.execute(update(StudyModel).where(StudyModel.id == study_id,
                                                  StudyModel.lease_token == token)
                         .values(lease_token=None, lease_beat_at=_now()))

    # ---- trial writes (the coordinator) ------------------------------------------------
    records_rank = True   # create_trial/restart_trial take the leader's world rank

    def create_trial(self, study_id: int, params: dict, seed: int | None, group: int | None,
                     host: str | None = None, rank: int | None = None) -> FrozenTrial:
        """A RUNNING trial with the next dense number, in one transaction with its params.

        SQLite serialises writers (BEGIN IMMEDIATE), so max+1 is safe; on other backends
        a concurrent writer trips the (study_id, number) constraint and we retry.
        """
        for attempt in range(NUMBER_RETRIES):
            try:
                return self._insert_trial(study_id, params, seed, group, host, rank)
            except StorageError as exc:
                if not isinstance(exc.__cause__, sa_exc.IntegrityError) or \
                        attempt == NUMBER_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def _insert_trial(self, study_id, params, seed, group, host, rank=None) -> FrozenTrial:
        return self._insert_trials(study_id, [dict(params=params, seed=seed, group=group,
                                                   host=host, rank=rank)])[0]

    def create_trials(self, study_id: int, requests: Sequence[dict]) -> list[FrozenTrial]:
        """Several create_trial calls (dicts of its keyword arguments) in one transaction,
        numbered in order: many groups that become idle together cost one commit."""
        for attempt in range(NUMBER_RETRIES):
            try:
                return self._insert_trials(study_id, requests)
            except StorageError as exc:
                if not isinstance(exc.__cause__, sa_exc.IntegrityError) or \
                        attempt == NUMBER_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def _insert_trials(self, study_id, requests) -> list[FrozenTrial]:
        now = _now()
        requests = [{**r, "suggest_seconds": finite_or_none(r.get("suggest_seconds"))}
                    for r in requests]
        with self._writing_core() as conn:
            return _writes.insert_trials(conn, study_id, requests, now, self.shown_url)

    def restart_trial(self, trial_id: int, group: int | None,
                      host: str | None = None, rank: int | None = None,
                      keep_intermediate: bool = False) -> FrozenTrial:
        """Run an unfinished trial again (resume): a new attempt, its old results dropped.
        keep_intermediate: its per-epoch values stay (it continues from a checkpoint;
        the epochs it trains again are merged by add_intermediate)."""
        with self._writing() as s:
            row = self._trial_row(s, trial_id)
            if TrialStatus(row.status).is_finished():
                raise StorageError(f"trial {row.number} is {row.status.value}; only unfinished "
                                   "trials can run again")
            row.status, row.attempt, row.group, row.host = (TrialStatus.RUNNING, row.attempt + 1,
                                                            group, host)
            row.rank = rank
            row.started_at, row.finished_at, row.duration = _now(), None, None
            row.value = row.value_std = row.error = row.metrics_json = None
            row.folds.clear()
            if not keep_intermediate:
                row.intermediate.clear()
            s.flush()
            return to_frozen(row)

    def finish_trial(self, trial_id: int, status: TrialStatus, value: float | None = None,
                     value_std: float | None = None, fold_values: Sequence = (),
                     metrics: dict | None = None, error: str | None = None,
                     duration: float | None = None, intermediate: dict | None = None,
                     fold_metrics: Sequence[dict] | None = None, device: str | None = None,
                     spans: Sequence[dict] = ()) -> FrozenTrial:
        """Record a trial's outcome, folds and per-epoch values in one transaction."""
        return self.finish_trials([dict(
            trial_id=trial_id, status=status, value=value, value_std=value_std,
            fold_values=fold_values, metrics=metrics, error=error, duration=duration,
            intermediate=intermediate, fold_metrics=fold_metrics, device=device,
            spans=spans)])[0]

    def finish_trials(self, outcomes: Sequence[dict], started: Sequence[int] = ()) -> list[FrozenTrial]:
        """Several finish_trial calls (dicts of its keyword arguments) in one transaction:
        results that arrive together cost one commit. All or none are written.
        started: trials sent ahead (created with started=False) that their groups began
        as these results came in; their start is noted in the same commit."""
        now, prepared = _now(), _prepared(outcomes)
        with self._writing_core() as conn:
            _writes.mark_started(conn, started, now)
            return _writes.finish_many(conn, prepared, now, self.shown_url)

    def finish_and_create(self, outcomes: Sequence[dict], study_id: int,
                          requests: Sequence[dict], started: Sequence[int] = ()
                          ) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
        """finish_trials and create_trials in one transaction: when every group of a batch
        already runs the trial it was sent ahead, nothing has to leave before the write,
        and one commit records the results, those starts and the next trials sent ahead."""
        prepared = _prepared(outcomes)
        requests = [{**r, "suggest_seconds": finite_or_none(r.get("suggest_seconds"))}
                    for r in requests]
        for attempt in range(NUMBER_RETRIES):
            try:
                now = _now()
                with self._writing_core() as conn:
                    _writes.mark_started(conn, started, now)
                    finished = _writes.finish_many(conn, prepared, now, self.shown_url)
                    made = (_writes.insert_trials(conn, study_id, requests, now, self.shown_url)
                            if requests else [])
                return finished, made
            except StorageError as exc:     # a trial number taken meanwhile: all rolled back
                if not isinstance(exc.__cause__, sa_exc.IntegrityError) or \
                        attempt == NUMBER_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def add_intermediate(self, trial_id: int, epoch: int, value: float) -> None:
        with self._writing_core() as conn:
            _writes.add_epoch(conn, trial_id, epoch, value, self.shown_url)

    def interrupt_running(self, study_id: int, keep=()) -> int:
        """RUNNING trials become INTERRUPTED; returns how many. PENDING ones (queued by
        `mpiopt enqueue`, never started) stay queued for the next job. Trial ids in `keep`
        stay RUNNING: their rank died under them, and the resume counts a lost attempt."""
        with self._writing() as s:
            where = [TrialModel.study_id == study_id, TrialModel.status == TrialStatus.RUNNING]
            if keep:
                where.append(TrialModel.id.not_in(list(keep)))
            done = s.execute(update(TrialModel).where(*where)
                             .values(status=TrialStatus.INTERRUPTED, finished_at=_now()))
            return done.rowcount

    def note_lost_attempts(self, study_id: int) -> list[FrozenTrial]:
        """Resume after a job that died: each RUNNING trial counts one lost attempt and
        becomes INTERRUPTED, in one transaction. Returns those trials, updated. A trial
        sent ahead that never started (no start time) was not running: it becomes
        INTERRUPTED without a lost attempt and is not returned."""
        with self._writing() as s:
            rows = s.scalars(_with_children(select(TrialModel).where(
                TrialModel.study_id == study_id, TrialModel.status == TrialStatus.RUNNING))).all()
            for row in rows:
                if row.started_at is not None:
                    row.lost_attempts = (row.lost_attempts or 0) + 1
                row.status, row.finished_at = TrialStatus.INTERRUPTED, _now()
            s.flush()
            return [to_frozen(row) for row in sorted(rows, key=lambda r: r.number)
                    if row.started_at is not None]

    # ---- trial reads -------------------------------------------------------------------
    def get_trials(self, study_id: int, statuses: Iterable[TrialStatus] | None = None,
                   order_by: str = "number", limit: int | None = None,
                   descending: bool = False) -> list[FrozenTrial]:
        """Trials of a study; order_by="value" puts trials without a value last."""
        if order_by not in ("number", "value"):
            raise StorageError(f"order_by must be 'number' or 'value', not {order_by!r}")
        stmt = _with_children(select(TrialModel).where(TrialModel.study_id == study_id))
        if statuses is not None:
            stmt = stmt.where(TrialModel.status.in_([TrialStatus(x) for x in statuses]))
        number = TrialModel.number.desc() if descending else TrialModel.number
        if order_by == "value":
            value = TrialModel.value.desc() if descending else TrialModel.value
            stmt = stmt.order_by(TrialModel.value.is_(None), value, TrialModel.number)
        else:
            stmt = stmt.order_by(number)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._reading() as s:
            return [to_frozen(r) for r in s.scalars(stmt).all()]

    def get_trial(self, study_id: int, number: int) -> FrozenTrial:
        stmt = _with_children(select(TrialModel).where(TrialModel.study_id == study_id,
                                                       TrialModel.number == number))
        with self._reading() as s:
            row = s.scalar(stmt)
            if row is None:
                count = s.scalar(select(func.count()).where(TrialModel.study_id == study_id))
                span = f"numbers 0..{count - 1}" if count else "no trials yet"
                raise StorageError(f"the study has no trial {number} ({span})")
            return to_frozen(row)

    def get_trial_by_id(self, trial_id: int) -> FrozenTrial:
        with self._reading() as s:
            return to_frozen(self._trial_row(s, trial_id))

    def best_trials(self, study_id: int, k: int = 1) -> list[FrozenTrial]:
        """The k best COMPLETE trials in the study's direction (ties: lower number first)."""
        with self._reading() as s:
            direction = self._require_study(s, study_id).direction
        return self.get_trials(study_id, [TrialStatus.COMPLETE], order_by="value", limit=k,
                               descending=direction == "maximize")

    def count_trials(self, study_id: int) -> dict[TrialStatus, int]:
        counts = _zero_counts()
        with self._reading() as s:
            rows = s.execute(select(TrialModel.status, func.count())
                             .where(TrialModel.study_id == study_id)
                             .group_by(TrialModel.status)).all()
        for status, n in rows:
            counts[TrialStatus(status)] = n
        return counts

    def group_activity(self, study_id: int) -> list[dict]:
        """Per group: its host, when it last started or finished a trial, the trial it
        runs now (None when idle) and how many were sent ahead to it (RUNNING, not yet
        started), for `mpiopt status`."""
        last = func.max(func.coalesce(TrialModel.finished_at, TrialModel.started_at))
        with self._reading() as s:
            rows = s.execute(select(TrialModel.group, last, func.max(TrialModel.started_at))
                             .where(TrialModel.study_id == study_id, TrialModel.group.is_not(None))
                             .group_by(TrialModel.group).order_by(TrialModel.group)).all()
            unfinished = s.execute(select(TrialModel.group, TrialModel.number,
                                          TrialModel.started_at).where(
                TrialModel.study_id == study_id,
                TrialModel.status == TrialStatus.RUNNING)).all()
            hosts = dict(s.execute(select(TrialModel.group, TrialModel.host).where(
                TrialModel.study_id == study_id).order_by(TrialModel.started_at)).all())
        # a RUNNING row without a start is a trial sent ahead: it waits for its group
        running = {g: n for g, n, started in unfinished if started is not None}
        ahead = Counter(g for g, _, started in unfinished if started is None)
        out = []
        for group, last_finish, last_start in rows:
            moments = [m for m in (last_finish, last_start) if m is not None]
            if not moments:
                continue
            at = max(m if m.tzinfo else m.replace(tzinfo=timezone.utc) for m in moments)
            out.append({"group": group, "host": hosts.get(group), "last_at": at,
                        "running": running.get(group), "ahead": ahead.get(group, 0)})
        return out

    # ---- helpers -----------------------------------------------------------------------
    def _require_study(self, s: Session, study_id: int) -> StudyModel:
        row = s.get(StudyModel, study_id)
        if row is None:
            raise StorageError(f"no study with id {study_id} in {self.shown_url}")
        return row

    def _trial_row(self, s: Session, trial_id: int) -> TrialModel:
        row = s.scalar(_with_children(select(TrialModel).where(TrialModel.id == trial_id)))
        if row is None:
            raise StorageError(f"no trial with id {trial_id} in {self.shown_url}")
        return row


def _zero_counts() -> dict[TrialStatus, int]:
    return {status: 0 for status in TrialStatus}


def _pick(extremes, direction: str) -> float | None:
    if not extremes:
        return None
    return extremes[1] if direction == "maximize" else extremes[0]


def _unknown(name: str, known: Sequence[str], url: str) -> str:
    if not known:
        return f"unknown study '{name}': {url} holds no studies"
    return f"unknown study '{name}'; known studies: {', '.join(known)}"


def _short(text: str | None) -> str | None:
    """A device name fits its column (255 characters) whatever a driver reports."""
    return None if text is None else str(text)[:NAME_LEN]


def _prepared(outcomes: Sequence[dict]) -> list[tuple]:
    """finish_trial keyword dicts as rows for _writes.finish_many (checked, encoded)."""
    prepared = []
    for o in outcomes:
        status = TrialStatus(o["status"])
        if status in (TrialStatus.RUNNING, TrialStatus.PENDING):
            raise StorageError(f"finish_trial needs a final status, not {status.value}")
        prepared.append((o["trial_id"], status, {
            "value": finite_or_none(o.get("value")),
            "value_std": finite_or_none(o.get("value_std")), "error": cut(o.get("error")),
            "metrics_json": dump_json(o.get("metrics")), "duration": o.get("duration"),
            "device": _short(o.get("device")), "spans_json": dump_spans(o.get("spans"))},
            o.get("fold_values") or (), o.get("fold_metrics") or (), o.get("intermediate") or {}))
    return prepared
