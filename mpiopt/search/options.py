"""Every searcher's options, declared once: name, default, type, range and one line of
documentation. The spec validates `search.<algorithm>` from here, the searchers take
their defaults from here and README's tables are generated from here. Light on purpose
(no scikit-learn, no Optuna): every rank validates the spec, and importing a searcher
costs seconds.
"""
from __future__ import annotations

from mpiopt.field import Field, Fields

OPTIONS: dict[str, Fields] = {
    "auto": Fields(),
    "random": Fields(),
    "bayesian": Fields(
        Field("estimator", "GP", "text", "Surrogate model: `GP` (Gaussian process), `RF` (random "
              "forest), `ET` (extra trees), `GBRT` (gradient-boosted trees).",
              choices=("GP", "RF", "ET", "GBRT")),
        Field("acquisition", "gp_hedge", "text", "Acquisition function: `EI` (expected "
              "improvement), `LCB` (lower confidence bound), `PI` (probability of improvement) "
              "or `gp_hedge` (mixes the three by their past gains, as scikit-optimize does).",
              choices=("gp_hedge", "EI", "LCB", "PI")),
        Field("initial_points", 10, "integer", "Points of the initial design before the surrogate "
              "is used.", low=1),
        Field("initial_design", "sobol", "text", "The initial points: `sobol` (a scrambled Sobol "
              "sequence, even cover for any number of points) or `random`.",
              choices=("sobol", "random")),
        Field("refit_every", 0, "integer", "Refit the GP kernel's hyperparameters every N told "
              "results; `0` = automatic (every result while few are told, then at every ~10% "
              "growth).", low=0),
        Field("max_points", 400, "integer", "At most this many results enter the model (the best "
              "half and the most recent half), and at most this many pending suggestions "
              "(the most recent).", low=1),
        Field("hyper_points", 150, "integer", "At most this many results are used to fit the "
              "kernel's hyperparameters.", low=1),
        Field("candidates", 2000, "integer", "Random candidates the acquisition function is "
              "maximized over (plus local perturbations).", low=1),
        Field("liar", "believer", "text", "The value assumed for pending suggestions (one per busy "
              "group): `believer` (the model's own prediction), or `mean`, `min` or `max` of the "
              "told values.", choices=("mean", "min", "max", "believer")),
        Field("xi", 0.01, "number", "Exploration of EI and PI, in the objective's units.", low=0.0),
        Field("kappa", 1.96, "number", "Exploration of LCB.", low=0.0),
        Field("min_distance", 0.01, "number", "How far (as a fraction of each parameter's range, "
              "max over parameters) a new suggestion must be from every pending one.",
              low=0.0, high=1.0),
        Field("output_warping", True, "flag", "Fit the GP to Yeo-Johnson-transformed values "
              "(HEBO's output warping): objectives spanning orders of magnitude no longer hide "
              "their good region."),
    ),
    "evolutionary": Fields(
        Field("mode", "steady_state", "text", "`steady_state`: a child is bred whenever any trial "
              "finishes (groups never wait); `generational`: a whole population per generation.",
              choices=("steady_state", "generational")),
        Field("population", 10, "integer", "Population size.", low=2),
        Field("crossover", 0.5, "number", "Crossover probability.", low=0.0, high=1.0),
        Field("mutation", 1.0, "number", "Probability that a child is mutated (each gene then "
              "moves with probability 1/number of genes).", low=0.0, high=1.0),
        Field("tournament", 5, "integer", "Tournament size for selection, at most `population`.",
              low=1),
        Field("elitism", 1, "integer", "Best individuals kept unchanged, less than `population`.",
              low=0),
        Field("cma", False, "flag", "Use CMA-ES instead; needs a space of `real` parameters only."),
    ),
    "tpe": Fields(
        Field("startup_trials", 10, "integer", "Random points before the densities are used.",
              low=1),
        Field("multivariate", True, "flag", "One joint density of the parameters instead of one "
              "density each."),
        Field("constant_liar", True, "flag", "Pending trials count as bad results, so groups "
              "spread out."),
    ),
    "pbt": Fields(
        Field("population", 8, "integer", "Members trained side by side. Groups beyond the "
              "population wait (a member is never trained by two groups at once).", low=2),
        Field("interval", 2, "integer", "Epochs a round trains: round r trains epochs "
              "r x interval + 1 to (r + 1) x interval.", low=1),
        Field("quantile", 0.25, "number", "The bottom fraction of the members (by their latest "
              "finished round) that exploits the top fraction.", low=0.0, high=0.5),
        Field("perturb", [0.8, 1.2], "list", "Positive factors a real or integer parameter is "
              "multiplied by at explore (one drawn per parameter), then clipped to its bounds; "
              "an integer moves at least one step."),
        Field("resample_probability", 0.25, "number", "Chance that a categorical parameter is "
              "drawn anew at explore.", low=0.0, high=1.0),
        Field("explore", [], "list", "The parameters explore perturbs; `[]`: all. List only "
              "those that keep the weights' shapes (learning rate, dropout, ...): the others "
              "stay as the copied member had them."),
    ),
    "cmaes": Fields(
        Field("population", 0, "integer", "Generation size; `0`: CMA-ES's own 4 + 3 ln d, whatever "
              "the number of groups (a generation as large as the groups leaves too few "
              "generations in a tuning budget).", low=0),
    ),
}


def defaults(algorithm: str) -> dict:
    return OPTIONS[algorithm].defaults()
