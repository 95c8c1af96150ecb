"""DEAP operators on plain genomes (lists of floats in [0, 1]), made reproducible.

DEAP draws from the global `random` module (and `deap.cma` from numpy's global state).
A searcher must give the same suggestions for the same seed without disturbing anybody
else's random numbers, so every DEAP call runs inside `GlobalRandom`, which binds the
searcher's own streams while it runs. Nothing here uses `creator.create`: individuals are
plain lists, and what leaves a searcher is a parameter dict.
"""
from __future__ import annotations

import random
import sys
from contextlib import contextmanager
from random import Random

import numpy as np
from deap import base, tools
from deap.tools import crossover as crossover_module
from deap.tools import mutation as mutation_module

SBX_ETA = 5.0         # crossover spread: lower = children farther from parents
MUTATION_ETA = 10.0   # polynomial mutation: higher = smaller steps


class GlobalRandom:
    """Private random streams for DEAP's operators and numpy's legacy global generator.

    DEAP's crossover and mutation call the `random` module's functions, so while `active`
    the name `random` in those modules (and here) is bound to a private `random.Random`:
    rebinding a name costs nanoseconds, where saving and restoring the module's state cost
    ~0.2 ms an ask. deap.cma draws from numpy's global generator, whose state is swapped
    (`active(numpy=True)`, once per CMA-ES batch).
    """

    MODULES = (crossover_module, mutation_module, sys.modules[__name__])

    def __init__(self, seed):
        self.reseed(seed)

    def reseed(self, seed) -> None:
        """Derive the streams from `seed` when first used (most asks and every tell never
        touch DEAP)."""
        self._seed, self._py, self._np = seed, None, None
        self._depth = 0

    def _words(self):
        return np.random.SeedSequence(self._seed).generate_state(4)

    @contextmanager
    def active(self, numpy: bool = False):
        """The private streams bound; nested uses bind once."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        if self._py is None:
            self._py = Random(int.from_bytes(self._words().tobytes(), "little"))
        saved = [m.random for m in self.MODULES]
        for m in self.MODULES:
            m.random = self._py
        saved_np = None
        if numpy:
            if self._np is None:
                self._np = np.random.RandomState(int(self._words()[0])).get_state()
            saved_np = np.random.get_state()
            np.random.set_state(self._np)
        self._depth = 1
        try:
            yield
        finally:
            self._depth = 0
            for m, r in zip(self.MODULES, saved):
                m.random = r
            if saved_np is not None:
                self._np = np.random.get_state()
                np.random.set_state(saved_np)


def tournament(pool: list[tuple[list, float]], size: int, rng: np.random.Generator) -> list:
    """Genome of the best of `size` members drawn at random (lower value wins).

    Written here rather than deap.tools.selTournament, which needs creator-made fitness
    objects on every individual.
    """
    picks = rng.integers(0, len(pool), size=max(1, size))
    best = min(picks, key=lambda i: (pool[i][1], i))
    return list(pool[best][0])


def crossover(g1: list, g2: list) -> tuple[list, list]:
    """Simulated binary crossover, bounded to the unit genome (call inside `active`)."""
    return tools.cxSimulatedBinaryBounded(list(g1), list(g2), eta=SBX_ETA, low=0.0, up=1.0)


def mutate(genome: list, indpb: float, categorical: list[bool]) -> list:
    """Polynomial bounded mutation; categorical genes are reset uniformly instead,
    because small steps inside a category's bin would rarely change it."""
    child, = tools.mutPolynomialBounded(list(genome), eta=MUTATION_ETA, low=0.0, up=1.0,
                                        indpb=indpb)
    for i, is_cat in enumerate(categorical):
        if is_cat:
            child[i] = random.random() if random.random() < indpb else genome[i]
    return [min(1.0, max(0.0, float(x))) for x in child]


class MinFitness(base.Fitness):
    """Single-objective minimisation fitness for deap.cma (a plain class, no creator)."""

    weights = (-1.0,)


class Individual(list):
    """A genome with the `.fitness` attribute deap.cma.Strategy.update sorts by."""

    def __init__(self, genes):
        super().__init__(float(g) for g in genes)
        self.fitness = MinFitness()
