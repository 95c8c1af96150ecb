"""Time to the first trial: what a study's start costs, by algorithm, with quick ranks and
with ranks whose set-up takes seconds.

A Bayesian study's coordinator imports scikit-learn and scikit-optimize (2-3 s on a
loaded 2-core machine); the other ranks meanwhile set up their objective, which for a
Keras study means importing TensorFlow (seconds, minutes on a busy shared file system).
Rank 0 imports its searcher while it waits for them (mpiopt.run.launch._preload), so
where their set-up is the longer of the two the import costs nothing: a Bayesian study's
first trial then comes as soon as a random search's. Measured side by side: every
algorithm and set-up in turn within each repetition, the order reversed every other one.

The objective is a 3-parameter function of 50 ms; "set-up s" is a sleep at its module's
import on every group rank (I/O-bound, as an import from a shared file system is).

    python benchmarks/startup.py                      # 3 ranks, set-up 0 and 3 s
    python benchmarks/startup.py --np 5 --setup 0 10 --reps 6
"""
from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import BIN, env, machine, table, write_spec

MODULE = '''import os, time
time.sleep(float(os.environ.get("STARTUP_BENCH_SETUP_S", "0")))


def f(p):
    time.sleep(0.05)
    return (p["x"] - 1) ** 2 + (p["y"] - 2) ** 2 + p["z"]
'''


LIMIT_S = 300.0     # one study of np - 1 trials of 50 ms


def one_run(folder: Path, algorithm: str, setup_s: float, np: int) -> tuple[float, float]:
    """(seconds to the first finished trial, seconds to the job's end) from mpiexec's start."""
    spec = write_spec(
        folder / f"{algorithm}.yaml", study={"name": "s"},
        objective={"function": f"{folder / 'objective.py'}:f", "direction": "minimize"},
        search_space={k: {"type": "real", "low": 0.0, "high": 5.0} for k in "xyz"},
        search={"algorithm": algorithm, "trials": np - 1, "seed": 1})
    db = Path(tempfile.mkdtemp(dir=folder)) / "results.db"     # a new database each run
    cmd = [str(BIN / "mpiexec"), "-n", str(np), str(BIN / "mpiopt"), "search", str(spec),
           "--storage", f"sqlite:///{db}", "--quiet"]
    errors = db.with_name("stderr.txt")
    start = time.monotonic()
    with open(errors, "w") as err:
        job = subprocess.Popen(cmd, cwd=folder, env=env(STARTUP_BENCH_SETUP_S=setup_s),
                               stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    first = None
    while job.poll() is None:
        if first is None and _finished(db):
            first = time.monotonic() - start
        if time.monotonic() - start > LIMIT_S:       # a job that hangs ends the benchmark
            os.killpg(job.pid, signal.SIGKILL)
            raise SystemExit(f"{algorithm}: no end within {LIMIT_S:.0f}s")
        time.sleep(0.02)
    end = time.monotonic() - start
    if job.returncode != 0:
        raise SystemExit(f"{algorithm}: exit {job.returncode}: {errors.read_text()[-2000:]}")
    return (first if first is not None else end), end


def _finished(db: Path) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1) as con:
            return con.execute("SELECT count(*) FROM trials WHERE status IN "
                               "('COMPLETE', 'FAILED')").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=3)
    ap.add_argument("--setup", type=float, nargs="+", default=[0.0, 3.0])
    ap.add_argument("--algorithms", nargs="+", default=["random", "evolutionary", "bayesian", "auto"])
    ap.add_argument("--reps", type=int, default=4)
    args = ap.parse_args()
    runs = [(a, s) for s in args.setup for a in args.algorithms]
    times: dict[tuple, list] = {r: [] for r in runs}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "objective.py").write_text(MODULE)
        for rep in range(args.reps):
            for run in (runs if rep % 2 == 0 else runs[::-1]):
                times[run].append(one_run(folder, *run, args.np))
    rows = []
    for algorithm, setup in runs:
        first = statistics.median(t[0] for t in times[(algorithm, setup)])
        base = statistics.median(t[0] for t in times[(args.algorithms[0], setup)])
        rows.append({"algorithm": algorithm, "rank set-up s": setup, "first trial s": first,
                     f"first trial vs {args.algorithms[0]}": first / base,
                     "whole job s": statistics.median(t[1] for t in times[(algorithm, setup)])})
    print(f"### Time to the first trial ({args.np} ranks, medians of {args.reps})\n")
    print(machine() + "\n")
    print(f"`python benchmarks/startup.py --np {args.np} --setup "
          f"{' '.join(map(str, args.setup))} --reps {args.reps}`\n")
    print(table(rows))


if __name__ == "__main__":
    main()
