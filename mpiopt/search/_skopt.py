"""The only module that touches scikit-optimize (pinned at 0.10.2: it is unmaintained).

What we take from it: the normalised encoding of a search space (reals and integers to
[0, 1], log scale for log priors, categoricals one-hot), its tree surrogates (RF, ET,
GBRT with a predictive spread), its Hamming kernel for all-categorical spaces and its
acquisition functions. Everything else (the GP posterior, the constant liar, the
candidate search) is ours, because skopt's versions are what made the original
coordinator slow and its parallel points clump.
"""
from __future__ import annotations

import numpy as np
from scipy.special import ndtr
from skopt.acquisition import gaussian_lcb
from skopt.learning.gaussian_process.kernels import HammingKernel
from skopt.space import Categorical, Integer
from skopt.utils import cook_estimator, normalize_dimensions

from mpiopt.space import NEUTRAL

__all__ = ["Encoder", "acquisition", "hamming_kernel", "tree_model"]

_GRID_LIMIT = 4096  # integer dimensions with more values are treated as continuous


class Encoder:
    """Maps parameter dicts to rows of the unit cube and back, vectorised for candidates.

    The max-abs difference between two encoded rows equals `Space.distance` (one-hot
    blocks differ by exactly 1), so distance filters over thousands of candidates are
    one numpy expression.

    Conditional spaces: an absent parameter's columns hold a constant (NEUTRAL = 0.5 for
    a number, all zeros for a one-hot block, 0.5 for a two-choice column), in told rows
    and in every candidate (`snap`). So two points where a parameter is absent do not
    differ in it, and the kernel between them ignores that dimension; the limit: between
    a point where it is absent and one where it is present, the model sees the distance
    to mid-range (it cannot tell "absent" from "middle"). SMAC imputes inactive values
    the same way.
    """

    def __init__(self, space):
        self.space = space
        self.sk = normalize_dimensions(skopt_dimensions(space))
        self.n_cols = self.sk.transformed_n_dims
        self.blocks = []
        col = 0
        for dim in self.sk.dimensions:
            size = dim.transformed_size
            self.blocks.append(_block(dim, col, size))
            col += size
        self.all_categorical = all(b["kind"] == "cat" for b in self.blocks)
        for b in self.blocks:
            b["neutral"] = 0.0 if b["kind"] == "cat" and len(b["cols"]) > 1 else NEUTRAL
        self._index = dict(zip(space.names, range(len(self.blocks))))

    def encode(self, params_list) -> np.ndarray:
        params_list = list(params_list)
        points = [to_point(self.space, p) for p in params_list]
        rows = np.asarray(self.sk.transform(points), dtype=float).reshape(-1, self.n_cols)
        if self.space.conditional:
            for i, params in enumerate(params_list):
                for name, j in self._index.items():
                    if name not in params:
                        rows[i, self.blocks[j]["cols"]] = self.blocks[j]["neutral"]
        return rows

    def decode(self, row) -> dict:
        return self.decode_rows(np.asarray(row, dtype=float)[None, :])[0]

    def decode_rows(self, rows: np.ndarray) -> list[dict]:
        """decode() of each row, in one inverse transform (a batch's suggestions)."""
        points = self.sk.inverse_transform(np.clip(np.asarray(rows, dtype=float), 0.0, 1.0))
        return [from_point(self.space, point) for point in points]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n random rows: uniform in the encoded space, which is the prior's own scale."""
        out = rng.random((n, self.n_cols))
        for b in self.blocks:
            if b["kind"] == "cat":
                out[:, b["cols"]] = _onehot(rng.integers(0, b["k"], n), b)
        return self.snap(out)

    def perturb(self, rows: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
        """Local moves: Gaussian steps on numeric columns, a resampled category now and then."""
        out = rows + rng.normal(0.0, scale, rows.shape)
        p_cat = min(0.5, 1.0 / max(1, len(self.blocks)))
        for b in self.blocks:
            if b["kind"] == "cat":
                out[:, b["cols"]] = rows[:, b["cols"]]
                flip = rng.random(len(rows)) < p_cat
                if flip.any():
                    out[np.ix_(flip, b["cols"])] = _onehot(rng.integers(0, b["k"], flip.sum()), b)
        return self.snap(np.clip(out, 0.0, 1.0))

    def snap(self, rows: np.ndarray) -> np.ndarray:
        """Move integer columns onto their grid so candidates are points that can be run,
        and absent parameters' columns to their constant (see the class docstring)."""
        for b in self.blocks:
            if b["kind"] == "int":
                grid = b["grid"]
                col = rows[:, b["cols"][0]]
                idx = np.clip(np.searchsorted(grid, col), 1, len(grid) - 1)
                left = grid[idx - 1]
                right = grid[idx]
                rows[:, b["cols"][0]] = np.where(col - left < right - col, left, right)
        if self.space.conditional:
            self._neutralise(rows)
        return rows

    def _neutralise(self, rows: np.ndarray) -> None:
        """Absent parameters' columns set to their constant, parents before children; a
        category that a move made present again (its columns still constant) becomes a
        real choice: the first one (the second of two)."""
        space, values, on = self.space, {}, {}
        for name in space.order:
            mask = np.ones(len(rows), dtype=bool)
            for cond in space.conditions.get(name, ()):
                if cond.parent not in values:
                    values[cond.parent] = self._column_values(rows, cond.parent)
                mask &= on[cond.parent] & cond.mask(values[cond.parent], space[cond.parent])
            on[name] = mask
            block = self.blocks[self._index[name]]
            if block["kind"] == "cat" and name in space.conditions:
                rows[np.ix_(mask, block["cols"])] = _onehot(
                    self._column_values(rows[mask], name), block)
            if not mask.all():
                rows[np.ix_(~mask, block["cols"])] = block["neutral"]

    def _column_values(self, rows: np.ndarray, name: str) -> np.ndarray:
        """What one dimension's columns stand for, row by row: a choice's index, or the
        value (Condition.mask reads these)."""
        j = self._index[name]
        block, sk = self.blocks[j], self.sk.dimensions[j]
        cols = rows[:, block["cols"]]
        if block["kind"] == "cat":
            return (cols[:, 0] >= 0.5).astype(int) if cols.shape[1] == 1 else cols.argmax(axis=1)
        return np.ravel(np.asarray(sk.inverse_transform(cols[:, 0]), dtype=float))


def skopt_dimensions(space) -> list:
    """scikit-optimize's dimensions for mpiopt's (the only place that knows skopt's space:
    mpiopt.space stays free of any searcher's types)."""
    from skopt.space import Categorical as SkCategorical
    from skopt.space import Integer as SkInteger
    from skopt.space import Real as SkReal

    out = []
    for dim in space.dimensions:
        kind = type(dim).__name__
        if kind == "Categorical":
            out.append(SkCategorical(list(dim.choices), name=dim.name))
        elif kind == "Integer":
            out.append(SkInteger(dim.low, dim.high, prior=dim.prior, name=dim.name))
        else:
            out.append(SkReal(dim.low, dim.high, prior=dim.prior, name=dim.name))
    return out


def to_point(space, params: dict) -> list:
    """params -> a skopt point (values in dimension order), checked against the space; an
    absent parameter gets its mid-range value (Encoder.encode overwrites its columns)."""
    space.check(params)
    return [params[d.name] if d.name in params else d.decode(NEUTRAL) for d in space.dimensions]


def from_point(space, point) -> dict:
    """skopt point -> params with native types (skopt hands back numpy int64)."""
    if len(point) != len(space.dimensions):
        raise ValueError(f"expected a point of {len(space)} values, got {len(point)}")
    return {d.name: d.native(_native(v)) for d, v in zip(space.dimensions, point)}


def _block(dim, col: int, size: int) -> dict:
    cols = list(range(col, col + size))
    if isinstance(dim, Categorical):
        return {"kind": "cat", "cols": cols, "k": len(dim.categories)}
    if isinstance(dim, Integer) and dim.high - dim.low + 1 <= _GRID_LIMIT:
        values = np.arange(dim.low, dim.high + 1)
        grid = np.asarray(dim.transform(values), dtype=float).ravel()
        if len(grid) == 1:
            grid = np.array([grid[0], grid[0]])
        return {"kind": "int", "cols": cols, "grid": np.sort(grid)}
    return {"kind": "num", "cols": cols}


def _onehot(index: np.ndarray, block: dict) -> np.ndarray:
    """The encoding skopt uses: one column 0/1 for two categories, else one-hot."""
    size = len(block["cols"])
    if size == 1:
        return (index >= 1).astype(float)[:, None] if block["k"] == 2 else np.zeros((len(index), 1))
    out = np.zeros((len(index), size))
    out[np.arange(len(index)), index] = 1.0
    return out


def _native(v):
    return v.item() if isinstance(v, np.generic) else v


class _Cached:
    """Hands skopt's acquisition functions a prediction we already computed."""

    def __init__(self, mu: np.ndarray, std: np.ndarray):
        self.mu, self.std = mu, std

    def predict(self, X, return_std=False, **_):
        return (self.mu, self.std) if return_std else self.mu


def acquisition(name: str, mu, std, y_opt: float, xi: float, kappa: float) -> np.ndarray:
    """Acquisition values to MAXIMISE (skopt's EI and PI are gains, its LCB a bound).

    EI and PI are skopt's formulas term by term (scipy's normal cdf is `ndtr`, its pdf
    exp(-x^2/2) / sqrt(2 pi)), so the same numbers, without scipy.stats' per-call
    argument handling: a batch scores its candidates at every pick, and that handling
    cost more than the arithmetic."""
    mu, std = np.asarray(mu, float), np.asarray(std, float)
    if name in ("EI", "PI"):
        values = np.zeros_like(mu)
        mask = std > 0
        improve = y_opt - xi - mu[mask]
        scaled = improve / std[mask]
        cdf = ndtr(scaled)
        if name == "PI":
            values[mask] = cdf
        else:
            values[mask] = improve * cdf + std[mask] * (np.exp(-scaled ** 2 / 2.0) / _PDF_C)
        return values
    if name == "LCB":
        return -gaussian_lcb(np.zeros((len(mu), 1)), _Cached(mu, std), kappa=kappa)
    raise ValueError(f"unknown acquisition {name!r}")


_PDF_C = np.sqrt(2 * np.pi)     # (scipy.stats.norm's constant)


def hamming_kernel(n_cols: int):
    """skopt's kernel for spaces made only of categorical dimensions."""
    return HammingKernel(length_scale=np.ones(n_cols))


def tree_model(kind: str, encoder: Encoder, seed: int):
    """skopt's RF / ET / GBRT surrogate with the predictive spread EI needs."""
    model = cook_estimator(kind, space=encoder.sk, random_state=seed)
    if hasattr(model, "n_jobs"):
        model.set_params(n_jobs=1)
    return _QuantileSpread(model) if kind == "GBRT" else _ForestSpread(model)


class _Spread:
    """A fitted skopt tree model whose predict(return_std=True) is computed here."""

    def __init__(self, model):
        self.model = model

    def fit(self, X, y):
        self.model.fit(X, y)
        return self


class _ForestSpread(_Spread):
    """skopt's RF / ET predictive spread (Hutter et al. 2014, arXiv:1211.0906, 4.3.2:
    E[Var(y | tree)] + Var(E[y | tree]), each tree's variance at least `min_variance`),
    computed from one `apply` of the whole forest. skopt's own predict(return_std=True)
    predicts tree by tree, validating the rows twice per tree: most of an ask's time."""

    def predict(self, X, return_std=False):
        leaves = self.model.apply(np.asarray(X, dtype=np.float32))     # (rows, trees)
        trees = [t.tree_ for t in self.model.estimators_]
        means = np.stack([t.value[leaves[:, i], 0, 0] for i, t in enumerate(trees)], axis=1)
        mu = means.mean(axis=1)
        if not return_std:
            return mu
        floor = getattr(self.model, "min_variance", 0.0)
        var = np.stack([t.impurity[leaves[:, i]] for i, t in enumerate(trees)], axis=1)
        second = (np.maximum(var, floor) + means ** 2).mean(axis=1)
        return mu, np.sqrt(np.maximum(second - mu ** 2, 0.0))


class _QuantileSpread(_Spread):
    """skopt's GBRT predict(return_std=True) calls np.in1d, gone in numpy 2.4; the same
    estimate (median, half the 16-84% quantile spread) computed from its fitted models."""

    def predict(self, X, return_std=False):
        by_q = {q: r.predict(X) for q, r in zip(self.model.quantiles, self.model.regressors_)}
        mu = by_q[0.5]
        if not return_std:
            return mu
        return mu, np.abs(by_q[0.84] - by_q[0.16]) / 2.0


class TreePosterior:
    """skopt's tree surrogate behind the same predict(rows) -> (mean, std) shape."""

    def __init__(self, kind, encoder, X, y, seed):
        self.model = tree_model(kind, encoder, seed)
        self.model.fit(X, y)

    def predict(self, rows):
        mu, std = self.model.predict(rows, return_std=True)
        return np.asarray(mu, float), np.maximum(np.asarray(std, float), 1e-12)
