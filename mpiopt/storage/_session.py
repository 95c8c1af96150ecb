"""The one place that owns commit, rollback, close and database-error translation."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from mpiopt.errors import MpioptError, StorageError


@contextmanager
def session_scope(factory: sessionmaker, where: str) -> Iterator[Session]:
    """One transaction: committed on success, rolled back on any error, always closed.

    Database failures become StorageError with one line naming `where` (the URL), so the
    CLI prints them without a traceback; our own MpioptErrors pass through unchanged.
    """
    session = factory()
    try:
        with _translated(where, session.rollback):
            yield session
            session.commit()
    finally:
        session.close()


@contextmanager
def connection_scope(engine: Engine, where: str) -> Iterator[Connection]:
    """session_scope for Core statements on a bare connection, with no ORM Session.

    The coordinator's per-trial writes use it: a Session's setup, identity map and
    commit bookkeeping cost more than the few statements it would run.
    """
    conn = engine.connect()
    try:
        with _translated(where, conn.rollback):
            yield conn
            conn.commit()
    finally:
        conn.close()


@contextmanager
def _translated(where: str, rollback) -> Iterator[None]:
    """Roll back on any error; database errors become one-line StorageErrors."""
    try:
        yield
    except MpioptError:
        rollback()
        raise
    except sa_exc.DBAPIError as exc:
        rollback()
        raise StorageError(f"{where}: {describe(exc)}") from exc
    except BaseException:
        rollback()
        raise


def describe(exc: sa_exc.DBAPIError) -> str:
    """The driver's own message, first line only (SQLAlchemy appends SQL and a link)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    message = text[0] if text else type(exc).__name__
    if "locked" in message:
        message += " (another process held the write lock too long)"
    return message
