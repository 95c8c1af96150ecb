"""Output warping of the GP's told values (search.bayesian.output_warping): a monotone
transform, so the best point stays the best, that keeps a few huge values from setting
the model's scale."""
from __future__ import annotations

import numpy as np


def warp(y: np.ndarray) -> np.ndarray:
    """Output warping (HEBO; Cowen-Rivers et al. 2022): a Yeo-Johnson power transform with
    its maximum-likelihood exponent, on standardised values. Objectives whose values span
    orders of magnitude (a narrow valley's walls, a loss that explodes for bad settings)
    otherwise let a few huge values set the GP's scale and hide the region that matters.
    Monotone, so the best point stays the best. (Other transforms lost on the quality
    suite: benchmarks/results/quality_suite.md.)"""
    from scipy import stats

    if len(y) < 3 or np.ptp(y) == 0:
        return y
    z = (y - np.mean(y)) / np.std(y)
    try:
        warped = stats.yeojohnson(z, yeojohnson_exponent(z))
    except (ValueError, FloatingPointError):
        return y
    if not np.all(np.isfinite(warped)) or np.ptp(warped) == 0:
        return y
    return warped


def yeojohnson_exponent(z: np.ndarray) -> float:
    """The maximum-likelihood Yeo-Johnson exponent, as `scipy.stats.yeojohnson_normmax`
    finds it (the same bounds against overflow, the same bounded Brent search, the same
    log-likelihood term by term, so the same exponent), without scipy's per-call array-API
    and NaN-policy wrapper round the log-likelihood, which costs more than the
    likelihood itself at every one of the search's evaluations."""
    from scipy import optimize, stats

    if not np.all(np.isfinite(z)):
        raise ValueError("Yeo-Johnson input must be finite")
    if not np.any(z):
        return 1.0                          # (scipy's answer: every exponent fits as well)
    n, tiny = len(z), np.finfo(float).smallest_normal
    with np.errstate(invalid="ignore"):
        shape = np.sum(np.sign(z) * np.log1p(np.abs(z)))

        def negative_llf(lmb):
            sigma = np.var(stats.yeojohnson(z, lmb))
            log_sigma = np.log(sigma) if sigma >= tiny else -np.inf
            llf = -n / 2 * log_sigma + (lmb - 1) * shape
            return np.inf if np.isinf(llf) else -llf

        eps, big = np.finfo(float).eps, np.finfo(float).max
        log1p_max = np.log1p(20 * np.max(np.abs(z)))
        lb = (np.log(tiny) - np.log(eps)) / 2 / log1p_max
        ub = (np.log(big) + np.log(eps)) / 2 / log1p_max
        if np.all(z < 0):
            lb, ub = 2 - ub, 2 - lb
        elif np.any(z < 0):
            lb, ub = max(2 - ub, lb), min(2 - lb, ub)
        return optimize.fminbound(negative_llf, lb, ub, xtol=1.48e-08)
