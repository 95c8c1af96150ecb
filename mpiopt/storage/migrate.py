"""Alembic, configured in code: find the migration scripts, upgrade, report the revision.

The scripts live in the top-level alembic/ directory of a checkout and ship inside wheels
as the package mpiopt._alembic (see setup.cfg). No alembic.ini is needed.

Alembic itself is imported only to migrate or to name the revisions a database may hold:
every command opens a database, nearly always one already at head, and importing alembic
is a large part of a query command's start. The head and the database's revision are
read without it (the scripts are numbered and linear: revision "NNNN" lives in
versions/NNNN_*.py, which tests/test_migrations.py holds them to).
"""
from __future__ import annotations

import contextlib

from pathlib import Path

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


def make_config(engine: Engine | None = None):
    """Alembic's Config for the scripts (and the engine's database, if given)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    cfg.set_main_option("path_separator", "os")
    if engine is not None:
        cfg.set_main_option("sqlalchemy.url",
                            engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """The newest script's revision, from the scripts' numbered file names."""
    return max(p.name[:4] for p in (script_location() / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))


def current_revision(engine: Engine) -> str | None:
    """The revision stamped in the database (alembic's version table); None when it was
    never migrated."""
    with engine.connect() as conn:
        return _stamped(conn)


def _stamped(conn) -> str | None:
    if not inspect(conn).has_table(_VERSION_TABLE):
        return None
    rows = conn.exec_driver_sql(f"SELECT version_num FROM {_VERSION_TABLE}").scalars().all()
    if len(rows) > 1:
        raise StorageError(f"the database is stamped with several schema revisions "
                           f"({', '.join(sorted(rows))}); mpiopt's migrations are one line")
    return rows[0] if rows else None


_VERSION_TABLE = "alembic_version"     # alembic's default, which env.py keeps


def table_names(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(inspect(conn).get_table_names())


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

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
    from alembic import command
    from alembic.util import CommandError

    cfg = make_config(engine)
    with writer(engine).connect() as conn, _no_cascades(conn), conn.begin():
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        if revision == "head" and _stamped(conn) == head_revision():
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


def _explain(exc, engine: Engine) -> str:  # render_as_string hides the password
    if "Can't locate revision" in str(exc):
        return newer_message(engine.url.render_as_string(), current_revision(engine),
                             head_revision())
    return f"{engine.url.render_as_string()}: migration failed: {exc}"
