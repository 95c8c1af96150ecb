"""Pruners replayed on unpruned studies: which trials would they stop, at other folds,
epochs and settings than the study ran?

Reads the studies without pruning that `pruning.py --keep DIR` kept (DIR/none-SEED.db:
every trial's whole learning curve, fold by fold, and how long each epoch took). Each
study is replayed on `--groups` groups: its trials start in number order, each epoch of
a trial reports when its own time has passed, a pruner judges every report on what was
reported before it, and a stopped trial frees its group at once. The same trials, in
the same order, for every pruner (the searcher is not asked again), so this measures the
pruners' decisions, not a search; `pruning.py` measures both, at one setting.

A setting "E epochs, K folds" keeps the first E epochs of each of the first K folds of
every curve (early stopping is off in those studies, so a fold's first E epochs are
what it would have trained with E), and a trial's final value is the mean of its folds'
best epochs, as a finished trial's. Per setting and pruner, over the studies: trials
pruned, of those how many would have ended in the top quarter of their study (ties in),
where those were stopped (fold/epoch), the epochs saved, and the largest loss of the
study's best value (the best unpruned trial against the best of all).

    python benchmarks/pruning.py --pruners none --keep /tmp/kept    # the studies
    python benchmarks/pruning_replay.py /tmp/kept
"""
from __future__ import annotations

import argparse
import heapq
import math
from pathlib import Path

import numpy

from _common import table

SETTINGS = [(6, 3), (3, 3), (4, 3), (2, 3), (6, 2), (6, 1), (3, 1)]      # (epochs, folds)
PRUNERS = {
    "median w2 m3": {"pruner": "median", "warmup_epochs": 2, "min_trials": 3},
    "asha rf3 min2": {"pruner": "asha", "reduction_factor": 3, "min_epoch": 2},
    "asha rf3 min1": {"pruner": "asha", "reduction_factor": 3, "min_epoch": 1},
    "asha rf2 min1": {"pruner": "asha", "reduction_factor": 2, "min_epoch": 1},
    "asha rf4 min1": {"pruner": "asha", "reduction_factor": 4, "min_epoch": 1},
}


def studies(folder: Path) -> list[list[dict]]:
    """Each kept study's trials: {"curve": {Step: lower-is-better}, "took": {Step: s}}."""
    from mpiopt.storage import open_storage

    out = []
    for db in sorted(folder.glob("none-*.db")):
        with open_storage(f"sqlite:///{db}", read_only=True) as st:
            study = st.get_study(f"digits-{db.stem}")       # pruning.py's name
            sign = -1.0 if study.direction == "maximize" else 1.0
            trials = st.get_trials(study.id)
        out.append([_trial(t, sign) for t in sorted(trials, key=lambda t: t.number)])
    return out


def _trial(t, sign: float) -> dict:
    ends = sorted((s["fold"], s["epoch"], s["end"]) for s in t.spans if s["kind"] == "epoch")
    took, before = {}, 0.0
    for fold, epoch, end in ends:
        took[(fold, epoch)] = end - before
        before = end
    return {"number": t.number, "took": took,
            "curve": {step: sign * v for step, v in t.intermediate.items()}}


def cut_to(trial: dict, epochs: int, folds: int) -> dict:
    curve = {s: v for s, v in trial["curve"].items() if s.epoch <= epochs and s.fold < folds}
    best = {}
    for s, v in curve.items():
        best[s.fold] = min(best.get(s.fold, math.inf), v)
    return {**trial, "curve": curve, "value": sum(best.values()) / len(best)}


def replay(trials: list[dict], pruner, groups: int) -> dict[int, object]:
    """{trial number: the step it was stopped at} for the trials `pruner` stops."""
    waiting, events, history, stopped, seq = list(trials), [], {}, {}, 0

    def start(group: int, now: float) -> None:
        nonlocal seq
        if waiting:
            t = waiting.pop(0)
            for step in sorted(t["curve"]):
                now += t["took"][tuple(step)]
                heapq.heappush(events, (now, seq, t, step, group))
                seq += 1

    for g in range(groups):
        start(g, 0.0)
    while events:
        now, _, t, step, group = heapq.heappop(events)
        if t["number"] in stopped:
            continue
        value = t["curve"][step]
        last = step == max(t["curve"])
        prune = pruner.judge(t["number"], step, value, history).prune
        history.setdefault(t["number"], {})[step] = value
        if prune and not last:
            stopped[t["number"]] = step
        if last or (prune and not last):
            start(group, now)
    return stopped


def measure(kept: list[list[dict]], settings, pruners: dict, groups: int) -> list[dict]:
    from mpiopt.search import make_pruner

    rows = []
    for epochs, folds in settings:
        cases = [[cut_to(t, epochs, folds) for t in study] for study in kept]
        for name, spec in pruners.items():
            pruned = top = ran = full = 0
            where: dict[str, int] = {}
            lost = []
            for trials in cases:
                stopped = replay(trials, make_pruner(spec, folds=folds), groups)
                cut = float(numpy.percentile([t["value"] for t in trials], 25))
                for t in trials:
                    full += len(t["curve"])
                    at = stopped.get(t["number"])
                    ran += len(t["curve"]) if at is None else sum(s <= at for s in t["curve"])
                    if at is not None and t["value"] <= cut:
                        top += 1
                        where[f"{at.fold}/{at.epoch}"] = where.get(f"{at.fold}/{at.epoch}", 0) + 1
                pruned += len(stopped)
                kept_best = min(t["value"] for t in trials if t["number"] not in stopped)
                lost.append(kept_best - min(t["value"] for t in trials))
            rows.append({"epochs": epochs, "folds": folds, "pruner": name, "pruned": pruned,
                         "top-quarter pruned": f"{top} of {pruned}",
                         "top-quarter pruned at": ", ".join(f"{k}: {where[k]}"
                                                            for k in sorted(where)) or "-",
                         "epochs saved": 1 - ran / full, "largest best lost": max(lost)})
    return rows


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kept", type=Path, help="the folder pruning.py --keep wrote")
    ap.add_argument("--groups", type=int, default=2, help="groups the trials share")
    args = ap.parse_args(argv)
    kept = studies(args.kept)
    rows = measure(kept, SETTINGS, PRUNERS, args.groups)
    report = (f"### Pruners replayed on {len(kept)} unpruned digits studies\n\n"
              f"`python benchmarks/pruning_replay.py KEPT --groups {args.groups}`\n\n"
              f"{table(rows)}\n")
    print(report)
    return report


if __name__ == "__main__":
    main()
