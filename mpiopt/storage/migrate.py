"""Alembic, configured in code: find the migration scripts, upgrade, report the revision.

The scripts live in the top-level alembic/ directory of a checkout and ship inside wheels
as the package mpiopt._alembic (see setup.cfg). No alembic.ini is needed.
"""
from __future__ import annotations

import contextlib

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import inspect
from sqlalchemy.engine import Engine

from mpiopt.errors import StorageError
from mpiopt.storage._engine import writer


def script_location() -> Path:
    """mpiopt/_alembic in an installed wheel, else <checkout>/alembic."""
    package = Path(__file__).resolve().parent.parent      # mpiopt/
    shipped = package / "_alembic"
    if (shipped / "env.py").is_file():
        return shipped
    return package.parent / "alembic"


def make_config(engine: Engine | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    cfg.set_main_option("path_separator", "os")
    if engine is not None:
        cfg.set_main_option("sqlalchemy.url",
                            engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def head_revision() -> str:
    return ScriptDirectory.from_config(make_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The revision stamped in the database; None when it was never migrated."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def table_names(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(inspect(conn).get_table_names())


def known_revisions() -> set[str]:
    return {s.revision for s in ScriptDirectory.from_config(make_config()).walk_revisions()}


def check_readable(engine: Engine, current: str | None, url: str) -> None:
    """For read-only opens: the schema must be exactly this mpiopt's (never migrated here)."""
    head = head_revision()
    if current == head:
        return
    shown = engine.url.render_as_string()
    if current not in known_revisions():
        raise StorageError(newer_message(shown, current, head))
    raise StorageError(f"{shown}: the database has schema revision {current}, older than this "
                       f"mpiopt's {head}: run `mpiopt db upgrade --storage ...` first (query "
                       "commands never change the database)")


def newer_message(shown: str, current: str | None, head: str) -> str:
    return (f"{shown}: the database has schema revision {current}, unknown to this mpiopt "
            f"(head {head}); it was written by a newer mpiopt: upgrade mpiopt to use it")


# One constant key for PostgreSQL's advisory lock: every mpiopt job that migrates waits on it.
_MIGRATION_LOCK = 0x6D70696F7074  # "mpiopt"


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate to `revision` in one write transaction (SQLite and PostgreSQL DDL is
    transactional), under a lock that any number of jobs starting at once queue on:
    BEGIN IMMEDIATE on SQLite, a transaction-scoped advisory lock on PostgreSQL. The
    revision is read again under the lock, so only the first job migrates."""
    cfg = make_config(engine)
    with writer(engine).connect() as conn, _no_cascades(conn), conn.begin():
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        if revision == "head" and \
                MigrationContext.configure(conn).get_current_revision() == head_revision():
            return
        cfg.attributes["connection"] = conn
        try:
            command.upgrade(cfg, revision)
        except CommandError as exc:
            raise StorageError(_explain(exc, engine)) from exc


@contextlib.contextmanager
def _no_cascades(conn):
    """SQLite's foreign keys off while migrating: a batch migration copies a table and
    drops the old one, and with them on, dropping `studies` deleted every trial (ON
    DELETE CASCADE). The pragma is set outside a transaction (inside one it does nothing)
    on the DBAPI connection, before SQLAlchemy begins one, and set back after."""
    raw = conn.connection.driver_connection if conn.dialect.name == "sqlite" else None
    if raw is not None:
        raw.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        if raw is not None:
            raw.execute("PRAGMA foreign_keys = ON")


def ensure_current(engine: Engine) -> None:
    """Upgrade only when behind: a reader at head never takes the write lock."""
    if current_revision(engine) != head_revision():
        upgrade(engine)


def _explain(exc: CommandError, engine: Engine) -> str:  # render_as_string hides the password
    if "Can't locate revision" in str(exc):
        return newer_message(engine.url.render_as_string(), current_revision(engine),
                             head_revision())
    return f"{engine.url.render_as_string()}: migration failed: {exc}"
