"""The search-quality suite: every searcher on every problem of benchmarks/problems.py, at
1, 4 and 16 pending suggestions (as 1, 4 and 16 groups), side by side in one run.

Parallel groups are simulated exactly as the coordinator drives a searcher: P suggestions
are pending at any time; the oldest is told, then one more is asked. Per problem and
pending level it prints the median (and interquartile range) of the best value at half
the budget and at the budget; across problems each searcher's mean rank and its median
normalized score (Bayesmark's: 1 at the optimum, 0 at random search's median best at the
same budget in this run; where the optimum is unknown, the best value any searcher found).
For a noisy problem the value is the noise-free value of the point with the best observed
value.

Searchers: mpiopt's `auto` (the default), `bayesian`, `evolutionary`, `tpe` (mpiopt's
Optuna TPE searcher) and `random`; as outside references Optuna's TPE (multivariate,
constant liar) and CMA-ES samplers through ask/tell, and scikit-optimize's own sequential
`gp_minimize` (at 1 pending only: it has no batch mode of its own; and only on budgets up to
50 with 3 seeds: its runs took 58 s on average at budgets up to 60, a quarter of the whole
suite's time, and minutes at 80).

    python benchmarks/quality_suite.py --quick          # 8 problems, 1 and 4 pending, 5 seeds
    python benchmarks/quality_suite.py                   # everything: 18 problems, 1/4/16, 10 seeds
    python benchmarks/quality_suite.py --problems branin levy20 --pending 16 --seeds 3

Twenty seeds from two runs of ten (the report then also gives the noise floor: on how
many problems a searcher's two halves of 10 seeds are more than 10% apart):

    python benchmarks/quality_suite.py --save a.json
    python benchmarks/quality_suite.py --first-seed 10 --save b.json
    python benchmarks/quality_suite.py --load a.json --load b.json --seeds 20

Batches (a searcher name NAME/batch): NAME asked as the background thread asks it when
results come faster than its fits, one fit giving several suggestions. The first P
suggestions are one batch (every group waits at the start); then every time a quarter of
P (BATCH_SHARE, at least 2) results are told, the groups they freed get one batch: made
after their results, with the other groups' suggestions pending. (Suggestions stocked
ahead so that no group waits are made before the results told since, one at a time or in
batches alike: that costs both the same, and the one-at-a-time runs here have no stock.)
The report compares NAME/batch with NAME problem by problem, paired by seed (a one-sided
Wilcoxon signed-rank test for "batch is worse", with Holm's correction over the problems):

    python benchmarks/quality_suite.py --pending 16 64 --searchers auto auto/batch random

Judging a change to `auto` without running every searcher again (each run is
deterministic per seed, so the stored runs of unchanged searchers are the runs):

    python benchmarks/quality_suite.py --save base.json          # once, on the old code
    python benchmarks/quality_suite.py --load base.json --variant 'new=auto:{}' \
        --searchers new bayesian evolutionary tpe cmaes random optuna-tpe optuna-cmaes \
        skopt-gp --default new                                    # after the change
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

# One BLAS/OpenMP thread per worker, set before numpy loads its libraries: the pool runs one
# worker per core, and a threaded BLAS on top oversubscribed the cores (a whole run took
# 4287 s against 3088 s pinned, 2026-11-25; the curves were the same). Runs are
# deterministic per seed on one machine; on another CPU a few differ (OpenBLAS picks its
# kernels by CPU: levy20's rows of Optuna's CMA-ES too), so compare saved runs from one.
os.environ.update(dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1"))

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import problems as P  # noqa: E402

OURS = {"auto": ("auto", {}), "bayesian": ("bayesian", {}), "evolutionary": ("evolutionary", {}),
        "tpe": ("tpe", {}), "cmaes": ("cmaes", {}), "random": ("random", {})}
REFERENCES = ["optuna-tpe", "optuna-cmaes", "skopt-gp"]
BATCHED = "/batch"      # NAME/batch: NAME asked in batches (see the module docstring)
BATCH_SHARE = 0.25      # a batch: this share of the pending suggestions (at least 2)
SIGNIFICANCE = 0.05     # "significantly worse": one-sided p below this
SKOPT_MAX_BUDGET, SKOPT_SEEDS = 50, 3    # gp_minimize: 1 pending, small budgets, 3 seeds


# ---- outside references, behind the same ask/tell shape ----------------------------------
class OptunaSearcher:
    def __init__(self, space, seed: int, kind: str):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        if kind == "tpe":
            sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
        else:
            sampler = optuna.samplers.CmaEsSampler(seed=seed)
        self.study = optuna.create_study(sampler=sampler)
        self.dists = _optuna_dists(space)
        self.pending = {}

    def ask(self):
        trial = self.study.ask(self.dists)
        params = dict(trial.params)
        self.pending.setdefault(_key(params), []).append(trial)   # (a small space repeats)
        return params

    def tell(self, params, value):
        key = _key(params)
        self.study.tell(self.pending[key].pop(0), value)
        if not self.pending[key]:
            del self.pending[key]


def _optuna_dists(space):
    import optuna

    from mpiopt.space import Categorical, Integer

    d = optuna.distributions
    out = {}
    for dim in space.dimensions:
        if isinstance(dim, Categorical):
            out[dim.name] = d.CategoricalDistribution(list(dim.choices))
        elif isinstance(dim, Integer):
            out[dim.name] = d.IntDistribution(dim.low, dim.high, log=dim.prior != "uniform")
        else:
            out[dim.name] = d.FloatDistribution(dim.low, dim.high, log=dim.prior != "uniform")
    return out


def _key(params):
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def skopt_curve(problem, seed: int) -> list[float]:
    """scikit-optimize's gp_minimize, as its users run it (sequential)."""
    from skopt import gp_minimize

    from mpiopt.search._skopt import skopt_dimensions

    dims = skopt_dimensions(problem.space)
    names = problem.space.names
    values = []

    def f(x):
        params = {n: (v.item() if hasattr(v, "item") else v) for n, v in zip(names, x)}
        value = problem.objective(params)
        values.append(_truth(problem, params, value))
        return value

    gp_minimize(f, dims, n_calls=problem.budget, random_state=seed, n_initial_points=10)
    return _best_so_far(values)


# ---- one run ----------------------------------------------------------------------------------
EXTRA = {}   # name -> (algorithm, options): variants measured with --variant NAME=ALG:JSON


def make(name, space, seed, budget=None, parallel=1):
    if name == "optuna-tpe":
        return OptunaSearcher(space, seed, "tpe")
    if name == "optuna-cmaes":
        return OptunaSearcher(space, seed, "cmaes")
    from mpiopt.search import make_searcher

    algorithm, options = OURS.get(name) or EXTRA[name]
    if algorithm == "auto" and options:     # a variant of auto: options per algorithm it picks
        from mpiopt.search.auto import choose

        algorithm = choose(space, budget, parallel)[0]
        options = options.get(algorithm, {})
    return make_searcher(algorithm, space, options, seed, budget=budget, parallel=parallel)


def same_run(task, pending_levels, searchers):
    """The task whose curve this task's curve is by construction, or None: such a task is
    not run, its curves are copied (checked equal, tests/test_quality_suite.py).

    - random search at every pending level but the first: its suggestion n depends on n
      alone, and results are told in the order asked, so the curve is the same;
    - `auto` where it chooses the GP alone (one or two numeric parameters): `auto` then
      is `bayesian` with its default options and the same seed (mpiopt.search.make_searcher).
    """
    pname, name, seed, pending_n = task
    if name == "random" and pending_n != pending_levels[0]:
        return pname, name, seed, pending_levels[0]
    if name == "auto" and "bayesian" in searchers:
        from mpiopt.search.auto import choose

        problem = P.catalogue()[pname]
        if choose(problem.space, problem.budget, pending_n)[0] == "bayesian":
            return pname, "bayesian", seed, pending_n
    return None


def run(task) -> tuple:
    pname, name, seed, pending_n = task
    problem = P.catalogue()[pname]
    if pname.endswith("-noisy"):
        problem.objective = P.noisy(problem.truth, 0.1, seed)
    start = time.perf_counter()
    if name == "skopt-gp":
        curve = skopt_curve(problem, seed)
    else:
        base = name[:-len(BATCHED)] if name.endswith(BATCHED) else name
        searcher = make(base, problem.space, seed, problem.budget, pending_n)
        curve = drive(searcher, problem, pending_n,
                      batch_size(pending_n) if base != name else 1)
    return task, curve, time.perf_counter() - start


def batch_size(pending_n: int) -> int:
    return max(2, round(BATCH_SHARE * pending_n))


def drive(searcher, problem, pending_n: int, batch: int = 1) -> list[float]:
    """The best-so-far curve with `pending_n` suggestions running; batch > 1: asked in
    batches, each for the groups that `batch` results freed (see the module docstring)."""
    pending, incumbent, curve, freed, asked = [], (math.inf, math.inf), [], 0, [0]

    def ask(count: int) -> None:
        first, count = asked[0], min(count, problem.budget - asked[0])
        if batch == 1:
            pending.extend(searcher.ask() for _ in range(count))
        elif count > 0:
            pending.extend(searcher.ask_batch(range(first, first + count)))
        asked[0] += max(0, count)

    ask(pending_n)
    for evaluation in range(problem.budget):
        params = pending.pop(0)
        value = problem.objective(params)
        if value < incumbent[0]:
            incumbent = (value, _truth(problem, params, value))
        curve.append(incumbent[1])
        searcher.tell(params, value)
        freed += 1
        if freed == batch:
            ask(batch)
            freed = 0
    return curve


def _truth(problem, params, value):
    return problem.truth(params) if problem.noisy else value


def _best_so_far(values):
    out, best, shown = [], math.inf, math.inf
    for v in values:
        if v < best:
            best = shown = v
        out.append(shown)
    return out


# ---- summaries ------------------------------------------------------------------------------
def normalized(best: float, random_median: float, optimum: float) -> float:
    span = random_median - optimum
    return 1.0 if span <= 0 else float((random_median - best) / span)


DEFAULT = "auto"          # the searcher the criterion is about
SHORTFALL = 0.9           # "more than 10% below the best peer's normalized score"
SPLIT_MIN_SEEDS = 20      # seed halves of at least the suite's 10 seeds: the noise floor
RESAMPLES = 1000


def shortfall(finals: dict, optimum: float, rng: np.random.Generator | None,
              default: str | None = None) -> tuple | None:
    """(default's score, best peer, its score, share of seed resamples in which the default
    is still more than 10% below the best peer) where it is below now; else None.

    With 10 seeds a median moves with one or two lucky runs, so each shortfall comes with
    how often it holds when the seeds are drawn again (a bootstrap, every searcher's runs
    resampled on their own, random search's too; rng None: no resampling, share None)."""
    default = default or DEFAULT

    def scores(pick):
        random_median = float(np.median(pick(finals["random"])))
        return {s: normalized(float(np.median(pick(v))), random_median, optimum)
                for s, v in finals.items() if len(v)}

    def short(sc):
        peers = {s: v for s, v in sc.items() if s != default}
        best = max(peers, key=peers.get)
        return sc[default] < SHORTFALL * peers[best] and peers[best] > 0, best, peers[best]

    now = scores(lambda v: v)
    below, best, best_score = short(now)
    if not below:
        return None
    if rng is None:
        return now[default], best, best_score, None
    held = sum(short(scores(lambda v: rng.choice(v, len(v))))[0] for _ in range(RESAMPLES))
    return now[default], best, best_score, held / RESAMPLES


def best_rank_shares(per_problem: list[dict], rng: np.random.Generator) -> dict[str, float]:
    """Each searcher's share of seed resamples in which its mean rank is the best (ties
    split): how firmly "the best mean rank" holds when the seeds are drawn again (every
    searcher's runs on every problem resampled on their own, as in `shortfall`). Only
    searchers that ran every problem are compared."""
    common = set.intersection(*(set(arrays) for arrays in per_problem)) if per_problem else set()
    wins = dict.fromkeys(sorted(common), 0.0)
    for _ in range(RESAMPLES if common else 0):
        total = dict.fromkeys(wins, 0)
        for arrays in per_problem:
            medians = {s: np.median(rng.choice(arrays[s], len(arrays[s]))) for s in wins}
            for s, m in medians.items():
                total[s] += sum(other < m for other in medians.values())
        best = min(total.values())
        winners = [s for s, t in total.items() if t == best]
        for s in winners:
            wins[s] += 1 / len(winners)
    return {s: w / RESAMPLES for s, w in wins.items()}


def report(results, problems, searchers, pending_levels, seeds) -> str:
    lines = []
    rng = np.random.default_rng(0)
    for pending_n in pending_levels:
        every_problem = []            # (per problem: searcher -> its final values)
        ranks = {s: [] for s in searchers}
        scores = {s: [] for s in searchers}
        short = []
        short_any = {s: [0, 0] for s in searchers if s != "random"}   # (short, pairs)
        apart = {s: [0, 0, []] for s in searchers if s != "random"}   # (apart, pairs, where)
        lines.append(f"\n### {pending_n} pending suggestion(s), {seeds} seeds\n")
        lines.append("| problem | budget | " + " | ".join(searchers) + " |")
        lines.append("|---|---|" + "---|" * len(searchers))
        for pname in problems:
            problem = P.catalogue()[pname]
            finals = {s: [c[-1] for c in results.get((pname, s, pending_n), [])] for s in searchers}
            halves = {s: [c[len(c) // 2 - 1] for c in results.get((pname, s, pending_n), [])]
                      for s in searchers}
            present = [s for s in searchers if finals[s]]
            if not present:
                continue
            every = [v for s in present for v in finals[s]]
            optimum = problem.optimum if problem.optimum is not None else min(every)
            random_median = float(np.median(finals["random"])) if finals.get("random") else max(every)
            medians = {s: float(np.median(finals[s])) for s in present}
            order = sorted(present, key=lambda s: medians[s])
            for s in present:
                ranks[s].append(1 + sum(medians[o] < medians[s] for o in present))
                scores[s].append(normalized(medians[s], random_median, optimum))
            arrays = {s: np.array(finals[s]) for s in present}
            every_problem.append(arrays)
            if "random" in present and len(present) > 2:   # each searcher as the default
                for s in (s for s in present if s != "random"):
                    short_any[s][0] += shortfall(arrays, optimum, None, s) is not None
                    short_any[s][1] += 1
            if "random" in present and seeds >= SPLIT_MIN_SEEDS:
                for s in (s for s in present if s != "random" and len(finals[s]) >= seeds):
                    if halves_apart(finals[s], seeds // 2, random_median, optimum):
                        apart[s][0] += 1
                        apart[s][2].append(pname)
                    apart[s][1] += 1
            if DEFAULT in present and "random" in present:
                found = shortfall(arrays, optimum, rng)
                if found:
                    short.append(f"{pname} {found[0]:.2f} vs {found[1]}'s {found[2]:.2f} "
                                 f"({found[3]:.0%} of resamples)")
            cells = []
            for s in searchers:
                if not finals[s]:
                    cells.append("-")
                    continue
                q1, q3 = np.percentile(finals[s], [25, 75])
                mark = "**" if s == order[0] else ""
                cells.append(f"{mark}{medians[s]:.4g}{mark} [{q1:.3g}, {q3:.3g}] (½: {np.median(halves[s]):.3g})")
            lines.append(f"| {pname} | {problem.budget} | " + " | ".join(cells) + " |")
        lines.append("\n| searcher | mean rank | median normalized score | worst normalized score |")
        lines.append("|---|---|---|---|")
        for s in sorted(searchers, key=lambda s: np.mean(ranks[s]) if ranks[s] else 99):
            if ranks[s]:
                lines.append(f"| {s} | {np.mean(ranks[s]):.2f} | {np.median(scores[s]):.3f} | "
                             f"{min(scores[s]):.3f} |")
        shares = best_rank_shares(every_problem, np.random.default_rng(1))
        if len(shares) > 1:
            lines.append("\nThe best mean rank with the seeds drawn again (share of "
                         f"{RESAMPLES} resamples): " + ", ".join(
                             f"{s} {v:.0%}" for s, v in sorted(shares.items(), key=lambda kv: -kv[1])
                             if v >= 0.005) + ".")
        if DEFAULT in searchers:
            lines.append(f"\n`{DEFAULT}` more than 10% below the best peer's normalized score: "
                         + ("; ".join(short) if short else "nowhere") + ".")
        lines.append("\nProblems where a searcher is more than 10% below the best other one, "
                     "each searcher in turn taken as the default (of the problems it ran): "
                     + (", ".join(f"{s} {n}/{m}" for s, (n, m) in
                                  sorted(short_any.items(), key=lambda kv: kv[1][0]) if m)
                        or "none to compare (random and two others needed)") + ".")
        for s in (s for s in searchers if s.endswith(BATCHED) and s[:-len(BATCHED)] in searchers):
            lines.append("\n" + batch_comparison(results, problems, s[:-len(BATCHED)], s,
                                                  pending_n))
        if seeds >= SPLIT_MIN_SEEDS:
            lines.append(f"\nThe same searcher against itself, its seeds split in two halves of "
                         f"{seeds // 2} (one half's score more than 10% below the other's; "
                         "the criterion's noise floor at that many seeds): "
                         + ", ".join(f"{s} {n}/{m}" + (f" ({', '.join(where)})" if where else "")
                                     for s, (n, m, where) in
                                     sorted(apart.items(), key=lambda kv: kv[1][0]) if m) + ".")
    return "\n".join(lines)


def batch_comparison(results, problems, one: str, batched: str, pending_n: int) -> str:
    """`batched` against `one` problem by problem, each seed's final best values paired
    (one seed gives both the same initial design): better and worse medians, and a
    one-sided Wilcoxon signed-rank test of "the batched runs end worse", with Holm's
    correction over the problems (a run of many problems finds a small p by chance)."""
    from scipy.stats import wilcoxon

    wins = losses = 0
    tests = []
    for pname in problems:
        a = np.array([c[-1] for c in results.get((pname, one, pending_n), [])])
        b = np.array([c[-1] for c in results.get((pname, batched, pending_n), [])])
        n = min(len(a), len(b))
        if n == 0:
            continue
        wins += np.median(b[:n]) < np.median(a[:n])
        losses += np.median(b[:n]) > np.median(a[:n])
        diff = b[:n] - a[:n]
        p = 1.0 if not np.any(diff) else float(
            wilcoxon(b[:n], a[:n], alternative="greater", zero_method="zsplit").pvalue)
        tests.append((p, pname))
    tests.sort()
    holm = [(min(1.0, p * (len(tests) - i)), pname) for i, (p, pname) in enumerate(tests)]
    for i in range(1, len(holm)):                    # (Holm's adjusted p never falls)
        holm[i] = (max(holm[i][0], holm[i - 1][0]), holm[i][1])
    raw = [f"{pname} (p = {p:.3f})" for p, pname in tests if p < SIGNIFICANCE]
    held = [f"{pname} (p = {p:.3f})" for p, pname in holm if p < SIGNIFICANCE]
    return (f"`{batched}` against `{one}`, paired by seed: better median on {wins} problem(s), "
            f"worse on {losses}; significantly worse (one-sided Wilcoxon, p < {SIGNIFICANCE}): "
            f"{', '.join(raw) or 'nowhere'}; after Holm's correction over {len(tests)} problems: "
            f"{', '.join(held) or 'nowhere'}.")


def halves_apart(finals: list, half: int, random_median: float, optimum: float) -> bool:
    """Whether the first `half` seeds' normalized score and the next `half` seeds' differ by
    more than the shortfall criterion allows, either way round: same code, other seeds."""
    a, b = (normalized(float(np.median(part)), random_median, optimum)
            for part in (finals[:half], finals[half:2 * half]))
    return (a < SHORTFALL * b and b > 0) or (b < SHORTFALL * a and a > 0)


def main(argv=None) -> int:
    global DEFAULT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 problems, 1 and 4 pending, 5 seeds")
    ap.add_argument("--problems", nargs="+", default=None,
                    help="default: the suite; also the held-out problems (problems.HELD_OUT)")
    ap.add_argument("--searchers", nargs="+", default=None)
    ap.add_argument("--pending", nargs="+", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="run seeds FIRST..FIRST+SEEDS-1 (more seeds for runs saved before: "
                         "--save, then join the files with --load)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=ALGORITHM:JSON, e.g. 'gp-max=bayesian:{\"liar\": \"max\"}'")
    ap.add_argument("--save", type=Path, help="write every run's best-so-far curve (JSON)")
    ap.add_argument("--load", type=Path, action="append", default=[],
                    help="curves of an earlier --save: their runs are not run again (the runs "
                         "are deterministic per seed, so only searchers changed since need to run)")
    ap.add_argument("--patch", action="append", default=[],
                    help="MODULE:NAME=JSON, a module constant set before any run (a variant of "
                         "code that has no option, e.g. 'mpiopt.search.bayesian:_EXPLORE_EVERY=0')")
    ap.add_argument("--default", default=DEFAULT,
                    help="the searcher whose shortfalls are listed (a --variant, to judge one)")
    args = ap.parse_args(argv)
    DEFAULT = args.default
    for text in args.patch:
        target, value = text.split("=", 1)
        module, attr = target.split(":")
        if not hasattr(importlib.import_module(module), attr):   # (a dropped variant's name)
            ap.error(f"--patch {text}: {module} has no constant {attr}")
        setattr(importlib.import_module(module), attr, json.loads(value))
    for text in args.variant:
        name, rest = text.split("=", 1)
        algorithm, options = rest.split(":", 1)
        EXTRA[name] = (algorithm, json.loads(options))
    suite = [p for p in P.catalogue() if p not in P.HELD_OUT]
    problems = args.problems or (P.QUICK if args.quick else suite)
    pending_levels = args.pending or ([1, 4] if args.quick else [1, 4, 16])
    seeds = args.seeds or (5 if args.quick else 10)
    searchers = args.searchers or (list(OURS) + _references())
    if args.quick and not args.searchers:
        searchers = [s for s in searchers if s != "skopt-gp"]   # minutes per run: full suite only
    def skopt_runs(p, seed):   # gp_minimize costs seconds per step past ~100 points
        return P.catalogue()[p].budget <= SKOPT_MAX_BUDGET and seed < SKOPT_SEEDS

    tasks = [(p, s, seed, n) for n in pending_levels for p in problems for s in searchers
             for seed in range(args.first_seed, args.first_seed + seeds)
             if not (s == "skopt-gp" and (n != 1 or not skopt_runs(p, seed)))]
    results, spent, per_problem = {}, {}, {}
    for path in args.load:
        for key, curves in json.loads(path.read_text()).items():
            pname, name, pending_n = key.split("|")
            # a key in several files: their seeds joined in the order given (--first-seed)
            results.setdefault((pname, name, int(pending_n)), []).extend(curves)
    def expected(name):                # (skopt-gp runs its first SKOPT_SEEDS seeds only)
        return min(seeds, SKOPT_SEEDS) if name == "skopt-gp" else seeds

    for key in [k for k, curves in results.items() if len(curves) < expected(k[1])]:
        del results[key]                 # a partial set of seeds runs again whole
    tasks = [t for t in tasks if (t[0], t[1], t[3]) not in results]
    # (copied from runs of this invocation only: a loaded run may predate a --patch)
    queued = set(tasks)
    copies = {t: src for t in tasks if (src := same_run(t, pending_levels, searchers)) in queued}
    tasks = [t for t in tasks if t not in copies]
    tasks.sort(key=lambda t: -P.catalogue()[t[0]].budget)     # long ones first
    start, by_seed = time.perf_counter(), {}
    with mp.get_context("fork").Pool(args.workers) as pool:
        for i, (task, curve, seconds) in enumerate(pool.imap_unordered(run, tasks), 1):
            by_seed.setdefault((task[0], task[1], task[3]), {})[task[2]] = curve
            spent[task[1]] = spent.get(task[1], 0.0) + seconds
            per_problem[task[0]] = per_problem.get(task[0], 0.0) + seconds
            if i % 25 == 0 or i == len(tasks):
                print(f"[{i}/{len(tasks)}] {time.perf_counter() - start:.0f}s", flush=True)
    for task, src in copies.items():
        curve = by_seed[(src[0], src[1], src[3])][src[2]]
        by_seed.setdefault((task[0], task[1], task[3]), {})[task[2]] = list(curve)
    for key, runs in by_seed.items():    # (in seed order, so saved files compare seed by seed)
        results[key] = [runs[seed] for seed in sorted(runs)]
    if args.save:
        args.save.write_text(json.dumps({f"{p}|{s}|{n}": c for (p, s, n), c in results.items()}))
    print(f"\n### Search quality suite ({len(problems)} problems, pending {pending_levels}, "
          f"{seeds} seeds, {time.perf_counter() - start:.0f}s on {args.workers} workers)")
    print(report(results, problems, searchers, pending_levels, seeds))
    print("\nSeconds spent per searcher (all runs): "
          + ", ".join(f"{s} {v:.0f}" for s, v in sorted(spent.items(), key=lambda kv: -kv[1])))
    print("Seconds spent per problem (all runs, evaluations included): "
          + ", ".join(f"{p} {v:.0f}" for p, v in sorted(per_problem.items(), key=lambda kv: -kv[1])))
    return 0


def _references() -> list[str]:
    try:
        import optuna  # noqa: F401
    except ImportError:
        return ["skopt-gp"]
    return REFERENCES


if __name__ == "__main__":
    raise SystemExit(main())
