"""Every search algorithm, declared once: its name, its searcher class and its traits.

`make_searcher` builds from here, the spec's `search.algorithm` choices and its checks
read from here (through `mpiopt.search.traits`), and each Searcher subclass takes its
traits from its row (Searcher.__init_subclass__). Light on purpose, no imports: every rank
validates the spec, and importing a strategy (scikit-learn, Optuna) costs seconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Traits:
    """An algorithm's traits, readable without building its searcher. Each is a class
    attribute of every Searcher, documented there (mpiopt.search._base.Searcher)."""

    slow: bool = False
    asks_ahead: bool = True
    numbered: bool = False
    rounds: bool = False
    supports_vector: bool = False
    batches: bool = False


TRAIT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Traits))


@dataclass(frozen=True)
class Algorithm:
    name: str
    searcher: str | None           # "module:Class", imported on first use (auto: none)
    traits: Traits = field(default_factory=Traits)
    public: bool = True            # a value of search.algorithm (not: auto's internal choice)

    @property
    def module(self) -> str | None:
        return self.searcher.split(":")[0] if self.searcher else None

    @property
    def cls(self) -> str | None:
        return self.searcher.split(":")[1] if self.searcher else None


_ROWS = (
    # chooses one of the rows below by the space, the budget and the number of groups
    # (mpiopt.search.auto): every choice takes any number of objectives, and is slow but
    # for NSGA-II (the built searcher's `slow` says which)
    Algorithm("auto", None, Traits(slow=True, supports_vector=True)),
    # a model fit per ask, growing with the results (or one per batch); several
    # objectives by ParEGO
    Algorithm("bayesian", "mpiopt.search.bayesian:BayesianSearcher",
              Traits(slow=True, supports_vector=True, batches=True)),
    # Optuna's samplers: their ask grows with the trials told
    Algorithm("cmaes", "mpiopt.search.optuna_samplers:CmaEsSearcher", Traits(slow=True)),
    Algorithm("tpe", "mpiopt.search.optuna_samplers:TPESearcher", Traits(slow=True)),
    # several objectives by NSGA-II's ranking
    Algorithm("evolutionary", "mpiopt.search.evolutionary:EvolutionarySearcher",
              Traits(supports_vector=True)),
    # rounds of a trained population, planned on the latest results
    Algorithm("pbt", "mpiopt.search.pbt:PBTSearcher",
              Traits(asks_ahead=False, numbered=True, rounds=True)),
    # learns nothing from the values, so any number of objectives works
    Algorithm("random", "mpiopt.search.random:RandomSearcher", Traits(supports_vector=True)),
    # auto's pair of a GP and a partner (mpiopt.search.portfolio): as slow as its GP, and
    # batched like it
    Algorithm("portfolio", "mpiopt.search.portfolio:PortfolioSearcher",
              Traits(slow=True, batches=True), public=False),
)
REGISTRY: dict[str, Algorithm] = {row.name: row for row in _ROWS}
# the values of search.algorithm, sorted
ALGORITHMS: tuple[str, ...] = tuple(sorted(row.name for row in _ROWS if row.public))
# the algorithms a study with several objectives or constraints may use
VECTOR_ALGORITHMS: tuple[str, ...] = tuple(a for a in ALGORITHMS
                                           if REGISTRY[a].traits.supports_vector)
