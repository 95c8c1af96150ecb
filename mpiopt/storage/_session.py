"""The one place that owns commit, rollback, close and database-error translation."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from mpiopt.errors import MpioptError, StorageError, StorageUnavailable
from mpiopt.storage._stall import busy


@contextmanager
def session_scope(factory: sessionmaker, where: str) -> Iterator[Session]:
    """One transaction: committed on success, rolled back on any error, always closed.

    Database failures become StorageError with one line naming `where` (the URL), so the
    CLI prints them without a traceback; our own MpioptErrors pass through unchanged.
    """
    session = factory()
    try:
        with busy(factory.kw.get("bind")), _translated(where, session.rollback):
            yield session
            session.commit()
    finally:
        _quietly(session.close)


@contextmanager
def connection_scope(engine: Engine, where: str) -> Iterator[Connection]:
    """session_scope for Core statements on a bare connection, with no ORM Session.

    The coordinator's per-trial writes use it: a Session's setup, identity map and
    commit bookkeeping cost more than the few statements it would run.
    """
    with busy(engine):
        with _translated(where, lambda: None):     # a refused connection is translated too
            conn = engine.connect()
        try:
            with _translated(where, conn.rollback):
                yield conn
                conn.commit()
        finally:
            _quietly(conn.close)


@contextmanager
def _translated(where: str, rollback) -> Iterator[None]:
    """Roll back on any error; database errors become one-line StorageErrors."""
    try:
        yield
    except MpioptError:
        _quietly(rollback)
        raise
    except sa_exc.DBAPIError as exc:
        _quietly(rollback)           # on a dead connection the rollback fails as well
        kind = StorageUnavailable if is_transient(exc) else StorageError
        raise kind(f"{where}: {describe(exc)}") from exc
    except BaseException:
        _quietly(rollback)
        raise


def _quietly(action) -> None:
    try:
        action()
    except Exception:
        pass


# SQLSTATE classes that say "try again": connection exception, transaction rollback
# (serialization failure, deadlock), insufficient resources, operator intervention
# (server shutting down or starting up).
_TRANSIENT_SQLSTATE = ("08", "40", "53", "57")
_TRANSIENT_WORDS = ("locked", "busy", "connection", "connect", "server closed", "timeout",
                    "timed out", "terminating", "shutting down", "starting up", "recovery mode",
                    # SQLite's file, not the statement: a full disk or quota (PostgreSQL's
                    # 53100 is in class 53), an I/O error of a network file system, a file
                    # system remounted read-only; ridden out like an outage, so a result
                    # that cannot be written waits, then goes to the recovery file (it was
                    # lost: "the study's loop failed", and the trial ran again on resume)
                    "disk is full", "disk i/o error", "readonly database",
                    "unable to open database file")


def is_transient(exc: sa_exc.DBAPIError) -> bool:
    """A failure of the database's availability, not of the statement: retry it."""
    if getattr(exc, "connection_invalidated", False):
        return True
    orig = getattr(exc, "orig", None)
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state:
        return str(state)[:2] in _TRANSIENT_SQLSTATE or str(state) == "55P03"  # lock timeout
    if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError)):
        message = str(orig or exc).lower()
        return any(word in message for word in _TRANSIENT_WORDS)
    return False


def describe(exc: sa_exc.DBAPIError) -> str:
    """The driver's own message, first line only (SQLAlchemy appends SQL and a link)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    message = text[0] if text else type(exc).__name__
    if "too many clients" in message or "remaining connection slots" in message:
        message += (" (every connection the server allows is taken, by other jobs or tools: "
                    "wait for some to end, or raise the server's max_connections)")
    elif "locked" in message:
        message += (" (another process held the write lock too long: a job suspended with"
                    " Ctrl-Z or stuck mid-write keeps it until it goes on or ends)")
    return message
