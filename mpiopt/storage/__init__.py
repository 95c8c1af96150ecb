"""The results database: open_storage() and the Storage repository.

    >>> from mpiopt.storage import open_storage
    >>> with open_storage("sqlite://", create=True) as st:   # in memory
    ...     sid = st.create_study("demo", "minimize", "value", "study: {name: demo}", "0" * 64, "{}")
    ...     st.create_trial(sid, {"x": 0.5}, seed=1, group=0).number
    0

Trial numbers start at 0 and are dense per study.
"""
from __future__ import annotations

from sqlalchemy import exc as sa_exc

from mpiopt.errors import StorageError
from mpiopt.storage import migrate
from mpiopt.storage._convert import StudyRecord
from mpiopt.storage._engine import check_exists, make_engine, sqlite_path
from mpiopt.storage._rdb import DuplicateStudyError, Storage
from mpiopt.storage._session import describe
from mpiopt.storage._urls import check_url, mask_url


def open_storage(url: str, create: bool = False) -> Storage:
    """Open the database at `url`, migrating its schema to the newest revision.

    Without `create`, a missing SQLite file or a database without mpiopt's schema is a
    StorageError naming it: query commands never leave an empty database behind.
    """
    check_exists(url, create)
    engine = make_engine(url)
    try:
        if not create and migrate.current_revision(engine) is None:
            raise StorageError(f"{_where(url)} is not an mpiopt results database "
                               "(it has no schema revision)")
        migrate.ensure_current(engine)
    except sa_exc.DBAPIError as exc:
        engine.dispose()
        raise StorageError(f"{_where(url)}: {describe(exc)}") from exc
    except BaseException:
        engine.dispose()
        raise
    return Storage(engine, url)


def _where(url: str) -> str:
    path = sqlite_path(url)
    return str(path) if path is not None else mask_url(url)


__all__ = ["DuplicateStudyError", "Storage", "StudyRecord", "check_url", "mask_url",
           "open_storage", "migrate"]
