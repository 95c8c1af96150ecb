"""Finite spaces: each parameter set at most once, and the search ends once all were tried.

A space of integer and categorical parameters only has so many parameter sets (two
optimizers x three depths: six). Searchers repeat points there (random draws collide,
models return to the best set found; benchmarks/results/quality_suite.md). A repeat of a
deterministic objective is a wasted trial on an allocation paid by the hour, so the
coordinator keeps the keys of every parameter set the study has tried, runs or has
queued. A suggestion that repeats one is replaced by an untried set, drawn at random
(keyed by the trial number, so a resumed study draws the same); once none is left the
study ends COMPLETE and says so, as Optuna's BruteForceSampler stops its study once the
grid is covered.

A failed set counts as tried: an error that depends on the parameters (an out-of-memory
batch size) fails again. Where a set's value varies from run to run, a Keras study
measures it by K-fold cross-validation (training.kfold, the spread recorded with the
value), and a function can average repeats itself. Spaces with a real parameter are
infinite and left alone.

Pure bookkeeping: the scheduler (mpiopt.parallel.scheduler) calls it; no MPI, no I/O.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from mpiopt.search._base import params_key

# Up to this many parameter sets an untried one is found by listing them all (built on
# the first need); beyond, by sampling. A conditional space's distinct sets are counted by
# listing its combinations (tens of milliseconds for 10,000; `mpiopt status` counts them too),
# so beyond this it is treated as infinite.
LIST_MAX = 10_000
_SAMPLES = 64       # random draws for an untried set before the list is used
_STREAM = 3         # a key word of its own: these draws never meet a searcher's (_base)


def space_size(space) -> int | None:
    """How many distinct parameter sets the space has, or None (a real parameter, or a
    conditional space of more than LIST_MAX combinations)."""
    sizes = []
    for dim in space.dimensions:
        kind = type(dim).__name__
        if kind == "Real":
            return None
        sizes.append(dim.high - dim.low + 1 if kind == "Integer" else len(dim.choices))
    total = math.prod(sizes)
    if not space.conditional:
        return total
    return len(_listing(space)) if total <= LIST_MAX else None


def _listing(space) -> dict[tuple, dict]:
    """Every distinct parameter set (only its active parameters), by key, in a fixed order."""
    values = [range(d.low, d.high + 1) if type(d).__name__ == "Integer" else list(d.choices)
              for d in space.dimensions]
    out: dict[tuple, dict] = {}
    for combo in itertools.product(*values):
        params = space.active(dict(zip(space.names, combo)))
        out.setdefault(params_key(params, space.names), params)
    return out


class Untried:
    """The sets a study has tried, runs or queued (`seen`), and of those the ones pending
    in the searcher now (`live`: running, sent ahead, or just suggested)."""

    def __init__(self, space, seed: int, size: int):
        self.space, self.seed, self.size = space, int(seed), int(size)
        self.seen: set[tuple] = set()
        self.live: set[tuple] = set()
        self.replaced = 0
        self._listed: dict[tuple, dict] | None = None

    @classmethod
    def of(cls, space, seed: int) -> "Untried | None":
        """Bookkeeping for a finite space; None for an infinite one."""
        size = None if space is None else space_size(space)
        return None if size is None else cls(space, seed, size)

    def key(self, params: dict) -> tuple:
        return params_key(self.space.active(params), self.space.names)

    def left(self) -> int:
        return self.size - len(self.seen)

    def note(self, params: dict) -> None:
        """A set the study tried before (resume) or holds in its queue."""
        self.seen.add(self.key(params))

    def claim(self, params: dict) -> None:
        """A set that runs now (or was just suggested for a trial)."""
        key = self.key(params)
        self.seen.add(key)
        self.live.add(key)

    def settle(self, params: dict) -> None:
        """Its trial ended: no longer pending in the searcher."""
        self.live.discard(self.key(params))

    def repeats(self, params: dict) -> bool:
        return self.key(params) in self.seen

    def is_live(self, params: dict) -> bool:
        return self.key(params) in self.live

    def instead(self, number: int) -> dict | None:
        """An untried set for trial `number`, or None where none can be found (a space too
        large to list, almost all of it seen)."""
        rng = np.random.default_rng([self.seed, _STREAM, int(number)])
        for _ in range(_SAMPLES):
            params = self.space.sample(rng)
            if self.key(params) not in self.seen:
                return params
        if self.size > LIST_MAX:
            return None
        if self._listed is None:
            self._listed = _listing(self.space)
        free = [params for key, params in self._listed.items() if key not in self.seen]
        return dict(free[int(rng.integers(len(free)))]) if free else None
