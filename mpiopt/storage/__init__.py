"""The results database: open_storage() and the Storage repository.

    >>> from mpiopt.storage import open_storage
    >>> with open_storage("sqlite://", create=True) as st:   # in memory
    ...     sid = st.create_study("demo", "minimize", "value", "study: {name: demo}", "0" * 64, "{}")
    ...     st.create_trial(sid, {"x": 0.5}, seed=1, group=0).number
    0

Trial numbers start at 0 and are dense per study. The contract every storage keeps is
BaseStorage's (storage/_base.py); a URL is a StorageURL (storage/_urls.py), parsed once.
"""
from __future__ import annotations

from sqlalchemy import exc as sa_exc

from mpiopt.errors import StorageError
from mpiopt.storage import migrate
from mpiopt.storage._convert import Changes, Job, StudyRecord
from mpiopt.storage._base import BaseStorage
from mpiopt.storage._engine import check_exists, make_engine
from mpiopt.storage._rdb import DuplicateStudyError, Storage
from mpiopt.storage._session import describe
from mpiopt.storage._urls import StorageURL, check_url, mask_url


def open_storage(url: "str | StorageURL", create: bool = False, read_only: bool = False) -> Storage:
    """Open the database at `url`, migrating its schema to the newest revision.

    - `create` (a study starts): a missing SQLite file is created, in a directory that
      must exist; an empty database gets the schema. A database that holds other tables
      and no mpiopt schema, or an existing empty file, is refused: it is someone else's.
    - without `create`: a missing file or a database without mpiopt's schema is a
      StorageError naming it; query commands never leave an empty database behind.
    - `read_only` (query commands): the database is never written, migrated or switched
      to another journal mode; an older schema says to run `mpiopt db upgrade`.
    """
    url = StorageURL.parse(url)
    check_exists(url, create)
    path = url.sqlite_path
    if path is not None and create and not path.exists():
        _create_sqlite(url, path)
    elif path is not None and path.is_file() and not read_only:
        _look_first(url, create)     # before a writer's connection switches it to WAL
    engine = make_engine(url, read_only=read_only)
    try:
        _check_schema(engine, url, create, read_only)
    except sa_exc.DBAPIError as exc:
        engine.dispose()
        raise StorageError(f"{_where(url)}: {describe(exc)}") from exc
    except BaseException:
        engine.dispose()
        raise
    return Storage(engine, url)


def _create_sqlite(url: StorageURL, path) -> None:
    """A new SQLite database appears whole or not at all: it is built and migrated under a
    temporary name, then linked into place (atomic; the first of several jobs starting at
    once wins and the others open its file). No job ever sees a half-made database."""
    import os

    tmp = path.with_name(f".{path.name}.{os.getpid()}.creating")
    text = url.text
    engine = make_engine(text.replace(str(path), str(tmp)) if str(path) in text else f"sqlite:///{tmp}")
    try:
        migrate.upgrade(engine)
        with engine.connect() as conn:       # everything into the main file before the link
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    except sa_exc.DBAPIError as exc:
        raise StorageError(f"{_where(url)}: {describe(exc)}") from exc
    finally:
        engine.dispose()
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            leftover.unlink(missing_ok=True)


def _look_first(url: StorageURL, create: bool) -> None:
    """Refuse a foreign SQLite file through a read-only connection, so it is not touched."""
    probe = make_engine(url, read_only=True)
    try:
        if migrate.current_revision(probe) is None and (migrate.table_names(probe) or not create):
            _check_schema(probe, url, create, read_only=True)
    except sa_exc.DBAPIError as exc:
        raise StorageError(f"{_where(url)}: {describe(exc)}") from exc
    finally:
        probe.dispose()


def _check_schema(engine, url: StorageURL, create: bool, read_only: bool) -> None:
    current = migrate.current_revision(engine)
    if current is None:
        tables = migrate.table_names(engine)
        if tables:   # another job's first migration may have committed between the reads
            current = migrate.current_revision(engine)
    if current is None:
        if tables:
            shown = ", ".join(tables[:5]) + (" ..." if len(tables) > 5 else "")
            raise StorageError(f"{_where(url)} is not an mpiopt results database: it holds "
                               f"other tables ({shown}) and no mpiopt schema; mpiopt will not "
                               "add its tables to another application's database")
        if not create or read_only:
            raise StorageError(f"{_where(url)} is not an mpiopt results database "
                               "(it has no schema revision)")
    if read_only:
        migrate.check_readable(engine, current, url)
        return
    migrate.ensure_current(engine)


def _where(url: StorageURL) -> str:
    return url.where()


__all__ = ["BaseStorage", "Changes", "DuplicateStudyError", "Job", "Storage", "StorageURL",
           "StudyRecord", "check_url", "mask_url", "open_storage", "migrate"]
