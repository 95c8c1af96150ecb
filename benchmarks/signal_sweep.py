"""Ctrl-C / SIGTERM at random moments of a short study's life under mpiexec: how each job
ended. Not a speed benchmark: the counts behind the start-up signal fixes
(mpiopt.run.startup_signals; the chaos tests check the cases one by one).

A job ended well when it finished (status 0, no `mpiopt:` line) or ended with status 130,
one `mpiopt:` line saying "interrupted" (with the resume command once a study exists),
and no trial left RUNNING. Anything else is listed with its output; a job still running
40 s after the signal is a hang (then killed, its proxy and ranks included).

    python benchmarks/signal_sweep.py --jobs 60 --ranks 5 --algorithm bayesian --from 1.0 --to 1.8
"""
from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BIN, env, write_spec  # noqa: E402

HANG_S = 40.0


def one_job(folder: Path, ranks: int, algorithm: str, after_s: float, sig) -> tuple[str, str]:
    """(outcome, what to show) of one job signalled `after_s` seconds into its life."""
    (folder / "f.py").write_text("import time\ndef f(params):\n    time.sleep(0.2)\n"
                                 "    return params['x'] ** 2 + params['y']\n")
    db = folder / "s.db"                           # (a fresh folder per job: no old WAL)
    spec = write_spec(folder / "spec.yaml", study={"name": "sweep"},
                      objective={"function": f"{folder / 'f.py'}:f", "direction": "minimize"},
                      search_space={"x": {"type": "real", "low": -1.0, "high": 1.0},
                                    "y": {"type": "real", "low": 0.0, "high": 1.0}},
                      search={"algorithm": algorithm, "trials": 24, "seed": 1})
    job = subprocess.Popen([str(BIN / "mpiexec"), "-n", str(ranks), str(BIN / "mpiopt"),
                            "search", str(spec), "--storage", f"sqlite:///{db}"],
                           cwd=folder, env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(after_s)
    try:
        os.killpg(job.pid, sig)                    # as a terminal's Ctrl-C does
    except ProcessLookupError:
        pass
    try:
        out, err = job.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        from mpiopt.objective.processes import descendants

        for pid in descendants(job.pid) | {job.pid}:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        job.communicate()
        return "hang", ""
    lines = [ln for ln in err.splitlines() if ln.startswith("mpiopt:")]
    running = _running_trials(db)
    if job.returncode == 0 and not lines:
        return "finished", ""
    if (job.returncode == 130 and len(lines) == 1 and "interrupted" in lines[0]
            and not running
            and (_study_status(db) == "not written" or "resume with" in lines[0])):
        return "interrupted in order", ""
    return f"status {job.returncode}", ((lines or err.splitlines()[-1:] or [""])[0]
                                        + f" (study {_study_status(db)})")


def _query(db: Path, sql: str, default):
    """One value from the job's database; `default` where nothing was written."""
    if not db.exists():
        return default
    with sqlite3.connect(db) as conn:
        try:
            row = conn.execute(sql).fetchone()
        except sqlite3.OperationalError:     # (no tables: the start-up wrote nothing)
            return default
    return row[0] if row else default


def _running_trials(db: Path) -> int:
    return _query(db, "select count(*) from trials where status = 'RUNNING'", 0)


def _study_status(db: Path) -> str:
    return _query(db, "select status from studies", "not written")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--ranks", type=int, default=5)
    ap.add_argument("--algorithm", default="bayesian")
    ap.add_argument("--from", dest="lo", type=float, default=1.0, help="earliest signal (s)")
    ap.add_argument("--to", dest="hi", type=float, default=1.8, help="latest signal (s)")
    ap.add_argument("--signals", default="SIGINT,SIGTERM", help="taken in turn")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sigs = [getattr(signal, name) for name in args.signals.split(",")]
    counts = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.jobs):
            after_s, sig = round(rng.uniform(args.lo, args.hi), 2), sigs[i % len(sigs)]
            folder = Path(tmp) / f"job{i}"
            folder.mkdir()
            outcome, shown = one_job(folder, args.ranks, args.algorithm, after_s, sig)
            counts[outcome] += 1
            if outcome not in ("finished", "interrupted in order"):
                print(f"{sig.name} at {after_s}s: {outcome} {shown}", flush=True)
    print(f"{args.jobs} jobs, {args.ranks} ranks, {args.algorithm}, {args.signals} at "
          f"{args.lo}-{args.hi}s: " + ", ".join(f"{n} {k}" for k, n in counts.most_common()))


if __name__ == "__main__":
    main()
