"""What one trial costs the coordinator inside the searcher: ask + tell, no database.

For each algorithm the searcher is brought to N told points (50, 200, 500 by default) by
replaying random trials of a 6-D problem (Hartmann-6), then a live phase follows with
4 suggestions pending (tell the oldest, ask one more), as with 4 busy groups. Printed per
N: the mean and the worst ask+tell over the live trials, the first ask after the replay
(a resume pays a full kernel fit there) and the replay itself (the rest of what a resume
costs the searcher). Reference: plain scikit-optimize GP, one suggestion at 50 and 200
points (`--skopt` to measure it here; it takes a while).

    python benchmarks/searcher_cost.py [--sizes 50 200 500] [--trials 30] [--skopt]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mpiopt.search import make_searcher  # noqa: E402
from mpiopt.search._skopt import skopt_dimensions, to_point  # noqa: E402
from mpiopt.space import Real, Space  # noqa: E402

SPACE = Space([Real(f"x{i}", 0.0, 1.0) for i in range(6)])
_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
               [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                      [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])
_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
ALGORITHMS = {
    "random": ("random", {}),
    "evolutionary": ("evolutionary", {}),
    "evolutionary-cma": ("evolutionary", {"cma": True}),
    "tpe": ("tpe", {}),
    "cmaes": ("cmaes", {}),
    "bayesian-GP": ("bayesian", {}),
    "bayesian-RF": ("bayesian", {"estimator": "RF"}),
    "auto": ("auto", {}),     # the default: on this space the GP + CMA-ES portfolio
}


def hartmann6(p: dict) -> float:
    x = np.array([p[f"x{i}"] for i in range(6)])
    return -float(_ALPHA @ np.exp(-np.sum(_A * (x - _P) ** 2, axis=1)))


def history(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    points = [SPACE.sample(rng) for _ in range(n)]
    return [(p, hartmann6(p)) for p in points]


def measure(algorithm: str, options: dict, n: int, trials: int, parallel: int = 4) -> dict:
    searcher = make_searcher(algorithm, SPACE, options, seed=0)
    told = history(n, seed=n)
    t0 = time.perf_counter()
    searcher.replay(told)
    replay = time.perf_counter() - t0
    t0 = time.perf_counter()
    pending = [searcher.ask()]
    first = time.perf_counter() - t0
    pending += [searcher.ask() for _ in range(parallel - 1)]
    costs = []
    for _ in range(trials):
        params = pending.pop(0)
        value = hartmann6(params)
        t0 = time.perf_counter()
        searcher.tell(params, value)
        pending.append(searcher.ask())
        costs.append(time.perf_counter() - t0)
    return {"mean": float(np.mean(costs)), "max": float(np.max(costs)), "first": first,
            "replay": replay}


def skopt_reference(n: int) -> float:
    """One ask after tell in plain scikit-optimize (GP, defaults) at n told points."""
    from skopt import Optimizer

    opt = Optimizer(skopt_dimensions(SPACE), base_estimator="GP", random_state=0)
    hist = history(n, seed=n)
    opt.tell([to_point(SPACE, p) for p, _ in hist[:-1]], [v for _, v in hist[:-1]])
    t0 = time.perf_counter()
    opt.tell(to_point(SPACE, hist[-1][0]), hist[-1][1])
    opt.ask()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 500])
    ap.add_argument("--trials", type=int, default=30, help="live trials measured per size")
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS))
    ap.add_argument("--skopt", action="store_true", help="also time plain scikit-optimize GP")
    args = ap.parse_args(argv)
    print(f"ask+tell per trial, 4 pending, Hartmann-6 space; {args.trials} live trials per size")
    print(f"{'algorithm':18s} {'told':>5s} {'mean ms':>9s} {'max ms':>9s} {'first ask ms':>13s} "
          f"{'replay ms':>10s}")
    for name in args.algorithms:
        algorithm, options = ALGORITHMS[name]
        for n in args.sizes:
            r = measure(algorithm, options, n, args.trials)
            print(f"{name:18s} {n:5d} {1e3 * r['mean']:9.1f} {1e3 * r['max']:9.1f} "
                  f"{1e3 * r['first']:13.1f} {1e3 * r['replay']:10.1f}", flush=True)
    if args.skopt:
        for n in [s for s in args.sizes if s <= 200]:
            t = skopt_reference(n)
            print(f"{'skopt-GP (plain)':18s} {n:5d} {1e3 * t:9.1f} {'':9s} {'':13s}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
