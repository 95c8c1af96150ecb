"""Engines for any SQLAlchemy URL, with SQLite tuned so readers never block on the writer.

The in-memory storage is this same SQL code on SQLite's in-memory database (`sqlite://`
or `sqlite:///:memory:`, the spellings SQLAlchemy and Optuna users know): its one
connection is held by one thread at a time (OneHolderPool), so every session of the
engine sees one database and the contract's "one transaction per call, from any thread"
holds on it too. One implementation of the contract, not two: the conformance suite that
holds the file and server engines holds this one, and nothing is kept in step by hand.
A new open of the URL is a new, empty database (as a new InMemoryStorage is in Optuna);
it lives as long as its engine.

SQLite: WAL journal (readers see a snapshot while the coordinator writes), a busy timeout
(a writer waits for a lock instead of failing at once), foreign keys on. pysqlite's own
transaction handling is switched off and SQLAlchemy emits BEGIN itself: reads use a plain
BEGIN, writes use BEGIN IMMEDIATE so a read-then-write transaction (dense trial numbers)
takes the write lock up front and waits on the busy timeout instead of failing mid-way.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from mpiopt.errors import StorageError
from mpiopt.storage._stall import watch_engine
from mpiopt.storage._urls import StorageURL, mask_url


def _busy_timeout_ms() -> int:
    """How long one SQLite statement waits for a lock before it is a (transient) error that
    storage/resilient.py retries: MPIOPT_SQLITE_BUSY_MS, default 30 s."""
    from mpiopt.knobs import SQLITE_BUSY_MS

    return SQLITE_BUSY_MS.get()


BUSY_TIMEOUT_MS = _busy_timeout_ms()
CONNECT_TIMEOUT_S = 10
LOCK_TIMEOUT_MS = 30_000
STATEMENT_TIMEOUT_MS = 300_000
WRITE_OPTION = "mpiopt_write"


def check_exists(url: "str | StorageURL", create: bool) -> None:
    """Before anything connects: a missing SQLite file is an error unless asked to create
    it, and then its directory must exist (a typo in a path must not make a new tree);
    an existing empty file is refused (it is not ours, and connecting would write it)."""
    path = StorageURL.parse(url).sqlite_path
    if path is None:
        return
    if create:
        if not path.parent.is_dir():
            raise StorageError(f"the directory {path.parent.resolve()} of the results database "
                               f"does not exist ({url}): create it, or fix the path")
        if path.is_file() and path.stat().st_size == 0:
            raise StorageError(f"{path.resolve()} is an empty file, not an mpiopt results "
                               "database: remove it, or name a file that does not exist yet "
                               "(mpiopt creates it)")
    elif not path.is_file():
        raise StorageError(f"no results database at {path.resolve()} ({url}): check --storage, "
                           "or start a study with `mpiopt search`")


def make_engine(url: "str | StorageURL", read_only: bool = False) -> Engine:
    """An engine for `url`; `read_only` never writes: PostgreSQL sessions are read-only
    transactions, a SQLite file is opened with mode=ro and its journal mode left alone."""
    url = StorageURL.parse(url)
    parsed = _parse(url)
    if parsed.get_backend_name() != "sqlite":
        kwargs = {"pool_pre_ping": True}
        if parsed.get_backend_name() == "postgresql":
            # No wait without an end: a server that does not answer (a network partition)
            # fails a connect after 10 s, a lock held by someone else after 30 s, a
            # statement after 5 min, and TCP keepalives notice a server gone mid-query
            # within a minute; all are transient errors that storage/resilient.py retries,
            # within storage.retry_timeout.
            kwargs["connect_args"] = {
                "connect_timeout": CONNECT_TIMEOUT_S,
                "options": f"-c lock_timeout={LOCK_TIMEOUT_MS} -c statement_timeout={STATEMENT_TIMEOUT_MS}",
                "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                "keepalives_count": 3}
            if read_only:
                kwargs["execution_options"] = {"postgresql_readonly": True}
        engine = create_engine(parsed, **kwargs)
        if parsed.get_backend_name() == "postgresql":
            watch_engine(engine)      # a server that stops answering (mpiopt.storage._stall)
        return engine
    kwargs = {"connect_args": {"timeout": BUSY_TIMEOUT_MS / 1000}}
    path = url.sqlite_path
    if path is None and not parsed.query.get("uri"):
        kwargs["poolclass"] = OneHolderPool   # one in-memory database shared by all sessions
        kwargs["connect_args"]["check_same_thread"] = False
    elif path is not None and read_only:
        mode = "ro&immutable=1" if _unchanging(path) else "ro"
        parsed = parsed.set(database=f"file:{path.resolve()}?mode={mode}",
                            query={**parsed.query, "uri": "true"})
    engine = create_engine(parsed, **kwargs)
    _tune_sqlite(engine, read_only)
    return engine


class OneHolderPool(StaticPool):
    """The in-memory database's one connection, held by one thread from checkout to
    checkin: two threads on it at once would run their statements inside each other's
    transactions. Re-entrant, since a thread may open a read inside its own write; there
    is no peer to lose (the holder is this process), so the wait ends when the holder's
    transaction does."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._holder = threading.RLock()

    def _do_get(self):
        self._holder.acquire()
        try:
            return super()._do_get()
        except BaseException:
            self._holder.release()
            raise

    def _do_return_conn(self, record) -> None:
        try:
            super()._do_return_conn(record)
        finally:
            self._holder.release()


def _unchanging(path: Path) -> bool:
    """A database in a folder this process cannot write (a read-only share or archive, a
    colleague's folder) with no write-ahead log beside it: no job writes it now (a writer
    keeps its -wal there while it runs), and SQLite could not open it at all, since a
    reader of a WAL database must create its -shm file there. Read as immutable."""
    folder = path.resolve().parent
    wal = path.with_name(path.name + "-wal")
    try:
        return (not os.access(folder, os.W_OK) and path.is_file()
                and (not wal.exists() or wal.stat().st_size == 0)
                and not path.with_name(path.name + "-shm").exists())
    except OSError:
        return False


def writer(engine: Engine) -> Engine:
    """The same engine (same pool) whose transactions start as writes."""
    return engine.execution_options(**{WRITE_OPTION: True})


def _tune_sqlite(engine: Engine, read_only: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None     # SQLAlchemy, not pysqlite, emits BEGIN
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not read_only:                     # switching the journal mode writes the file
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        write = conn.get_execution_options().get(WRITE_OPTION)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _parse(url: "str | StorageURL"):
    try:
        return make_url(str(url))
    except ArgumentError as exc:
        raise StorageError(f"not a database URL: {mask_url(url)!r} (expected e.g. "
                           "sqlite:///mpiopt.db)") from exc
