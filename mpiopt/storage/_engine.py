"""Engines for any SQLAlchemy URL, with SQLite tuned so readers never block on the writer.

SQLite: WAL journal (readers see a snapshot while the coordinator writes), a busy timeout
(a writer waits for a lock instead of failing at once), foreign keys on. pysqlite's own
transaction handling is switched off and SQLAlchemy emits BEGIN itself: reads use a plain
BEGIN, writes use BEGIN IMMEDIATE so a read-then-write transaction (dense trial numbers)
takes the write lock up front and waits on the busy timeout instead of failing mid-way.
"""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from mpiopt.errors import StorageError

BUSY_TIMEOUT_MS = 30_000
WRITE_OPTION = "mpiopt_write"


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL; None for other backends and in-memory databases."""
    parsed = _parse(url)
    if not parsed.get_backend_name() == "sqlite":
        return None
    database = parsed.database or ""
    if database in ("", ":memory:") or parsed.query.get("uri") or database.startswith("file:"):
        return None
    return Path(database)


def check_exists(url: str, create: bool) -> None:
    """Refuse a missing SQLite file unless asked to create it (then make its directory)."""
    path = sqlite_path(url)
    if path is None:
        return
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.is_file():
        raise StorageError(f"no results database at {path.resolve()} ({url}): check --storage, "
                           "or start a study with `mpiopt search`")


def make_engine(url: str) -> Engine:
    parsed = _parse(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True)
    kwargs = {"connect_args": {"timeout": BUSY_TIMEOUT_MS / 1000}}
    if sqlite_path(url) is None and not parsed.query.get("uri"):
        kwargs["poolclass"] = StaticPool      # one in-memory database shared by all sessions
        kwargs["connect_args"]["check_same_thread"] = False
    engine = create_engine(parsed, **kwargs)
    _tune_sqlite(engine)
    return engine


def writer(engine: Engine) -> Engine:
    """The same engine (same pool) whose transactions start as writes."""
    return engine.execution_options(**{WRITE_OPTION: True})


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None     # SQLAlchemy, not pysqlite, emits BEGIN
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        write = conn.get_execution_options().get(WRITE_OPTION)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _parse(url: str):
    try:
        return make_url(url)
    except ArgumentError as exc:
        raise StorageError(f"not a database URL: {url!r} (expected e.g. sqlite:///mpiopt.db)") \
            from exc
