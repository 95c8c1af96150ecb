"""How fast each searcher finds good settings, with 4 groups working in parallel.

Problems: Branin (2-D, optimum 0.397887, target 0.4019 within 40 evaluations), Hartmann-6
(6-D, optimum -3.32237, target -3.289 within 80) and a mixed integer/categorical problem
shaped like a network's validation error (optimum 0.100; target: within 1% of the spread
between the optimum and the median random value, within 60 evaluations).

Parallel groups are simulated exactly as the coordinator drives a searcher: 4 suggestions
are pending at any time; the oldest is told, then one more is asked. Printed per problem
and algorithm, over the seeds: median best value at half and at the full budget, the
median number of evaluations to reach the target (over the seeds that did), how many
seeds did, the smallest scaled distance between two pending suggestions and how many asks
came closer than 1% to another pending one, and the searcher's time per ask.

    python benchmarks/search_quality.py [--seeds 8] [--budget N] [--parallel 4]
        [--problems branin hartmann6 mixed] [--algorithms ...]
        [--options 'bayesian={"acquisition": "EI"}']

`ga-generational` is our evolutionary searcher in its classic generational mode (the
MPI_Opt behaviour); Optuna's TPE is added when `import optuna` works (never a dependency).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mpiopt.search import make_searcher  # noqa: E402
from mpiopt.space import Categorical, Integer, Real, Space  # noqa: E402


# ---- problems -------------------------------------------------------------------------
def branin(p: dict) -> float:
    x1, x2 = p["x1"], p["x2"]
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 ** 2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
               [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                      [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])


def hartmann6(p: dict) -> float:
    x = np.array([p[f"x{i}"] for i in range(6)])
    return -float(_ALPHA @ np.exp(-np.sum(_A * (x - _P) ** 2, axis=1)))


_BEST_LR = {"adam": -3.0, "rmsprop": -3.3, "sgd": -1.3}  # log10 of the best learning rate


def network_error(p: dict) -> float:
    """A validation-error surface: the best learning rate depends on the optimizer, width
    and depth trade off, dropout helps wide nets, relu and elu beat tanh, batch size is
    mildly coupled to the learning rate. Minimum 0.100 (adam, lr 1e-3, 3 layers of 128,
    dropout 0.2, relu, batch 64)."""
    lr = math.log10(p["lr"]) - _BEST_LR[p["optimizer"]] - 0.15 * (math.log2(p["batch"]) - 6)
    width = math.log2(p["units"]) - 7
    return (0.100 + 0.04 * lr ** 2 + 0.01 * width ** 2 + 0.02 * (p["layers"] - 3) ** 2
            + 0.3 * (p["dropout"] - 0.2 - 0.05 * width) ** 2
            + {"relu": 0.0, "elu": 0.004, "tanh": 0.03}[p["activation"]]
            + {"adam": 0.0, "rmsprop": 0.006, "sgd": 0.012}[p["optimizer"]])


@dataclass
class Problem:
    space: Space
    objective: object
    budget: int
    optimum: float
    target: float | None = None


def problems() -> dict[str, Problem]:
    mixed = Space([Real("lr", 1e-5, 1.0, prior="log-uniform"), Integer("batch", 16, 512, prior="log-uniform"),
                   Integer("layers", 1, 6), Integer("units", 8, 1024, prior="log-uniform"),
                   Real("dropout", 0.0, 0.6), Categorical("activation", ["relu", "tanh", "elu"]),
                   Categorical("optimizer", ["sgd", "adam", "rmsprop"])])
    out = {
        "branin": Problem(Space([Real("x1", -5.0, 10.0), Real("x2", 0.0, 15.0)]), branin, 40,
                          0.397887, 0.4019),
        "hartmann6": Problem(Space([Real(f"x{i}", 0.0, 1.0) for i in range(6)]), hartmann6, 80,
                             -3.32237, -3.289),
        "mixed": Problem(mixed, network_error, 60, 0.100),
    }
    rng = np.random.default_rng(0)
    spread = np.median([network_error(mixed.sample(rng)) for _ in range(2000)]) - 0.100
    out["mixed"].target = 0.100 + 0.01 * spread
    return out


# ---- searchers --------------------------------------------------------------------------
ALGORITHMS = {
    "bayesian": ("bayesian", {}),
    "evolutionary": ("evolutionary", {}),
    "ga-generational": ("evolutionary", {"mode": "generational"}),
    "random": ("random", {}),
}


class OptunaTPE:
    """Optuna's TPE behind the same ask/tell shape (only when optuna is installed)."""

    def __init__(self, space: Space, seed: int):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        d = optuna.distributions
        self.study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
        self.dists = {}
        for dim in space.dimensions:
            if isinstance(dim, Categorical):
                self.dists[dim.name] = d.CategoricalDistribution(list(dim.choices))
            elif isinstance(dim, Integer):
                self.dists[dim.name] = d.IntDistribution(dim.low, dim.high, log=dim.prior != "uniform")
            else:
                self.dists[dim.name] = d.FloatDistribution(dim.low, dim.high, log=dim.prior != "uniform")
        self.trials = {}

    def ask(self) -> dict:
        trial = self.study.ask(self.dists)
        self.trials[id(trial.params)] = trial
        return trial.params

    def tell(self, params: dict, value: float) -> None:
        self.study.tell(self.trials.pop(id(params)), value)


def make(name: str, space: Space, seed: int, overrides: dict):
    if name == "optuna-tpe":
        return OptunaTPE(space, seed)
    algorithm, options = ALGORITHMS[name]
    return make_searcher(algorithm, space, {**options, **overrides.get(name, {})}, seed)


def run_one(problem: Problem, name: str, seed: int, parallel: int, overrides: dict) -> dict:
    """One seed: the best-so-far curve, pending distances and time per ask."""
    searcher = make(name, problem.space, seed, overrides)
    pending, curve, distances, ask_time = [], [], [], 0.0
    best = math.inf
    for evaluation in range(problem.budget):
        while len(pending) < parallel and evaluation + len(pending) < problem.budget:
            t0 = time.perf_counter()
            params = searcher.ask()
            ask_time += time.perf_counter() - t0
            if pending:
                distances.append(min(problem.space.distance(params, q) for q in pending))
            pending.append(params)
        params = pending.pop(0)
        value = problem.objective(params)
        best = min(best, value)
        curve.append(best)
        searcher.tell(params, value)
    return {"curve": curve, "distances": distances, "ask_time": ask_time / problem.budget}


def summarise(problem: Problem, runs: list[dict]) -> dict:
    budget = problem.budget
    hits = [next((i + 1 for i, v in enumerate(r["curve"]) if v <= problem.target), None) for r in runs]
    reached = [h for h in hits if h is not None]
    distances = [d for r in runs for d in r["distances"]]
    return {
        "half": float(np.median([r["curve"][budget // 2 - 1] for r in runs])),
        "full": float(np.median([r["curve"][-1] for r in runs])),
        "evals": float(np.median(reached)) if reached else None,
        "reached": len(reached),
        "min_distance": min(distances) if distances else None,
        "close": sum(d < 0.01 for d in distances),
        "asks": len(distances),
        "ask_ms": 1e3 * float(np.mean([r["ask_time"] for r in runs])),
    }


def print_table(name: str, problem: Problem, rows: dict[str, dict], seeds: int) -> None:
    print(f"\n{name}: budget {problem.budget}, optimum {problem.optimum:g}, "
          f"target <= {problem.target:.4f}, {seeds} seeds")
    head = (f"{'algorithm':16s} {'median@half':>12s} {'median@full':>12s} {'evals to target':>16s} "
            f"{'seeds there':>12s} {'min pending dist':>17s} {'asks <1% apart':>15s} {'ms/ask':>8s}")
    print(head)
    print("-" * len(head))
    for alg, s in rows.items():
        evals = f"{s['evals']:.1f}" if s["evals"] is not None else "-"
        dist = f"{s['min_distance']:.4f}" if s["min_distance"] is not None else "-"
        print(f"{alg:16s} {s['half']:12.4f} {s['full']:12.4f} {evals:>16s} "
              f"{s['reached']:>7d} / {seeds:<2d} {dist:>17s} {s['close']:>8d} / {s['asks']:<4d} "
              f"{s['ask_ms']:8.1f}")
    if "random" in rows:
        ref = rows["random"]["full"] - problem.optimum
        gaps = ", ".join(f"{alg} {(s['full'] - problem.optimum) / ref:.3f}"
                         for alg, s in rows.items() if alg != "random" and ref > 0)
        print(f"gap to optimum at full budget relative to random: {gaps}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--budget", type=int, default=None, help="override every problem's budget")
    ap.add_argument("--parallel", type=int, default=4, help="pending suggestions (groups)")
    ap.add_argument("--problems", nargs="+", default=["branin", "hartmann6", "mixed"])
    ap.add_argument("--algorithms", nargs="+", default=None)
    ap.add_argument("--options", action="append", default=[],
                    help="ALGORITHM=JSON options merged over the defaults (repeatable)")
    args = ap.parse_args(argv)
    algorithms = args.algorithms or list(ALGORITHMS) + _optional_tpe()
    overrides = {k: json.loads(v) for k, v in (o.split("=", 1) for o in args.options)}
    catalogue = problems()
    print(f"search quality: {args.parallel} pending suggestions, seeds 0..{args.seeds - 1}")
    for pname in args.problems:
        problem = catalogue[pname]
        if args.budget:
            problem.budget = args.budget
        rows = {}
        for alg in algorithms:
            runs = [run_one(problem, alg, seed, args.parallel, overrides) for seed in range(args.seeds)]
            rows[alg] = summarise(problem, runs)
        print_table(pname, problem, rows, args.seeds)
        sys.stdout.flush()
    return 0


def _optional_tpe() -> list[str]:
    try:
        import optuna  # noqa: F401
    except ImportError:
        return []
    return ["optuna-tpe"]


if __name__ == "__main__":
    sys.exit(main())
