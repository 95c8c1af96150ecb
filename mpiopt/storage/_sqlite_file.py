"""A SQLite database's file, watched: deleted or replaced while a job runs, it must not be
written any more.

A process that keeps a SQLite file open goes on writing to it after `rm` (into an inode
no name leads to: every result lost) or after `mv other.db study.db` (its connections
still write the old file, and a new connection opens the other one beside this job's
-wal and -shm, which then lay this job's pages over the other database's). So before each
write transaction, and before any new connection is opened, the path's (st_dev, st_ino)
is compared with the file's at open: one stat. On a difference the job's write-ahead log
is checkpointed into the file it belongs to and emptied (so no other process's
connection to the new file can read it as its own), and DatabaseGone is raised.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from mpiopt.errors import DatabaseGone


class SqliteFile:
    """The identity of the file at `path` when the database was opened."""

    def __init__(self, path: Path):
        self.path = Path(os.path.abspath(path))
        self.identity = self._identity()
        self.gone: str | None = None       # why, once it was found gone
        self._lock = threading.Lock()

    def _identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def check(self, let_go=lambda: None) -> None:
        """DatabaseGone if the path no longer leads to the file opened; `let_go()` runs
        once, on the first finding (the write-ahead log emptied into the old file)."""
        if self.gone is None:
            now = self._identity()
            if now == self.identity:
                return
            with self._lock:
                if self.gone is None:
                    what = "deleted" if now is None else "replaced by another file"
                    self.gone = (f"{self.path} was {what} while this job ran: it is no longer "
                                 "the database this job opened, and this job writes nothing "
                                 "more to it")
                    let_go()
        raise DatabaseGone(self.gone)
