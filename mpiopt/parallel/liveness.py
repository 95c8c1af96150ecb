"""What ends a wait when the peer is gone: heartbeats between rank 0 and the other ranks.

The launcher normally ends the whole job when one process dies (MPICH's hydra when the
dead process's PMI socket closes, Slurm, Open MPI). It does not always: hydra was seen to
miss a rank killed by `os._exit` about once in a few hundred jobs, and a process stopped
or stuck outside Python (SIGSTOP, a driver call) never dies at all. Then the coordinator
would wait for ever for that group's result, or the groups for a coordinator that is gone.

So every rank other than 0 sends ALIVE to rank 0 from a thread every `period`, and rank 0
sends ALIVE to the group leaders. A rank silent for `limit` seconds (MPIOPT_SILENCE_LIMIT,
default 60) is taken for dead: the coordinator ends the job (the dead group's trial stays
RUNNING, so the resume counts a lost attempt), and a leader that no longer hears the
coordinator prints one line and ends the job with MPI_Abort. Members need no watch of
their own: a dead leader or coordinator ends the job, members included.

A thread sends because the main thread may be inside user code for hours; it needs
MPI_THREAD_MULTIPLE (mpi4py's default). Where the MPI library gives less, there are no
heartbeats and the launcher alone ends the job. A limit well above the period keeps a
thread that waits for the GIL (a C extension holding it) from being taken for dead.

A silence can be the watcher's own: a rank stopped (SIGSTOP, a suspended VM, a swapped
node) and continued finds every peer "silent" for as long as it was itself frozen. A
healthy job was ended that way, its coordinator blaming the groups. So a watcher that
notices a jump of its own clock between two of its looks (more than FROZEN_PERIODS beats:
its own thread did not run) takes the silence for its own and gives every peer a fresh
limit. And a leader that finds the coordinator silent, but stopped on its own host
(state T in /proc: a Ctrl-Z, a scheduler's suspend, someone's decision that a SIGCONT
will likely follow), waits for it up to STOPPED_LIMITS times the limit before it ends the
job; a coordinator that died, or is stuck while running, still ends it after the limit.
One seen stopped and then running again was continued: its first beat after the SIGCONT
may still be on the way, so it gets a fresh limit from the moment it was seen running.
"""
from __future__ import annotations

import os
import socket
import threading
import time

from mpiopt.parallel.protocol import Tag

from mpiopt.knobs import SILENCE_LIMIT

FROZEN_PERIODS = 3      # a watcher that did not look for this many beats was frozen itself
STOPPED_LIMITS = 5      # how many limits a leader waits for a coordinator stopped on its host


def silence_limit() -> float:
    """Seconds without a heartbeat after which a rank is taken for dead."""
    return SILENCE_LIMIT.get()


def period_for(limit: float) -> float:
    """A heartbeat every limit/12 (5 s at the default): many beats may be late or lost
    to a busy GIL before a live rank looks dead, and a beat costs one small message."""
    return limit / 12.0


def threads_ok() -> bool:
    """Whether MPI lets a second thread send while the main one is in MPI calls."""
    from mpi4py import MPI

    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


class Liveness:
    """Rank 0's view: when each watched rank was last heard from. The heartbeat thread
    calls heard(), the coordinator's loop silent(); a lock keeps the two apart."""

    def __init__(self, ranks, limit: float, clock=time.monotonic):
        self.limit, self.clock = limit, clock
        now = clock()
        self.last = {r: now for r in ranks}
        self.next_check = now + min(1.0, limit)
        self.looked = now                     # when rank 0 last looked (thread or loop)
        self.frozen_after = FROZEN_PERIODS * period_for(limit)
        self._lock = threading.Lock()

    def look(self) -> None:
        """Rank 0 is awake now (its heartbeat thread calls this every beat, its loop at
        each silent()): after a gap past frozen_after, rank 0 itself was frozen, and
        every rank gets a fresh limit from now."""
        now = self.clock()
        with self._lock:
            if now - self.looked > self.frozen_after:
                self.last = dict.fromkeys(self.last, now)
            self.looked = now

    def heard(self, rank: int) -> None:
        with self._lock:
            if rank in self.last:
                self.last[rank] = self.clock()

    def forget(self, rank: int) -> None:
        """A rank that said BYE is no longer watched."""
        with self._lock:
            self.last.pop(rank, None)

    def silent(self) -> list[int]:
        """Ranks silent past the limit (looked at about once a second)."""
        self.look()
        now = self.clock()
        if now < self.next_check:
            return []
        self.next_check = now + min(1.0, self.limit)
        with self._lock:
            return sorted(r for r, t in self.last.items() if now - t > self.limit)


class CoordinatorSilence:
    """A leader's judgement of rank 0's silence (pure: `stopped()` says whether rank 0's
    process is stopped now, `clock` gives seconds). `over()` is the silence in seconds
    once it should end the job, else None."""

    def __init__(self, limit: float, stopped, clock=time.monotonic):
        self.limit, self.stopped, self.clock = limit, stopped, clock
        self.last = clock()
        self.seen_stopped = False

    def heard(self) -> None:
        """A beat from rank 0, or this rank's own freeze: the silence starts again."""
        self.last = self.clock()
        self.seen_stopped = False

    def over(self) -> float | None:
        """Looked at every beat: a stop is noted as soon as it is seen, so a coordinator
        stopped for less than the limit and continued is known as continued too."""
        silent = self.clock() - self.last
        if self.stopped():
            self.seen_stopped = True
            return silent if silent > STOPPED_LIMITS * self.limit else None
        if silent <= self.limit:
            return None
        if self.seen_stopped:                    # continued since: its beat may be on the way
            self.heard()
            return None
        return silent


class Heartbeat:
    """A daemon thread on `comm` (a duplicate of the world, so beats never meet the
    protocol's messages): every `period` it sends ALIVE to each of `targets()` and hands
    the source of every ALIVE that came in to `heard(source)`.

    Sends are non-blocking, and a target whose last beat is still in flight gets no new
    one, so a dead peer can never block the thread. `lock` is held while sending: the
    coordinator takes it to send STOP, so no beat follows a STOP. With `on_silent`, the
    thread watches rank 0: silent past `limit`, it calls on_silent(seconds) and ends."""

    def __init__(self, comm, targets, period: float, heard=None, lock=None,
                 limit: float | None = None, on_silent=None, look=None, coordinator=None):
        self.comm, self.targets, self.period = comm, targets, period
        self.heard = heard or (lambda source: None)
        self.look = look or (lambda: None)
        self.me = (socket.gethostname(), os.getpid())     # each beat says who sends it
        self.coordinator = coordinator    # rank 0's (host, pid): from the start-up, or its beats
        self.lock = lock or threading.Lock()
        self.limit, self.on_silent = limit, on_silent
        self.silence = CoordinatorSilence(limit or 0.0, lambda: _stopped_here(self.coordinator))
        self._inflight: dict[int, object] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mpiopt-alive", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating (before BYE, or as the coordinator ends); returns within a beat."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        looked = time.monotonic()
        while not self._stop.wait(self.period):
            self.look()
            now = time.monotonic()
            if now - looked > FROZEN_PERIODS * self.period:
                self.silence.heard()                 # the silence was this rank's own
            looked = now
            with self.lock:
                if self._stop.is_set():
                    return
                self._beat()
            self._listen()
            if self.on_silent is not None and (silent := self.silence.over()) is not None:
                self.on_silent(silent)
                return

    def _beat(self) -> None:
        for rank in self.targets():
            req = self._inflight.get(rank)
            if req is None or req.Test():
                self._inflight[rank] = self.comm.isend(self.me, dest=rank, tag=Tag.ALIVE)

    def _listen(self) -> None:
        """Every ALIVE already here (a matched probe: the receive takes exactly the message
        found, so it never waits; senders have at most one beat in flight each)."""
        from mpi4py import MPI

        status = MPI.Status()
        while (message := self.comm.improbe(tag=Tag.ALIVE, status=status)) is not None:
            sender = message.recv()
            source = status.Get_source()
            if source == 0:
                self.silence.heard()
                self.coordinator = sender
            self.heard(source)


class Watch:
    """Rank 0's side, started as soon as the ranks exist (before the searcher is built, so
    a long set-up never looks like a dead coordinator): beats to the group leaders that
    have not been sent STOP, and the Liveness of every other rank."""

    def __init__(self, comm, leaders, size: int, limit: float):
        self.lock = threading.Lock()          # held to send STOP: no beat follows a STOP
        self.stopped: set[int] = set()
        self.liveness = Liveness(range(1, size), limit)
        self.heartbeat = Heartbeat(comm, lambda: [r for r in leaders if r not in self.stopped],
                                   period_for(limit), heard=self.liveness.heard, lock=self.lock,
                                   look=self.liveness.look)

    def start(self) -> "Watch":
        self.heartbeat.start()
        return self

    def stop(self) -> None:
        self.heartbeat.stop()


def _stopped_here(peer) -> bool:
    """Whether `peer` ((host, pid) from its beats) is a process on this host that is
    stopped (state T or t in /proc). Any doubt (another host, another pid namespace, no
    /proc) is False: the silence then counts as it always did."""
    if not peer or peer[0] != socket.gethostname():
        return False
    try:
        with open(f"/proc/{int(peer[1])}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError, ValueError, TypeError):
        return False
    return state in ("T", "t")
