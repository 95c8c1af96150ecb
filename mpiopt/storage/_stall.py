"""A PostgreSQL server that stops answering, without closing its connections, is an outage.

Why: a server that is frozen (SIGSTOP, a paused virtual machine, a hung disk under it) or
cut off by a firewall that drops packets leaves a statement waiting in a socket read that
no libpq setting ends: the kernel still acknowledges the packets and the keepalives of a
stopped process, and statement_timeout is the server's to enforce. The coordinator waited
there without a word and deaf to SIGTERM (its flag is read between calls) for as long as
the freeze lasted: 150 s of silence for a 150 s freeze, for ever for a server that never
comes back, while Slurm's SIGKILL took the result it held.

How: every database call of a Storage runs inside `busy(engine)`. A watch thread looks
twice a second while a call runs (it sleeps while none does, and ends after IDLE_S); a
call older than STALL_S (HURRIED_S once the job is stopping) makes it open a fresh
connection with a short timeout. A server that answers (even to refuse one: too many clients) is alive, and its
own lock_timeout and statement_timeout bound the wait. One that does not answer within
PROBE_S is not: the watch shuts down the sockets of every connection of the pool (the
idle ones are as dead), the waiting call fails with "server closed the connection", and
storage/resilient.py rides that out as any outage (its retries, the recovery file past
storage.retry_timeout, a stop signal heard within a second).
"""
from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from contextlib import contextmanager, nullcontext

from sqlalchemy import event

STALL_S = 5.0         # a call this old makes the watch ask whether the server answers
HURRIED_S = 1.0       # ... once a stop signal came (Slurm's SIGKILL follows in 30 s)
PROBE_S = 4.0         # how long a fresh connection may take (libpq's minimum is 2 s)
DOWN_CONNECT_S = 2    # connect_timeout while the server is known not to answer
LOOK_S = 0.5
IDLE_S = 60.0         # the watch thread ends after this long without a call

_WATCHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # pool -> StallWatch


def watch_engine(engine, stall_s: float = STALL_S, probe_s: float = PROBE_S) -> None:
    """Watch the calls on `engine`'s pool (PostgreSQL engines: mpiopt.storage._engine)."""
    _WATCHES[engine.pool] = StallWatch(engine, stall_s, probe_s)


def hurry_when(engine, stopping) -> None:
    """`stopping()`: whether the job is ending (a stop signal came); a call then counts as
    stalled after HURRIED_S (storage/resilient.py gives it)."""
    watch = _watch(engine)
    if watch is not None:
        watch.stopping = stopping


def busy(engine):
    """A database call on `engine` (or an engine sharing its pool) is under way."""
    watch = _watch(engine)
    return watch.call() if watch is not None else nullcontext()


def _watch(engine) -> "StallWatch | None":
    pool = getattr(engine, "pool", None)
    return _WATCHES.get(pool) if pool is not None else None


class StallWatch:
    def __init__(self, engine, stall_s: float, probe_s: float):
        # the dialect and URL, not the engine: the watch must not keep its pool alive (it
        # is the value of a weak-keyed map, and its thread ends once idle: IDLE_S)
        self.dialect, self.url = engine.dialect, engine.url
        self.stall_s, self.probe_s = float(stall_s), float(probe_s)
        self._calls: dict[int, float] = {}        # call -> when it started (or was cleared)
        self._conns: "weakref.WeakSet" = weakref.WeakSet()    # the pool's DBAPI connections
        self._lock = threading.Condition()      # (the watch sleeps on it while no call runs)
        self._thread: threading.Thread | None = None
        self._next = 0
        self.shut = 0                             # connections shut down (for the tests)
        self.down = False          # the last probe went unanswered, and no connect since
        self.stopping = lambda: False
        event.listen(engine, "connect", self._connected)
        event.listen(engine, "do_connect", self._connecting)

    def _connected(self, dbapi_conn, _record) -> None:
        self._conns.add(dbapi_conn)
        self.down = False

    def _connecting(self, _dialect, _record, _cargs, cparams) -> None:
        """While the server is known not to answer, a reconnect fails in DOWN_CONNECT_S
        rather than the usual connect_timeout, so the retries and a stopping job's last
        calls do not wait 10 s each."""
        if self.down:
            cparams["connect_timeout"] = min(int(cparams.get("connect_timeout", 10)),
                                             DOWN_CONNECT_S)

    @contextmanager
    def call(self):
        with self._lock:
            key, self._next = self._next, self._next + 1
            self._calls[key] = time.monotonic()
            self._lock.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._look, name="mpiopt-db-watch",
                                                daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._calls.pop(key, None)

    def _look(self) -> None:
        """The watch thread (a daemon: it never keeps a process alive). It looks every
        LOOK_S while a call runs, sleeps on the condition while none does, and ends after
        IDLE_S without one (a process that opens many storages keeps no thread for each)."""
        while True:
            with self._lock:
                if not self._calls and not self._lock.wait_for(lambda: self._calls, IDLE_S):
                    self._thread = None         # (the next call starts another)
                    return
            time.sleep(LOOK_S)
            now = time.monotonic()
            limit = HURRIED_S if _quietly_true(self.stopping) else self.stall_s
            with self._lock:
                stalled = [k for k, since in self._calls.items() if now - since >= limit]
            if not stalled:
                continue
            alive = self._answers()
            with self._lock:
                for key in stalled:
                    if key in self._calls:
                        self._calls[key] = time.monotonic()    # (asked again after STALL_S)
                self.down = not alive
                if not alive:
                    for conn in list(self._conns):
                        self.shut += _shut_down(conn)

    def _answers(self) -> bool:
        """Whether the server answers a fresh connection within PROBE_S; an error it sends
        back (too many clients, a password refused) is an answer."""
        dialect = self.dialect
        cargs, cparams = dialect.create_connect_args(self.url)
        cparams = {**cparams, "connect_timeout": max(2, int(self.probe_s))}
        started = time.monotonic()
        try:
            dialect.connect(*cargs, **cparams).close()
            return True
        except Exception as exc:
            took = time.monotonic() - started
            return took < self.probe_s - 0.5 and "timeout" not in str(exc).lower()


def _quietly_true(check) -> bool:
    try:
        return bool(check())
    except Exception:
        return False


def _shut_down(dbapi_conn) -> int:
    """Shut the connection's socket down (not close it: the driver owns the descriptor),
    so a call waiting on it fails at once as on a server gone."""
    try:
        fd = dbapi_conn.fileno()
    except Exception:
        return 0                                   # (closed already)
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return 0
    try:
        sock.shutdown(socket.SHUT_RDWR)
        return 1
    except OSError:
        return 0
    finally:
        sock.close()
