"""Storage: the write path per finished trial and query times on a 10,000-trial study,
SQLite and PostgreSQL side by side in one run.

- write path: what the coordinator does per trial (create_trial as RUNNING, then
  finish_trial with 3 fold values, 10 per-epoch values and metrics: two transactions),
  ms per trial, median of blocks of 50; then the same with the lease checked in each
  transaction, as a job's writes are (Storage.fence);
- queries on a study of N trials (default 10,000, filled with a bulk loader that uses the
  same write path): `studies` (list_studies), `status` (count + best), `trials --limit
  50 --sort value`, `best --top 10`, `show` of one trial, and the full `get_trials` read
  that `export` does;
- `--changes`: only the read every job of a study makes every second or so
  (Storage.changes) on a study of 1,000 finished trials and 16 running: incremental
  (since the last read, two results new: what a live job asks each second) and whole
  (since None: a job's first read), ms, median of 20.

PostgreSQL is a throwaway local cluster started from Debian's server binaries (the tests'
tests/pgserver.py), fsync off as in the tests: it measures mpiopt's SQL, not a disk.

    python benchmarks/storage.py [--trials 10000] [--writes 500] [--changes]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, table

sys.path.insert(0, str(ROOT / "tests"))


def write_path(storage, study_id: int, n: int) -> list[float]:
    """Seconds per finished trial (create + finish), one sample per trial."""
    out = []
    for i in range(n):
        t = time.perf_counter()
        trial = storage.create_trial(study_id, {"lr": 1e-3 * (i + 1), "units": i % 64,
                                                "act": "relu"}, seed=i, group=i % 4, host="n1")
        storage.finish_trial(trial.id, "COMPLETE", value=float(i % 97), value_std=0.1,
                             fold_values=[1.0, 2.0, 3.0], metrics={"val_loss": 0.3, "acc": 0.9},
                             duration=1.0, intermediate={e: 1.0 / (e + 1) for e in range(1, 11)})
        out.append(time.perf_counter() - t)
    return out


def timed(fn, repeat=5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def queries(storage, study_id: int) -> dict[str, float]:
    middle = storage.count_trials(study_id)
    n = sum(middle.values())
    return {
        "studies": timed(storage.list_studies),
        "status": timed(lambda: (storage.count_trials(study_id), storage.best_trials(study_id, 1))),
        "trials --sort value --limit 50": timed(
            lambda: storage.get_trials(study_id, order_by="value", limit=50)),
        "best --top 10": timed(lambda: storage.best_trials(study_id, 10)),
        "show (one trial)": timed(lambda: storage.get_trial(study_id, n // 2)),
        "export (every trial)": timed(lambda: storage.get_trials(study_id), repeat=2),
    }


def run_engine(name: str, url: str, trials: int, writes: int) -> tuple[dict, dict]:
    from mpiopt.storage import open_storage

    with open_storage(url, create=True) as st:
        sid = st.create_study("bench", "minimize", "value", "s", "0" * 64, "{}")
        per = write_path(st, sid, writes)
        blocks = [statistics.median(per[i:i + 50]) for i in range(0, len(per), 50)]
        # as a job writes: each transaction first checks its job is live (Storage.fence)
        held = st.create_study("held", "minimize", "value", "s", "2" * 64, "{}")
        job = st.join_study(held, "n1", 1, 30)
        st.fence = (job.id, job.token)
        fenced = write_path(st, held, writes)
        st.fence = None
        fenced = [statistics.median(fenced[i:i + 50]) for i in range(0, len(fenced), 50)]
        write = {"engine": name, "ms per finished trial": round(1e3 * statistics.median(blocks), 2),
                 "trials/s": round(1 / statistics.median(blocks)),
                 "ms, lease checked": round(1e3 * statistics.median(fenced), 2),
                 "checked / not": round(statistics.median(fenced) / statistics.median(blocks), 2)}
        big = st.create_study("big", "minimize", "value", "s", "1" * 64, "{}")
        start = time.perf_counter()
        write_path(st, big, trials)
        print(f"{name}: filled {trials} trials in {time.perf_counter() - start:.0f}s", flush=True)
        q = {k: round(1e3 * v, 1) for k, v in queries(st, big).items()}
    return write, q


def changes_cost(name: str, url: str, finished: int = 1000, running: int = 16) -> dict:
    """ms per changes() call, median of 20, incremental and whole (see the docstring)."""
    from mpiopt.storage import open_storage

    with open_storage(url, create=True) as st:
        sid = st.create_study("changes", "minimize", "value", "s", "3" * 64, "{}")
        job = st.join_study(sid, "n1", 1, 30)
        st.fence = (job.id, job.token)
        write_path(st, sid, finished - 2)
        for i in range(running):
            st.create_trial(sid, {"lr": 1e-3, "units": i, "act": "relu"}, seed=i, group=i)
        at = st.changes(sid, None).at
        write_path(st, sid, 2)

        def incremental():
            got = st.changes(sid, at)
            assert len(got.finished) == 2 and len(got.running) == running

        def whole():
            st.changes(sid, None)
        return {"engine": name,
                "incremental ms": round(1e3 * statistics.median(_samples(incremental)), 2),
                "whole ms": round(1e3 * statistics.median(_samples(whole)), 1)}


def _samples(fn, n: int = 20) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--writes", type=int, default=500)
    ap.add_argument("--changes", action="store_true",
                    help="only the cost of Storage.changes (1,000 trials, 16 running)")
    args = ap.parse_args()
    from pgserver import PostgresServer, find_bindir

    engines = []
    with tempfile.TemporaryDirectory() as tmp:
        engines.append(("SQLite (WAL)", f"sqlite:///{Path(tmp) / 'bench.db'}"))
        server = None
        bindir = find_bindir()
        if bindir is not None:
            server = PostgresServer(bindir)
            engines.append(("PostgreSQL 15", server.new_database()))
        try:
            if args.changes:
                rows = [changes_cost(n, u) for n, u in engines]
                print(f"\n### Storage.changes: 1,000 finished trials, 16 running\n\n"
                      f"Machine: {machine()}\n\n{table(rows)}")
                return 0
            results = [run_engine(n, u, args.trials, args.writes) for n, u in engines]
        finally:
            if server is not None:
                server.close()
    print(f"\n### Storage: write path and queries\n\nMachine: {machine()}\n")
    print(f"Write path per finished trial (create RUNNING + finish with 3 folds, 10 epochs; "
          f"{args.writes} trials, median of 50-trial blocks):\n")
    print(table([w for w, _ in results]))
    names = list(results[0][1])
    rows = [{"query (ms, best of 5)": k, **{n: q[k] for (n, _), (_, q) in zip(engines, results)}}
            for k in names]
    if len(results) == 2:
        for row in rows:
            a, b = row[engines[0][0]], row[engines[1][0]]
            row["PostgreSQL / SQLite"] = round(b / a, 2) if a else None
    print(f"\nQueries on a study of {args.trials} trials:\n")
    print(table(rows))
    if bindir is None:
        print("\nPostgreSQL server binaries not found: only SQLite measured.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
