"""Search quality of one study run by several jobs (`mpiopt search --join`): 4 jobs of 4
groups against 1 job of 16 groups, on the quality suite's problems (benchmarks/problems.py).

The jobs are simulated as the shared scheduler drives their searchers (mpiopt/parallel/
scheduler/shared.py): each job has its own searcher, seeded by its job (so the jobs draw
from streams of their own); a suggestion one job makes is held pending by the others, and
every result is told to every job. Sixteen suggestions are pending at any time, the oldest
is evaluated first, as in the suite's 16-pending runs. One simplification, stated: another
job hears of a result at once, where the real jobs read the database every second (next to
trials of minutes, as a group's wait for a dispatch is left out of the suite too).

Per problem: the median best value at the budget of each layout over the seeds; across
problems, the paired differences in normalized score (4x4 minus 1x16; the suite's score:
1 at the optimum, 0 at random search's median best in this run), a Wilcoxon signed-rank
test over every (problem, seed) pair and a sign test over the problems' medians for "the
layouts differ".

With --batch, each job asks its searcher as its background thread does with many groups
(quality_suite.py's NAME/batch): in batches of a quarter of its groups (at least two), the
rest of a batch stocked; a stocked suggestion is held by the other jobs once it runs (only
then is it a trial in the database they read).

    python benchmarks/jobs_quality.py                         # the suite's problems, 5 seeds
    python benchmarks/jobs_quality.py --problems branin levy6 --seeds 3 --searcher auto
"""
from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import problems as P  # noqa: E402
from _common import machine, table  # noqa: E402
from quality_suite import batch_size  # noqa: E402


def job_seed(seed: int, job: int) -> int:
    """As StudyRun.searcher_seed gives a shared study's job its own stream."""
    return int(np.random.SeedSequence([seed, job]).generate_state(1)[0] % (2**31 - 1))


def run(task) -> tuple:
    """(task, best value at the budget): `jobs` searchers of `groups` pending each (asked
    in batches where the task's last item is true)."""
    pname, algorithm, seed, jobs, groups, batched = (*task, False)[:6]
    from mpiopt.search import make_searcher

    problem = P.catalogue()[pname]
    if problem.noisy:
        problem.objective = P.noisy(problem.truth, 0.1, seed)
    searchers = [make_searcher(algorithm, problem.space, {},
                               seed if jobs == 1 else job_seed(seed, j + 1),
                               budget=problem.budget, parallel=groups)
                 for j in range(jobs)]
    pending: list[tuple[int, dict]] = []            # (job, params), oldest first
    best = (math.inf, math.inf)                     # (observed, true) of the best observed
    stock: list[list[dict]] = [[] for _ in range(jobs)]
    made = [0]                                      # suggestions made, all jobs

    def ask(j: int) -> None:
        if not batched:
            params = searchers[j].ask()
        else:
            if not stock[j]:
                first, k = searchers[j].next_number, min(batch_size(groups),
                                                         problem.budget - made[0])
                stock[j] = searchers[j].ask_batch(range(first, first + max(1, k)))
                made[0] += len(stock[j])
            params = stock[j].pop(0)
        for k, other in enumerate(searchers):
            if k != j:
                other.hold(params)
        pending.append((j, params))

    for j in range(jobs):
        for _ in range(groups):
            if len(pending) < problem.budget:
                ask(j)
    for evaluation in range(problem.budget):
        j, params = pending.pop(0)
        value = problem.objective(params)
        if value < best[0]:
            best = (value, problem.truth(params) if problem.noisy else value)
        for s in searchers:
            s.tell(params, value)
        if evaluation + len(pending) + 1 < problem.budget:
            ask(j)
    return task, best[1]


def score(value: float, optimum: float, random_median: float) -> float:
    """1 at the optimum, 0 at random search's median best (the suite's normalized score)."""
    span = random_median - optimum
    return 1.0 if span <= 0 else (random_median - value) / span


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="*", default=None,
                    help="problem names (default: the suite's, the held-out ones left out)")
    ap.add_argument("--searcher", default="auto")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", action="store_true",
                    help="each job asks in batches (see the module docstring)")
    args = ap.parse_args(argv)
    catalogue = P.catalogue()
    names = args.problems or [n for n in catalogue if n not in P.HELD_OUT]
    layouts = [(1, 16), (4, 4)]
    tasks = [(p, algorithm, seed, jobs, groups, args.batch and algorithm != "random")
             for p in names for seed in range(args.seeds)
             for algorithm, (jobs, groups) in [(args.searcher, lay) for lay in layouts]
             + [("random", (1, 16))]]
    start = time.perf_counter()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        done = dict(((t[0], t[2], t[3] if t[1] != "random" else 0), v)
                    for t, v in pool.imap_unordered(run, tasks))
    rows, diffs, wins, losses = [], [], 0, 0
    from scipy.stats import wilcoxon

    for p in names:
        one = [done[(p, s, 1)] for s in range(args.seeds)]
        four = [done[(p, s, 4)] for s in range(args.seeds)]
        rand = [done[(p, s, 0)] for s in range(args.seeds)]
        optimum = catalogue[p].optimum
        optimum = min(one + four + rand) if optimum is None else optimum
        median = statistics.median(rand)
        d = [score(b, optimum, median) - score(a, optimum, median) for a, b in zip(one, four)]
        diffs += d
        m1, m4 = statistics.median(one), statistics.median(four)
        wins += m4 < m1
        losses += m4 > m1
        rows.append({"problem": p, "1 x 16 median best": f"{m1:.4g}",
                     "4 x 4 median best": f"{m4:.4g}",
                     "score 4x4 - 1x16 (median)": f"{statistics.median(d):+.3f}"})
    print(f"# {machine()}; {args.searcher}{' in batches' if args.batch else ''}, "
          f"{args.seeds} seeds, {len(names)} problems, "
          f"{time.perf_counter() - start:.0f} s")
    print(table(rows))
    nonzero = [x for x in diffs if x != 0]
    w = wilcoxon(nonzero).pvalue if len(nonzero) > 5 else float("nan")
    print(f"\npaired score difference 4x4 - 1x16 over {len(diffs)} (problem, seed) pairs: "
          f"median {statistics.median(diffs):+.3f}, mean {statistics.fmean(diffs):+.3f}; "
          f"Wilcoxon p = {w:.3f}")
    print(f"problems where 4 x 4's median best is better / worse: {wins} / {losses}; "
          f"sign test p = {sign_test_p(wins, losses):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
