"""Search strategies (pure ask/tell) and pruners. No MPI and no database in here.

    searcher = make_searcher("bayesian", space, {"estimator": "GP"}, seed=0)
    params = searcher.ask(); searcher.tell(params, 0.42)

The strategy modules are imported on first use: `bayesian` pulls in scikit-learn and
scikit-optimize (seconds), which ranks that only train or only validate a spec never need.
"""
from __future__ import annotations

import importlib

from mpiopt.errors import SpecError
from mpiopt.search._base import Searcher
from mpiopt.search.pruners import ASHAPruner, MedianPruner, Pruner, make_pruner

__all__ = [
    "ALGORITHMS", "ASHAPruner", "BayesianSearcher", "EvolutionarySearcher", "MedianPruner",
    "Pruner", "RandomSearcher", "Searcher", "make_pruner", "make_searcher",
]

ALGORITHMS = {
    "bayesian": ("mpiopt.search.bayesian", "BayesianSearcher"),
    "evolutionary": ("mpiopt.search.evolutionary", "EvolutionarySearcher"),
    "random": ("mpiopt.search.random", "RandomSearcher"),
}
_LAZY = {cls: mod for mod, cls in ALGORITHMS.values()}


def make_searcher(algorithm: str, space, options: dict | None = None, seed: int = 0) -> Searcher:
    """The searcher for `algorithm` (bayesian | evolutionary | random) over `space`."""
    if algorithm not in ALGORITHMS:
        raise SpecError(f"search.algorithm: expected one of {', '.join(ALGORITHMS)}, "
                        f"got {algorithm!r}")
    module, cls = ALGORITHMS[algorithm]
    return getattr(importlib.import_module(module), cls)(space, options or {}, seed)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mpiopt.search' has no attribute {name!r}")
