"""Scheduling efficiency: how much of the machine goes into trials, not into the tool.

A sleeping objective of fixed duration runs `trials` times on G groups of one rank.
Ideal wall time is trials x duration / G. The objective records when it starts and ends,
so the gap between a group's trial ending and its next one starting is measured where it
matters, on the group. The coordinator prints its own CPU time over its wall time.

    python benchmarks/scheduling.py --groups 1 2 4 8 16 --trials 40 --duration 0.5
"""
from __future__ import annotations

import argparse
import re
import statistics
import tempfile
from pathlib import Path

from _common import OBJECTIVES, machine, mpiopt, table, write_spec

CPU_LINE = re.compile(r"coordinator: ([\d.]+)s CPU over ([\d.]+)s wall")


def run_one(tmp: Path, algorithm: str, groups: int, trials: int, duration: float) -> dict:
    name = f"{algorithm}-{groups}"
    spec = write_spec(
        tmp / f"{name}.yaml",
        study={"name": name},
        objective={"function": f"{OBJECTIVES}:sleeping", "direction": "minimize"},
        search_space={"x": {"type": "real", "low": -5.0, "high": 10.0},
                      "y": {"type": "real", "low": 0.0, "high": 15.0}},
        search={"algorithm": algorithm, "trials": trials, "seed": 1},
        resources={"group_size": 1},
    )
    url = f"sqlite:///{tmp / (name + '.db')}"
    proc = mpiopt(["search", spec, "--storage", url], np=groups + 1, cwd=tmp,
                  MPIOPT_BENCH_SLEEP=duration)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout}\n{proc.stderr}")
    trials_ = _trials(url, name)
    starts = [t.metrics["t_start"] for t in trials_]
    ends = [t.metrics["t_end"] for t in trials_]
    wall = max(ends) - min(starts)
    ideal = trials * duration / groups
    gaps = _gaps(trials_)
    cpu, cwall = map(float, CPU_LINE.search(proc.stdout).groups())
    return {"algorithm": algorithm, "groups": groups, "wall s": wall, "ideal s": ideal,
            "efficiency %": 100 * ideal / wall, "median gap ms": 1000 * statistics.median(gaps),
            "worst gap ms": 1000 * max(gaps), "coordinator CPU %": 100 * cpu / cwall}


def _trials(url, name):
    from mpiopt.storage import open_storage

    storage = open_storage(url)
    try:
        return storage.get_trials(storage.get_study(name).id)
    finally:
        storage.close()


def _gaps(trials) -> list[float]:
    by_group: dict[int, list] = {}
    for t in trials:
        by_group.setdefault(t.group, []).append((t.metrics["t_start"], t.metrics["t_end"]))
    gaps = []
    for runs in by_group.values():
        runs.sort()
        gaps += [b[0] - a[1] for a, b in zip(runs, runs[1:])]
    return gaps or [0.0]


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--duration", type=float, default=0.5)
    ap.add_argument("--algorithms", nargs="+", default=["random", "evolutionary", "bayesian"])
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in args.algorithms:
            for g in args.groups:
                rows.append(run_one(Path(tmp), algorithm, g, args.trials, args.duration))
                print(table(rows[-1:]), flush=True)
    report = (f"### Scheduling efficiency\n\n{machine()}\n\n"
              f"`python benchmarks/scheduling.py --groups {' '.join(map(str, args.groups))} "
              f"--trials {args.trials} --duration {args.duration}`\n\n{table(rows)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
