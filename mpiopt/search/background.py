"""A slow searcher asked beside the coordinator's loop, so no group waits for a model fit.

A Gaussian-process suggestion costs tens to hundreds of milliseconds. Asked in the loop,
every group that finishes during a fit waits for it, and with many groups a good share of
them idles (benchmarks/results/quality_suite.md). Here one thread owns the searcher: it
keeps a stock of suggestions ready, and the coordinator only takes from the stock and
queues tells and forgets (both return at once). The stock holds about as many suggestions as results
arrive during one ask (Little's law: results per second x seconds per ask, both averaged
as the study runs, plus one), at most one per group; every stocked suggestion is pending
in the searcher, so the suggestions after it keep away from it as usual.

A searcher that batches (`Searcher.batches`: one fit, many suggestions) is asked for the
groups' needs at once: the stock's shortfall plus the groups waiting now. Its suggestions
join the stock only when the whole batch is made, so the stock covers the results of two
asks (the one in progress, and the one that refills what they took): 1 + 2 x results
per ask. With 1,000 groups, results come faster than one fit per suggestion could serve
them; one fit per batch of them does (benchmarks/results/simulate.md). Results also come
in bursts (groups started together, trials of one length finish together): the results
per ask are the larger of the average's and the most that came within one ask's time
lately (a peak forgotten by BURST_MEMORY a result), so a burst finds its suggestions
made.

When results come faster than the model can be asked (many groups of short trials on a
loaded node), an idle group may get a random point from the space instead (a "filler",
pending in the searcher like any suggestion, and told to it when done). A filler spends a
trial of the budget on a random-search result, so it is given only where the wait it
saves matters: longer than FILL_SHARE of a trial and, unless the study has a
time limit (then every second is budget), at least `min_fill_wait_s` (MIN_FILL_WAIT_S)
in absolute terms: a wait of milliseconds costs nothing a user would notice, while a
random trial costs the search. The study's summary says how many fillers there were, so
a user sees that the trials are too short for the model (and `evolutionary` or `random`
would do as well). The wait is the last waiting group's: the ask in progress and one more
for each group ahead of it (the thread makes one suggestion at a time, so with hundreds
of groups finishing within one ask the queue, not the ask, is the wait); the mean trial
time is the results' spacing x the groups training (Little's law; idle groups make no
results, so counting them would stretch the trial as the queue grows).

The price: a suggestion may be made before the last few results were told, as any
asynchronous optimiser's are. Randomness stays keyed by trial number, so a replay still
gives what an uninterrupted study would have asked, whenever a suggestion happens to be
made with the same results told.

Only the thread touches the searcher once it runs; replay() comes before. A suggestion
or a tell that fails is worked round by the searcher itself (mpiopt.search._base), and
take_failures() hands the coordinator what failed; any other error in the thread is
raised from the next take(), so the coordinator ends the job as for any of its own errors. The thread checks its stop flag between asks (close() waits at most
CLOSE_WAIT_S for it) and is a daemon, so a job never waits on it.

With `threaded=False` no thread starts: its caller does the thread's work, a step at a
time (`queued`, `apply_queued`, `ask_due`, `begin_ask`, `end_ask`), on its own clock. A
simulation (benchmarks/simulate_model.py) does, to charge each step the time it took on
a simulated clock, with every rule above (the stock, the fillers) unchanged.
"""
from __future__ import annotations

import collections
import math
import sys
import threading
import time

import numpy as np

from mpiopt.search._registry import TRAIT_NAMES

CLOSE_WAIT_S = 5.0           # close() waits this long for the ask in progress, then leaves it
SWITCH_INTERVAL_S = 0.0005   # the loop's thread gets the GIL back within 0.5 ms (default 5)
FILL_SHARE = 0.01            # a group waits for the model if that costs under 1% of a trial
MIN_FILL_WAIT_S = 1.0        # ... or under a second, without a time limit (module docstring)
_SMOOTHING = 0.3             # weight of the newest sample in the moving averages
BURST_MEMORY = 0.99          # a burst's size is forgotten by 1% a result (half in 69)


class BackgroundSearcher:
    """take() a ready suggestion (or None), tell()/forget() queued; see the module doc."""

    def __init__(self, searcher, max_stock: int, clock=time.monotonic,
                 min_fill_wait_s: float = MIN_FILL_WAIT_S, threaded: bool = True):
        self.inner = searcher
        self.threaded = threaded     # False: the caller steps it (module docstring)
        self.min_fill_wait_s = min_fill_wait_s
        self.max_stock = max(1, int(max_stock))
        self.clock = clock
        self.choice = getattr(searcher, "choice", None)
        self._ready: collections.deque[tuple[dict, float]] = collections.deque()
        self.last_ask_s: float | None = None   # the ask time of the suggestion take() gave
        self._inbox: collections.deque[tuple] = collections.deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closed = False
        self._number = self._first_number = 0
        self._ask_s: float | None = None     # moving average of one ask's seconds
        self._gap_s: float | None = None     # moving average of seconds between results
        self._last_result: float | None = None
        self._recent: collections.deque[float] = collections.deque()  # results' times, lately
        self._burst = 0.0            # the most results within one ask's time, lately
        self.asks = 0
        self.fillers = 0
        self._asking_since: float | None = None
        self._asking_for = 0        # the suggestions the ask in progress makes
        self._waiting = 0           # groups left without work at the last take()

    # ---- the coordinator's side ------------------------------------------------------
    def replay(self, trials, pending=(), next_number=None) -> None:
        """Before the thread starts: as Searcher.replay."""
        assert self._thread is None, "replay after the background thread started"
        self.inner.replay(trials, pending, next_number)

    def start(self, next_number: int) -> None:
        if self._thread is None:
            self._number = self._first_number = int(next_number)
            if not self.threaded:
                return
            self._previous_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(self._previous_interval, SWITCH_INTERVAL_S))
            self._thread = threading.Thread(target=self._serve, name="mpiopt-searcher", daemon=True)
            self._thread.start()

    def take(self, waiting: int = 1, training: int | None = None) -> dict | None:
        """A ready suggestion, else a random filler when waiting for the model would cost
        more than FILL_SHARE of a trial (see above), else None (the group waits).
        `waiting`: the groups without work now, this one included; `training`: the groups
        that train (default: every group)."""
        self._raise_error()
        with self._wake:
            params, self.last_ask_s = self._ready.popleft() if self._ready else (None, None)
            if params is None and self._waiting_costs_too_much(waiting, training):
                start = self.clock()
                params = self._filler()
                self.last_ask_s = self.clock() - start
            self._waiting = waiting - (params is not None)
            self._wake.notify()
        return params

    def take_failures(self) -> list[tuple[str, str]]:
        """The inner searcher's (Searcher.take_failures), met in the thread."""
        return self.inner.take_failures()

    def _waiting_costs_too_much(self, waiting: int = 1, training: int | None = None) -> bool:
        if self._gap_s is None:        # fewer than two results: nothing known yet
            return False
        since, ask = self._asking_since, self._ask_s or 0.0
        wait = max(ask, 0.0 if since is None else self.clock() - since)
        if not self.inner.batches:      # one suggestion per ask: a queue of asks
            wait += (waiting - 1) * ask
        elif waiting > self._asking_for:   # the next batch serves the rest
            wait += ask
        trial = self._gap_s * max(1, self.max_stock if training is None else training)
        return wait > FILL_SHARE * trial and wait >= self.min_fill_wait_s

    def _filler(self) -> dict:
        """A random point, pending in the searcher (the thread adds it before its next ask)."""
        self.fillers += 1
        # keyed by this run's first trial number too: a resumed study draws new fillers
        rng = np.random.default_rng([self.inner.seed, 2, self._first_number, self.fillers])
        params = self.inner.space.sample(rng)
        self._inbox.append(("pending", params, None))
        return params

    def tell(self, params: dict, value: float) -> None:
        now = self.clock()
        if self._last_result is not None:
            self._gap_s = _average(self._gap_s, now - self._last_result)
        self._last_result = now
        self._note_burst(now)
        self._post(("tell", params, value))

    def _note_burst(self, now: float) -> None:
        """The results within one ask's time up to now; the peak decays (BURST_MEMORY)."""
        self._recent.append(now)
        while self._recent[0] < now - (self._ask_s or 0.0):
            self._recent.popleft()
        self._burst = max(float(len(self._recent)), self._burst * BURST_MEMORY)

    def forget(self, params: dict) -> None:
        self._post(("forget", params, None))

    def hold(self, params: dict) -> None:
        """A set chosen elsewhere (mpiopt.search.untried), pending in the searcher."""
        self._post(("hold", params, None))

    def close(self) -> None:
        """Stop the thread (it ends after the ask it is in, if any)."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(CLOSE_WAIT_S)
            sys.setswitchinterval(self._previous_interval)

    @property
    def stock_target(self) -> int:
        """Suggestions to keep ready: results during one ask (two for a searcher that
        batches), plus one (see module doc)."""
        per_ask = self._per_ask()
        return max(1, min(self.max_stock, 1 + per_ask * (2 if self.inner.batches else 1)))

    def _per_ask(self) -> int:
        """Results expected during one ask: Little's law's, or the most that came within
        one ask's time lately (a burst), whichever is more; 0 before they are measured."""
        if self._ask_s is None or self._gap_s is None:
            return 0
        return math.ceil(max(self._ask_s / max(self._gap_s, 1e-6), self._burst))

    def _wanted(self) -> int:
        """Suggestions the next ask makes: one, or for a searcher that batches, the
        stock's shortfall, at most one ask's results and one (the stock refills over two
        asks: a batch sized for both would take longer, and the next one longer still,
        wherever a batch costs more than half the results' spacing per suggestion), and
        the groups waiting now; at most one per group in all."""
        if not self.inner.batches:
            return 1
        short = min(self.stock_target - len(self._ready), 1 + self._per_ask()) + self._waiting
        return max(1, min(short, self.max_stock - len(self._ready)))

    @property
    def ready(self) -> int:
        return len(self._ready)

    # ---- the thread's steps, for a caller that drives it (threaded=False) --------------
    @property
    def queued(self) -> int:
        """Tells, forgets, holds and fillers not yet applied to the inner searcher."""
        return len(self._inbox)

    def apply_queued(self) -> None:
        """Apply what was queued, in order, to the inner searcher (the thread's first step)."""
        with self._wake:
            inbox, self._inbox = list(self._inbox), collections.deque()
        self._apply(inbox)

    def ask_due(self) -> bool:
        """Whether the stock is short of its target: the thread asks now."""
        return len(self._ready) < self.stock_target

    def begin_ask(self, at: float) -> list[dict]:
        """The next suggestions, asked from `at` (the filler rule weighs the wait since).
        They join the stock with `end_ask`, when the caller's clock says the ask ended."""
        self._asking_since = at
        return self._next_batch()

    def end_ask(self, batch: list[dict], took: float) -> None:
        """The ask `begin_ask` began ends: its suggestions, that took `took` seconds, join
        the stock."""
        self._publish(batch, took)

    # ---- the thread -------------------------------------------------------------------
    def _post(self, item: tuple) -> None:
        self._raise_error()
        with self._wake:
            self._inbox.append(item)
            self._wake.notify()

    def _serve(self) -> None:
        try:
            while True:
                with self._wake:
                    while not self._closed and not self._inbox and len(self._ready) >= self.stock_target:
                        self._wake.wait()
                    if self._closed:
                        return
                    inbox, self._inbox = list(self._inbox), collections.deque()
                self._apply(inbox)
                if len(self._ready) < self.stock_target:
                    self._ask()
        except BaseException as exc:   # raised to the coordinator at its next call
            self._error = exc

    def _apply(self, inbox: list[tuple]) -> None:
        """What the coordinator queued, in order, to the inner searcher (the thread only)."""
        for kind, params, value in inbox:
            if kind == "tell":
                self.inner.tell(params, value)
            elif kind == "pending":
                self.inner.pending[self.inner.key(params)] = params
            elif kind == "hold":
                self.inner.hold(params)
            else:
                self.inner.forget(params)

    def _ask(self) -> None:
        start = self._asking_since = self.clock()
        self._publish(self._next_batch(), self.clock() - start)

    def _next_batch(self) -> list[dict]:
        """The inner searcher's next suggestions, _wanted() of them (the thread only)."""
        self._asking_for = self._wanted()
        return self.inner.ask_batch(range(self._number, self._number + self._asking_for))

    def _publish(self, batch: list[dict], took: float) -> None:
        """Suggestions that took `took` seconds join the stock, each with its share of
        them (the thread only)."""
        self._asking_since, self._asking_for = None, 0
        self._number += len(batch)
        self.asks += len(batch)
        self._ask_s = _average(self._ask_s, took)
        with self._wake:
            self._ready.extend((params, took / len(batch)) for params in batch)
            self._waiting = max(0, self._waiting - len(batch))   # (it was sized for them)

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the searcher failed: {type(self._error).__name__}: "
                               f"{self._error}") from self._error


def _inner(name: str) -> property:
    return property(lambda self: getattr(self.inner, name),
                    doc=f"The inner searcher's `{name}` (mpiopt.search._base.Searcher).")


for _name in (*TRAIT_NAMES, "space"):       # a wrapped searcher has the traits of its own
    setattr(BackgroundSearcher, _name, _inner(_name))


def _average(old: float | None, new: float) -> float:
    return new if old is None else (1 - _SMOOTHING) * old + _SMOOTHING * new
