"""The ask/tell contract every search strategy follows, and the bookkeeping they share.

A searcher is a pure object: it never imports MPI or the database and does no I/O. The
coordinator asks for a suggestion per idle group, tells the result when the group
reports, forgets suggestions whose trial failed or was interrupted, and on resume replays
the finished trials in number order. Values are always "lower is better" (the
coordinator negates them for maximisation) and always finite.
"""
from __future__ import annotations

import abc
import math
from typing import Any, Iterable

import numpy as np

from mpiopt.errors import SpecError


def params_key(params: dict, names: list[str]) -> tuple:
    """A hashable identity for a parameter set that survives a database round trip.

    Floats are compared at 12 significant digits so a suggestion read back from SQLite or
    received over MPI still matches the pending entry it came from.
    """
    return tuple(_canon(params[n]) for n in names)


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
    `self.told` as they see fit) and may hook `_on_tell` / `_on_forget`.
    """

    algorithm = "base"

    def __init__(self, space, options: dict | None = None, seed: int = 0):
        self.space = space
        self.names = list(space.names)
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.pending: dict[tuple, dict] = {}
        self.told: list[tuple[dict, float]] = []
        self.n_asked = 0

    # ---- public API ---------------------------------------------------------------
    def ask(self) -> dict:
        """A new suggestion; it stays pending until told or forgotten."""
        params = self._suggest()
        self.pending[self.key(params)] = params
        self.n_asked += 1
        return params

    def tell(self, params: dict, value: float) -> None:
        """Learn a finished trial's value (finite, lower is better)."""
        value = float(value)
        assert math.isfinite(value), f"searcher told a non-finite value {value!r}"
        was_pending = self.pending.pop(self.key(params), None) is not None
        self.told.append((dict(params), value))
        self._on_tell(params, value, was_pending)

    def forget(self, params: dict) -> None:
        """A pending trial failed or was interrupted: drop it and learn nothing."""
        if self.pending.pop(self.key(params), None) is not None:
            self._on_forget(params)

    def replay(self, trials: Iterable[tuple[dict, float | None]]) -> None:
        """Rebuild the state on resume from finished trials in number order (None = failed).

        Afterwards the random stream is re-derived from the seed and the number of
        replayed trials, so the same stored history always gives the same next suggestions.
        """
        count = 0
        for params, value in trials:
            count += 1
            if value is not None and math.isfinite(float(value)):
                self.tell(params, float(value))
        self.rng = np.random.default_rng([self.seed, count])
        self._on_replay(count)

    def key(self, params: dict) -> tuple:
        return params_key(params, self.names)

    @property
    def best(self) -> tuple[dict, float] | None:
        """The best told (params, value), or None before anything was told."""
        return min(self.told, key=lambda t: t[1]) if self.told else None

    # ---- hooks --------------------------------------------------------------------
    @abc.abstractmethod
    def _suggest(self) -> dict:
        """Return a new parameter dict (native Python types, inside the space)."""

    def _on_tell(self, params: dict, value: float, was_pending: bool) -> None:
        """Called after a value was recorded in `self.told`."""

    def _on_forget(self, params: dict) -> None:
        """Called after a pending suggestion was dropped."""

    def _on_replay(self, count: int) -> None:
        """Called after replay re-seeded `self.rng` (reseed private generators here)."""
