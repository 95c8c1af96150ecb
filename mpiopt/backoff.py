"""The one way mpiopt waits for something that is not there yet: poll, then sleep a little
longer each time.

MPICH and Open MPI busy-poll inside blocking calls, so a rank that blocks burns a core that
a training rank on the same node needs. A sleep that grows from tens of microseconds to a
cap sees a reply that comes at once at once, and a long wait costs well under 1% of a core.
Used by the coordinator's and groups' waits (parallel/waiting.py) and by the training
algorithms' non-blocking exchanges (training/_algorithm.py, training/downpour.py).
"""
from __future__ import annotations

import time


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
