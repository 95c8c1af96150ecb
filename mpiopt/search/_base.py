"""The ask/tell contract every search strategy follows, and the bookkeeping they share.

A searcher is a pure object: it never imports MPI or the database and does no I/O. The
coordinator asks for a suggestion per idle group, tells the result when the group
reports, forgets suggestions whose trial failed or was interrupted, and on resume replays
the finished trials in number order. Values are always "lower is better" (the
coordinator negates them for maximisation) and always finite.
"""
from __future__ import annotations

import abc
import collections
import math
from typing import Any, Iterable

import numpy as np

from mpiopt.errors import SpecError
from mpiopt.search._registry import REGISTRY, TRAIT_NAMES, Traits


def params_key(params: dict, names: list[str]) -> tuple:
    """A hashable identity for a parameter set that survives a database round trip.

    Floats are compared at 12 significant digits so a suggestion read back from SQLite or
    received over MPI still matches the pending entry it came from. An absent parameter
    (conditional spaces) keys as `()`, which no value (a scalar, or None) equals.
    """
    return tuple(_canon(params[n]) if n in params else _ABSENT for n in names)


_ABSENT = ()


def _canon(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    return float(f"{float(v):.12g}")


def check_options(algorithm: str, options: dict, defaults: dict) -> dict:
    """Fill an algorithm's options with its defaults; unknown keys are a user error."""
    unknown = sorted(set(options or {}) - set(defaults))
    if unknown:
        raise SpecError(f"search.{algorithm}: unknown option(s) {', '.join(unknown)}; "
                        f"expected {', '.join(sorted(defaults))}")
    merged = dict(defaults)
    merged.update(options or {})
    return merged


class Searcher(abc.ABC):
    """Base of every strategy: keeps the pending suggestions and the told history.

    Subclasses implement `_suggest()` (a new parameter dict, using `self.pending` and
    `self.told` as they see fit; in a conditional space it may hold inactive parameters,
    which `ask` drops) and may hook `_on_tell` / `_on_forget` / `_on_reseed`.

    Randomness is keyed, never carried: the suggestion for trial number n draws from a
    stream derived from (seed, n), and the n-th tell from (seed, n). So a resumed study,
    which replays its finished trials, gets the suggestions an uninterrupted one would
    have got, and a study interrupted twice at the same point does not draw the same
    numbers again for new trials.
    """

    algorithm = "base"

    # ---- traits: what the layers above must know of a strategy. A subclass takes them
    # from its algorithm's row in mpiopt.search._registry (see __init_subclass__), where
    # mpiopt.search.traits(name) reads them without building (or importing) the searcher.
    slow: bool = Traits.slow
    """Its ask may take long (a model fit that grows with the results): the MPI coordinator
    asks it in a background thread (mpiopt.search.background), so no group waits for it."""
    asks_ahead: bool = Traits.asks_ahead
    """It may be asked before the last result is told (the coordinator prepares the next
    suggestions while groups train); False where each plan must see the latest results."""
    numbered: bool = Traits.numbered
    """Told and forgotten by trial number (tell_trial / forget_trial, with a lineage per
    trial), not by parameters: its trials may share a parameter set (pbt)."""
    rounds: bool = Traits.rounds
    """Its trials are rounds of a trained population's members, each continuing a
    checkpoint (pbt): only the searcher makes them (no queued or retried parameter set has
    a place), it needs a Keras objective, and a study's reports count rounds."""
    supports_vector: bool = Traits.supports_vector
    """Takes pareto.Objectives values: several objectives, or constraints."""
    batches: bool = Traits.batches
    """One fit gives several suggestions (ask_batch): whoever needs many at once (the
    background thread, for the groups that will finish before its next fit) asks them
    together; a searcher without it is asked one at a time, each ask seeing the results
    told before it."""
    choice: str | None = None
    """How `auto` chose this searcher, in words (mpiopt.search.make_searcher); None when
    the algorithm was named."""

    def __init_subclass__(cls, **kwargs):
        """Traits from the registry row of the class's own `algorithm`, declared nowhere
        else: a class body of a registered algorithm that sets one is a mistake."""
        super().__init_subclass__(**kwargs)
        row = REGISTRY.get(cls.__dict__.get("algorithm"))
        if row is None:
            return
        clash = [n for n in TRAIT_NAMES if n in cls.__dict__]
        if clash:
            raise TypeError(f"{cls.__name__}: traits {clash} are declared in "
                            f"mpiopt.search._registry, not in the class")
        for name in TRAIT_NAMES:
            setattr(cls, name, getattr(row.traits, name))

    def __init__(self, space, options: dict | None = None, seed: int = 0):
        self.space = space
        self.names = list(space.names)
        self.seed = int(seed)
        self._rng_key: int | list[int] = self.seed
        self._rng: np.random.Generator | None = None
        self.pending: dict[tuple, dict] = {}
        self.told: list[tuple[dict, float]] = []
        # keys of suggestions given out that came back with no value (failed, interrupted,
        # withdrawn): a searcher whose suggestions do not depend on results (the GP's
        # space-filling design) must not make them again, or a failing design point comes
        # back at every ask and uses up the study's trials and max_initial_failures.
        self.spent: set[tuple] = set()
        self.next_number = 0  # the trial number the next ask() is for, unless it says
        self.number = 0       # the trial number being suggested (ask) right now
        # the failures of _suggest and _on_tell met and worked round, not yet taken (a
        # deque: a background searcher's thread adds while the coordinator takes)
        self._failures: collections.deque[tuple[str, str]] = collections.deque()

    # ---- public API ---------------------------------------------------------------
    def ask(self, number: int | None = None) -> dict:
        """A new suggestion for trial `number` (default: the next one); it stays pending
        until told or forgotten."""
        self.number = self.next_number if number is None else int(number)
        self._reseed(_ASK, self.number)
        params = self._pend(self._suggest_or_draw())   # only what is present leaves
        self.next_number = max(self.next_number, self.number + 1)
        return params

    def warm_up(self) -> None:
        """Pay the process's one-time costs of a first ask and a first fit (imports,
        tables, library probes) while nothing waits for a suggestion: under MPI, rank 0
        has a throwaway searcher pay them while the groups start up
        (mpiopt.search.preload), so the run's own searcher finds them paid. It changes no
        state of the searcher (its suggestions are the same after it). Most searchers
        have nothing to pay."""

    def ask_batch(self, numbers: Iterable[int]) -> list[dict]:
        """Suggestions for the trials `numbers`, in order, from one view of what is told
        (a model fitted once, its suggestions spread apart by _suggest_batch); each stays
        pending until told or forgotten. A batch of one is ask(); a searcher that does not
        batch makes each as ask() would."""
        numbers = [int(n) for n in numbers]
        if len(numbers) < 2 or not self.batches:
            return [self.ask(n) for n in numbers]
        self.number = numbers[0]
        self._reseed(_BATCH, self.number)   # (the batch's stream: keyed by its first trial)
        out: list[dict] = []
        try:
            for params in self._suggest_batch(numbers):
                out.append(self._pend(params))
        except Exception as exc:            # the rest of the batch: as _suggest_or_draw
            self._failed("suggest", exc, "such a trial's parameters are drawn at random")
            self._reseed(_DRAW, self.number)
            out += [self._pend(self.space.sample(self.rng)) for _ in numbers[len(out):]]
        self.next_number = max(self.next_number, numbers[-1] + 1)
        return out

    def _pend(self, params: dict) -> dict:
        """A suggestion given out: only its active parameters, pending from now on."""
        params = self.space.active(params)
        self.pending[self.key(params)] = params
        return params

    def tell(self, params: dict, value) -> None:
        """Learn a finished trial's value (finite, lower is better): a float, or for several
        objectives or constraints a pareto.Objectives vector (searchers that take those
        say so with `supports_vector`)."""
        if not isinstance(value, tuple):
            value = float(value)
        assert all(math.isfinite(v) for v in (value if isinstance(value, tuple) else (value,))), \
            f"searcher told a non-finite value {value!r}"
        was_pending = self.pending.pop(self.key(params), None) is not None
        self._reseed(_TELL, len(self.told))
        self.told.append((dict(params), value))
        try:
            self._on_tell(params, value, was_pending)
        except Exception as exc:       # it learns the next results (see _suggest_or_draw)
            self._failed("learn", exc, "it goes on with the results it learnt")

    def hold(self, params: dict) -> None:
        """Another searcher's suggestion, pending here too (a portfolio's members share
        their pending points), so this one's suggestions keep away from it."""
        self.pending[self.key(params)] = params
        self._on_hold(params)

    def forget(self, params: dict) -> None:
        """A pending trial failed or was interrupted: drop it and learn nothing."""
        key = self.key(params)
        if self.pending.pop(key, None) is not None:
            self.spent.add(key)
            self._on_forget(params)

    def replay(self, trials: Iterable[tuple[dict, float | None]], pending: Iterable[dict] = (),
               next_number: int | None = None) -> None:
        """Rebuild the state on resume: finished trials in number order (None = failed),
        then the unfinished ones that will run again, pending from the first ask on (so
        no suggestion repeats or crowds them); `next_number` is the next new trial's."""
        count = 0
        for params, value in trials:
            count += 1
            if isinstance(value, tuple):
                self.tell(params, value)
            elif value is not None and math.isfinite(float(value)):
                self.tell(params, float(value))
            else:
                self.spent.add(self.key(params))
        reruns = [dict(p) for p in pending]
        for params in reruns:
            self.pending[self.key(params)] = params
        self.next_number = count + len(reruns) if next_number is None else int(next_number)
        self._on_replay(reruns)

    def take_failures(self) -> list[tuple[str, str]]:
        """What failed in this searcher and was worked round since the last call: a kind
        ("suggest", "learn") and a line saying it, for the coordinator."""
        taken = []
        while self._failures:
            taken.append(self._failures.popleft())
        return taken

    def _suggest_or_draw(self) -> dict:
        """The strategy's suggestion; where it fails, a random draw from the space (from
        this trial's own stream), the failure noted (take_failures). A failure that comes
        from the study's history (results a model cannot fit, a library broken in the
        coordinator's process by an objective run there) comes back on every resume,
        which replays that history: ending the study's loop on it would make a study
        that can never finish. A random point costs one guided suggestion instead."""
        try:
            return self._suggest()
        except Exception as exc:
            self._failed("suggest", exc, "such a trial's parameters are drawn at random")
            self._reseed(_DRAW, self.number)
            return self.space.sample(self.rng)

    def _failed(self, kind: str, exc: Exception, instead: str) -> None:
        lines = str(exc).strip().splitlines()
        what = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        self._failures.append((kind, f"{self.algorithm} could not {_DOING[kind]} ({what}): "
                                     f"{instead}"))

    def key(self, params: dict) -> tuple:
        """params' identity; in a conditional space only its active parameters count, so
        a genome's full decoding and the suggestion made from it have the same key."""
        return params_key(self.space.active(params), self.names)

    @property
    def best(self) -> tuple[dict, float] | None:
        """The best told (params, value), or None before anything was told."""
        return min(self.told, key=lambda t: t[1]) if self.told else None

    @property
    def rng(self) -> np.random.Generator:
        """This ask's or tell's generator, derived when first used (most tells never draw,
        and deriving one costs ~40 us)."""
        if self._rng is None:
            self._rng = np.random.default_rng(self._rng_key)
        return self._rng

    def _reseed(self, *key: int) -> None:
        self._rng_key, self._rng = [self.seed, *key], None
        self._on_reseed(key)

    # ---- hooks --------------------------------------------------------------------
    @abc.abstractmethod
    def _suggest(self) -> dict:
        """Return a new parameter dict (native Python types, inside the space)."""

    def _suggest_batch(self, numbers: list[int]):
        """Yield a suggestion for each of the trials `numbers` (a searcher that batches
        overrides this); each is pending before the next is made, so the next one can
        keep away from it. Here: each made as ask() would make it."""
        for number in numbers:
            self.number = number
            self._reseed(_ASK, number)
            yield self._suggest_or_draw()

    def _on_hold(self, params: dict) -> None:
        """Called after another searcher's suggestion became pending here (see hold)."""

    def _on_tell(self, params: dict, value: float, was_pending: bool) -> None:
        """Called after a value was recorded in `self.told`."""

    def _on_forget(self, params: dict) -> None:
        """Called after a pending suggestion was dropped."""

    def _on_reseed(self, key: tuple) -> None:
        """Called after `self.rng` was re-derived (reseed private generators from key)."""

    def _on_replay(self, reruns: list[dict]) -> None:
        """Called at the end of a replay with the parameter sets that will run again."""


# the first word of a stream's key: streams for asks, tells, batches and the draws that
# replace a failed suggestion never meet (2: the background thread's fillers')
_ASK, _TELL, _DRAW, _BATCH = 0, 1, 3, 4
_DOING = {"suggest": "make a suggestion", "learn": "learn a result"}
