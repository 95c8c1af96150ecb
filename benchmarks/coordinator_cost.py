"""Coordinator cost per trial: database writes + tell + ask, at 50, 200 and 500 finished trials.

Drives the real Scheduler with the real SQLite storage (a file on disk, WAL) and the real
searchers, 4 groups, no MPI: every result is answered at once, so all the time measured
is the coordinator's. Per trial it reports

- writes: committing the finished trial and the next one as RUNNING (every storage
          write the scheduler makes);
- tell:   the searcher learning the result (model refits live here);
- ask:    the next suggestion (asked ahead while groups train);
- wait:   what a finished group waits for its next trial = writes + the prefetched
          suggestion handed over (the tell and the next ask happen after it is busy).

    python benchmarks/coordinator_cost.py --points 50 200 500 --algorithms random evolutionary bayesian
"""
from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from _common import machine, table

WINDOW = 10  # trials averaged around each point
WRITES = ["create_trial", "create_trials", "finish_trial", "finish_trials", "finish_and_create",
          "take_pending", "restart_trial"]


class Timed:
    """Wraps an object's methods, summing their wall time by name."""

    def __init__(self, inner, names):
        self.inner, self.spent = inner, {n: 0.0 for n in names}
        for name in names:
            setattr(self, name, self._wrap(name, getattr(inner, name)))

    def _wrap(self, name, fn):
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.spent[name] += time.perf_counter() - t
        return timed

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def lap(self) -> dict:
        """Time spent per name since the last lap. (Not `take`: the Scheduler takes an
        object with `take` for a background searcher.)"""
        out, self.spent = self.spent, {n: 0.0 for n in self.spent}
        return out


def branin(p):
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    x, y = p["x"], p["y"]
    return (y - b * x**2 + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


def measure(algorithm: str, points: list[int], tmp: Path) -> list[dict]:
    from mpiopt.parallel.protocol import Result
    from mpiopt.parallel.scheduler import Dispatch, Executor, Scheduler
    from mpiopt.parallel.scheduler import events as ev
    from mpiopt.search import make_searcher
    from mpiopt.space import Real, Space
    from mpiopt.storage import open_storage

    space = Space([Real("x", -5.0, 10.0), Real("y", 0.0, 15.0)])
    raw = open_storage(f"sqlite:///{tmp / (algorithm + '.db')}", create=True)
    study = raw.create_study(algorithm, "minimize", "value", "{}", "x", space.to_dict())
    storage = Timed(raw, [n for n in WRITES if hasattr(raw, n)])
    searcher = Timed(make_searcher(algorithm, space, {}, 0), ["ask", "tell"])
    budget = max(points) + WINDOW + 4          # 4 still running when the last window closes
    sched = Scheduler(study_id=study, searcher=searcher, direction="minimize", budget=budget,
                      n_groups=4)
    executor = Executor(storage, send=None, machine=sched, searcher=searcher)


    running = {a.group: a.trial for a in executor.collect(ev.Start())
               if isinstance(a, Dispatch)}
    executor.run(ev.Prefetch())
    rows, acc, group = [], [], 0
    for n in range(1, max(points) + WINDOW):
        group = min(running, key=lambda g: running[g].number)    # the oldest finishes first
        trial = running.pop(group)
        storage.lap(), searcher.lap()
        t0 = time.perf_counter()
        result = Result(trial.trial_id, "COMPLETE", branin(trial.params))
        actions = executor.collect(ev.Results(((group, result),)))
        total = time.perf_counter() - t0
        db, s = storage.lap(), searcher.lap()
        t1 = time.perf_counter()
        executor.run(ev.Prefetch())
        ask = time.perf_counter() - t1 + s["ask"]            # an ask inside on_result counts too
        running.update({a.group: a.trial for a in actions if isinstance(a, Dispatch)})
        writes = sum(db.values())
        acc.append({"writes": writes, "tell": s["tell"], "ask": ask, "wait": total - s["tell"]})
        target = next((p for p in points if p <= n < p + WINDOW), None)
        if target is not None and n == target + WINDOW - 1:
            avg = {k: 1000 * sum(a[k] for a in acc[-WINDOW:]) / WINDOW for k in acc[-1]}
            rows.append({"algorithm": algorithm, "finished": target, "writes ms": avg["writes"],
                         "tell ms": avg["tell"], "ask ms": avg["ask"],
                         "per trial ms": avg["writes"] + avg["tell"] + avg["ask"],
                         "group waits ms": avg["wait"]})
            print(table(rows[-1:]), flush=True)
    raw.close()
    return rows


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, nargs="+", default=[50, 200, 500])
    ap.add_argument("--algorithms", nargs="+", default=["random", "evolutionary", "bayesian"])
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in args.algorithms:
            rows += measure(algorithm, sorted(args.points), Path(tmp))
    report = (f"### Coordinator cost per trial (SQLite on disk)\n\n{machine()}\n\n"
              f"`python benchmarks/coordinator_cost.py --points {' '.join(map(str, args.points))}`\n\n"
              f"{table(rows)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
