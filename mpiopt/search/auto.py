"""`algorithm: auto`, the default: which searcher suits a study, from what is known before
it starts. No constant here is fitted to a benchmark problem.

The rule, and why (benchmarks/quality_suite.py; README "Choosing a searcher"):

- at least three real or integer parameters: `bayesian` and `cmaes` sharing the trials
  (mpiopt.search.portfolio: the GP's share follows how well it predicts the results so
  far, within a quarter and three quarters), whatever the number of groups. The Gaussian
  process makes the most of every result on smooth problems, but on rugged, multimodal
  ones (Levy, Rastrigin, a tree's cross-validated error) it settles in the first good basin and
  ends near random search, where CMA-ES, a population method, does well. Nobody knows
  beforehand which kind a study is, so both run, every result told to both, as algorithm
  portfolios do (Nevergrad's NGOpt). On the quality suite the pair has a better mean rank
  than either alone: it loses a few percent on smooth problems and gains most of the gap
  on rugged ones;
  with a categorical parameter among them, the GP's partner is TPE instead of CMA-ES
  (`partner`): CMA-ES models real numbers only (its categorical choices are sampled
  beside its distribution), while TPE models a choice and the numbers it goes with as
  densities of good and bad results (Bergstra et al. 2011), which on the suite's tasks with a
  choice (a tree's criterion, SGD's loss) reached the rare best settings more often;
- fewer (all categorical, or one or two numeric parameters): `bayesian` alone. In two
  dimensions a few dozen results already cover the plane, so the model is good even
  on rugged surfaces, and CMA-ES's half of the trials is mostly spent adapting its
  distribution (on one dimension it has none to adapt), so the GP alone ranks better on
  2-D problems, held out of the suite and in it;
- several objectives, or constraints: `bayesian` (ParEGO) up to 250 trials, `evolutionary`
  (NSGA-II) beyond (see VECTOR_MODEL_BUDGET).

The figures: benchmarks/results/quality_suite.md, quality_suite.py.
"""
from __future__ import annotations


# Several objectives (or constraints): ParEGO (a GP per suggestion) up to this budget,
# NSGA-II beyond. ParEGO was designed for, and tested at, budgets of 100-250 evaluations
# (Knowles, 2006); NSGA-II needs many generations and its cost does not grow with them.
VECTOR_MODEL_BUDGET = 250


# A GP and a partner sharing the trials from this many numeric parameters; a GP alone below.
PORTFOLIO_MIN_NUMERIC = 3


def numeric_dimensions(space) -> int:
    return sum(type(d).__name__ != "Categorical" for d in space.dimensions)


def partner(space) -> str:
    """The GP's partner in the portfolio: TPE where the space has a categorical parameter
    (it models choices; CMA-ES does not), CMA-ES on all-numeric spaces."""
    return "tpe" if numeric_dimensions(space) < len(space.dimensions) else "cmaes"


def pair(space) -> tuple[str, str]:
    """The portfolio's two members: the GP and its partner."""
    return "bayesian", partner(space)


def choose(space, budget: int | None, parallel: int, vector: bool = False) -> tuple[str, str]:
    """(algorithm, the reason in words)."""
    n, numeric = len(space.dimensions), numeric_dimensions(space)
    if vector:
        if budget is not None and budget > VECTOR_MODEL_BUDGET:
            return "evolutionary", (f"several objectives or constraints and {budget} trials: "
                                    "NSGA-II (a model's fit would grow with the trials)")
        return "bayesian", ("several objectives or constraints: ParEGO (a Gaussian process on "
                            "a random scalarization per suggestion)")
    if numeric >= PORTFOLIO_MIN_NUMERIC:
        kinds, other = f"{numeric} numeric", "a population method for rugged ones"
        if partner(space) == "tpe":
            kinds, other = f"{kinds} and {n - numeric} categorical", "TPE, which models the choices"
        return "portfolio", (f"{kinds} parameter(s): a Gaussian process for smooth problems and "
                             f"{other}, sharing the trials by how well the model predicts them")
    return "bayesian", (f"{n} parameter(s), {numeric} numeric: a Gaussian process "
                        "(in so few numeric dimensions the model covers the space)")
