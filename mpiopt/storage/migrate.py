"""Alembic, configured in code: find the migration scripts, upgrade, report the revision.

The scripts live in the top-level alembic/ directory of a checkout and ship inside wheels
as the package mpiopt._alembic (see setup.cfg). No alembic.ini is needed.
"""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import inspect
from sqlalchemy.engine import Engine

import mpiopt
from mpiopt.errors import StorageError
from mpiopt.storage._engine import writer


def script_location() -> Path:
    """mpiopt/_alembic in an installed wheel, else <checkout>/alembic."""
    package = Path(mpiopt.__file__).resolve().parent
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


def is_empty(engine: Engine) -> bool:
    with engine.connect() as conn:
        return not inspect(conn).get_table_names()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate to `revision` in one write transaction (SQLite DDL is transactional)."""
    cfg = make_config(engine)
    with writer(engine).begin() as conn:
        cfg.attributes["connection"] = conn
        try:
            command.upgrade(cfg, revision)
        except CommandError as exc:
            raise StorageError(_explain(exc, engine)) from exc


def ensure_current(engine: Engine) -> None:
    """Upgrade only when behind: a reader at head never takes the write lock."""
    if current_revision(engine) != head_revision():
        upgrade(engine)


def _explain(exc: CommandError, engine: Engine) -> str:  # render_as_string hides the password
    if "Can't locate revision" in str(exc):
        return (f"{engine.url.render_as_string()}: the database has schema revision "
                f"{current_revision(engine)}, unknown to this mpiopt (head "
                f"{head_revision()}); it was written by a newer mpiopt")
    return f"{engine.url.render_as_string()}: migration failed: {exc}"
