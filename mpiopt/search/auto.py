"""`algorithm: auto`, the default: which searcher suits a study, from what is known before
it starts. No constant here is fitted to a benchmark problem.

The rule, and why (benchmarks/quality_suite.py; README "Choosing a searcher"):

- at least two real or integer parameters: `bayesian` and `cmaes` in turn
  (mpiopt.search.portfolio), whatever the number of groups. The Gaussian process makes
  the most of every result on smooth problems, but on rugged, multimodal ones (Levy,
  Rastrigin, a tree's cross-validated error) it settles in the first good basin and
  ends near random search, where CMA-ES, a population method, does well. Nobody knows
  beforehand which kind a study is, so both run, every result told to both, as algorithm
  portfolios do (Nevergrad's NGOpt). On the 18 problems of the suite at 1, 4 and 16
  pending suggestions, 10 seeds, the pair has a better mean rank than either alone: it
  loses a few percent on smooth problems and gains most of the gap on rugged ones;
- fewer (all categorical, or one numeric parameter): `bayesian` alone. CMA-ES adapts a
  distribution over at least two numeric dimensions; otherwise its half of the trials
  would be random samples (Optuna's fallback).
- several objectives, or constraints: `bayesian` (ParEGO) up to 250 trials, `evolutionary`
  (NSGA-II) beyond (see VECTOR_MODEL_BUDGET).
"""
from __future__ import annotations


# Several objectives (or constraints): ParEGO (a GP per suggestion) up to this budget,
# NSGA-II beyond. ParEGO was designed for, and tested at, budgets of 100-250 evaluations
# (Knowles, 2006); NSGA-II needs many generations and its cost does not grow with them.
VECTOR_MODEL_BUDGET = 250


def numeric_dimensions(space) -> int:
    return sum(type(d).__name__ != "Categorical" for d in space.dimensions)


def choose(space, budget: int | None, parallel: int, vector: bool = False) -> tuple[str, str]:
    """(algorithm, the reason in words)."""
    n, numeric = len(space.dimensions), numeric_dimensions(space)
    if vector:
        if budget is not None and budget > VECTOR_MODEL_BUDGET:
            return "evolutionary", (f"several objectives or constraints and {budget} trials: "
                                    "NSGA-II (a model's fit would grow with the trials)")
        return "bayesian", ("several objectives or constraints: ParEGO (a Gaussian process on "
                            "a random scalarization per suggestion)")
    if numeric >= 2:
        return "portfolio", (f"{numeric} numeric parameter(s): a Gaussian process for smooth "
                             "problems and a population method for rugged ones, in turn")
    return "bayesian", (f"{n} parameter(s), {numeric} numeric: a Gaussian process "
                        "(CMA-ES needs two numeric parameters)")
