"""CMA-ES for a space of numbers, on the `cmaes` package directly (mpiopt.search's `cmaes`
and `auto`'s partner where every parameter is a number and none is conditional).

Why not through Optuna's CmaEsSampler there: it keeps CMA-ES's state in the trials of
its study and reads every trial at every ask (to find the generation's finished trials
and the state pickled in the latest), so an ask's cost grows with the study, and with
thousands of groups the study is thousands of trials before the first result: the first
5,000 asks of 10,000 groups took 53 s of CPU, where this takes a fraction of a second
(benchmarks/results/simulate.md). Here the state is one `cmaes.CMA` object in memory: an
ask is one draw from it, a tell adds the result to its generation.

The rules are Optuna's, so the search is the one Optuna users run:

- the parameters as genes in [0, 1] (log scale for a log prior, an integer's bin of equal
  width: Optuna's transform); mean at the centre (after a replay: at the best told
  point), step size 1/6 of the range, the population `population` (Hansen's 4 + 3 ln d
  by default), at most 10 d resamplings to land inside the bounds;
- before the first result, points are drawn at random (Optuna's CMA-ES has no space to
  model until a trial has finished, and its independent sampler draws them);
- a suggestion belongs to the generation current when it was made; the first
  `population` results of the current generation update the distribution, and results
  of earlier generations (or of other searchers' points) change nothing: with more
  groups than the population, later suggestions are drawn from the same generation and
  whichever results come first update it.

Randomness is keyed as every searcher's: the draw for trial n comes from its own stream.
"""
from __future__ import annotations

import math

import numpy as np

_SIGMA0 = 1.0 / 6.0      # Optuna's: a sixth of the (unit) range
_RESAMPLING = 10         # x d draws at most to land inside the bounds (Optuna's)


def default_population(dimensions: int) -> int:
    """Hansen's default population size, 4 + 3 ln d."""
    return 4 + int(3 * math.log(max(1, dimensions)))


def numeric(space) -> bool:
    """Whether CMA-ES models every parameter of the space (numbers, no conditions)."""
    return not space.conditional and all(type(d).__name__ in ("Real", "Integer")
                                         for d in space.dimensions)


class Strategy:
    """One CMA-ES run: asks drawn from its distribution, tells collected per generation."""

    def __init__(self, space, population: int, seed: int):
        self.space = space
        self.population = population or default_population(len(space.dimensions))
        self.seed = seed
        self.x0: list[float] | None = None       # the mean to start from (a replay's best)
        self.cma = None
        self.generation_of: dict[tuple, int] = {}  # pending suggestion -> its generation
        self.results: list[tuple[np.ndarray, float]] = []   # the generation's, so far

    def suggest(self, rng: np.random.Generator, started: bool) -> tuple[dict, int | None]:
        """A parameter set and the generation it belongs to (None: drawn at random, before
        any result: `started` False)."""
        if not started:
            return self.space.sample(rng), None
        cma = self._cma()
        cma.reseed_rng(int(rng.integers(1, 2**31 - 1)))
        return self.space.from_genome(cma.ask().tolist()), cma.generation

    def asked(self, key: tuple, generation: int | None) -> None:
        if generation is not None:
            self.generation_of[key] = generation

    def told(self, key: tuple, params: dict, value: float) -> None:
        """A result: it counts for the generation it was drawn in, while that is current."""
        generation = self.generation_of.pop(key, None)
        if generation is None or generation != self.cma.generation:
            return
        self.results.append((np.array(self.space.to_genome(params), dtype=float), value))
        if len(self.results) == self.cma.population_size:
            self.cma.tell(self.results)
            self.results = []

    def forgot(self, key: tuple) -> None:
        self.generation_of.pop(key, None)

    def _cma(self):
        if self.cma is None:
            import cmaes

            d = len(self.space.dimensions)
            mean = np.full(d, 0.5) if self.x0 is None else np.array(self.x0, dtype=float)
            self.cma = cmaes.CMA(mean=mean, sigma=_SIGMA0, bounds=np.tile([0.0, 1.0], (d, 1)),
                                 n_max_resampling=_RESAMPLING * d, seed=self.seed,
                                 population_size=self.population)
        return self.cma
