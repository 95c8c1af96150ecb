"""Scheduling efficiency: how much of the machine goes into trials, not into the tool.

A sleeping objective of fixed duration runs on G groups: trials = max(40, 4 G), rounded
up to a multiple of G so that the last wave is full. With 4 trials a group, half of the
gaps are a first or last wave's, which go through rank 0 (nothing is sent ahead before a
trial has succeeded, nor once at most one trial per group is left); `--steady` adds runs
of random and evolutionary search at the most groups with 16 trials a group, where a
study's middle, in which every group holds its next trial, dominates (`--in-process`: the
objective in the ranks' own processes, where nothing is sent ahead nor before the write
of the result before it, mpiopt/parallel/coordinator.py). Ideal wall time is trials x duration
/ G. The objective records when it starts and ends, so the gap between a group's trial
ending and its next one starting is measured where it matters, on the group; "busy %" is
duration / (duration + mean gap). The coordinator prints its own CPU time over its wall
time, and how many trials got a random point because the model was still busy
("fillers", mpiopt/search/background.py). Then 64 ranks: 63 groups of 1 and 16 groups of
4 (`--wide`).

    python benchmarks/scheduling.py --groups 1 2 4 8 16 --duration 0.5
"""
from __future__ import annotations

import argparse
import functools
import re
import statistics
import tempfile
from pathlib import Path

from _common import OBJECTIVES, machine, mpiopt, table, write_spec

CPU_LINE = re.compile(r"coordinator: ([\d.]+)s CPU over ([\d.]+)s wall")
FILLERS_LINE = re.compile(r"(\d+) trial\(s\) got a random point")


def run_one(tmp: Path, algorithm: str, groups: int, duration: float, group_size: int = 1,
            per_group: int = 4, in_process: bool = False) -> dict:
    trials = -(-max(40, per_group * groups) // groups) * groups
    name = f"{algorithm}-{groups}x{group_size}-{per_group}"
    spec = write_spec(
        tmp / f"{name}.yaml",
        study={"name": name},
        objective={"function": f"{OBJECTIVES}:sleeping", "direction": "minimize",
                   "isolate": not in_process},
        search_space={"x": {"type": "real", "low": -5.0, "high": 10.0},
                      "y": {"type": "real", "low": 0.0, "high": 15.0}},
        search={"algorithm": algorithm, "trials": trials, "seed": 1},
        resources={"group_size": group_size},
    )
    url = f"sqlite:///{tmp / (name + '.db')}"
    proc = mpiopt(["search", spec, "--storage", url], np=groups * group_size + 1, cwd=tmp,
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
    fillers = FILLERS_LINE.search(proc.stdout)
    p99 = sorted(gaps)[min(len(gaps) - 1, int(0.99 * len(gaps)))]
    return {"algorithm": algorithm, "groups": f"{groups}" + (f" x {group_size}" if group_size > 1 else "")
            + (f" ({per_group} a group)" if per_group != 4 else ""),
            "trials": trials, "wall s": wall, "ideal s": ideal,
            "efficiency %": 100 * ideal / wall,
            "busy %": 100 * duration / (duration + statistics.fmean(gaps)),
            "median gap ms": 1000 * statistics.median(gaps), "p99 gap ms": 1000 * p99,
            "worst gap ms": 1000 * max(gaps), "coordinator CPU %": 100 * cpu / cwall,
            "fillers": int(fillers.group(1)) if fillers else 0, "_gaps": gaps}


EDGES_MS = [0.5, 1, 2, 5, 10, 20, 50]


def histogram(rows) -> str:
    """Gaps from a trial's end to its group's next start, per algorithm, all runs."""
    labels = [f"< {EDGES_MS[0]}"] + [f"{a}-{b}" for a, b in zip(EDGES_MS, EDGES_MS[1:])] + [f">= {EDGES_MS[-1]}"]
    out = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        gaps = [1000 * g for r in rows if r["algorithm"] == algorithm for g in r["_gaps"]]
        counts = [0] * len(labels)
        for g in gaps:
            counts[sum(g >= e for e in EDGES_MS)] += 1
        out.append({"algorithm": algorithm, "gaps": len(gaps),
                    **{f"{lab} ms": f"{100 * c / len(gaps):.1f}%" for lab, c in zip(labels, counts)}})
    return table(out)


def _shown(rows):
    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]


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
    ap.add_argument("--duration", type=float, default=0.5)
    ap.add_argument("--algorithms", nargs="+", default=["random", "evolutionary", "bayesian"])
    ap.add_argument("--wide", nargs="*", default=["random", "evolutionary", "bayesian"],
                    help="algorithms also run on 64 ranks (63 x 1 and 16 x 4); none to skip")
    ap.add_argument("--steady", type=int, default=16,
                    help="trials a group in the extra runs at the most groups (0: none)")
    ap.add_argument("--in-process", action="store_true",
                    help="trials in the ranks' own processes (isolate: false, as Keras "
                         "trials run): each starts once its group's last result is written")
    args = ap.parse_args(argv)
    run = functools.partial(run_one, in_process=args.in_process)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in args.algorithms:
            for g in args.groups:
                rows.append(run(Path(tmp), algorithm, g, args.duration))
                print(table(_shown(rows[-1:])), flush=True)
            if args.steady and algorithm in ("random", "evolutionary"):
                rows.append(run(Path(tmp), algorithm, max(args.groups), args.duration,
                                    per_group=args.steady))
                print(table(_shown(rows[-1:])), flush=True)
        for algorithm in args.wide:
            for g, size in ((63, 1), (16, 4)):
                rows.append(run(Path(tmp), algorithm, g, args.duration, size))
                print(table(_shown(rows[-1:])), flush=True)
    report = (f"### Scheduling efficiency\n\n{machine()}\n\n"
              f"`python benchmarks/scheduling.py --groups {' '.join(map(str, args.groups))} "
              f"--duration {args.duration}{' --in-process' if args.in_process else ''}`\n\n{table(_shown(rows))}\n\n"
              f"Dispatch gaps (a trial's end to its group's next start), every run above:\n\n"
              f"{histogram(rows)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
