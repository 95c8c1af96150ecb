"""Several objectives: Pareto fronts, NSGA-II's ranking, ParEGO's scalarization, hypervolume.

Every value here is a vector of objectives, each lower-is-better (the coordinator negates
maximized ones), and a trial may carry a constraint violation (0 = feasible). Pure
functions: the searchers, the coordinator, the CLI and the report share them.

- Constrained domination (Deb et al., 2002): a feasible point beats an infeasible one;
  two infeasible ones compare by their violation; feasible ones by Pareto dominance.
- NSGA-II's order (Deb et al., 2002): front index first, then crowding distance (larger is
  better). DEAP computes both (tools.sortNondominated, tools.emo.assignCrowdingDist).
- ParEGO (Knowles, 2006): each suggestion fits one model to an augmented Chebyshev
  scalarization of the objectives, normalized to [0, 1] by the values seen, with weights
  drawn afresh, so successive suggestions aim at different parts of the front.
- Hypervolume: the volume dominated by the front up to a reference point, exact (slicing
  by the first objective, recursively); fronts of a few hundred points in 2-4 objectives.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

CHEBYSHEV_RHO = 0.05   # ParEGO's augmentation term, as in Knowles (2006)


class Objectives(tuple):
    """What a searcher is told for a study with several objectives or constraints: the
    lower-is-better values, and the trial's constraint violation (0 = feasible)."""

    violation: float

    def __new__(cls, values, violation: float = 0.0):
        self = super().__new__(cls, (float(v) for v in values))
        self.violation = float(violation)
        return self

    def __reduce__(self):
        return (Objectives, (tuple(self), self.violation))


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a is no worse than b in every objective and better in one (minimization)."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def front_mask(values: Sequence[Sequence[float]],
               violations: Sequence[float] | None = None) -> np.ndarray:
    """True for the feasible points that no other feasible point dominates."""
    v = np.asarray(values, dtype=float).reshape(len(values), -1)
    ok = np.ones(len(v), bool) if violations is None else np.asarray(violations) <= 0
    mask = ok.copy()
    for i in np.flatnonzero(ok):
        others = v[ok]
        beaten = np.all(others <= v[i], axis=1) & np.any(others < v[i], axis=1)
        mask[i] = not beaten.any()
    return mask


def nsga2_keys(values: Sequence[Sequence[float]],
               violations: Sequence[float] | None = None) -> list[float]:
    """One number per point, lower is better: NSGA-II's front index plus a share in
    [0, 1) that falls with crowding distance (boundary points get 0). Infeasible points
    come after every feasible front, ordered by violation."""
    from deap import base, tools
    from deap.tools import emo

    n = len(values)
    if n == 0:
        return []
    m = len(values[0])
    violations = [0.0] * n if violations is None else [float(x) for x in violations]
    fitness = type("Fitness", (base.Fitness,), {"weights": (-1.0,) * m})
    feasible = [i for i in range(n) if violations[i] <= 0]
    inds = []
    for i in feasible:
        ind = _Point(values[i])
        ind.fitness = fitness(tuple(float(x) for x in values[i]))
        ind.index = i
        inds.append(ind)
    keys = [0.0] * n
    rank = 0
    for rank, front in enumerate(tools.sortNondominated(inds, len(inds)) if inds else []):
        emo.assignCrowdingDist(front)
        finite = [ind.fitness.crowding_dist for ind in front
                  if math.isfinite(ind.fitness.crowding_dist)]
        top = max(finite, default=0.0)
        for ind in front:
            d = ind.fitness.crowding_dist
            share = 0.0 if not math.isfinite(d) else 1.0 - d / (top + 1e-12) * 0.999
            keys[ind.index] = rank + min(max(share, 0.0), 0.999)
    base_rank = rank + 1 if inds else 0
    infeasible = sorted((i for i in range(n) if violations[i] > 0), key=lambda i: violations[i])
    for j, i in enumerate(infeasible):
        keys[i] = base_rank + j
    return keys


class _Point(list):
    """A DEAP individual: a list with a fitness (set per call: the number of objectives
    is the study's)."""


def simplex_weights(m: int, rng: np.random.Generator) -> np.ndarray:
    """Weights drawn uniformly on the simplex (ParEGO draws one vector per suggestion)."""
    w = rng.dirichlet(np.ones(m))
    return np.maximum(w, 1e-6)


def chebyshev(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """ParEGO's augmented Chebyshev scalarization of objectives normalized to [0, 1] by
    the values given (lower is better)."""
    v = np.asarray(values, dtype=float)
    lo, hi = v.min(axis=0), v.max(axis=0)
    z = (v - lo) / np.where(hi > lo, hi - lo, 1.0)
    wz = z * weights
    return wz.max(axis=1) + CHEBYSHEV_RHO * wz.sum(axis=1)


def reference_point(values: np.ndarray) -> np.ndarray:
    """The worst value seen in each objective: the default reference of the hypervolume
    (a fixed one can be set with objective.reference)."""
    return np.asarray(values, dtype=float).max(axis=0)


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """The volume that the points dominate below the reference (minimization); points not
    better than the reference in every objective add nothing."""
    ref = np.asarray(reference, dtype=float)
    p = np.asarray(points, dtype=float).reshape(-1, len(ref))
    p = p[np.all(p < ref, axis=1)]
    if len(p) == 0:
        return 0.0
    p = p[front_mask(p)]
    return float(_slice_volume(p, ref))


def _slice_volume(p: np.ndarray, ref: np.ndarray) -> float:
    if p.shape[1] == 1:
        return float(ref[0] - p[:, 0].min())
    if p.shape[1] == 2:       # a sweep: the staircase below the points, sorted by x
        order = p[np.argsort(p[:, 0], kind="stable")]
        xs, ys = order[:, 0], np.minimum.accumulate(order[:, 1])
        edges = np.append(xs[1:], ref[0])
        return float(np.sum((edges - xs) * (ref[1] - ys)))
    order = p[np.argsort(p[:, 0], kind="stable")]
    volume = 0.0
    for i in range(len(order)):
        upper = order[i + 1, 0] if i + 1 < len(order) else ref[0]
        width = upper - order[i, 0]
        if width <= 0:
            continue
        below = order[: i + 1, 1:]
        sub = below[front_mask(below)]
        volume += width * _slice_volume(sub, ref[1:])
    return volume
