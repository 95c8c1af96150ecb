"""Evolutionary search with DEAP operators on the [0, 1] genome of `Space.to_genome`.

Modes:

* `steady_state` (default, asynchronous): the first `population` asks are random samples;
  afterwards each ask breeds one child from the current population (tournament selection,
  simulated binary crossover with probability `crossover`, polynomial bounded mutation with
  probability `mutation`; categorical genes are reset instead of nudged). A told child
  joins the population and, once it is over `population`, the loser of a reverse
  tournament among all but the `elitism` best leaves. No group ever waits for a generation.
* `generational` (classic MPI_Opt): a whole generation of `population` children is bred
  when the previous generation has `population` told members. Asks that come while the
  generation is fully handed out but not yet told get extra members of the same generation
  (bred from the same parents), so a group is never refused work; values of a generation's
  members told after it closed count only towards the best value.
* `cma: true` (all-real spaces): deap.cma.Strategy with lambda = `population`; same
  generation rule, extra members are further samples of the current distribution.

State comes from told trials only, so `replay` rebuilds the population from the stored
trials in number order.
"""
from __future__ import annotations

from deap import cma

from mpiopt.errors import SpecError
from mpiopt.search import _genetic as gen
from mpiopt.search import pareto
from mpiopt.search._base import Searcher, check_options
from mpiopt.search.options import defaults as declared
from mpiopt.space import PointSet

DEFAULTS = declared("evolutionary")   # declared in mpiopt.search.options
_MAX_RETRIES = 10  # re-breeding attempts when a child repeats a known point
_MIN_DISTANCE = 0.01  # from pending suggestions, as in the bayesian searcher
_GENERATION = 2       # first word of the key of a CMA-ES generation's samples


class EvolutionarySearcher(Searcher):
    """See the module docstring for the modes; options as in `DEFAULTS`."""

    algorithm = "evolutionary"

    def __init__(self, space, options: dict | None = None, seed: int = 0):
        super().__init__(space, options, seed)
        self.options = _validate(check_options(self.algorithm, options, DEFAULTS), space)
        self.size = int(self.options["population"])
        self.categorical = [hasattr(d, "choices") for d in space.dimensions]
        self.indpb = 1.0 / max(1, len(self.names))
        self.globals = gen.GlobalRandom(self.seed)
        self.pool: list[tuple[list, float]] = []      # told members that breed
        self.generation = 0
        self.member_of: dict[tuple, tuple[int, list]] = {}  # pending key -> (generation, genome)
        self.current: list[tuple[list, float]] = []   # told members of the open generation
        self.queue: list[list] = []                   # bred genomes not yet asked
        self.asked_in_generation = 0
        self.known: set[tuple] = set()
        self.strategy = None
        self._points = PointSet(space)
        self.front_pool: list[tuple[list, tuple]] = []  # several objectives: (genome, value)
        self.front_current: list[tuple[list, tuple]] = []

    # ---- ask ------------------------------------------------------------------------
    def _suggest(self) -> dict:
        genome = self._next_genome()
        for _ in range(_MAX_RETRIES):
            params = self.space.from_genome(genome) if genome is not None else self.space.sample(self.rng)
            if self._fresh(params):
                break
            genome = self._mutated(genome) if genome is not None else None
        if genome is None:
            genome = self.space.to_genome(params)
        self.member_of[self.key(params)] = (self.generation, list(genome))
        self.asked_in_generation += 1
        self._points.add(self.key(params), params)   # pending from here on (base class)
        return params

    def _fresh(self, params: dict) -> bool:
        """Not a told point again, and at least 1% (scaled) from every pending one, so
        parallel groups never evaluate near-copies. With thousands of pending points the
        1% boxes cover a small space entirely (5,000 in 2-D: twice over), and every child
        would be refused: the distance is then a quarter of the typical spacing of
        that many points, n ** (-1/d), when that is smaller."""
        if self.key(params) in self.known:
            return False
        n = len(self.pending)
        limit = _MIN_DISTANCE if n < 2 else min(_MIN_DISTANCE, 0.25 * n ** (-1 / len(self.names)))
        return self._pending_points().nearest(params) >= limit

    def _pending_points(self) -> PointSet:
        """self.pending as a PointSet. Asks, tells and forgets keep it up to date through
        the hooks; pending points added otherwise (replay, the background thread's
        fillers) are caught by the size check."""
        points, pending = self._points, self.pending
        if len(points.slot) != len(pending):
            for key in points.slot.keys() - pending.keys():
                points.discard(key)
            for key in pending.keys() - points.slot.keys():
                points.add(key, pending[key])
        return points

    def _next_genome(self) -> list | None:
        """None means: a random sample from the space (initial population)."""
        if self.options["cma"]:
            return self._cma_genome()
        if self.options["mode"] == "generational":
            if self.queue:
                return self.queue.pop(0)
            return None if self.generation == 0 else self._child()
        if len(self.told) + len(self.pending) < self.size or len(self.pool) < 2:
            return None
        return self._child()

    def _child(self) -> list:
        first = gen.tournament(self.pool, self.options["tournament"], self.rng)
        crossed = self.rng.random() < self.options["crossover"]
        if crossed:
            second = gen.tournament(self.pool, self.options["tournament"], self.rng)
            with self.globals.active():
                first = list(gen.crossover(first, second)[int(self.rng.integers(2))])
        if not crossed or self.rng.random() < self.options["mutation"]:
            first = self._mutated(first)
        return first

    def _mutated(self, genome: list) -> list:
        with self.globals.active():
            return gen.mutate(genome, self.indpb, self.categorical)

    def _cma(self) -> cma.Strategy:
        """The CMA-ES state, created on first use (also when a replay comes first)."""
        if self.strategy is None:
            self.strategy = cma.Strategy(centroid=[0.5] * len(self.names), sigma=0.3,
                                         lambda_=self.size)
        return self.strategy

    def _cma_genome(self) -> list:
        """The generation's next sample. A generation's samples are keyed by (seed,
        generation, batch), so a resume mid-generation continues the same list."""
        if not self.queue:
            batch, skip = divmod(self.asked_in_generation, self.size)
            self.globals.reseed([self.seed, _GENERATION, self.generation, batch])
            with self.globals.active(numpy=True):
                self.queue = [list(ind) for ind in self._cma().generate(gen.Individual)][skip:]
        return self.queue.pop(0)

    # ---- tell -----------------------------------------------------------------------
    def _on_tell(self, params, value, was_pending) -> None:
        if isinstance(value, tuple):
            return self._on_tell_vector(params, value)
        key = self.key(params)
        self.known.add(key)
        self._points.discard(key)
        generation, genome = self.member_of.pop(key, (self.generation, None))
        if genome is None:
            genome = self.space.to_genome(params)
        if self.options["cma"] or self.options["mode"] == "generational":
            if generation == self.generation:
                self.current.append((genome, value))
                if len(self.current) >= self.size:
                    self._close_generation()
            return
        self.pool.append((self.space.to_genome(params), value))
        if len(self.pool) > self.size:
            self._drop_one()

    # ---- several objectives: NSGA-II -------------------------------------------------
    def _on_tell_vector(self, params, value) -> None:
        """NSGA-II (Deb et al., 2002) on the same operators: breeding pools are ranked by
        front, then crowding distance (pareto.nsga2_keys, via DEAP), with constrained
        domination. Steady state: a told child joins and the lowest-ranked member leaves;
        generational: the next pool is the best `population` of parents and children."""
        key = self.key(params)
        self.known.add(key)
        self._points.discard(key)
        generation, genome = self.member_of.pop(key, (self.generation, None))
        genome = genome if genome is not None else self.space.to_genome(params)
        if self.options["mode"] == "generational":
            if generation == self.generation:
                self.front_current.append((genome, value))
                if len(self.front_current) >= self.size:
                    self._close_vector_generation()
            return
        self.front_pool.append((genome, value))
        self._rank_pool(self.size)

    def _rank_pool(self, keep: int) -> None:
        """Keep the best `keep` of front_pool by NSGA-II's order; `pool` holds their keys
        for the tournaments."""
        values = [v for _, v in self.front_pool]
        keys = pareto.nsga2_keys(values, [getattr(v, "violation", 0.0) for v in values])
        order = sorted(range(len(keys)), key=lambda i: (keys[i], i))[:keep]
        if len(order) < len(keys):        # survivors ranked again among themselves
            self.front_pool = [self.front_pool[i] for i in sorted(order)]
            return self._rank_pool(keep)
        self.pool = [(g, k) for (g, _), k in zip(self.front_pool, keys)]

    def _close_vector_generation(self) -> None:
        self.front_pool = self.front_pool + self.front_current
        self._rank_pool(self.size)
        self.queue = self._breed_generation()
        self.generation += 1
        self.front_current, self.current = [], []
        self.asked_in_generation = 0

    def _on_forget(self, params) -> None:
        self.member_of.pop(self.key(params), None)
        self._points.discard(self.key(params))

    def _on_reseed(self, key: tuple) -> None:
        self.globals.reseed([self.seed, *key])

    def _on_replay(self, reruns: list[dict]) -> None:
        """The open generation has had its told and its re-run members asked already."""
        if self.options["cma"] or self.options["mode"] == "generational":
            self.asked_in_generation = len(self.current) + len(self.front_current) + len(reruns)
            if not self.options["cma"]:
                self.queue = self.queue[self.asked_in_generation:]

    def _drop_one(self) -> None:
        """Reverse tournament among all but the elite: the worst of a few random members leaves."""
        order = sorted(range(len(self.pool)), key=lambda i: (self.pool[i][1], i))
        candidates = order[int(self.options["elitism"]):] or order
        picks = self.rng.choice(candidates, size=min(len(candidates), self.options["tournament"]),
                                replace=False)
        worst = max(picks, key=lambda i: (self.pool[i][1], i))
        del self.pool[worst]

    def _close_generation(self) -> None:
        if self.options["cma"]:
            inds = [gen.Individual(g) for g, _ in self.current]
            for ind, (_, v) in zip(inds, self.current):
                ind.fitness.values = (v,)
            self._cma().update(inds)
        else:
            elite = sorted(self.pool, key=lambda m: m[1])[: int(self.options["elitism"])]
            self.pool = list(self.current) + elite
            self.queue = self._breed_generation()
        self.generation += 1
        self.current = []
        self.queue = self.queue if not self.options["cma"] else []
        self.asked_in_generation = 0

    def _breed_generation(self) -> list[list]:
        """Classic varAnd: tournament-selected parents, pairwise crossover, mutation."""
        parents = [gen.tournament(self.pool, self.options["tournament"], self.rng)
                   for _ in range(self.size)]
        for i in range(1, len(parents), 2):
            if self.rng.random() < self.options["crossover"]:
                with self.globals.active():
                    parents[i - 1], parents[i] = map(list, gen.crossover(parents[i - 1], parents[i]))
        return [self._mutated(p) if self.rng.random() < self.options["mutation"] else p
                for p in parents]


def _validate(opts: dict, space) -> dict:
    if opts["mode"] not in ("steady_state", "generational"):
        raise SpecError(f"search.evolutionary.mode: expected steady_state or generational, "
                        f"got {opts['mode']!r}")
    for key, low in (("population", 2), ("tournament", 1), ("elitism", 0)):
        if not isinstance(opts[key], int) or opts[key] < low:
            raise SpecError(f"search.evolutionary.{key}: expected an integer >= {low}, "
                            f"got {opts[key]!r}")
    for key in ("crossover", "mutation"):
        if not 0.0 <= float(opts[key]) <= 1.0:
            raise SpecError(f"search.evolutionary.{key}: expected a probability in [0, 1], "
                            f"got {opts[key]!r}")
    if opts["cma"] and any(type(d).__name__ != "Real" for d in space.dimensions):
        raise SpecError("search.evolutionary.cma: CMA-ES needs a space of real dimensions only")
    return opts
