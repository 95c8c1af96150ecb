"""Many jobs on one study (`mpiopt search --join`) on a real PostgreSQL server: how fast
the study finishes trials and how busy the jobs are, for 1, 2, 4 and 8 jobs.

Each job is a real `mpiopt search SPEC --join` process (single-process mode: one group a
job, so that 8 jobs fit a 2-core machine; the jobs meet only in the database, which is
what is measured here), started together on an empty database, with trials that sleep
`--trial-s` seconds and 40 trials per job in the study's budget. Reported per row:

- completions/s: finished trials / (last trial's end - first trial's start); the ideal is
  jobs / trial-s;
- busy %: the jobs' summed trial time / their summed lifetimes (from each job's lease to
  its end: what the allocation paid for, the wait at the end for other jobs' last trials
  included);
- lost: trials that ran twice, and finished trials beyond the budget (both must be 0).

    python benchmarks/jobs.py
    python benchmarks/jobs.py --jobs 1 2 --trial-s 0.5
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import machine, table  # noqa: E402

BIN = Path(sys.executable).parent
FUNCTIONS = HERE.parent / "tests" / "objectives" / "functions.py"
PER_JOB = 40


def spec(folder: Path, trials: int) -> Path:
    path = folder / "jobs.yaml"
    path.write_text(yaml.safe_dump({
        "study": {"name": "jobs"},
        "objective": {"function": f"{FUNCTIONS}:steady", "direction": "minimize"},
        "search_space": {"x": {"type": "real", "low": -5.0, "high": 10.0},
                         "y": {"type": "real", "low": 0.0, "high": 15.0}},
        "search": {"algorithm": "random", "trials": trials, "seed": 1}}))
    return path


def one_row(url: str, jobs: int, trial_s: float, folder: Path) -> dict:
    from mpiopt.storage import open_storage

    budget = PER_JOB * jobs
    path = spec(folder, budget)
    env = {**os.environ, "MPIOPT_TEST_SLEEP": str(trial_s), "OMP_NUM_THREADS": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs = [subprocess.Popen([str(BIN / "mpiopt"), "search", str(path), "--join", "--quiet",
                               "--storage", url], cwd=folder, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(jobs)]
    errors = [p.communicate(timeout=600)[1] for p in procs]
    failed = [e for p, e in zip(procs, errors) if p.returncode != 0]
    if failed:
        raise SystemExit(f"a job failed:\n{failed[0][-2000:]}")
    with open_storage(url) as st:
        sid = st.get_study("jobs").id
        trials, lives = st.get_trials(sid), st.list_jobs(sid)
    done = [t for t in trials if t.status.is_finished()]
    first = min(t.started_at for t in done)
    last = max(t.finished_at for t in done)
    lifetime = sum(((j.ended_at or j.beat_at) - j.started_at).total_seconds() for j in lives)
    twice = sum(n - 1 for n in Counter(tuple(sorted(t.params.items())) for t in trials).values())
    return {"jobs": jobs, "trials": len(done),
            "completions/s": len(done) / (last - first).total_seconds(),
            "ideal/s": jobs / trial_s,
            "busy %": 100 * sum(t.duration or 0 for t in done) / lifetime,
            "lost": twice + max(0, len(done) - budget)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, nargs="*", default=[1, 2, 4, 8])
    ap.add_argument("--trial-s", type=float, default=0.5)
    args = ap.parse_args(argv)
    from pgserver import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL server binaries not found (.ci/ensure-postgresql)")
    server = PostgresServer(bindir)
    rows = []
    try:
        for n in args.jobs:
            with tempfile.TemporaryDirectory() as folder:
                rows.append(one_row(server.new_database(), n, args.trial_s, Path(folder)))
                print(rows[-1], flush=True)
    finally:
        server.close()
    print(f"# {machine()}; trials of {args.trial_s:g} s, {PER_JOB} per job, single-process jobs")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
