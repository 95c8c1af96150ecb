"""Storage: the SQL implementation of the storage contract (storage/_base.py), for
SQLite and PostgreSQL.

Every public method is one short transaction (session_scope; the per-trial writes use
connection_scope with the Core statements of _writes). Before each write transaction a
SQLite database's file is checked to still be the one opened (storage/_sqlite_file.py).
"""
from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterable, Sequence

from sqlalchemy import delete, event, func, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from mpiopt import jsontext
from mpiopt.errors import DuplicateStudyError, StorageError, TrialTaken, UnknownStudyError
from mpiopt.storage import _jobs, _queries, _studies, _writes
from mpiopt.storage._base import BaseStorage
from mpiopt.storage._convert import (Changes, StudyRecord, dump_json, finite_or_none,
                                     prepared_outcomes, to_frozen, to_record,
                                     with_children as _with_children)
from mpiopt.storage._jobs import JobMethods
from mpiopt.storage._engine import writer
from mpiopt.storage._session import connection_scope, session_scope
from mpiopt.storage._sqlite_file import SqliteFile
from mpiopt.storage._stall import hurry_when
from mpiopt.storage.models import StudyModel, TrialFoldModel, TrialIntermediateModel, TrialModel
from mpiopt.trial import FrozenTrial, Step, StudyStatus, TrialStatus

DIRECTIONS = ("minimize", "maximize")
NUMBER_RETRIES = 5


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Storage(JobMethods, BaseStorage):
    """Studies and trials in one SQL database (any SQLAlchemy URL; see open_storage)."""

    def __init__(self, engine: Engine, url):
        super().__init__(url)
        self.engine = engine
        path = self.location.sqlite_path
        self.file = SqliteFile(path) if path is not None else None
        if self.file is not None and self.file.identity is not None:
            event.listen(engine, "do_connect", lambda *args: self.file.check(self._let_go))
        self._read = sessionmaker(engine, expire_on_commit=False)
        self._writer = writer(engine)
        self._write = sessionmaker(self._writer, expire_on_commit=False)
        # (job id, token) once a job joined its study (mpiopt.run.study_run): from then on
        # every write transaction first checks that the job is still live with that token
        # (storage/_jobs.py), and the trials it creates, takes or restarts are the job's
        self.fence: tuple[int, str] | None = None
        self.lost: str | None = None      # why, once a write or a heartbeat found it taken

    def close(self) -> None:
        self.engine.dispose()

    def stop_waiting_when(self, should_stop) -> None:
        hurry_when(self.engine, should_stop)

    def _reading(self):
        return session_scope(self._read, self.shown_url)

    def _check_file(self) -> None:
        """Before a write: the SQLite file is still the one opened (storage/_sqlite_file)."""
        if self.file is not None and self.file.identity is not None:
            self.file.check(self._let_go)

    def _let_go(self) -> None:
        """The file is gone: this job's write-ahead log goes into the file it belongs to
        (through a connection opened before, on the old file) and is emptied, so that
        nothing of it is read as the new file's. Best effort: a busy log stays."""
        try:
            raw = self.engine.raw_connection()
        except Exception:
            return
        try:
            raw.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except Exception:
            pass
        finally:
            raw.close()

    @contextmanager
    def _writing(self):
        self._check_file()
        with session_scope(self._write, self.shown_url) as session:
            self._check_fence(session.connection())
            yield session

    @contextmanager
    def _writing_core(self, fenced: bool = True):
        """A write transaction for Core statements (the per-trial hot path, see _writes)."""
        self._check_file()
        with connection_scope(self._writer, self.shown_url) as conn:
            if fenced:
                self._check_fence(conn)
            yield conn

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
        duplicate = DuplicateStudyError(f"study '{name}' already exists in {self.shown_url}")
        try:
            with self._writing() as s:
                if s.scalar(select(StudyModel.id).where(StudyModel.name == name)) is not None:
                    raise duplicate
                s.add(row)
                s.flush()
                if enqueued:
                    _studies.enqueue(s.connection(), row.id, enqueued, now, self.shown_url)
                return row.id
        except StorageError as exc:   # (PostgreSQL: another job inserted the name after
            if exc is duplicate or not isinstance(exc.__cause__, sa_exc.IntegrityError):
                raise                 # the look above, as jobs of an array do at once)
            with self._reading() as s:
                if s.scalar(select(StudyModel.id).where(StudyModel.name == name)) is None:
                    raise
            raise duplicate from None

    def get_study(self, name: str) -> StudyRecord:
        with self._reading() as s:
            row = s.scalar(select(StudyModel).where(StudyModel.name == name))
            if row is None:
                known = s.scalars(select(StudyModel.name).order_by(StudyModel.name)).all()
                raise UnknownStudyError(_queries.unknown(name, known, self.shown_url))
            return to_record(row, lease=_jobs.leases(s.connection(), [row.id]).get(row.id))

    def list_studies(self) -> list[StudyRecord]:
        """Every study with its trial counts per status and best COMPLETE value."""
        with self._reading() as s:
            return _queries.list_studies(s)

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
        self._update_study(study_id, recovery=jsontext.exact([str(p) for p in places]))

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

    def take_pending(self, requests: Sequence[dict], limit: int | None = None) -> list:
        """Queued trials become RUNNING for this job (the fence's), in one transaction:
        dicts of trial_id, seed, group, host, rank (and started=False for one sent ahead).
        Without `limit`: returns those taken (a trial no longer PENDING, deleted or taken
        before, is left out). With it: only as many as the study's budget has left are
        taken, and the answer is aligned with `requests` (None where none was taken)."""
        now, taken = _now(), []
        with self._writing_core() as conn:
            left = self._budget_left(conn, requests, limit)
            for r in requests:
                if left is not None and left <= 0:
                    taken.append(None)
                    continue
                ok = _studies.take(conn, r["trial_id"], r.get("seed"), r.get("group"),
                                   r.get("host"), r.get("rank"), now, r.get("started", True),
                                   self.fenced_job)
                taken.append(r["trial_id"] if ok else None)
                left = None if left is None else left - ok
        got = [None if t is None else self.get_trial_by_id(t) for t in taken]
        return got if limit is not None else [t for t in got if t is not None]

    def _budget_left(self, conn, requests, limit) -> int | None:
        """How many trials the budget still allows (take_pending: the requests' study
        locked first), or None without a limit."""
        if limit is None or not requests:
            return None
        sid = conn.execute(select(TrialModel.study_id).where(
            TrialModel.id.in_([r["trial_id"] for r in requests])).limit(1)).scalar()
        if sid is None:
            return 0
        _jobs.lock_study(conn, sid, self.shown_url)
        return len(_jobs.budgeted(conn, sid, [{}] * len(requests), limit, False))

    def retry_failed(self, study_id: int) -> list[int]:
        """FAILED trials become RETRIED and their parameter sets are queued again, in one
        transaction; returns the numbers of the trials marked."""
        with self._writing_core() as conn:
            return _studies.retry_failed(conn, study_id, _now(), self.shown_url)

    # ---- trial writes (the coordinator) ------------------------------------------------
    def create_trials(self, study_id: int, requests: Sequence[dict], limit: int | None = None,
                      distinct: bool = False) -> list:
        """Several create_trial calls (dicts of its keyword arguments, and "key": the
        parameter set's key) in one transaction, numbered in order: many groups that
        become idle together cost one commit. With `limit` or `distinct`, the budget and
        the keys decide which are made (storage/_jobs.budgeted) under the study's lock,
        and the answer is aligned with `requests` (None where none was made). SQLite
        serialises writers (BEGIN IMMEDIATE), PostgreSQL the study's row lock, so max+1 is
        safe; a concurrent writer that still trips the (study_id, number) constraint is
        tried again."""
        for attempt in range(NUMBER_RETRIES):
            try:
                with self._writing_core() as conn:
                    return self._insert_trials(conn, study_id, requests, limit, distinct)
            except StorageError as exc:
                if not isinstance(exc.__cause__, sa_exc.IntegrityError) or \
                        attempt == NUMBER_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def _insert_trials(self, conn, study_id, requests, limit, distinct) -> list:
        """create_trials inside the caller's transaction."""
        now = _now()
        requests = [{**r, "suggest_seconds": finite_or_none(r.get("suggest_seconds"))}
                    for r in requests]
        if limit is None and not distinct:
            return _writes.insert_trials(conn, study_id, requests, now, self.shown_url,
                                         self.fenced_job) if requests else []
        _jobs.lock_study(conn, study_id, self.shown_url)
        chosen = _jobs.budgeted(conn, study_id, requests, limit, distinct)
        made = _writes.insert_trials(conn, study_id, [requests[i] for i in chosen], now,
                                     self.shown_url, self.fenced_job) if chosen else []
        return _jobs.aligned(requests, chosen, made)

    def restart_trial(self, trial_id: int, group: int | None,
                      host: str | None = None, rank: int | None = None,
                      keep_intermediate: bool = False) -> FrozenTrial:
        """Claim an INTERRUPTED trial and run it again for this job (the fence's): a new
        attempt, its old results dropped. The status is checked in the UPDATE itself, so of
        two jobs claiming one trial one wins; the other (and a claim of a trial RUNNING or
        finished) gets TrialTaken. keep_intermediate: its per-epoch values stay (it
        continues from a checkpoint; the epochs it trains again are merged by
        add_intermediate)."""
        trials = TrialModel.__table__
        with self._writing() as s:
            done = s.execute(update(trials).where(
                trials.c.id == trial_id, trials.c.status == TrialStatus.INTERRUPTED).values(
                status=TrialStatus.RUNNING, attempt=trials.c.attempt + 1, group_index=group,
                host=host, rank=rank, started_at=_now(), finished_at=None, duration=None,
                value=None, value_std=None, error=None, metrics_json=None,
                job_id=self.fenced_job))
            if done.rowcount != 1:
                row = self._trial_row(s, trial_id)
                raise TrialTaken(
                    f"trial {row.number} is {TrialStatus(row.status).value}"
                    + (f" for job {row.job_id}" if row.job_id is not None else "")
                    + "; only an INTERRUPTED trial can be claimed to run again")
            s.execute(delete(TrialFoldModel).where(TrialFoldModel.trial_id == trial_id))
            if not keep_intermediate:
                s.execute(delete(TrialIntermediateModel)
                          .where(TrialIntermediateModel.trial_id == trial_id))
            return to_frozen(self._trial_row(s, trial_id))

    def finish_trials(self, outcomes: Sequence[dict], started: Sequence[int] = ()) -> list[FrozenTrial]:
        """Several finish_trial calls (dicts of its keyword arguments) in one transaction:
        results that arrive together cost one commit. All or none are written.
        started: trials sent ahead (created with started=False) that their groups began
        as these results came in; their start is noted in the same commit."""
        now, prepared = _now(), prepared_outcomes(outcomes)
        with self._writing_core() as conn:
            _writes.mark_started(conn, started, now)
            return _writes.finish_many(conn, prepared, now, self.shown_url)

    def finish_and_create(self, outcomes: Sequence[dict], study_id: int,
                          requests: Sequence[dict], started: Sequence[int] = (),
                          limit: int | None = None, distinct: bool = False
                          ) -> tuple[list[FrozenTrial], list]:
        """finish_trials and create_trials in one transaction: when every group of a batch
        already runs the trial it was sent ahead, nothing has to leave before the write,
        and one commit records the results, those starts and the next trials sent ahead.
        The results are written first, so the budget (`limit`) counts them."""
        prepared = prepared_outcomes(outcomes)
        for attempt in range(NUMBER_RETRIES):
            try:
                now = _now()
                with self._writing_core() as conn:
                    _writes.mark_started(conn, started, now)
                    finished = (_writes.finish_many(conn, prepared, now, self.shown_url)
                                if prepared else [])
                    made = self._insert_trials(conn, study_id, requests, limit, distinct)
                return finished, made
            except StorageError as exc:     # a trial number taken meanwhile: all rolled back
                if not isinstance(exc.__cause__, sa_exc.IntegrityError) or \
                        attempt == NUMBER_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def add_intermediate(self, trial_id: int, epoch: int, value: float, fold: int = 0) -> None:
        with self._writing_core() as conn:
            _writes.add_epoch(conn, trial_id, Step(int(fold), int(epoch)), value, self.shown_url)

    def interrupt_running(self, study_id: int, keep=()) -> int:
        """RUNNING trials become INTERRUPTED; returns how many. With a fence, only this
        job's: the others' trials run on. PENDING ones (queued by `mpiopt enqueue`, never
        started) stay queued for the next job. Trial ids in `keep` stay RUNNING: their
        rank died under them, and take_orphans counts them a lost attempt once this job
        has ended."""
        with self._writing() as s:
            where = [TrialModel.study_id == study_id, TrialModel.status == TrialStatus.RUNNING]
            if self.fence is not None:
                where.append(TrialModel.job_id == self.fenced_job)
            if keep:
                where.append(TrialModel.id.not_in(list(keep)))
            done = s.execute(update(TrialModel).where(*where)
                             .values(status=TrialStatus.INTERRUPTED, finished_at=_now()))
            return done.rowcount

    def changes(self, study_id: int, since: datetime | None) -> Changes:
        """See BaseStorage.changes: one read transaction (storage/_queries.changes)."""
        with self._reading() as s:
            return _queries.changes(s, study_id, since, _now())

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

    def study_direction(self, study_id: int) -> str:
        with self._reading() as s:
            return self._require_study(s, study_id).direction

    def count_trials(self, study_id: int) -> dict[TrialStatus, int]:
        counts = _queries.zero_counts()
        with self._reading() as s:
            rows = s.execute(select(TrialModel.status, func.count())
                             .where(TrialModel.study_id == study_id)
                             .group_by(TrialModel.status)).all()
        for status, n in rows:
            counts[TrialStatus(status)] = n
        return counts

    def group_activity(self, study_id: int) -> list[dict]:
        """Per group of each job ("job", "group"): its host, when it last started or
        finished a trial, the trial it runs now (None when idle) and how many were sent
        ahead to it (RUNNING, not yet started), for `mpiopt status`."""
        with self._reading() as s:
            return _queries.group_activity(s, study_id)

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
