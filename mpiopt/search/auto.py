"""`algorithm: auto`, the default: which searcher suits a study, from what is known before
it starts. No constant here is fitted to a benchmark problem.

The rule, and why (benchmarks/quality_suite.py; README "Choosing a searcher"):

- fewer than 8 groups: the Gaussian-process searcher (`bayesian`, with output warping).
  With few suggestions pending it makes the most of every result: on the suite it has the
  best mean rank at 1 and 4 pending, on smooth, rugged, valley, integer, categorical and
  mixed problems alike;
- 8 groups or more: `bayesian` and `cmaes` in turn (mpiopt.search.portfolio). With many
  pending suggestions and few rounds of feedback the GP alone falls to random search's
  level on rugged problems, where a population method does well, while on smooth ones
  it stays far ahead; the pair does as well as the better of the two on each kind (and
  costs half the GP fits). The crossing lies between the 4 and 16 pending we measured;
  8 is its middle, not a tuned value.
"""
from __future__ import annotations

MANY_GROUPS = 8


def choose(space, budget: int | None, parallel: int) -> tuple[str, str]:
    """(algorithm, the reason in words)."""
    n = len(space.dimensions)
    if parallel >= MANY_GROUPS:
        return "portfolio", (f"{parallel} groups: many suggestions wait for results, so a "
                             "population method shares the work with the Gaussian process")
    return "bayesian", (f"{parallel} group(s), {n} parameter(s): a Gaussian process makes the "
                        "most of each result")
