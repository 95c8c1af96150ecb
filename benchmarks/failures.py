"""Failed trials: what a searcher should learn from a parameter set whose trial failed.

A network whose learning rate is too high diverges (NaN), one too big runs out of memory:
the trial is FAILED, and such failures have a region. mpiopt tells the searcher nothing
about a failed trial (it forgets the suggestion, and never makes it again); SMAC instead
tells its model the worst value seen so far (its "crash cost"), so the model learns the
region and keeps away. Measured here side by side, on three problems with a failing
region, four suggestions pending, the budget counting failed trials as the study does:

- `half`: a bowl in 3 dimensions, half the space fails, the optimum inside the rest;
- `cliff`: a learning rate's log, momentum and weight decay's log; every learning rate
  above 10^-2.3 diverges, the best is 10^-2.5, just below the cliff;
- `hart6-fail`: Hartmann-6 where x0 + x1 > 0.6 or x5 < 0.3 fails (about 88% of the space;
  the optimum, at x0 + x1 = 0.35 and x5 = 0.66, stays valid).

Printed per problem and searcher: the median best value at the budget (lower is better)
and the mean number of failed trials, for each policy: `forget` (mpiopt's) and `worst`
(each failure told as the worst value so far).

    python benchmarks/failures.py                # budget 50, 10 seeds, 30-60 s on 2 cores
    python benchmarks/failures.py --seeds 4
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _common import machine, table  # noqa: E402
from problems import hartmann6  # noqa: E402

from mpiopt.search import make_searcher  # noqa: E402
from mpiopt.space import Real, Space  # noqa: E402

SEARCHERS = ("bayesian", "auto", "tpe")
POLICIES = ("forget", "worst")
PENDING = 4


def half(p: dict) -> float | None:
    if p["x"] > 0.5:
        return None
    return (p["x"] - 0.2) ** 2 + (p["y"] - 0.3) ** 2 + (p["z"] + 0.4) ** 2


def cliff(p: dict) -> float | None:
    if p["lr"] > -2.3:
        return None
    return (p["lr"] + 2.5) ** 2 + 4 * (p["momentum"] - 0.9) ** 2 + (p["wd"] + 4) ** 2 / 10


def hart6_fail(p: dict) -> float | None:
    if p["x0"] + p["x1"] > 0.6 or p["x5"] < 0.3:
        return None
    return hartmann6(p)


PROBLEMS = {
    "half": (Space([Real("x", 0, 1), Real("y", -1, 1), Real("z", -1, 1)]), half),
    "cliff": (Space([Real("lr", -5, -1), Real("momentum", 0.5, 0.99), Real("wd", -6, -2)]), cliff),
    "hart6-fail": (Space([Real(f"x{i}", 0, 1) for i in range(6)]), hart6_fail),
}


def run(job: tuple) -> tuple:
    """(best value at the budget, failed trials) of one searcher, policy and seed."""
    problem, algorithm, policy, seed, budget = job
    space, objective = PROBLEMS[problem]
    searcher = make_searcher(algorithm, space, {}, seed, budget=budget, parallel=PENDING)
    asked = [searcher.ask() for _ in range(PENDING)]
    best, failed, worst = math.inf, 0, None
    for i in range(budget):
        params = asked.pop(0)
        value = objective(params)
        if value is None:
            failed += 1
            if policy == "worst" and worst is not None:
                searcher.tell(params, worst)
            else:
                searcher.forget(params)
        else:
            best, worst = min(best, value), value if worst is None else max(worst, value)
            searcher.tell(params, value)
        if i + PENDING < budget:
            asked.append(searcher.ask())
    return job, best, failed


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    jobs = [(p, a, pol, seed, args.budget) for p in PROBLEMS for a in SEARCHERS
            for pol in POLICIES for seed in range(args.seeds)]
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(run, jobs))
    runs: dict[tuple, list] = {}
    for (problem, algorithm, policy, _, _), best, failed in results:
        runs.setdefault((problem, algorithm, policy), []).append((best, failed))
    rows = []
    for problem in PROBLEMS:
        for algorithm in SEARCHERS:
            row = {"problem": problem, "searcher": algorithm}
            for policy in POLICIES:
                r = runs[(problem, algorithm, policy)]
                row[f"{policy}: median best"] = f"{statistics.median(b for b, _ in r):.4g}"
                row[f"{policy}: failed"] = round(statistics.mean(f for _, f in r), 1)
            rows.append(row)
    report = (f"### Failed trials: forgotten or told as the worst value ({PENDING} pending, budget "
              f"{args.budget} with the failures, {args.seeds} seeds)\n\n{machine()}\n\n"
              f"`python benchmarks/failures.py --budget {args.budget} --seeds {args.seeds}` "
              f"({time.perf_counter() - start:.0f} s)\n\n{table(rows)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
