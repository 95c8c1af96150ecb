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
    """Exponential sleep between polls, reset whenever something arrived.

    `eager_s`: for that long after the start (or a reset) the sleep stays at most
    `eager_limit`, for a wait whose answer is due soon (a group that just sent its result
    waits for its next trial; doubling alone would notice a reply after 3 ms up to 3 ms
    late). About 20 polls a millisecond for a few tens of milliseconds: a fraction of a
    millisecond of CPU per wait.
    """

    def __init__(self, first: float = 5e-5, limit: float = 5e-3, eager_s: float = 0.0,
                 eager_limit: float = 2e-4):
        self.first, self.limit = first, limit
        self.eager_s, self.eager_limit = eager_s, eager_limit
        self.delay = first
        self.since = time.monotonic()

    def reset(self) -> None:
        self.delay = self.first
        self.since = time.monotonic()

    def sleep(self, at_most: float | None = None) -> None:
        """Sleep the current delay (or `at_most`, when shorter), then grow the delay."""
        time.sleep(self.delay if at_most is None else min(self.delay, at_most))
        cap = self.limit
        if self.eager_s and time.monotonic() - self.since < self.eager_s:
            cap = min(cap, self.eager_limit)
        self.delay = min(self.delay * 2, cap)
