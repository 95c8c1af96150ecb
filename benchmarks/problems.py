"""The problems of the search-quality suite (benchmarks/quality_suite.py).

Chosen to cover what users meet, not what a searcher was tuned on: smooth low-dimensional
functions, rugged multimodal ones, narrow curved valleys, 10 and 20 dimensions, a noisy
objective, integer, categorical and mixed spaces, parameters spread over decades (log
scale), and three real tuning tasks on data that ships with scikit-learn (cross-validated
error of a model). Standard definitions (Surjanovic & Bingham's library of test
functions; Bayesmark's sklearn tasks as the model). Every problem is minimised; budgets
grow with the dimension (10 d + 20, at least 40).

A problem's `reference` values (the best value a long random search finds and its
median value) turn a best value into Bayesmark's normalized score: 1 at the reference
optimum, 0 at the median random value.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mpiopt.space import Categorical, Integer, Real, Space  # noqa: E402


@dataclass
class Problem:
    name: str
    kind: str
    space: Space
    objective: object
    optimum: float | None = None     # known global minimum, where there is one
    noisy: bool = False
    truth: object = None             # the noise-free objective of a noisy problem
    cost: str = "cheap"              # "model": a cross-validated fit per evaluation
    budget: int = field(default=0)

    def __post_init__(self):
        if not self.budget:
            self.budget = max(40, 10 * len(self.space.dimensions) + 20)


def _reals(n, low, high, prefix="x"):
    return Space([Real(f"{prefix}{i}", low, high) for i in range(n)])


def _vec(p, n, prefix="x"):
    return np.array([p[f"{prefix}{i}"] for i in range(n)], dtype=float)


# ---- smooth, low-dimensional ------------------------------------------------------------
def branin(p):
    x1, x2 = p["x0"], p["x1"]
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


_H3A = np.array([[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]])
_H3P = 1e-4 * np.array([[3689, 1170, 2673], [4699, 4387, 7470], [1091, 8732, 5547],
                        [381, 5743, 8828]])
_H6A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                 [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_H6P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                        [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann3(p):
    x = _vec(p, 3)
    return -float(_ALPHA @ np.exp(-np.sum(_H3A * (x - _H3P) ** 2, axis=1)))


def hartmann6(p):
    x = _vec(p, 6)
    return -float(_ALPHA @ np.exp(-np.sum(_H6A * (x - _H6P) ** 2, axis=1)))


# ---- rugged, multimodal -------------------------------------------------------------------
def ackley(n):
    def f(p):
        x = _vec(p, n)
        return float(-20 * np.exp(-0.2 * np.sqrt(np.mean(x ** 2)))
                     - np.exp(np.mean(np.cos(2 * np.pi * x))) + 20 + np.e)
    return f


def rastrigin(n):
    def f(p):
        x = _vec(p, n)
        return float(10 * n + np.sum(x ** 2 - 10 * np.cos(2 * np.pi * x)))
    return f


def levy(n):
    def f(p):
        w = 1 + (_vec(p, n) - 1) / 4
        return float(np.sin(np.pi * w[0]) ** 2
                     + np.sum((w[:-1] - 1) ** 2 * (1 + 10 * np.sin(np.pi * w[:-1] + 1) ** 2))
                     + (w[-1] - 1) ** 2 * (1 + np.sin(2 * np.pi * w[-1]) ** 2))
    return f


# ---- narrow valleys -----------------------------------------------------------------------
def rosenbrock(n):
    def f(p):
        x = _vec(p, n)
        return float(np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))
    return f


def six_hump_camel(p):
    x, y = p["x0"], p["x1"]
    return (4 - 2.1 * x ** 2 + x ** 4 / 3) * x ** 2 + x * y + (-4 + 4 * y ** 2) * y ** 2


def goldstein_price(p):
    x, y = p["x0"], p["x1"]
    a = 1 + (x + y + 1) ** 2 * (19 - 14 * x + 3 * x ** 2 - 14 * y + 6 * x * y + 3 * y ** 2)
    b = 30 + (2 * x - 3 * y) ** 2 * (18 - 32 * x + 12 * x ** 2 + 48 * y - 36 * x * y + 27 * y ** 2)
    return a * b


def eggholder(p):
    x, y = p["x0"], p["x1"]
    return (-(y + 47) * math.sin(math.sqrt(abs(x / 2 + y + 47)))
            - x * math.sin(math.sqrt(abs(x - (y + 47)))))


def styblinski_tang(n):
    def f(p):
        x = _vec(p, n)
        return float(np.sum(x ** 4 - 16 * x ** 2 + 5 * x) / 2)
    return f


# ---- many dimensions ----------------------------------------------------------------------
def ellipsoid(n):
    """Rotated-free but ill-conditioned (1 .. 1e4) and shifted off the centre."""
    weights = 10.0 ** (4 * np.arange(n) / max(1, n - 1))
    shift = np.linspace(-1.5, 1.5, n)

    def f(p):
        return float(np.sum(weights * (_vec(p, n) - shift) ** 2))
    return f


# ---- noisy ----------------------------------------------------------------------------------
def noisy(fn, scale, seed=0):
    """fn plus Gaussian noise of `scale` (a fresh draw per call, reproducible per run)."""
    rng = np.random.default_rng(seed)

    def f(p):
        return fn(p) + float(rng.normal(0.0, scale))
    return f


# ---- integer, categorical, mixed, log-scaled ------------------------------------------------
def int_quadratic(p):
    """Integers over wide ranges, a coupled bowl (as layer counts and widths)."""
    a, b, c, d = (p[k] for k in ("a", "b", "c", "d"))
    return float((a - 37) ** 2 + 0.5 * (b - 3) ** 2 + (c - 2 * a / 10) ** 2 + 0.1 * (d - 120) ** 2
                 + 0.3 * (a - 37) * (b - 3))


_CAT_W = np.random.default_rng(7).normal(size=(6, 5))
_CAT_PAIR = np.random.default_rng(8).normal(size=(5, 5)) * 0.8


def categorical_interactions(p):
    """Six 5-way choices with main effects and one strong pairwise interaction."""
    idx = [p[f"c{i}"] for i in range(6)]
    return float(sum(_CAT_W[i, idx[i]] for i in range(6)) + _CAT_PAIR[idx[0], idx[1]])


_BEST_LR = {"adam": -3.0, "rmsprop": -3.3, "sgd": -1.3}


def network_error(p):
    """A validation-error surface shaped like a network's (optimum 0.100)."""
    lr = math.log10(p["lr"]) - _BEST_LR[p["optimizer"]] - 0.15 * (math.log2(p["batch"]) - 6)
    width = math.log2(p["units"]) - 7
    return (0.100 + 0.04 * lr ** 2 + 0.01 * width ** 2 + 0.02 * (p["layers"] - 3) ** 2
            + 0.3 * (p["dropout"] - 0.2 - 0.05 * width) ** 2
            + {"relu": 0.0, "elu": 0.004, "tanh": 0.03}[p["activation"]]
            + {"adam": 0.0, "rmsprop": 0.006, "sgd": 0.012}[p["optimizer"]])


def log_valley(p):
    """Four parameters spread over 6 decades whose best values depend on each other."""
    a, b, c, d = (math.log10(p[k]) for k in ("a", "b", "c", "d"))
    return (a + 3) ** 2 + (b - a / 2 + 1) ** 2 * 4 + (c - 1) ** 2 + 0.5 * (d + b) ** 2


# ---- real tasks (scikit-learn data, cross-validated error) ----------------------------------
@lru_cache(maxsize=None)
def _data(name):
    from sklearn import datasets

    loader = {"digits": datasets.load_digits, "breast_cancer": datasets.load_breast_cancer,
              "wine": datasets.load_wine}[name]
    x, y = loader(return_X_y=True)
    rng = np.random.default_rng(0)
    keep = rng.permutation(len(x))[:600]
    return x[keep], y[keep]


@lru_cache(maxsize=None)
def _scaled_folds(name, folds=3):
    """(train x, train y, test x, test y) per fold, each fold's x scaled by a StandardScaler
    fitted on its training part: the splits cross_val_score makes for a classifier
    (StratifiedKFold, unshuffled), computed once per data set instead of per evaluation."""
    from sklearn.model_selection import StratifiedKFold
    from sklearn.preprocessing import StandardScaler

    x, y = _data(name)
    out = []
    for train, test in StratifiedKFold(folds).split(x, y):
        scaler = StandardScaler().fit(x[train])
        out.append((scaler.transform(x[train]), y[train], scaler.transform(x[test]), y[test]))
    return tuple(out)


def _cv_error(model, name, folds=3):
    """1 - mean accuracy over the folds: the numbers of `1 - mean(cross_val_score(
    make_pipeline(StandardScaler(), model), x, y, cv=folds))` (the same splits, scaled
    arrays, fits and scores; checked equal on random settings of every task, and the
    suite's curves were unchanged), without cross_val_score's per-call machinery and the
    scaler's refits, which were 30-45% of a tree's or SGD's evaluation."""
    from sklearn.base import clone

    return 1.0 - float(np.mean([clone(model).fit(a, b).score(c, d)
                                for a, b, c, d in _scaled_folds(name, folds)]))


def svc_digits(p):
    from sklearn.svm import SVC

    return _cv_error(SVC(C=p["C"], gamma=p["gamma"], kernel=p["kernel"]), "digits")


def _tree(p):
    from sklearn.tree import DecisionTreeClassifier

    return DecisionTreeClassifier(
        max_depth=p["max_depth"], min_samples_leaf=p["min_samples_leaf"],
        min_samples_split=p["min_samples_split"], criterion=p["criterion"],
        max_features=p["max_features"], random_state=0)


def _tree_space():
    return Space([
        Integer("max_depth", 1, 20), Integer("min_samples_leaf", 1, 50, prior="log-uniform"),
        Integer("min_samples_split", 2, 40), Categorical("criterion", ["gini", "entropy"]),
        Real("max_features", 0.1, 1.0)])


def _sgd(p):
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(
        loss=p["loss"], alpha=p["alpha"], l1_ratio=p["l1_ratio"], penalty="elasticnet",
        learning_rate="adaptive", eta0=p["eta0"], max_iter=60, tol=None, random_state=0)


def _sgd_space():
    return Space([
        Categorical("loss", ["hinge", "log_loss", "modified_huber"]),
        Real("alpha", 1e-7, 1.0, prior="log-uniform"), Real("l1_ratio", 0.0, 1.0),
        Real("eta0", 1e-4, 1.0, prior="log-uniform")])


def tree_cancer(p):
    return _cv_error(_tree(p), "breast_cancer")


def sgd_wine(p):
    return _cv_error(_sgd(p), "wine")


# ---- held out: more shapes, only to check a rule (see HELD_OUT) -------------------------------
def michalewicz(n, m=10):
    """Steep narrow ridges and valleys (m sets their steepness); d! local minima."""
    i = np.arange(1, n + 1)

    def f(p):
        x = _vec(p, n)
        return float(-np.sum(np.sin(x) * np.sin(i * x ** 2 / math.pi) ** (2 * m)))
    return f


def griewank(n):
    """A wide bowl covered by a fine product of cosines."""
    i = np.sqrt(np.arange(1, n + 1))

    def f(p):
        x = _vec(p, n)
        return float(1 + np.sum(x ** 2) / 4000 - np.prod(np.cos(x / i)))
    return f


def shifted(fn, n, low, high, seed=0):
    """fn with its optimum moved off the centre: fn(x - c), c uniform within 80% of the
    half-width per coordinate (as BBOB/COCO place their optima). Rastrigin's, Ackley's and
    Griewank's optima lie at the centre of their usual domains, where CMA-ES starts its
    distribution (Optuna's and Hansen's default x0): the shifted twins show how much of a
    searcher's result on them is that start."""
    c = np.random.default_rng(seed).uniform(-0.8, 0.8, n) * (high - low) / 2

    def f(p):
        return fn({**p, **{f"x{i}": p[f"x{i}"] - c[i] for i in range(n)}})
    return f


def _moved(name, kind, family, n, low, high) -> "Problem":
    """The n-D `family` function on [low, high]^n with its optimum (0) moved (`shifted`)."""
    return Problem(name, kind, _reals(n, low, high), shifted(family(n), n, low, high), 0.0)


def zakharov(n):
    """A smooth plate-shaped valley whose walls rise as the fourth power."""
    i = np.arange(1, n + 1)

    def f(p):
        x = _vec(p, n)
        s = float(np.sum(0.5 * i * x))
        return float(np.sum(x ** 2) + s ** 2 + s ** 4)
    return f


def schwefel(n):
    """Schwefel 2.26: a rugged surface whose best basin lies near a corner (420.97 each)."""
    def f(p):
        x = _vec(p, n)
        return float(418.9829 * n - np.sum(x * np.sin(np.sqrt(np.abs(x)))))
    return f


def dixon_price(n):
    """A curved valley; its optimum (0) at x_i = 2^-(2^i - 2)/2^i, off the centre."""
    i = np.arange(2, n + 1)

    def f(p):
        x = _vec(p, n)
        return float((x[0] - 1) ** 2 + np.sum(i * (2 * x[1:] ** 2 - x[:-1]) ** 2))
    return f


def powell(n):
    """Powell's singular function (n a multiple of 4): a quartic valley, singular Hessian
    at its optimum (0 at the origin, off the centre of [-4, 5])."""
    def f(p):
        x = _vec(p, n).reshape(-1, 4)
        return float(np.sum((x[:, 0] + 10 * x[:, 1]) ** 2 + 5 * (x[:, 2] - x[:, 3]) ** 2
                            + (x[:, 1] - 2 * x[:, 2]) ** 4 + 10 * (x[:, 0] - x[:, 3]) ** 4))
    return f


def mixed_hartmann(p):
    """Hartmann-6 whose last two coordinates are chosen from five levels each (a model's
    layer count, a batch size): a mixed space."""
    q = {f"x{i}": p[f"x{i}"] for i in range(4)}
    q["x4"], q["x5"] = p["level_a"] / 4, p["level_b"] / 4
    return hartmann6(q)


def logreg_cancer(p):
    import warnings

    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():   # saga's convergence; scikit-learn 1.8's penalty notice
        warnings.simplefilter("ignore")
        return _cv_error(LogisticRegression(C=p["C"], l1_ratio=p["l1_ratio"], penalty="elasticnet",
                                            solver="saga", max_iter=200, tol=p["tol"]),
                         "breast_cancer")


def sgd_cancer(p):
    """sgd-wine's model and space on the breast-cancer data."""
    return _cv_error(_sgd(p), "breast_cancer")


def tree_wine(p):
    """tree-cancer's model and space on the wine data."""
    return _cv_error(_tree(p), "wine")


# ---- the catalogue ----------------------------------------------------------------------------
def catalogue() -> dict[str, Problem]:
    hart6 = Problem("hartmann6-noisy", "noisy", _reals(6, 0.0, 1.0), noisy(hartmann6, 0.1),
                    -3.32237, noisy=True, truth=hartmann6)
    items = [
        Problem("branin", "smooth", Space([Real("x0", -5.0, 10.0), Real("x1", 0.0, 15.0)]),
                branin, 0.397887),
        Problem("hartmann3", "smooth", _reals(3, 0.0, 1.0), hartmann3, -3.86278),
        Problem("hartmann6", "smooth", _reals(6, 0.0, 1.0), hartmann6, -3.32237),
        Problem("ackley5", "rugged", _reals(5, -32.768, 32.768), ackley(5), 0.0),
        Problem("rastrigin4", "rugged", _reals(4, -5.12, 5.12), rastrigin(4), 0.0),
        Problem("levy6", "rugged", _reals(6, -10.0, 10.0), levy(6), 0.0),
        Problem("rosenbrock4", "valley", _reals(4, -5.0, 10.0), rosenbrock(4), 0.0),
        Problem("camel", "valley", Space([Real("x0", -3.0, 3.0), Real("x1", -2.0, 2.0)]),
                six_hump_camel, -1.0316),
        Problem("ellipsoid10", "high-dim", _reals(10, -5.0, 5.0), ellipsoid(10), 0.0),
        Problem("levy20", "high-dim", _reals(20, -10.0, 10.0), levy(20), 0.0),
        hart6,
        Problem("int-quadratic", "integer", Space([Integer("a", 1, 100), Integer("b", 0, 10),
                                                   Integer("c", 0, 20), Integer("d", 1, 500)]),
                int_quadratic, 0.0),
        Problem("categorical", "categorical",
                Space([Categorical(f"c{i}", list(range(5))) for i in range(6)]),
                categorical_interactions, None),
        Problem("network-mixed", "mixed", Space([
            Real("lr", 1e-5, 1.0, prior="log-uniform"), Integer("batch", 16, 512, prior="log-uniform"),
            Integer("layers", 1, 6), Integer("units", 8, 1024, prior="log-uniform"),
            Real("dropout", 0.0, 0.6), Categorical("activation", ["relu", "tanh", "elu"]),
            Categorical("optimizer", ["sgd", "adam", "rmsprop"])]), network_error, 0.100),
        Problem("log-valley", "log-scaled", Space([Real(k, 1e-6, 1.0, prior="log-uniform")
                                                   for k in ("a", "b", "c", "d")]), log_valley, 0.0),
        Problem("svc-digits", "real task", Space([
            Real("C", 1e-3, 1e3, prior="log-uniform"), Real("gamma", 1e-5, 1.0, prior="log-uniform"),
            Categorical("kernel", ["rbf", "sigmoid"])]), svc_digits, None, cost="model"),
        Problem("tree-cancer", "real task", _tree_space(), tree_cancer, None, cost="model"),
        Problem("sgd-wine", "real task", _sgd_space(), sgd_wine, None, cost="model"),
    ]
    held_out = [   # not in the suite: only to check a rule on problems it was not made on
        Problem("rastrigin2", "rugged", _reals(2, -5.12, 5.12), rastrigin(2), 0.0),
        Problem("ackley2", "rugged", _reals(2, -32.768, 32.768), ackley(2), 0.0),
        Problem("levy2", "rugged", _reals(2, -10.0, 10.0), levy(2), 0.0),
        Problem("eggholder", "rugged", _reals(2, -512.0, 512.0), eggholder, -959.6407),
        Problem("goldstein-price", "smooth", _reals(2, -2.0, 2.0), goldstein_price, 3.0),
        Problem("styblinski2", "smooth", _reals(2, -5.0, 5.0), styblinski_tang(2), -78.33198),
        # beyond two dimensions (added 2026-11-25, after auto's rules were set; a random
        # forest on wine and k-nearest neighbours on wine were dropped the same day: random
        # search's median already reached the best value any searcher found, so they tell
        # searchers apart by noise only)
        Problem("styblinski5", "rugged", _reals(5, -5.0, 5.0), styblinski_tang(5), -195.83),
        Problem("michalewicz5", "rugged", _reals(5, 0.0, math.pi), michalewicz(5), -4.687658),
        Problem("griewank8", "rugged", _reals(8, -50.0, 50.0), griewank(8), 0.0),
        Problem("zakharov6", "valley", _reals(6, -5.0, 10.0), zakharov(6), 0.0),
        Problem("mixed-hartmann", "mixed", Space(
            [Real(f"x{i}", 0.0, 1.0) for i in range(4)]
            + [Categorical("level_a", list(range(5))), Integer("level_b", 0, 4)]), mixed_hartmann,
            None),
        Problem("logreg-cancer", "real task", Space([
            Real("C", 1e-4, 1e3, prior="log-uniform"), Real("l1_ratio", 0.0, 1.0),
            Real("tol", 1e-6, 1e-1, prior="log-uniform")]), logreg_cancer, None, cost="model"),
        # (added 2026-11-25 13:20, after a 30-seed check of the suite's two tasks where TPE
        # beats `auto`, only to see whether that holds for the same models on the other
        # data set: it did not, RESULTS.md)
        Problem("sgd-cancer", "real task", _sgd_space(), sgd_cancer, None, cost="model"),
        Problem("tree-wine", "real task", _tree_space(), tree_wine, None, cost="model"),
        # (added 2026-11-26: the centre-optimum functions with their optima moved, see shifted)
        _moved("ackley5-shifted", "rugged", ackley, 5, -32.768, 32.768),
        _moved("rastrigin4-shifted", "rugged", rastrigin, 4, -5.12, 5.12),
        _moved("levy6-shifted", "rugged", levy, 6, -10.0, 10.0),
        _moved("griewank8-shifted", "rugged", griewank, 8, -50.0, 50.0),
        _moved("levy20-shifted", "high-dim", levy, 20, -10.0, 10.0),
        # (added 2026-11-27, fifth stop, only to check once a rule for many groups that the
        # problems above had suggested: none of these was looked at before)
        Problem("schwefel5", "rugged", _reals(5, -500.0, 500.0), schwefel(5), 0.0),
        Problem("dixon-price6", "valley", _reals(6, -10.0, 10.0), dixon_price(6), 0.0),
        Problem("powell8", "valley", _reals(8, -4.0, 5.0), powell(8), 0.0),
        _moved("rosenbrock6-shifted", "valley", rosenbrock, 6, -5.0, 10.0),
    ]
    HELD_OUT.update(p.name for p in held_out)
    return {p.name: p for p in items + held_out}


HELD_OUT: set[str] = set()   # filled by catalogue(); quality_suite.py runs them only by name


QUICK = ["branin", "hartmann6", "ackley5", "rosenbrock4", "int-quadratic", "network-mixed",
         "categorical", "svc-digits"]
