"""When the next result that needs rank 0 is due, so the coordinator polls finely then.

The coordinator sleeps between probes with a growing backoff (at most 5 ms, a few percent
of a core), so a result that comes while it sleeps waits up to that long; a group that
has no trial sent ahead (the last wave, slow searchers, queued sets, re-runs) waits with
it. Trials of one study tend to last alike, so a result is expected at its trial's start
plus the median of the recent durations. From LEAD_S before that until WINDOW_S after,
the coordinator polls every EAGER_POLL_S; otherwise it sleeps no later than the next
window's start. A trial that runs past its window is no longer expected: the ordinary
backoff applies. The cost is bounded per trial: about (LEAD_S + WINDOW_S) / EAGER_POLL_S
wake-ups of tens of microseconds each, 1-3 ms of CPU per trial, whatever its length.

Pure bookkeeping (no MPI): the scheduler notes starts and durations, the loop asks.
"""
from __future__ import annotations

import statistics
from collections import deque
from typing import Callable

HISTORY = 16          # recent durations the expectation is the median of
LEAD_S = 1e-3         # fine polling starts this long before a result is expected
WINDOW_S = 10e-3      # ... and ends this long after
EAGER_POLL_S = 2.5e-4


class Forecast:
    def __init__(self):
        self.durations: deque[float] = deque(maxlen=HISTORY)
        self.starts: deque[tuple[float, int, int]] = deque()   # (start, group, trial id), in start order
        self._typical: float | None = None

    def began(self, group: int, trial_id: int, at: float) -> None:
        self.starts.append((at, group, trial_id))

    def ended(self, seconds: float) -> None:
        self.durations.append(max(0.0, seconds))
        self._typical = statistics.median(self.durations)

    def due_in(self, now: float, waits: Callable[[int, int], bool]) -> float | None:
        """Seconds until the earliest expected result of a trial whose group will wait for
        rank 0 (`waits(group, trial_id)`); <= 0 while it is due; None when no result is
        expected (no duration known yet, or every expected one is past its window).
        Starts are in time order, so the earliest is at the front: amortized O(1)."""
        typical = self._typical
        if typical is None:
            return None
        while self.starts:
            at, group, trial_id = self.starts[0]
            if at + typical + WINDOW_S < now or not waits(group, trial_id):
                self.starts.popleft()
                continue
            return at + typical - now
        return None

    def sleep_s(self, now: float, waits: Callable[[int, int], bool], backoff_s: float) -> float:
        """How long the loop sleeps before its next probe: EAGER_POLL_S inside a window,
        else the backoff's sleep cut short at the next window's start."""
        due = self.due_in(now, waits)
        if due is None:
            return backoff_s
        if due <= LEAD_S:
            return EAGER_POLL_S
        return min(backoff_s, due - LEAD_S)
