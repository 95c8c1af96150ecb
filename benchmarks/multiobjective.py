"""Several objectives: the hypervolume each searcher's front reaches at the same budget.

NSGA-II (`evolutionary`), ParEGO (`bayesian`) and `random`, on standard two-objective
problems none of them was tuned on (ZDT1, ZDT2 and ZDT3 with 6 variables, DTLZ2 with 6
variables, and a constrained one, ZDT1 with f1 <= 0.5 required), 4 suggestions pending
as with 4 groups (the oldest told, then one more asked), 10 seeds.

The hypervolume is measured on objectives normalized by the ideal and nadir of every
point evaluated on that problem in this run (all searchers and seeds), up to the
reference point 1.1 in each objective, so problems of different scales compare; an
infeasible point never counts. Printed: the median (and interquartile range) of the
hypervolume at the budget per problem and searcher, and each searcher's mean rank.

    python benchmarks/multiobjective.py                 # budget 120, 10 seeds
    python benchmarks/multiobjective.py --budget 60 --seeds 3
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _common import machine, table  # noqa: E402

D = 6
SEARCHERS = ("evolutionary", "bayesian", "random")


def _x(p):
    return np.array([p[f"x{i}"] for i in range(D)])


def zdt1(p):
    x = _x(p)
    g = 1 + 9 * x[1:].mean()
    return (x[0], g * (1 - np.sqrt(x[0] / g))), 0.0


def zdt2(p):
    x = _x(p)
    g = 1 + 9 * x[1:].mean()
    return (x[0], g * (1 - (x[0] / g) ** 2)), 0.0


def zdt3(p):
    x = _x(p)
    g = 1 + 9 * x[1:].mean()
    h = 1 - np.sqrt(x[0] / g) - (x[0] / g) * np.sin(10 * np.pi * x[0])
    return (x[0], g * h), 0.0


def dtlz2(p):
    x = _x(p)
    g = float(np.sum((x[1:] - 0.5) ** 2))
    return ((1 + g) * np.cos(x[0] * np.pi / 2), (1 + g) * np.sin(x[0] * np.pi / 2)), 0.0


def zdt1_constrained(p):
    values, _ = zdt1(p)
    return values, max(0.0, values[0] - 0.5)


PROBLEMS = {"zdt1": zdt1, "zdt2": zdt2, "zdt3": zdt3, "dtlz2": dtlz2,
            "zdt1-constrained": zdt1_constrained}


def run(problem, algorithm: str, seed: int, budget: int, pending: int):
    from mpiopt.search import make_searcher
    from mpiopt.search.pareto import Objectives
    from mpiopt.space import Space

    space = Space.from_dict({f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(D)})
    searcher = make_searcher(algorithm, space, {}, seed=seed)
    queue, points = [], []
    for number in range(budget):
        queue.append(searcher.ask(number))
        if len(queue) >= pending or number == budget - 1:
            while queue and (len(queue) >= pending or number == budget - 1):
                params = queue.pop(0)
                values, violation = problem(params)
                points.append((tuple(values), violation))
                searcher.tell(params, Objectives(values, violation))
    return points


def normalized_hypervolume(points, lo, hi) -> float:
    from mpiopt.search.pareto import hypervolume

    feasible = np.array([v for v, viol in points if viol <= 0])
    if len(feasible) == 0:
        return 0.0
    z = (feasible - lo) / np.where(hi > lo, hi - lo, 1.0)
    return hypervolume(z, [1.1, 1.1])


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=120)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--pending", type=int, default=4)
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    args = ap.parse_args(argv)
    rows, ranks, seconds = [], {a: [] for a in SEARCHERS}, {a: 0.0 for a in SEARCHERS}
    for name in args.problems:
        runs = {}
        for algorithm in SEARCHERS:
            for seed in range(args.seeds):
                start = time.perf_counter()
                runs[algorithm, seed] = run(PROBLEMS[name], algorithm, seed, args.budget, args.pending)
                seconds[algorithm] += time.perf_counter() - start
        every = np.array([v for pts in runs.values() for v, viol in pts if viol <= 0])
        lo, hi = every.min(axis=0), every.max(axis=0)
        hv = {a: [normalized_hypervolume(runs[a, s], lo, hi) for s in range(args.seeds)]
              for a in SEARCHERS}
        row = {"problem": name}
        for a in SEARCHERS:
            q1, med, q3 = np.quantile(hv[a], [0.25, 0.5, 0.75])
            row[a] = f"{med:.3f} ({q1:.3f}-{q3:.3f})"
        rows.append(row)
        medians = {a: float(np.median(hv[a])) for a in SEARCHERS}
        order = sorted(SEARCHERS, key=lambda a: -medians[a])
        for a in SEARCHERS:
            ranks[a].append(1 + order.index(a))
        print(table([row]), flush=True)
    summary = [{"searcher": a, "mean rank": float(np.mean(ranks[a])),
                "seconds": seconds[a]} for a in SEARCHERS]
    report = (f"### Several objectives: normalized hypervolume at {args.budget} trials "
              f"(median and IQR over {args.seeds} seeds, {args.pending} pending; higher is better)\n\n"
              f"{machine()}\n\n`python benchmarks/multiobjective.py --budget {args.budget} "
              f"--seeds {args.seeds}`\n\n{table(rows)}\n\n{table(summary)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
