"""Search strategies (pure ask/tell) and pruners. No MPI and no database in here.

    searcher = make_searcher("bayesian", space, {"estimator": "GP"}, seed=0)
    params = searcher.ask(); searcher.tell(params, 0.42)
    traits("pbt").numbered        # an algorithm's traits, without building its searcher

Every algorithm, its class and its traits are declared once, in mpiopt.search._registry.
The strategy modules are imported on first use: `bayesian` pulls in scikit-learn and
scikit-optimize (seconds), which ranks that only train or only validate a spec never need.
"""
from __future__ import annotations

import importlib

from mpiopt.errors import SpecError
from mpiopt.search._base import Searcher
from mpiopt.search._registry import ALGORITHMS, REGISTRY, VECTOR_ALGORITHMS, Traits
from mpiopt.search.pruners import ASHAPruner, MedianPruner, Pruner, make_pruner

__all__ = [
    "ALGORITHMS", "ASHAPruner", "BayesianSearcher", "EvolutionarySearcher", "MedianPruner",
    "PBTSearcher", "Pruner", "RandomSearcher", "Searcher", "Traits", "VECTOR_ALGORITHMS",
    "make_pruner", "make_searcher", "traits",
]

_LAZY = {row.cls: row.module for row in REGISTRY.values() if row.searcher}


def traits(algorithm: str) -> Traits:
    """The traits of a `search.algorithm` value (Searcher's class attributes of the same
    names say what each means), read from the registry: nothing is built or imported."""
    if algorithm not in ALGORITHMS:
        raise SpecError(f"search.algorithm: expected one of {', '.join(ALGORITHMS)}, "
                        f"got {algorithm!r}")
    return REGISTRY[algorithm].traits


def make_searcher(algorithm: str, space, options: dict | None = None, seed: int = 0,
                  budget: int | None = None, parallel: int = 1, vector: bool = False) -> Searcher:
    """The searcher for `algorithm` (one of ALGORITHMS) over `space`; `auto` chooses by the
    space, the budget and the number of groups (see mpiopt.search.auto) and the choice is
    in the searcher's `choice` attribute."""
    chosen_because = None
    if algorithm == "auto":
        from mpiopt.search.auto import choose

        algorithm, chosen_because = choose(space, budget, parallel, vector)
        options = {}
    if algorithm == "portfolio":             # auto's choice for many groups (see there)
        from mpiopt.search.portfolio import PortfolioSearcher

        # (options, for benchmarks' variants only: "members", the algorithms taking turns,
        # and {member algorithm: its options})
        from mpiopt.search.auto import pair

        opts = dict(options or {})
        names = opts.pop("members", pair(space))   # auto's pair (see there)
        members = [make_searcher(a, space, opts.get(a, {}), seed, budget, parallel) for a in names]
        searcher = PortfolioSearcher(space, members, seed)
        searcher.choice = f"auto chose {' + '.join(names)}: {chosen_because}"
        return searcher
    if algorithm not in ALGORITHMS or algorithm == "auto":
        raise SpecError(f"search.algorithm: expected one of {', '.join(ALGORITHMS)}, "
                        f"got {algorithm!r}")
    row = REGISTRY[algorithm]
    searcher = getattr(importlib.import_module(row.module), row.cls)(space, options or {}, seed)
    searcher.choice = (f"auto chose {algorithm}: {chosen_because}" if chosen_because else None)
    return searcher


def preload(algorithm: str, space, budget: int | None = None, parallel: int = 1,
            vector: bool = False, options: dict | None = None) -> None:
    """Import now the strategy modules that make_searcher will need for this study (auto
    resolved), and pay the searcher's one-time costs on a throwaway one built as the
    study's will be (Searcher.warm_up: tables, library probes, first calls). Rank 0 does
    this while the other ranks set up their objective, so the seconds that scikit-learn
    and scikit-optimize take to import, and the milliseconds of a first design and a
    first fit, overlap theirs instead of every group waiting for them at the first
    trials. An error is left for make_searcher to raise, where a study's start-up errors
    are reported."""
    names = [algorithm]
    try:
        if algorithm == "auto":
            from mpiopt.search.auto import choose, pair

            chosen, _ = choose(space, budget, parallel, vector)
            names = list(pair(space)) if chosen == "portfolio" else [chosen]
        for name in names:
            if name in ALGORITHMS and REGISTRY[name].module:
                importlib.import_module(REGISTRY[name].module)
        make_searcher(algorithm, space, options, 0, budget, parallel, vector).warm_up()
    except Exception:       # (make_searcher imports the same modules and raises it there)
        pass


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mpiopt.search' has no attribute {name!r}")
