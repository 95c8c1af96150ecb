"""Waiting without spinning.

MPICH and Open MPI busy-poll inside blocking receives, so a blocking recv on an idle rank
burns a core that a training rank on the same node needs. Every wait here is a cheap
non-blocking probe followed by a sleep that grows from 50 us to a few milliseconds:
a reply that comes at once is seen at once, and a long wait costs well under 1% of a core.
"""
from __future__ import annotations

import time

from mpi4py import MPI

from mpiopt.parallel.protocol import Tag


class Backoff:
    """Exponential sleep between polls, reset whenever something arrived."""

    def __init__(self, first: float = 5e-5, limit: float = 5e-3):
        self.first, self.limit = first, limit
        self.delay = first

    def reset(self) -> None:
        self.delay = self.first

    def sleep(self) -> None:
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, self.limit)


def probe(comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) -> MPI.Status | None:
    """Status of a waiting message, or None (never blocks)."""
    status = MPI.Status()
    return status if comm.Iprobe(source=source, tag=tag, status=status) else None


def wait_message(comm, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, backoff: Backoff | None = None):
    """Receive the next matching message, sleeping between probes. Returns (obj, status)."""
    backoff = backoff or Backoff()
    while True:
        status = probe(comm, source, tag)
        if status is not None:
            obj = comm.recv(source=status.Get_source(), tag=status.Get_tag())
            return obj, status
        backoff.sleep()


def quiet_bcast(comm, obj=None, root: int = 0, tag: int = 0):
    """Broadcast a small object so that receivers sleep while the root is still working."""
    if comm.Get_rank() == root:
        for rank in range(comm.Get_size()):
            if rank != root:
                comm.send(obj, dest=rank, tag=tag)
        return obj
    obj, _ = wait_message(comm, source=root, tag=tag)
    return obj


def send_ready(world, error: str | None, info: dict | None = None) -> None:
    """Step 2 of start-up, on a rank other than 0: READY, or the one-line error."""
    world.send({"error": error, **(info or {})}, dest=0, tag=Tag.READY)


def gather_ready(world, own_error: str | None = None) -> tuple[list[str], list[dict]]:
    """On rank 0: every other rank's READY (sleeping between probes). Returns the errors,
    rank 0's own first, and every rank's READY payload."""
    errors = [own_error] if own_error else []
    payloads = []
    for _ in range(world.Get_size() - 1):
        msg, _status = wait_message(world, tag=Tag.READY)
        payloads.append(msg)
        if msg.get("error"):
            errors.append(msg["error"])
    return errors, payloads
