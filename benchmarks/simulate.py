"""One coordinator, thousands of groups: the real coordinator logic on a simulated clock.

No MPI here: the real Scheduler, the real searcher and the real storage (SQLite on disk;
PostgreSQL too where Debian's server binaries are found) are driven as the MPI loop
drives them, against 1,000 and 10,000 simulated groups whose trials last a random time
(log-normal, mean D, sd 0.5 D). The coordinator is one server: each batch of results
that arrived while it was busy costs the wall time it really took (writes included), on
a simulated clock, and the groups wait meanwhile. As under MPI, random and evolutionary
search ask ahead: a busy group holds its next trial and starts it when its current one
ends. Reported:

- completions per second (trials / the coordinator's busy seconds), at the load the
  groups make (1,000 groups of 10 s trials offer 100 results a second, which mostly arrive
  one at a time) and saturated: 10,000 groups of 1 s trials offer 10,000 a second, more
  than one coordinator can take, so results wait and arrive in batches, as they would at
  the limit. The saturated figure is the most the coordinator sustains;
- how busy the groups are at D = 10 s and 60 s: mean trial time / (mean trial time +
  mean wait between a trial's end and the group's next start), with 1,000 and 10,000
  groups (a short last wave that is nobody's fault is left out: only the gaps count);
- write transactions (commits that wrote) per finished trial: one when every group of
  a batch already runs its next trial, two when a group waits for a dispatch;
- the coordinator's cost per trial around 100 and around 10,000 finished trials;
- for Bayesian search, suggestions per second when 16 are asked for a batch of groups,
  one at a time (a fit each) and in one batch (one fit), at 200 and 500 told results;
- `auto` (a Gaussian process and CMA-ES, in the background as under MPI) at 64, 256 and
  1,000 groups of 10-60 s trials (uniform; 10,000 with --scale-groups), each ask costing
  the simulated seconds of its real CPU time (simulate_model.py): the share of
  suggestions that were random fillers, how busy the groups are, the searcher's CPU per
  suggestion; random search as the reference. A row stops at SCALE_HORIZON_S simulated
  seconds (where the searcher cannot keep up, each one costs a second of CPU).

    python benchmarks/simulate.py
    python benchmarks/simulate.py --groups 1000 --algorithms random --engines sqlite
    python benchmarks/simulate.py --scale-only --scale-groups 64 256
    python benchmarks/simulate.py --scale-only --scale-groups 16 --scale-durations 0.3 0.3 \
        --scale-waves 4 --scale-horizon 0 --scale-algorithms bayesian auto   # scheduling.py's case
"""
from __future__ import annotations

import argparse
import heapq
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sqlalchemy import event

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import machine, table  # noqa: E402

WRITES = {"INSERT", "UPDATE", "DELETE"}
SPACE = {"x": {"type": "real", "low": -5.0, "high": 10.0},
         "y": {"type": "real", "low": 0.0, "high": 15.0}}


def _space():
    from mpiopt.space import Space

    return Space.from_dict(SPACE)


def _branin(p):
    x, y = p["x"], p["y"]
    return (y - 5.1 / (4 * np.pi ** 2) * x ** 2 + 5 / np.pi * x - 6) ** 2 \
        + 10 * (1 - 1 / (8 * np.pi)) * np.cos(x) + 10


def simulate(url: str, algorithm: str, groups: int, trials: int, mean_s: float,
             seed: int = 0, marks=(), ahead: bool = True) -> dict:
    """Run `trials` trials on `groups` simulated groups; returns the measures. ahead: as
    the MPI loop runs a searcher that answers at once, each busy group holds its next
    trial and starts it the moment its current one ends."""
    from mpiopt.parallel.protocol import Result
    from mpiopt.parallel.scheduler import Dispatch, Executor, Scheduler
    from mpiopt.parallel.scheduler import events as ev
    from mpiopt.search import make_searcher
    from mpiopt.storage import open_storage
    from mpiopt.trial import TrialStatus

    rng = np.random.default_rng(seed)
    sigma = np.sqrt(np.log(1.25))                       # sd = 0.5 x mean
    now = {"t": 0.0}
    with open_storage(url, create=True) as st:
        name = f"{algorithm}-{groups}-{mean_s:g}-{trials}"
        sid = st.create_study(name, "minimize", "value", "sim", "0" * 64, "{}")
        searcher = make_searcher(algorithm, _space(), {}, seed)
        sched = Scheduler(study_id=sid, searcher=searcher,
                          direction="minimize", budget=trials, n_groups=groups, seed=seed,
                          clock=lambda: now["t"], send_first=True, ask_ahead=ahead)
        executor = Executor(st, send=None, machine=sched, searcher=searcher)
        commits, wrote = [], [False]     # write transactions (reads commit too)

        def statement(conn, cursor, text, *rest):
            wrote[0] = wrote[0] or text.lstrip().split(None, 1)[0].upper() in WRITES

        def commit(conn):
            if wrote[0]:
                commits.append(1)
            wrote[0] = False
        event.listen(st.engine, "before_cursor_execute", statement)
        event.listen(st.engine, "commit", commit)
        events: list[tuple] = []     # (end time, group, trial id, params)
        last_end: dict[int, float] = {}
        held: dict[int, list] = {}   # group -> trials it holds, not begun (sent ahead)
        busy: set[int] = set()
        gaps, durations, busy_s, cost_at, batches = [], [], 0.0, {}, 0

        def launch(group, at):
            a = held[group].pop(0)
            d = float(mean_s * rng.lognormal(-sigma ** 2 / 2, sigma))
            if group in last_end:
                gaps.append(at - last_end[group])
            durations.append(d)
            busy.add(group)
            heapq.heappush(events, (at + d, group, a.trial.trial_id, a.trial.params))

        def start(actions, at):
            for a in actions:
                if isinstance(a, Dispatch):
                    held.setdefault(a.group, []).append(a)
                    if a.group not in busy:
                        launch(a.group, at)

        t0 = time.perf_counter()
        start(executor.collect(ev.Start()), 0.0)
        free = time.perf_counter() - t0                 # the coordinator is busy until then
        busy_s += free
        while events:
            first = events[0][0]
            now["t"] = max(free, first)
            batch = []
            while events and events[0][0] <= now["t"]:
                end, group, tid, params = heapq.heappop(events)
                last_end[group] = end
                busy.discard(group)
                if held.get(group):          # its next trial was already there
                    launch(group, end)
                batch.append((group, Result(tid, TrialStatus.COMPLETE, value=float(_branin(params)))))
            before = sched.finished
            batches += 1
            t0 = time.perf_counter()
            actions = executor.collect(ev.Results(tuple(batch)))
            spent = time.perf_counter() - t0
            busy_s += spent
            for mark in marks:
                if before < mark + 100 and sched.finished > mark:
                    cost_at.setdefault(mark, []).append(spent / len(batch))
            free = now["t"] + spent
            start(actions, free)
        executor.collect(ev.Finish())
    mean_gap = statistics.fmean(gaps) if gaps else 0.0
    return {"completions/s": trials / busy_s, "busy %": 100 * mean_s / (mean_s + mean_gap),
            "mean gap ms": 1e3 * mean_gap, "cost per trial ms": 1e3 * busy_s / trials,
            "commits per trial": len(commits) / trials, "mean batch": trials / max(1, batches),
            "cost_at": {m: 1e3 * statistics.median(v) for m, v in cost_at.items()}}


def bayes_batches(told_sizes=(200, 500), batch: int = 16) -> list[dict]:
    """Suggestions for `batch` groups, one ask (and fit) each and in one batch (one fit),
    on two searchers with the same history."""
    from mpiopt.search import make_searcher

    rows = []
    for told in told_sizes:
        rng = np.random.default_rng(0)
        history = [(p, float(_branin(p))) for p in (_space().sample(rng) for _ in range(told))]
        for how in ("one at a time", "one batch"):
            searcher = make_searcher("bayesian", _space(), {}, 0)
            searcher.replay(history)
            searcher.ask()                              # the first fit after a replay
            first = searcher.next_number
            start = time.perf_counter()
            asked = ([searcher.ask() for _ in range(batch)] if how == "one at a time"
                     else searcher.ask_batch(range(first, first + batch)))
            seconds = time.perf_counter() - start
            rows.append({"told": told, "asked": how, "suggestions": batch,
                         "seconds": round(seconds, 3), "suggestions/s": round(batch / seconds, 1),
                         "distinct": len({tuple(a.values()) for a in asked})})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", nargs="+", type=int, default=[1000, 10000])
    ap.add_argument("--durations", nargs="+", type=float, default=[10.0, 60.0])
    ap.add_argument("--algorithms", nargs="+", default=["random", "evolutionary"])
    ap.add_argument("--engines", nargs="+", default=["sqlite", "postgresql"])
    ap.add_argument("--waves", type=int, default=3, help="trials = waves x groups")
    ap.add_argument("--saturate", type=int, default=10_000,
                    help="groups of 1 s trials for the saturated figure (0: skip)")
    _scale_options(ap)
    args = ap.parse_args(argv)
    if args.scale_only:
        print_scale(args)
        return 0
    server = None
    rows, growth, saturated = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"sqlite": lambda n: f"sqlite:///{Path(tmp) / (n + '.db')}"}
        if "postgresql" in args.engines:
            from pgserver import PostgresServer, find_bindir

            bindir = find_bindir()
            if bindir is not None:
                server = PostgresServer(bindir)
                urls["postgresql"] = lambda n: server.new_database()
            else:
                print("PostgreSQL server binaries not found: only SQLite measured.")
        try:
            for engine in [e for e in args.engines if e in urls]:
                for algorithm in args.algorithms:
                    for groups in args.groups:
                        for mean_s in args.durations:
                            url = urls[engine](f"{algorithm}-{groups}-{mean_s:g}")
                            r = simulate(url, algorithm, groups, args.waves * groups, mean_s)
                            rows.append({"engine": engine, "algorithm": algorithm, "groups": groups,
                                         "trial s": mean_s, "completions/s": round(r["completions/s"]),
                                         "busy %": round(r["busy %"], 2),
                                         "mean gap ms": round(r["mean gap ms"], 1),
                                         "cost per trial ms": round(r["cost per trial ms"], 3),
                                         "commits per trial": round(r["commits per trial"], 2)})
                            print(rows[-1], flush=True)
                    if args.saturate:
                        r = simulate(urls[engine](f"{algorithm}-saturated"), algorithm,
                                     args.saturate, args.waves * args.saturate, 1.0)
                        saturated.append({"engine": engine, "algorithm": algorithm,
                                          "groups": args.saturate, "trial s": 1.0,
                                          "completions/s": round(r["completions/s"]),
                                          "mean batch": round(r["mean batch"], 1),
                                          "commits per trial": round(r["commits per trial"], 3)})
                        print(saturated[-1], flush=True)
                    r = simulate(urls[engine](f"{algorithm}-growth"), algorithm, 16, 10_100, 10.0,
                                 marks=(100, 10_000))
                    growth.append({"engine": engine, "algorithm": algorithm,
                                   "ms per trial near 100 finished": round(r["cost_at"][100], 3),
                                   "near 10,000": round(r["cost_at"][10_000], 3),
                                   "ratio": round(r["cost_at"][10_000] / r["cost_at"][100], 2)})
                    print(growth[-1], flush=True)
        finally:
            if server is not None:
                server.close()
    print("\n### Coordinator at scale (simulated groups, real scheduler, searcher and storage)\n")
    print(f"Machine: {machine()}\n")
    print(f"`python benchmarks/simulate.py` (trials = {args.waves} x groups; durations "
          "log-normal, sd = mean / 2)\n")
    print(table(rows))
    if saturated:
        print("\nSaturated: more results offered than one coordinator takes (the most it "
              "sustains; results wait and are written in batches):\n")
        print(table(saturated))
    print("\nCost per trial as the study grows (16 groups, 10,100 trials):\n")
    print(table(growth))
    print("\nBayesian suggestions for 16 idle groups, one ask each or one batch:\n")
    print(table(bayes_batches()))
    if args.scale_groups:
        print_scale(args)
    return 0


# Model-based rows stop at this simulated second: 3 waves of 10-60 s trials end by about
# 145 s when no group waits, while a row whose searcher is the bottleneck would go on for
# as many seconds of CPU as it is behind (simulate_model.py's `horizon`).
SCALE_HORIZON_S = 150.0


def _scale_options(ap) -> None:
    ap.add_argument("--scale-groups", nargs="*", type=int, default=[64, 256, 1000],
                    help="groups for the model-based rows (none: skip them)")
    ap.add_argument("--scale-waves", type=float, default=3.0,
                    help="model-based rows: trials = waves x groups")
    ap.add_argument("--scale-algorithms", nargs="+", default=["auto", "random"])
    ap.add_argument("--scale-only", action="store_true", help="only the model-based rows")
    ap.add_argument("--scale-horizon", type=float, default=SCALE_HORIZON_S,
                    help="model-based rows: stop at this simulated second (0: never)")
    ap.add_argument("--scale-durations", nargs=2, type=float, default=[10.0, 60.0],
                    metavar=("LOW", "HIGH"),
                    help="model-based rows: trial seconds, uniform in [LOW, HIGH]")


def scale_rows(groups: list[int], waves: float, algorithms: list[str],
               horizon: float | None = None, durations=(10.0, 60.0)) -> list[dict]:
    """The model-based rows (simulate_model.py), on Hartmann-6: six real parameters, so
    `auto` runs its Gaussian process and CMA-ES pair."""
    import simulate_model
    from problems import _reals, hartmann6

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in groups:
            for algorithm in algorithms:
                trials = int(round(waves * n))
                r = simulate_model.run(f"sqlite:///{Path(tmp) / f'{algorithm}-{n}.db'}",
                                       _reals(6, 0.0, 1.0), hartmann6, algorithm, n, trials,
                                       durations[0], durations[1], horizon=horizon or None)
                asks = r["model asks"]
                rows.append({"groups": n, "trials": trials, "algorithm": algorithm,
                             "started": r["trials"], "finished": r["finished"],
                             "fillers": r["fillers"], "filler share %": round(100 * r["filler share"], 1),
                             "busy %": round(100 * r["busy"], 1),
                             "mean wait s": round(r["mean wait s"], 2),
                             "model asks": asks,
                             "CPU per suggestion ms": (round(1e3 * r["searcher CPU s"] / asks, 1)
                                                if r["searcher CPU s"] is not None else None),
                             "simulated s": round(r["simulated s"]),
                             "coordinator CPU s": round(r["coordinator s"], 1),
                             "run CPU s": round(r["CPU s"]), "run wall s": round(r["wall s"])})
                print(rows[-1], flush=True)
    return rows


def print_scale(args) -> None:
    rows = scale_rows(args.scale_groups, args.scale_waves, args.scale_algorithms,
                      args.scale_horizon, args.scale_durations)
    print("\n### auto at scale (simulated groups and clock; each ask costs its real CPU time)\n")
    print(f"Machine: {machine()}\n")
    low, high = args.scale_durations
    print(f"Hartmann-6, trials = {args.scale_waves:g} x groups, durations uniform {low:g}-{high:g} s "
          "(seeded); busy = training group-seconds / group-seconds up to the last start (or "
          "where the row stopped); "
          "model asks = suggestions the searcher computed (random: every trial, in the loop)"
          + (f"; a row stops at {args.scale_horizon:g} simulated s" if args.scale_horizon else "")
          + "\n")
    print(table(rows))


if __name__ == "__main__":
    raise SystemExit(main())
