"""Parameter importance: fANOVA-style main effects of a random forest fitted to the trials.

What it is. A scikit-learn random forest is fitted to the COMPLETE trials (parameters ->
value), each parameter encoded as the plots show it: log10 for a log-uniform prior, the
choice's index for a categorical (ordinal encoding: a forest splits it into any subsets
of neighbouring choices). Under the uniform measure on the search space (the space's
bounds, in encoded units), the forest's function f has a total variance V = Var f(x), and
each parameter i a main effect f_i(v) = E[f(x) | x_i = v], its partial dependence. The
importance of i is Var f_i / V: the share of the variance that i explains on its own, as
in fANOVA (Hutter et al., 2014). The shares sum to at most 1; the rest is interactions.

How. Monte Carlo instead of fANOVA's exact tree traversal: the expectations are averages
of the forest's predictions over `samples` uniform points of the space, each main effect
is evaluated on a grid of `grid` values (every choice of a categorical). A fixed seed
makes it reproducible. Sampling noise can make the main effects add up to a little more
than the estimated total; the total is then taken as their sum (no interactions left).

Limits. With few trials (the forest has seen a dozen points) the shares are rough and
change from run to run of the search; the forest predicts a constant outside the region
the trials explored, which shrinks effects there; ordinal encoding of categoricals is an
approximation (a one-hot forest would not be better with this few points); interactions
are reported only as one remainder; a pruned trial's value is not its final one and is
left out, so is a failed trial.
"""
from __future__ import annotations

from typing import Sequence

from mpiopt.reporting.view import Param

GRID = 16
SAMPLES = 256
TREES = 64


def encode(params: Sequence[Param], trials) -> list[list[float]]:
    """Rows of encoded parameter values; a value the axis cannot encode becomes the
    middle of its range (a conditional parameter inactive in that trial, or one added to
    the space later): the forest needs a number, the plots draw no point there."""
    columns = []
    for p in params:
        raw = [p.encode(t.params.get(p.name)) for t in trials]
        lo, hi = p.encoded_range(raw)
        columns.append([(lo + hi) / 2 if v is None else v for v in raw])
    return [list(row) for row in zip(*columns)]


def fit(params: Sequence[Param], trials, seed: int = 0):
    """A random forest of value on the encoded parameters of `trials` (values beyond 1e77
    in size scaled by a power of two: the shares are ratios, see mpiopt.search.scaling)."""
    from sklearn.ensemble import RandomForestRegressor

    from mpiopt.search.scaling import in_range

    model = RandomForestRegressor(n_estimators=TREES, min_samples_leaf=1, random_state=seed)
    model.fit(encode(params, trials), in_range([t.value for t in trials]))
    return model


def uniform_points(params: Sequence[Param], trials, n: int, seed: int = 0):
    """n points drawn uniformly from the space in encoded units (choices: each index)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    X = np.empty((n, len(params)))
    for j, p in enumerate(params):
        lo, hi = p.encoded_range([p.encode(t.params.get(p.name)) for t in trials])
        if p.categorical:
            X[:, j] = rng.integers(0, len(p.choices), n)
        else:
            X[:, j] = rng.uniform(lo, hi, n)
    return X


def grid(param: Param, trials, size: int = GRID) -> list[float]:
    """Encoded values at which a main effect is evaluated."""
    import numpy as np

    if param.categorical:
        return [float(i) for i in range(len(param.choices))]
    lo, hi = param.encoded_range([param.encode(t.params.get(param.name)) for t in trials])
    return [float(x) for x in np.linspace(lo, hi, size)]


def main_effect(model, background, j: int, values: Sequence[float]):
    """f_j(v) for each v: the mean prediction with column j set to v (partial dependence)."""
    import numpy as np

    n = len(background)
    X = np.repeat(background[None, :, :], len(values), axis=0)
    X[:, :, j] = np.asarray(values)[:, None]
    return model.predict(X.reshape(-1, background.shape[1])).reshape(len(values), n).mean(axis=1)


def surface(model, background, i: int, j: int, xs: Sequence[float], ys: Sequence[float]):
    """The two-parameter partial dependence f_ij(x, y), rows over ys (a contour's z)."""
    import numpy as np

    Z = np.empty((len(ys), len(xs)))
    for r, y in enumerate(ys):
        X = np.repeat(background[None, :, :], len(xs), axis=0)
        X[:, :, i] = np.asarray(xs)[:, None]
        X[:, :, j] = y
        Z[r] = model.predict(X.reshape(-1, background.shape[1])).reshape(len(xs), -1).mean(axis=1)
    return Z


def importances(params: Sequence[Param], trials, seed: int = 0) -> dict[str, float]:
    """{name: share of the variance explained by its main effect}, largest first; empty
    when the forest's function is constant (nothing to explain)."""
    import numpy as np

    model = fit(params, trials, seed)
    background = uniform_points(params, trials, SAMPLES, seed)
    total = float(np.var(model.predict(background)))
    if total <= 0:
        return {}
    effects = {p.name: float(np.var(main_effect(model, background, j, grid(p, trials))))
               for j, p in enumerate(params)}
    total = max(total, sum(effects.values()))   # sampling noise may push the sum past V
    return dict(sorted(((k, v / total) for k, v in effects.items()), key=lambda kv: -kv[1]))
