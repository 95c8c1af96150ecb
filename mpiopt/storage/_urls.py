"""Database URLs as users see them: checked before anything connects, never shown with a
password.

check_url() runs on rank 0 before any rank does anything: a URL that cannot work (MySQL,
a driver that is not installed) is one line naming what to do, and nothing is written.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from mpiopt.errors import StorageError

# The Python package behind each driver name, and what to install to get it.
_DRIVERS = {
    "psycopg": ("psycopg", "pip install 'psycopg[binary]'"),
    "psycopg2": ("psycopg2", "pip install psycopg2-binary"),
    "pg8000": ("pg8000", "pip install pg8000"),
    "asyncpg": ("asyncpg", "pip install asyncpg"),
    "pysqlite": ("sqlite3", "a Python built with sqlite3"),
}
_DEFAULT_DRIVER = {"postgresql": "psycopg2", "sqlite": "pysqlite"}


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***; anything unparsable is returned as is."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.password is None:
        return url
    return parsed.render_as_string(hide_password=True)


def canonical_url(url: str) -> str:
    """One spelling per database: an SQLite file's absolute path (a relative one counts
    from the working directory, as everywhere), no password; for keys, never shown."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        parsed = parsed.set(database=str(Path(parsed.database).expanduser().resolve()))
    return parsed._replace(password=None, drivername=parsed.get_backend_name()).render_as_string()


def database_key(url: str) -> str:
    """A short name of the database itself (canonical_url, hashed): recovery files carry
    it, since the trial ids in their lines mean other trials in another database."""
    import hashlib

    return hashlib.sha256(canonical_url(url).encode()).hexdigest()[:12]


def check_url(url: str) -> None:
    """Refuse, without connecting, a URL that cannot work: one line, status 2."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StorageError(f"not a database URL: {mask_url(url)!r} (expected e.g. "
                           "sqlite:///mpiopt.db or postgresql+psycopg://user@host/db)") from None
    backend = parsed.get_backend_name()
    if backend in ("mysql", "mariadb"):
        raise StorageError(f"{mask_url(url)}: MySQL/MariaDB is not supported; use SQLite or "
                           "PostgreSQL")
    if backend not in ("sqlite", "postgresql"):
        raise StorageError(f"{mask_url(url)}: the {backend!r} database is not supported; use "
                           "SQLite or PostgreSQL")
    driver = parsed.get_driver_name() or _DEFAULT_DRIVER[backend]
    module, install = _DRIVERS.get(driver, (driver, f"pip install {driver}"))
    if importlib.util.find_spec(module) is None:
        raise StorageError(f"{mask_url(url)}: the database driver {driver!r} is not installed "
                           f"({install})")
    try:
        parsed.get_dialect()
    except NoSuchModuleError:
        raise StorageError(f"{mask_url(url)}: SQLAlchemy has no driver {driver!r} for "
                           f"{backend}") from None
