"""Database URLs as users give them, parsed once into a `StorageURL`: checked before
anything connects, never shown with a password.

    >>> url = StorageURL.parse("postgresql+psycopg://me:secret@db/hpo")
    >>> url.shown, url.backend, url.sqlite_path
    ('postgresql+psycopg://me:***@db/hpo', 'postgresql', None)
    >>> StorageURL.parse("sqlite:///~/runs/opt.db").text.startswith("sqlite:///~")
    False

check() runs on rank 0 before any rank does anything: a URL that cannot work (MySQL, a
driver that is not installed) is one line naming what to do, and nothing is written.
"""
from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from mpiopt.errors import StorageError
from mpiopt.sqlite_urls import expand_home

DEFAULT_URL = "sqlite:///mpiopt.db"


# The Python package behind each driver name, and what to install to get it.
_DRIVERS = {
    "psycopg": ("psycopg", "pip install 'psycopg[binary]'"),
    "psycopg2": ("psycopg2", "pip install psycopg2-binary"),
    "pg8000": ("pg8000", "pip install pg8000"),
    "asyncpg": ("asyncpg", "pip install asyncpg"),
    "pysqlite": ("sqlite3", "a Python built with sqlite3"),
}
_DEFAULT_DRIVER = {"postgresql": "psycopg2", "sqlite": "pysqlite"}


@dataclass(frozen=True)
class StorageURL:
    """One database's URL, parsed once. `text` is the URL to connect with (~ expanded);
    everything else derives from it. A URL SQLAlchemy cannot parse is kept as given
    (`backend` None), so that check() can say what is wrong with it in one line."""

    text: str

    @classmethod
    def parse(cls, url: "str | StorageURL") -> "StorageURL":
        return url if isinstance(url, StorageURL) else cls(expand_home(str(url)))

    @classmethod
    def default(cls, given: "str | StorageURL | None" = None,
                fallback: "str | None" = None) -> "StorageURL":
        """`given` (--storage), else $MPIOPT_STORAGE (a URL with a password need not sit
        in a spec file or a shell history), else `fallback` (the spec's storage), else
        sqlite:///mpiopt.db in the working directory."""
        from mpiopt.knobs import STORAGE

        return cls.parse(given or STORAGE.get() or fallback or DEFAULT_URL)

    def __str__(self) -> str:
        return self.text

    @property
    def _parsed(self) -> URL | None:
        try:
            return make_url(self.text)
        except ArgumentError:
            return None

    @property
    def backend(self) -> str | None:
        """"sqlite", "postgresql", ...; None for text that is no URL."""
        parsed = self._parsed
        return None if parsed is None else parsed.get_backend_name()

    @property
    def sqlite_path(self) -> Path | None:
        """The file behind a SQLite URL (relative ones count from the working directory);
        None for servers, in-memory databases and file: URIs."""
        parsed = self._parsed
        if parsed is None or parsed.get_backend_name() != "sqlite":
            return None
        database = parsed.database or ""
        if database in ("", ":memory:") or parsed.query.get("uri") or database.startswith("file:"):
            return None
        return Path(database)

    @property
    def shown(self) -> str:
        """The URL with its password replaced by ***: what every message and stored spec
        names."""
        parsed = self._parsed
        if parsed is None or parsed.password is None:
            return self.text
        return parsed.render_as_string(hide_password=True)

    @property
    def canonical(self) -> str:
        """One spelling per database: an SQLite file's absolute path, the backend without
        its driver, no password; for keys, never shown."""
        parsed = self._parsed
        if parsed is None:
            return self.text
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            parsed = parsed.set(database=str(Path(parsed.database).expanduser().resolve()))
        return parsed._replace(password=None,
                               drivername=parsed.get_backend_name()).render_as_string()

    @property
    def key(self) -> str:
        """The database's identity, short (canonical, hashed): recovery and kept-result
        files carry it, since the trial ids in their lines mean other trials in another
        database; the home folder's recovery place is named for it."""
        return hashlib.sha256(self.canonical.encode()).hexdigest()[:12]

    def where(self) -> str:
        """The database as a message names it: a SQLite file's path, else the shown URL."""
        path = self.sqlite_path
        return str(path) if path is not None else self.shown

    def check(self) -> None:
        """Refuse, without connecting, a URL that cannot work: one line, status 2."""
        parsed = self._parsed
        if parsed is None:
            raise StorageError(f"not a database URL: {self.shown!r} (expected e.g. "
                               "sqlite:///mpiopt.db or postgresql+psycopg://user@host/db)")
        backend = parsed.get_backend_name()
        if backend in ("mysql", "mariadb"):
            raise StorageError(f"{self.shown}: MySQL/MariaDB is not supported; use SQLite or "
                               "PostgreSQL")
        if backend not in ("sqlite", "postgresql"):
            raise StorageError(f"{self.shown}: the {backend!r} database is not supported; use "
                               "SQLite or PostgreSQL")
        driver = parsed.get_driver_name() or _DEFAULT_DRIVER[backend]
        module, install = _DRIVERS.get(driver, (driver, f"pip install {driver}"))
        if importlib.util.find_spec(module) is None:
            raise StorageError(f"{self.shown}: the database driver {driver!r} is not installed "
                               f"({install})")
        try:
            parsed.get_dialect()
        except NoSuchModuleError:
            raise StorageError(f"{self.shown}: SQLAlchemy has no driver {driver!r} for "
                               f"{backend}") from None


def check_url(url: "str | StorageURL") -> None:
    StorageURL.parse(url).check()


def mask_url(url: "str | StorageURL") -> str:
    """The URL with its password replaced by ***; anything unparsable is returned as is."""
    return StorageURL.parse(url).shown
