"""The Bayesian searcher's options checked up front: each wrong one is a one-line SpecError
naming its field."""
from __future__ import annotations

from mpiopt.errors import SpecError

ESTIMATORS = ("GP", "RF", "ET", "GBRT")
ACQUISITIONS = ("gp_hedge", "EI", "LCB", "PI")


def validate(opts: dict) -> dict:
    est = str(opts["estimator"]).upper()
    if est not in ESTIMATORS:
        raise SpecError(f"search.bayesian.estimator: expected one of {', '.join(ESTIMATORS)}, "
                        f"got {opts['estimator']!r}")
    acq = str(opts["acquisition"])
    acq = acq if acq == "gp_hedge" else acq.upper()
    if acq not in ACQUISITIONS:
        raise SpecError(f"search.bayesian.acquisition: expected one of "
                        f"{', '.join(ACQUISITIONS)}, got {opts['acquisition']!r}")
    if opts["liar"] not in ("believer", "mean", "min", "max"):
        raise SpecError(f"search.bayesian.liar: expected believer, mean, min or max, "
                        f"got {opts['liar']!r}")
    if opts["initial_design"] not in ("sobol", "random"):
        raise SpecError(f"search.bayesian.initial_design: expected sobol or random, "
                        f"got {opts['initial_design']!r}")
    for key in ("initial_points", "max_points", "hyper_points", "candidates"):
        if int(opts[key]) < 1:
            raise SpecError(f"search.bayesian.{key}: expected an integer >= 1, got {opts[key]!r}")
    return {**opts, "estimator": est, "acquisition": acq}
