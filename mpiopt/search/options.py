"""Every searcher's options, declared once: name, default, type, range and one line of
documentation. The spec validates `search.<algorithm>` from here and the searchers take
their defaults from here. Light on purpose (no scikit-learn, no Optuna): every rank
validates the spec, and importing a searcher costs seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    kind: str                       # "text" | "integer" | "number" | "flag"
    doc: str
    choices: tuple | None = None
    low: float | None = None        # integers: the minimum; numbers: the closed range
    high: float | None = None

    def read(self, section) -> Any:
        """The value from a spec section (mpiopt.spec._Section), checked."""
        if self.kind == "text":
            return section.text(self.name, self.default, choices=self.choices)
        if self.kind == "integer":
            return section.integer(self.name, self.default, minimum=self.low)
        if self.kind == "number":
            return section.number(self.name, self.default, low=self.low, high=self.high)
        return section.flag(self.name, self.default)


OPTIONS: dict[str, tuple[Option, ...]] = {
    "auto": (),
    "random": (),
    "bayesian": (
        Option("estimator", "GP", "text", "surrogate: GP (Gaussian process), RF, ET, GBRT (trees)",
               choices=("GP", "RF", "ET", "GBRT")),
        Option("acquisition", "gp_hedge", "text", "gp_hedge, EI, LCB or PI",
               choices=("gp_hedge", "EI", "LCB", "PI")),
        Option("initial_points", 10, "integer", "random points before the surrogate is used", low=1),
        Option("refit_every", 0, "integer", "refit the kernel every N results; 0 = automatic", low=0),
        Option("max_points", 400, "integer", "results in the model at most (best and most recent halves)", low=1),
        Option("hyper_points", 150, "integer", "results used to fit the kernel at most", low=1),
        Option("candidates", 2000, "integer", "random candidates the acquisition is maximised over", low=1),
        Option("liar", "believer", "text", "value assumed for pending points: believer, mean, min, max",
               choices=("mean", "min", "max", "believer")),
        Option("xi", 0.01, "number", "exploration of EI and PI", low=0.0),
        Option("kappa", 1.96, "number", "exploration of LCB", low=0.0),
        Option("min_distance", 0.01, "number", "distance to every pending point, in [0, 1]",
               low=0.0, high=1.0),
        Option("output_warping", True, "flag", "fit the GP to Yeo-Johnson-transformed values"),
    ),
    "evolutionary": (
        Option("mode", "steady_state", "text", "steady_state or generational",
               choices=("steady_state", "generational")),
        Option("population", 10, "integer", "population size", low=2),
        Option("crossover", 0.5, "number", "crossover probability", low=0.0, high=1.0),
        Option("mutation", 1.0, "number", "probability that a child is mutated", low=0.0, high=1.0),
        Option("tournament", 5, "integer", "tournament size, at most population", low=1),
        Option("elitism", 1, "integer", "best members kept, fewer than population", low=0),
        Option("cma", False, "flag", "CMA-ES (DEAP) instead; real parameters only"),
    ),
    "tpe": (
        Option("startup_trials", 10, "integer", "random points first", low=1),
        Option("multivariate", True, "flag", "joint densities of the parameters"),
        Option("constant_liar", True, "flag", "pending trials count as bad results"),
    ),
    "cmaes": (
        Option("population", 0, "integer", "0: Hansen's default, 4 + 3 ln d", low=0),
    ),
}


def defaults(algorithm: str) -> dict:
    return {o.name: o.default for o in OPTIONS[algorithm]}
