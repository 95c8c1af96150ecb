"""The one place that owns commit, rollback, close and database-error translation."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import exc as sa_exc
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
        yield session
        session.commit()
    except MpioptError:
        session.rollback()
        raise
    except sa_exc.DBAPIError as exc:
        session.rollback()
        raise StorageError(f"{where}: {describe(exc)}") from exc
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def describe(exc: sa_exc.DBAPIError) -> str:
    """The driver's own message, first line only (SQLAlchemy appends SQL and a link)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    message = text[0] if text else type(exc).__name__
    if "locked" in message:
        message += " (another process held the write lock too long)"
    return message
