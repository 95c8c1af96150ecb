"""Waiting without spinning: every wait here is a cheap non-blocking probe followed by a
growing sleep (mpiopt.backoff says why)."""
from __future__ import annotations

import time

from mpi4py import MPI

from mpiopt.backoff import Backoff

from mpiopt.parallel.protocol import Tag


def probe(comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) -> MPI.Status | None:
    """Status of a waiting message, or None (never blocks).

    One Iprobe per call. Two in a row see a message sooner, since MPICH's first often
    only moves it along, but each costs tens of microseconds, paid on every wake-up of a
    rank that waits: a waiter that must see a message at once (the coordinator's loop)
    calls it twice; the others wait one sleep longer and stay cheap (the figures:
    benchmarks/results/scheduling.md)."""
    status = MPI.Status()
    return status if comm.Iprobe(source=source, tag=tag, status=status) else None


def wait_message(comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, backoff: Backoff | None = None,
                 limit_s: float | None = None):
    """Receive the next matching message, sleeping between probes. Returns (obj, status);
    TimeoutError when `limit_s` seconds pass first (a wait whose peer has no heartbeat yet)."""
    backoff = backoff or Backoff()
    deadline = None if limit_s is None else time.monotonic() + limit_s
    while True:
        status = probe(comm, source, tag)
        if status is not None:
            obj = comm.recv(source=status.Get_source(), tag=status.Get_tag())
            return obj, status
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"nothing from rank {source} within {limit_s:.0f}s")
        backoff.sleep()


def meet(comm, limit_s: float) -> bool:
    """Wait, sleeping between tests, until every rank of `comm` has called meet() (a
    non-blocking barrier); False when `limit_s` seconds pass first (the request is left
    to MPI_Finalize, whose own bound then applies)."""
    request = comm.Ibarrier()
    deadline = time.monotonic() + limit_s
    backoff = Backoff(limit=0.05)
    while not request.Test():
        if time.monotonic() >= deadline:
            return False
        backoff.sleep()
    return True


def quiet_bcast(comm, obj=None, root: int = 0, tag: int = 0, limit_s: float | None = None):
    """Broadcast a small object so that receivers sleep while the root is still working
    (TimeoutError on a receiver after `limit_s`)."""
    if comm.Get_rank() == root:
        for rank in range(comm.Get_size()):
            if rank != root:
                comm.send(obj, dest=rank, tag=tag)
        return obj
    obj, _ = wait_message(comm, source=root, tag=tag, limit_s=limit_s)
    return obj


def send_ready(world, error: str | None, info: dict | None = None) -> None:
    """Step 2 of start-up, on a rank other than 0: READY, or the one-line error."""
    world.send({"error": error, **(info or {})}, dest=0, tag=Tag.READY)


def gather_ready(world, own_error: str | None = None, limit_s: float = 600.0, say=None,
                 say_after_s: float = 30.0) -> tuple[list[str], list[dict], list[int]]:
    """On rank 0: every other rank's READY (sleeping between probes). Returns the errors,
    rank 0's own first, every READY payload, and the ranks still silent after `limit_s`
    (a rank stuck in an import: the caller ends the job). `say(line)` hears, once, which
    ranks are still setting up after `say_after_s`."""
    errors = [own_error] if own_error else []
    payloads = []
    waiting = set(range(1, world.Get_size()))
    start = time.monotonic()
    said = False
    backoff = Backoff(limit=0.05)
    while waiting:
        status = probe(world, tag=Tag.READY)
        if status is None:
            waited = time.monotonic() - start
            if waited >= limit_s:
                break
            if say and not said and waited >= say_after_s:
                said = True
                say(f"waiting for rank(s) {_ranks(waiting)} to set up the objective "
                    f"({waited:.0f}s so far)")
            backoff.sleep()
            continue
        msg = world.recv(source=status.Get_source(), tag=Tag.READY)
        waiting.discard(status.Get_source())
        payloads.append(msg)
        if msg.get("error"):
            errors.append(msg["error"])
        backoff.reset()
    return errors, payloads, sorted(waiting)


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
