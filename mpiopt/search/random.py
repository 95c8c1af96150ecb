"""Random search: independent samples that respect each dimension's prior.

The baseline every benchmark compares against. It has no options; its state is the
random stream only, so `replay` (which re-derives that stream) is all a resume needs.
"""
from __future__ import annotations

from mpiopt.search._base import Searcher, check_options


class RandomSearcher(Searcher):
    """Uniform over the space (log-uniform where a dimension says so), seeded."""

    algorithm = "random"

    def __init__(self, space, options: dict | None = None, seed: int = 0):
        super().__init__(space, options, seed)
        self.options = check_options(self.algorithm, options, {})

    def _suggest(self) -> dict:
        return self.space.sample(self.rng)
